"""Cost model: estimated time and HBM traffic per op and per core, from the specs alone.

Data-independent (only sdsc JSON and the bundle's execution counts), so it runs in milliseconds
at any size and `spyrec compile` can put it in report.json. Per op and core c (the `cores`
split of the sdsc file), following reference/C-simulator.md §5.9:

- HBM bytes: distinct 128-byte sticks each HBM arg touches in c's slice × 128 (`footprint`);
  inputs are reads, the output a write. Useful bytes (elements × itemsize) give the stick
  efficiency (a stick-sparse output moves 64× its data). LX args are counted the same way
  as LX bytes, reported beside the HBM bytes and free in time (KC default): keeping a tile in
  LX is what saves the HBM traffic, and the report shows both sides.
- compute, memory, ring and the broadcast cohort's read share: `spyrec/costmodel.py`'s
  formulas and parameters (the compiler's split estimate uses the same ones). An input slice
  r cores read alike (r = the product of the splits of the vars the arg does not use) is
  charged its read share; those are the HBM read bytes reported, the sticks a core touches
  are `sticks_read`.
- op time = max over cores of max(compute, memory) (overlapped; `serial_us` adds them) + ring
  + per-op overhead. Bundle time = Σ op time × executions + per-bundle overhead; every
  execution of a loop body counts (bytes too: a looped op moves its tile's bytes per trip).

Only the byte counting is this module's own (with sim/footprint.py, from the files): the
compiler counts from the IR with its own code, and tests compare the two.
"""

from __future__ import annotations

import math
from dataclasses import asdict

from spyrec.costmodel import (
    DEFAULT_PARAMS, MATMUL, MOVE, CostParams, compute_seconds, cost_class, matmul_m_vars,
    memory_seconds, ring_us,
)
from spyrec.device import STICK_BYTES
from spyrec.indexing.expr import FloorDiv, Lin, Mod, Var
from spyrec.sim.footprint import ArgFootprint, support
from spyrec.sim.fused_cost import price_fused
from spyrec.sim.specs import CoreSplit, OpSpec


def _us(x: float) -> float:
    return round(x, 6)


def core_cost(spec: OpSpec, core: CoreSplit, active: int, p: CostParams,
              footprints: list[tuple[bool, int, ArgFootprint, bool]] | None = None,
              m_vars: set[str] | None = None) -> dict:
    """Traffic and time of one core's slice of one op execution (`footprints`: the HBM args'
    (is_input, itemsize, footprint), and `m_vars` a matmul's M: both shared by every core
    of the op, so `op_cost` computes them once)."""
    reads = writes = useful = lx_reads = lx_writes = touched = 0
    for is_input, itemsize, fp, in_lx in footprints or _footprints(spec):
        moved = fp.sticks(core.ranges) * STICK_BYTES
        if in_lx:
            lx_reads += moved if is_input else 0
            lx_writes += 0 if is_input else moved
            continue
        if is_input:
            touched += moved
            reads += moved * p.read_share(fp.readers)
        else:
            writes += moved
        useful += fp.useful(core.ranges) * itemsize
    points = core.points
    klass = cost_class(spec.op)
    m_rows = 1
    if klass == MATMUL:
        m_vars = _m_vars(spec) if m_vars is None else m_vars
        m_rows = math.prod(hi - lo for v, (lo, hi) in core.ranges.items() if v in m_vars)
    compute_s = compute_seconds(klass, points, m_rows, p)
    memory_s = memory_seconds(reads + writes, active, p)
    return {"core": core.core, "points": points, "hbm_read_bytes": round(reads),
            "sticks_read": touched // STICK_BYTES,
            "hbm_write_bytes": writes, "lx_read_bytes": lx_reads, "lx_write_bytes": lx_writes,
            "useful_bytes": useful,
            "compute_us": _us(compute_s * 1e6), "memory_us": _us(memory_s * 1e6)}


