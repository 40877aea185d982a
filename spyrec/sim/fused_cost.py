"""The time of fused SuperDSCs (issue 58): their members priced as concurrent unit streams.

`cost.py` prices every op as a one-op SuperDSC. The members of one fused file (`OpSpec.fused`)
run in one execution on each core: the PT array takes the matmuls, the SFP the vector and
transcendental work, the load and store units the HBM traffic, each a stream joined to the
next by FIFOs (reference/I §1a). So the group takes the slowest stream plus a pipeline fill,
not the sum (`costmodel.fused_us`, `CostParams.unit_overlap` between the two), plus its
members' rings and one op overhead.

Each member's row keeps its own compute, memory and `serial_us` (what it costs alone) and its
`time_us` becomes its share of the group's time, in proportion to its time alone, so every
sum over rows (totals, per op name, per bundle, `cost_at`) counts the group's time once. A
`fused` row per group says how it was priced.
"""

from __future__ import annotations

from spyrec.costmodel import MATMUL, CostParams, fused_us


def _us(x: float) -> float:
    return round(x, 6)


def price_fused(rows: list[dict], fused_of: dict[str, str], p: CostParams) -> list[dict]:
    """Re-time the rows of fused members (`fused_of`: member file -> its fused file) in place;
    returns one row per fused file, in file order."""
    members: dict[str, list[dict]] = {}
    for r in rows:
        group = fused_of.get(r["file"])
        if group is not None:
            members.setdefault(group, []).append(r)
    return [_price_group(name, group, p) for name, group in members.items()]


def _price_group(name: str, group: list[dict], p: CostParams) -> dict:
    units = {"pt": 0.0, "sfp": 0.0, "memory": 0.0}
    for r in group:
        units["pt" if r["class"] == MATMUL else "sfp"] += r["compute_us"]
        units["memory"] += r["memory_us"]
    extra = sum(r["ring_us"] for r in group) + p.op_overhead_us
    streams = sum(r["time_us"] - r["ring_us"] - r["overhead_us"] for r in group)
    points = max(c["points"] for r in group for c in r["per_core"])
    timed = fused_us(units, streams, points, p)
    before = sum(r["time_us"] for r in group)
    total = timed["time_us"] + extra
    for r in group:
        r["time_us"] = _us(r["time_us"] * total / before) if before else 0.0
        r["fused"] = name
    return {"file": name, "ops": [r["name"] for r in group],
            "units": ["pt" if r["class"] == MATMUL else "sfp" for r in group],
            "executions": group[0]["executions"],
            **{f"{k}_us": _us(v) for k, v in units.items()},
            "fill_us": _us(timed["fill_us"]), "serial_us": _us(before),
            "time_us": _us(total)}
