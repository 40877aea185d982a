"""report.json and report.txt of a compile, assembled from the passes that ran.

Each pass owns its part (`passes/registry.Pass`: the report.json keys it writes, what each
holds when it wrote none, its lines of report.txt); this module knows no pass by name. It
adds what belongs to the compile as a whole: the format, the build's id, the passes' wall
times, every buffer's layout, the op count, the front end used, the sdsc files' size and the
cost estimate (`compiler.py` fills the last ones in).
"""

from __future__ import annotations

import time

from spyrec.passes.registry import PASSES, REPORT_OMIT

REPORT_FORMAT = "spyrec-report/1"


def assemble_report(graph, pipeline: list, written: dict, timings: list[dict]) -> dict:
    """The report of a compile whose passes (`pipeline`, in order) wrote `written` (the
    context's report): each pass's keys, in pipeline order, with its default where it wrote
    none; the build's id is filled in when manifest.json has it."""
    report = {"format": REPORT_FORMAT, "build": None, "passes": timings}
    for p in pipeline:
        for key, default in p.report_keys.items():
            value = written.get(key, default)
            if value is not REPORT_OMIT:
                report[key] = value
    report["layouts"] = {b.name: b.layout.to_json() for b in graph.buffers.values()}
    report["ops"] = len(graph.ops)
    return report


def report_text(report: dict, pipeline: list | None = None) -> str:
    """report.txt above the cost table: the header, every pass's lines (`pipeline`'s, else
    every registered pass's, in the registry's order, which is the default pipeline's), the
    op count, the layouts and, for a program with symbolic lengths, its cost curve."""
    passes = pipeline if pipeline is not None else [loader() for loader in PASSES.values()]
    lines = ["spyrec compile report", f"build {report['build']}", "", "passes:"]
    lines += [f"  {p['name']:<20} {p['wall_ms']:>10.1f} ms" for p in report["passes"]]
    for p in dict.fromkeys(type(p) if not isinstance(p, type) else p for p in passes):
        lines += p.report_text(report)
    lines += ["", f"ops: {report['ops']}", "", "layouts:"]
    for name, lay in report["layouts"].items():
        lines.append(f"  {name:<24} {lay['device_size']} / {lay['stride_map']} "
                     f"{lay['device_dtype']}")
    return "\n".join(lines + _cost_curve_text(report.get("cost_curve"))) + "\n"


def _cost_curve_text(curve: list | None) -> list[str]:
    """A program with symbolic lengths: its estimate at each length (a sample of them)."""
    if not curve:
        return []
    names = list(curve[0]["lengths"])
    lines = ["", "cost curve (estimated at each length; cost below: at the maximum):",
             "  " + " ".join(f"{n:>8}" for n in names) + f" {'time us':>12} {'HBM KiB':>12}"]
    return lines + ["  " + " ".join(f"{row['lengths'][n]:>8}" for n in names) +
                    f" {row['time_us']:>12.3f} {row['hbm_bytes'] / 1024:>12.1f}"
                    for row in curve]


def sdsc_summary(files: dict) -> dict:
    """How many sdsc files (all SuperDSC) and their bytes, for the report (a `JsonDoc`'s
    text is printed here, once)."""
    from spyrec.codegen.writer import printed

    texts = [printed(content) for name, content in files.items() if name.startswith("sdsc_")]
    sizes = [len(t.encode()) if isinstance(t, str) else len(t) for t in texts]
    return {"files": len(sizes), "bytes": sum(sizes)}


def elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 3)


def report_json(obj) -> str:
    from spyrec.codegen.writer import dump_json
    return dump_json(obj)