def _offset_periods(spec: OpSpec) -> dict[str, int]:
    """Per var, a shift of its slice that changes no core's cost: 1 where every coordinate
    of every arg uses it as a plain term (the shift moves those coordinates by a constant,
    a one-to-one map of the sticks), d / gcd(b, d) where it also sits in `floor((b v + ..) /
    d)` or `(b v + ..) mod d`, whose values then shift by a constant too; absent (no
    shift) inside anything else, or in a gathered arg's index. Cores alike but for such
    shifts (the row slices of most ops) are priced once."""
    periods: dict[str, int] = {}
    unknown: set[str] = set()
    for a in spec.args:
        for c in a.coordinates:
            for atom, _ in c.terms:
                if isinstance(atom, Var):
                    periods.setdefault(atom.name, 1)
                elif isinstance(atom, (FloorDiv, Mod)) and all(
                        isinstance(x, Var) for x, _ in atom.num.terms):
                    d = abs(atom._args[1])
                    for x, b in atom.num.terms:
                        periods[x.name] = math.lcm(periods.get(x.name, 1),
                                                   d // math.gcd(b, d))
                else:
                    unknown |= support(spec, Lin(((atom, 1),)))
    for v in spec.vars:         # a var no coordinate uses: its offset reaches nothing
        periods.setdefault(v, 1)
    return {v: n for v, n in periods.items() if v not in unknown}


def _footprints(spec: OpSpec) -> list[tuple[bool, int, ArgFootprint, bool]]:
    """(is_input, itemsize, footprint, in LX) of every arg of `spec`."""
    return [(a.is_input, a.itemsize, ArgFootprint(spec, a), a.in_lx) for a in spec.args]


def copies_of(spec: OpSpec) -> int:
    """How many cores compute each point alike: the product of a replicated op's copy dims
    (`OpSpec.replica_vars`)."""
    return math.prod(spec.iteration_space[v][0] for v in spec.replica_vars)


def _m_vars(spec: OpSpec) -> set[str]:
    """Matmul M: vars of the first operand and the output that the second does not use."""
    x, y = spec.value_inputs[:2]
    return matmul_m_vars(set().union(*(support(spec, c) for c in x.coordinates)),
                         set().union(*(support(spec, c) for c in y.coordinates)), spec.reduced)


def op_cost(spec: OpSpec, executions: int, p: CostParams = DEFAULT_PARAMS) -> dict:
    """Cost of one execution of `spec` (per core and combined), and how often it runs."""
    active = sum(1 for c in spec.cores if c.points)
    footprints = _footprints(spec)
    klass = cost_class(spec.op)
    m_vars = _m_vars(spec) if klass == MATMUL else None
    periods = _offset_periods(spec)
    alike: dict[tuple, dict] = {}     # cores whose slices differ only by a period's shift
    cores = []
    for c in spec.cores:
        key = tuple((v, hi - lo, lo % periods[v] if periods.get(v) else lo)
                    for v, (lo, hi) in c.ranges.items())
        found = alike.get(key)
        if found is None:
            found = alike[key] = core_cost(spec, c, active, p, footprints, m_vars)
        cores.append(found if found["core"] == c.core else {**found, "core": c.core})
    used = [c for c in cores if c["points"]] or cores
    k_split = math.prod(k for v, (_, k) in spec.iteration_space.items() if v in spec.reduced)
    out_elems = math.prod(n for v, (n, _) in spec.iteration_space.items()
                          if v not in spec.reduced)
    ring = ring_us(k_split, out_elems, p)
    overlapped = max(max(c["compute_us"], c["memory_us"]) for c in used)
    serial = max(c["compute_us"] + c["memory_us"] for c in used)
    parts = {"compute": max(c["compute_us"] for c in used),
             "memory": max(c["memory_us"] for c in used), "ring": ring,
             "overhead": p.op_overhead_us}
    mean = sum(max(c["compute_us"], c["memory_us"]) for c in used) / len(used)
    # the op's own work, once: copies of a replicated op (docs/formats.md) repeat it
    flops = spec.points // copies_of(spec) * (2 if klass == MATMUL else 1)
    if klass == MOVE:
        flops = 0
    reads = sum(c["hbm_read_bytes"] for c in cores)
    writes = sum(c["hbm_write_bytes"] for c in cores)
    lx_reads = sum(c["lx_read_bytes"] for c in cores)
    lx_writes = sum(c["lx_write_bytes"] for c in cores)
    useful = sum(c["useful_bytes"] for c in cores)
    touched = sum(c["sticks_read"] for c in cores) * STICK_BYTES + writes
    return {
        "file": spec.file, "index": spec.index, "op": spec.op, "name": spec.name,
        "source": spec.source, "executions": executions, "class": klass,
        "cores_used": active, "points": spec.points, "flops": flops,
        "hbm_read_bytes": reads, "hbm_write_bytes": writes, "lx_read_bytes": lx_reads,
        "lx_write_bytes": lx_writes, "useful_bytes": useful,
        "stick_efficiency": round(useful / touched, 6) if touched else 1.0,
        "compute_us": _us(parts["compute"]), "memory_us": _us(parts["memory"]),
        "ring_us": _us(ring), "overhead_us": _us(p.op_overhead_us),
        "time_us": _us(overlapped + ring + p.op_overhead_us),
        "serial_us": _us(serial + ring + p.op_overhead_us),
        "bound": max(parts, key=parts.get),
        "imbalance": round(max(max(c["compute_us"], c["memory_us"]) for c in used) / mean, 6)
        if mean else 1.0,
        "per_core": cores,
    }


def cost_key(spec: OpSpec) -> tuple:
    """Everything `op_cost` reads of `spec` besides its identity (file, index, name, source):
    the op, its iteration space and reduced vars, each arg's direction, element size,
    coordinates (a gather's name its index tensor), LX placement and tile coordinates, and
    each core's slice. Addresses are not in it: sticks are counted from coordinates relative
    to each arg's base, which a stick boundary starts. The ops of the layers of a stack share
    their keys."""
    return (spec.op, tuple(spec.iteration_space.items()), spec.reduced,
            tuple((a.is_input, a.itemsize, a.coordinates, a.in_lx, a.tile_coordinates,
                   a.is_index) for a in spec.args),
            tuple((c.core, tuple(c.ranges.items())) for c in spec.cores))


def _shared_op_cost(spec: OpSpec, executions: int, p: CostParams, memo: dict) -> dict:
    """`op_cost`, computed once per `cost_key` (a 16-layer decoder's ~800 ops have ~60
    keys); each row its own dicts, with the op's own identity and executions."""
    key = cost_key(spec)
    cached = memo.get(key)
    if cached is None:
        cached = memo[key] = op_cost(spec, executions, p)
    return {**cached, "file": spec.file, "index": spec.index, "name": spec.name,
            "source": spec.source, "executions": executions,
            "per_core": [dict(c) for c in cached["per_core"]]}


def estimate(ops: dict[str, OpSpec], bundles: dict[str, dict[str, int]],
             p: CostParams = DEFAULT_PARAMS) -> dict:
    """The cost section of report.json: parameters, every op, totals per bundle and overall.

    `bundles` maps each bundle (kernel) name to how often it executes each sdsc file.
    """
    counts = _file_counts(bundles)
    memo: dict[tuple, dict] = {}
    rows = [_shared_op_cost(spec, counts.get(f, 0), p, memo)
            for f, spec in sorted(ops.items(), key=lambda kv: kv[1].index)]
    fused = price_fused(rows, {f: s.fused for f, s in ops.items() if s.fused}, p)
    by_file = {r["file"]: r for r in rows}
    per_bundle = [dict(name=name, **_totals([(by_file[f], n) for f, n in per_file.items()], 1, p))
                  for name, per_file in bundles.items()]
    totals = _totals([(r, r["executions"]) for r in rows], len(bundles), p)
    by_op: dict[str, float] = {}
    for r in rows:
        by_op[r["op"]] = _us(by_op.get(r["op"], 0.0) + r["time_us"] * r["executions"])
    totals["time_us_by_op"] = by_op
    totals["per_bundle"] = per_bundle
    out = {"model": "spyrec-cost/1", "params": asdict(p), "ops": rows, "totals": totals}
    return {**out, "fused": fused} if fused else out


def _file_counts(bundles: dict[str, dict[str, int]]) -> dict[str, int]:
    """How often each sdsc file executes over all bundles."""
    counts: dict[str, int] = {}
    for per_file in bundles.values():
        for f, n in per_file.items():
            counts[f] = counts.get(f, 0) + n
    return counts


class SizedCosts:
    """The per-execution cost of each op whose size is a symbolic length (`OpSpec.lengths`)
    at given lengths, for the cost curve: ops alike at the maxima (a stack's layers, the
    same `cost_key`) are priced once per length."""

    def __init__(self, ops: dict[str, OpSpec], p: CostParams = DEFAULT_PARAMS,
                 min_shares: dict[str, tuple[tuple[int, int], ...]] | None = None):
        self.p, self.min_shares = p, min_shares or {}
        self.alike: dict[tuple, list[OpSpec]] = {}
        for spec in ops.values():
            if spec.lengths:
                self.alike.setdefault(cost_key(spec), []).append(spec)

    def rows(self, lengths: dict[str, int]) -> dict[str, dict]:
        """file -> its `op_cost` row (executions left at 1) at `lengths`."""
        out = {}
        for specs in self.alike.values():
            row = op_cost(specs[0].at(lengths, self.min_shares), 1, self.p)
            for spec in specs:
                out[spec.file] = {**row, "file": spec.file, "index": spec.index,
                                  "name": spec.name, "source": spec.source}
        return out


def cost_at(cost: dict, bundles: dict[str, dict[str, int]], p: CostParams = DEFAULT_PARAMS,
            resized: dict[str, dict] | None = None) -> dict:
    """Time and HBM traffic of the program of `cost` (an `estimate`) when its bundles execute
    each file `bundles` times instead (a program with symbolic lengths at another length:
    its ops are the same, only their trips differ), and the files of `resized` cost the
    rows given (an op whose size is a length, at that length: `SizedCosts.rows`). Summed as
    `estimate` sums its totals, so at the estimate's own counts it gives its totals exactly."""
    counts = _file_counts(bundles)
    resized = resized or {}
    rows = [resized.get(r["file"], r) for r in cost["ops"]]
    # a fused file's members run as often as the file (their rows name it: `fused`)
    totals = _totals([(r, counts.get(r["file"], counts.get(r.get("fused"), 0))) for r in rows],
                     len(bundles), p)
    return {"time_us": totals["time_us"],
            "hbm_bytes": totals["hbm_read_bytes"] + totals["hbm_write_bytes"]}


def _totals(runs: list[tuple[dict, int]], bundles: int, p: CostParams) -> dict:
    """Sums over (op row, executions) pairs plus the per-bundle overhead."""
    totals: dict = {"bundles": bundles, "executions": sum(n for _, n in runs)}
    for key in ("time_us", "serial_us", "compute_us", "memory_us", "ring_us", "overhead_us"):
        totals[key] = _us(sum(r[key] * n for r, n in runs))
    for key in ("time_us", "serial_us", "overhead_us"):
        totals[key] = _us(totals[key] + bundles * p.bundle_overhead_us)
    for key in ("hbm_read_bytes", "hbm_write_bytes", "lx_read_bytes", "lx_write_bytes",
                "useful_bytes", "flops"):
        totals[key] = sum(r[key] * n for r, n in runs)
    return totals


def format_table(cost: dict) -> str:
    """The cost as a readable table (one row per op file, then totals)."""
    head = (f"{'#':>3}  {'file':<14} {'op':<15} {'name':<16} {'runs':>4} {'cores':>5} "
            f"{'HBM rd KiB':>10} {'HBM wr KiB':>10} {'compute us':>10} {'memory us':>10} "
            f"{'time us':>10}  bound")
    lines = [head, "-" * len(head)]
    for r in cost["ops"]:
        lines.append(
            f"{r['index']:>3}  {r['file']:<14} {r['op']:<15.15} {r['name']:<16.16} "
            f"{r['executions']:>4} {r['cores_used']:>5} {r['hbm_read_bytes'] / 1024:>10.1f} "
            f"{r['hbm_write_bytes'] / 1024:>10.1f} {r['compute_us']:>10.3f} "
            f"{r['memory_us']:>10.3f} {r['time_us']:>10.3f}  {r['bound']}")
    t = cost["totals"]
    lines.append("-" * len(head))
    lines.append(
        f"total: {t['executions']} op executions in {t['bundles']} bundle(s), "
        f"{t['time_us']:.3f} us estimated ({t['serial_us']:.3f} us without overlap), "
        f"HBM {t['hbm_read_bytes'] / 1024:.1f} KiB read / {t['hbm_write_bytes'] / 1024:.1f} KiB "
        f"written, {t['flops']} flops"
        + (f"; LX {t['lx_read_bytes'] / 1024:.1f} KiB read / "
           f"{t['lx_write_bytes'] / 1024:.1f} KiB written"
           if t["lx_read_bytes"] + t["lx_write_bytes"] else ""))
    fused = cost.get("fused") or []
    if fused:       # one row per member above; each group's time counted once (fused_cost.py)
        lines.append(
            f"fused: {len(fused)} SuperDSC(s) of {sum(len(g['ops']) for g in fused)} compute ops, "
            f"{sum(g['time_us'] * g['executions'] for g in fused):.3f} us as concurrent unit "
            f"streams ({sum(g['serial_us'] * g['executions'] for g in fused):.3f} us one op "
            f"after another; unit_overlap {cost['params'].get('unit_overlap', 1.0):g})")
    if len(t["per_bundle"]) > 1:
        for b in t["per_bundle"]:
            lines.append(f"  bundle {b['name']}: {b['executions']} op executions, "
                         f"{b['time_us']:.3f} us")
    core_bw = cost['params'].get('core_bytes_per_s')      # absent in older reports
    lines.append(f"model: {cost['model']}; HBM {cost['params']['hbm_bytes_per_s'] / 1e9:g} GB/s"
                 + (f" (at most {core_bw / 1e9:g} GB/s per core)" if core_bw else "") + ", "
                 f"{cost['params']['cores']} cores, PT peak "
                 f"{cost['params']['pt_peak_flops_per_card'] / 1e12:g} TFLOP/s, bundle overhead "
                 f"{cost['params']['bundle_overhead_us']:g} us (estimates; see spyrec/costmodel.py)")
    return "\n".join(lines)
