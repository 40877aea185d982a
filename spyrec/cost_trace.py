"""`spyrec inspect OUT --trace FILE.json`: the cost model as a Chrome/Perfetto trace.

Open the file in https://ui.perfetto.dev or chrome://tracing. One lane (tid) per core, one
slice ("ph": "X", times in µs) per op execution on every core that has work in it, laid end to
end in bundle order, each as long as the op's estimated `time_us` (cores of one op start
together and the next op waits for the slowest: the model's synchronous ops). Each bundle's
fixed overhead is a slice on its own lane before its first op, so the trace ends at
`cost.totals.time_us`. The per-core split of the time (compute, memory, HBM bytes) is in each
slice's args. The numbers are `sim/cost.py`'s, the same as report.json's cost section.
"""

from __future__ import annotations

BUNDLE_TID = 1000   # the lane of bundle overheads, after every core's


def cost_trace(trace: list[tuple[str, str]], cost: dict) -> dict:
    """The trace document for executions `trace` ((kernel, sdsc file) in execution order) and
    the cost estimate `cost` (report.json's `cost` section)."""
    rows = {r["file"]: r for r in cost["ops"]}
    overhead = cost["params"]["bundle_overhead_us"]
    events: list[dict] = []
    lanes: set[int] = set()
    seen: set[str] = set()
    ts = 0.0
    for kernel, file in trace:
        if kernel not in seen:
            seen.add(kernel)
            events.append({"name": f"bundle {kernel} overhead", "cat": "bundle", "ph": "X",
                           "pid": 0, "tid": BUNDLE_TID, "ts": ts, "dur": overhead,
                           "args": {"kernel": kernel}})
            ts += overhead
        row = rows[file]
        cores = [c for c in row["per_core"] if c["points"]] or row["per_core"][:1]
        for c in cores:
            lanes.add(c["core"])
            events.append({
                "name": row["name"] or row["op"], "cat": row["class"], "ph": "X", "pid": 0,
                "tid": c["core"], "ts": ts, "dur": row["time_us"],
                "args": {"file": file, "op": row["op"], "kernel": kernel,
                         "source": row["source"], "bound": row["bound"],
                         "core_compute_us": c["compute_us"], "core_memory_us": c["memory_us"],
                         "core_hbm_read_bytes": c["hbm_read_bytes"],
                         "core_hbm_write_bytes": c["hbm_write_bytes"]}})
        ts += row["time_us"]
    names = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
              "args": {"name": f"spyrec cost model ({cost['model']})"}}]
    names += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid,
               "args": {"name": f"core {tid}"}} for tid in sorted(lanes)]
    names.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": BUNDLE_TID,
                  "args": {"name": "bundle overhead"}})
    return {"traceEvents": names + events, "displayTimeUnit": "ns",
            "otherData": {"total_time_us": cost["totals"]["time_us"]}}
