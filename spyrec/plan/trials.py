"""A trial: a candidate (a tiling, an attention tile size) planned as the pipeline will plan it.

`--tiling auto` and attention tiling price each candidate on a copy of part of the program, by
planning it: work division, input staging, LX placement. They used to do so with each step's
default options, so `--set work_division.cores=8`, an LX budget or `--set cost.NAME=VALUE`
changed the plan but not the tiles chosen for it. `Planning` is the configured options of the
pipeline's planning passes and the cost model's parameters, read once from the pipeline
(`Planning.of`); every trial plans with it (`plan_trial`, `place_trial`), MLIR's nested pass
manager made concrete for the three planning steps a tiling depends on.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from spyrec.costmodel import DEFAULT_PARAMS, CostParams
from spyrec.device import LX_USABLE_BYTES_PER_CORE
from spyrec.ir import Graph
from spyrec.plan.core_splits import SplitOptions, divide_work
from spyrec.plan.lx_placement import LxPlacement, place_lx
from spyrec.plan.staging import StagingOptions, stage_inputs


@dataclass(frozen=True)
class Planning:
    """How the pipeline plans: work division's options (`split`), staging's (None when the
    pipeline stages nothing), the LX budget and whether intermediates may live in LX
    (scratchpad_planning's), the cost model's parameters every estimate uses, and how
    symbolic_lengths will run ops over a symbolic length (flash attention's query tiles
    depend on it) and whether the fusion pass will fuse (a fused tile body is priced as
    concurrent unit streams)."""

    split: SplitOptions = SplitOptions()
    staging: StagingOptions | None = StagingOptions()
    lx_budget: int = LX_USABLE_BYTES_PER_CORE
    lx_intermediates: bool = True
    params: CostParams = DEFAULT_PARAMS
    symbolic: str = "sized"       # symbolic_lengths' mode: how ops over a length will run
    fusion: bool = False          # whether the fusion pass will run: candidates priced fused

    @classmethod
    def of(cls, pipeline: list, params: CostParams = DEFAULT_PARAMS) -> Planning:
        """The planning of a configured pipeline (its pass objects): the options of its
        work_division, stage_inputs and scratchpad_planning entries, the defaults where it
        has none."""
        by_name = {p.name: p for p in pipeline}
        split = _options(by_name.get("work_division"), SplitOptions)
        staging = _options(by_name.get("stage_inputs"), StagingOptions) \
            if "stage_inputs" in by_name else None
        lx = by_name.get("scratchpad_planning")
        return cls(split, staging,
                   getattr(lx, "budget_bytes", LX_USABLE_BYTES_PER_CORE),
                   getattr(lx, "intermediates", True), params,
                   getattr(by_name.get("symbolic_lengths"), "mode", "sized"),
                   getattr(by_name.get("fusion"), "enabled", False))


def _options(configured, options_type: type):
    """The options part of a configured pass (a subclass of `options_type`, the plan/
    dataclass its fields come from), as that plain dataclass."""
    if configured is None:
        return options_type()
    return options_type(**{f.name: getattr(configured, f.name) for f in fields(options_type)})


def plan_trial(sub: Graph, planning: Planning, memo: dict | None = None) -> dict:
    """Plan `sub` as the pipeline will: work division (sharing `memo`, `core_splits.plan_work`)
    then staging; the work division report section."""
    report = divide_work(sub, planning.split, memo, planning.params)
    if planning.staging is not None:
        stage_inputs(sub, planning.staging)
    return report


def place_trial(sub: Graph, planning: Planning, budget: int | None = None) -> LxPlacement:
    """`sub`'s LX placement as scratchpad_planning will make it (`budget`: another one to
    try); the graph is not changed (`lx_placement.apply_lx` writes it)."""
    return place_lx(sub, planning.lx_budget if budget is None else budget,
                    planning.lx_intermediates)
