"""The cost model's parameters and formulas: one place, read by the compiler and the simulator.

Why a leaf beside `device.py`: two estimates use the same model. The simulator's
(`sim/cost.py`) prices the written sdsc files for report.json; the compiler's
(`plan/split_estimate.py`) prices a candidate core split on the IR before any file exists,
so that work_division picks the split the simulator will then report as cheapest. Each reads
the parameters, the op -> cost class table and every formula from here, and counts bytes its
own way (sim/footprint.py from the files, the split estimate from the IR): two independent
counts that a test holds equal, one copy of each formula. Importing only `device`, this module
lets the compiler price splits without importing the simulator (tests/test_architecture.py).

The formulas (reference/C-simulator.md §5.9; TS = torch-spyre, KC = ktir-cpu), per core of
one op execution:

- compute (`compute_seconds`): vector ops `points × w / (lanes × clock)` with w = 1, or the
  transcendental factor; matmul `MACs / (per-core PT MAC rate × eff)` with
  eff = min(1, sqrt(max(1, M_c/8)/8)), M_c the matmul's M rows on the core (`matmul_m_vars`);
  data movement (identity, restickify, fill) costs no compute.
- memory (`memory_seconds`): HBM bytes / min(aggregate bandwidth / active cores, one core's
  own bandwidth) — cores share the card's bandwidth, and one core alone cannot use all of it
  (issue 28: pricing a lone core at the card's rate made spreading a memory-bound op look
  worthless, and work division put every decode matmul on one core). Traffic an op causes in
  its neighbours (spread over their cores) is priced at the card's rate (`card_seconds`).
- broadcast cohort (`CostParams.read_share`): an input slice r cores read alike is fetched
  max(1, r/8) times, not r times (TS's cohort rule); each core is charged max(8, r) / (8 r) of
  its bytes.
- ring (`ring_us`): a reduction split over k cores pays (k − 1) hops × output elements ×
  the partial-sum cost per element and hop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spyrec.device import CORES, HBM_BYTES_PER_S

# --- parameters (reference/C-simulator.md §5.9) -----------------------------------------------
# parameters that add a time (an overhead, a ring's hop): zero means free; every other parameter
# is a rate, a size or a count and must be positive (`--set cost.NAME=VALUE` checks it)
ADDED_TIME_PARAMS = ("psum_us_per_elem_hop", "op_overhead_us", "bundle_overhead_us")
# parameters that are a fraction: 0 to 1, both ends included
FRACTION_PARAMS = ("unit_overlap",)


@dataclass(frozen=True)
class CostParams:
    """Every parameter of the model, its default with its source and confidence (TS =
    torch-spyre, KC = ktir-cpu). The device facts (cores: firm; HBM bandwidth, TS
    work_division.py _HBM_BW_GBS, LPDDR5 aggregate: medium) come from spyrec/device.py."""

    cores: int = CORES
    hbm_bytes_per_s: float = HBM_BYTES_PER_S
    # TS work_division.py "DL16 peak", fp16 — medium
    pt_peak_flops_per_card: float = 98.304e12
    # TS work_division.py: M streamed 8 rows per pass, efficiency sqrt(passes/8) — fitted
    pt_rows_per_pass: int = 8
    pt_full_efficiency_passes: int = 8
    # KC estimate: one fp16 stick per cycle per core — low; a 1 GHz clock is KC's convention,
    # a unit only (no public clock) — unknown
    vector_elems_per_cycle: int = 64
    clock_hz: float = 1.0e9
    # KC "common heuristic" — low
    transcendental_factor: float = 4.0
    # TS work_division.py, K-split ring reduction — fitted
    psum_us_per_elem_hop: float = 1.4e-4
    # t_op: not separable from t_bundle in the only data — low
    op_overhead_us: float = 0.0
    # t_bundle: fit to TS softmax timings (C-sim §1.3) — low
    bundle_overhead_us: float = 21.0
    # TS work_division.py, cores sharing one read for free — fitted
    broadcast_cohort: int = 8
    # One core's own HBM bandwidth (its DMA path), whatever the other cores do. No public
    # figure for HBM reads; the nearest measured ones are the reference's on-chip transfer
    # links, 36 GB/s and 130 GB/s in two bands (reference/H-anchors-2026-11.md §1.4, FK
    # comm_cost_model_20260706). We take the lower band — low confidence: it is the
    # conservative choice (at least 6 cores are then needed to reach the card's 204.8 GB/s, so
    # plans spread memory-bound work), and TS#4690's store-heavy kernel (208 µs on 1 core,
    # 143 µs on 4) also shows one core well short of the card. bench/hardware_plans.py prints
    # the decode estimates under card/32, card/8 and card as well.
    core_bytes_per_s: float = 36.0e9
    # How far the units of a fused SuperDSC (PT, SFP, and the load/store stream) run at once:
    # 1 = fully concurrent (the slowest unit plus a pipeline fill), 0 = serialized (the sum
    # of the members, as one-op SuperDSCs). Low confidence: the units are separate and
    # joined by FIFOs and the back-end's scheduler is called decoupled (reference/I §1a), but
    # no public measurement of the PT/SFP overlap exists; `--set cost.unit_overlap=0`
    # re-prices any program serialized.
    unit_overlap: float = 1.0
    # FIFO depth between a fused SuperDSC's units, in sticks: a unit downstream starts once
    # one FIFO of vectors has passed (the pipeline fill). DS sample_device.mlir's depth-16
    # FIFOs, a sample not labelled as Spyre (reference/I §1a) — low
    fifo_sticks: int = 16

    def read_share(self, readers: int) -> float:
        """The part of its bytes each of `readers` cores reading one slice is charged."""
        return max(self.broadcast_cohort, readers) / (self.broadcast_cohort * readers)

    @property
    def pt_macs_per_s_per_core(self) -> float:
        return self.pt_peak_flops_per_card / self.cores / 2


DEFAULT_PARAMS = CostParams()

# --- cost classes: which unit runs an op and how expensive an element is ----------------------
VECTOR = "vector"                  # one element per lane per cycle
TRANSCENDENTAL = "transcendental"  # vector, times the transcendental factor
MATMUL = "matmul"                  # the PT array, counted in MACs
MOVE = "move"                      # data movement only: no compute time

# Every device op not named here is VECTOR. The simulator's kernel table (sim/kernels) takes
# each kernel's class from `cost_class`, so an op's class is stated once
# (tests/test_costmodel.py checks that every name here is a kernel).
COST_CLASSES = {
    "batchmatmul": MATMUL,
    "identity": MOVE, "ReStickifyOpHBM": MOVE, "fill": MOVE,
    **{op: TRANSCENDENTAL for op in (
        "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "cos", "sin", "sigmoid", "silu",
        "gelufwd", "pow", "powtensor")},
}


def cost_class(op: str) -> str:
    """The cost class of device op `op` (its sdsc `op` name)."""
    return COST_CLASSES.get(op, VECTOR)


# --- formulas -----------------------------------------------------------------------------------


def compute_seconds(klass: str, points: int, m_rows: int, p: CostParams = DEFAULT_PARAMS
                    ) -> float:
    """One core's compute time for `points` iteration points of an op of cost class `klass`
    (`m_rows`: a matmul's M rows on that core, `matmul_m_vars`; unused for other classes)."""
    if klass == MOVE:
        return 0.0
    if klass == MATMUL:
        passes = max(1.0, m_rows / p.pt_rows_per_pass)
        eff = min(1.0, math.sqrt(passes / p.pt_full_efficiency_passes))
        return points / (p.pt_macs_per_s_per_core * eff)
    weight = p.transcendental_factor if klass == TRANSCENDENTAL else 1.0
    return points * weight / (p.vector_elems_per_cycle * p.clock_hz)


def fused_us(units: dict[str, float], serial_us: float, points: int,
             p: CostParams = DEFAULT_PARAMS) -> dict[str, float]:
    """The time of one execution of a fused SuperDSC on a core (reference/I §1a; DESIGN §3):
    `units` the busy time of each of its streams in µs (PT, SFP, memory), `serial_us` the sum
    of its members' one-op times, `points` the most iteration points a member runs on a core.
    Concurrent: the slowest stream, plus the fill while the first FIFO of vectors (`fifo_sticks`
    sticks of `vector_elems_per_cycle` lanes, one of the work's `points` / that pieces) passes
    every other stream; never more than serial. `unit_overlap` mixes the two linearly."""
    slowest = max(units.values())
    pieces = max(1.0, points / (p.fifo_sticks * p.vector_elems_per_cycle))
    fill = (sum(units.values()) - slowest) / pieces
    concurrent = min(slowest + fill, serial_us)
    time = p.unit_overlap * concurrent + (1.0 - p.unit_overlap) * serial_us
    return {"fill_us": fill, "concurrent_us": concurrent, "time_us": time}


def fused_floor_us(compute_by_unit: dict[str, float], p: CostParams = DEFAULT_PARAMS) -> float:
    """A lower bound of a program's fused time from each unit's compute summed over it: at
    most fully concurrent (the busiest unit's total), serialized the sum; `unit_overlap`
    mixes the two as `fused_us` does."""
    slowest, summed = max(compute_by_unit.values(), default=0.0), sum(compute_by_unit.values())
    return p.unit_overlap * slowest + (1.0 - p.unit_overlap) * summed


def matmul_m_vars(x_vars: set[str], y_vars: set[str], reduced) -> set[str]:
    """A matmul's M: the vars of its first operand that its second does not use, K aside."""
    return (x_vars - y_vars) - set(reduced)


def core_bandwidth(active: int, p: CostParams = DEFAULT_PARAMS) -> float:
    """Bytes per second one of `active` cores moves: its share of the card's bandwidth, at
    most its own."""
    return min(p.hbm_bytes_per_s / max(active, 1), p.core_bytes_per_s)


def memory_seconds(hbm_bytes: float, active: int, p: CostParams = DEFAULT_PARAMS) -> float:
    """Time one core takes to move `hbm_bytes` while `active` cores share the bandwidth."""
    return hbm_bytes / core_bandwidth(active, p)


def card_seconds(hbm_bytes: float, p: CostParams = DEFAULT_PARAMS) -> float:
    """Time the card takes to move `hbm_bytes` spread over all its cores (traffic a split
    causes in other ops; the roofline's memory bound)."""
    return hbm_bytes / min(p.hbm_bytes_per_s, p.cores * p.core_bytes_per_s)


def ring_us(k_split: int, out_elems: int, p: CostParams = DEFAULT_PARAMS) -> float:
    """The ring reduction of a reduced var split over `k_split` cores, in µs: the partial
    sums of `out_elems` output elements pass k − 1 hops."""
    return (k_split - 1) * out_elems * p.psum_us_per_elem_hop
