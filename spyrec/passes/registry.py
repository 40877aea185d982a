"""The pass registry: one dict, snake_case name -> loader of the pass class (xDSL's
`get_all_passes`). A pass module is imported only when a pipeline names it, or when every pass
is listed (`--list-passes`); the module is `spyrec/passes/<name>.py` (STYLE: module, YAML key,
dump name and report row share one name).

Each entry also carries the pass's contract: the graph facts it needs, the ones it establishes
and the ones it destroys (a pass that adds ops or buffers leaves them without core splits or
addresses). `pipeline.check_order` walks a configured pipeline with these before anything
runs, so a pipeline in an order that cannot work fails at once with the pass that is missing;
the verifier (`ir/verify.py`) checks that the facts a pipeline has established really hold.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from spyrec.plan.trials import Planning

# The facts a pass can rely on, and how messages describe them.
FACTS = {
    "layouts": "a device layout for every buffer",
    "core_splits": "core splits for every op",
    "hbm_addresses": "a device-memory address for every buffer",
}

# What code generation reads after the last pass (ops without core splits run on one core).
CODEGEN_REQUIRES = ("layouts", "hbm_addresses")


@dataclass(frozen=True)
class Contract:
    """What a pass needs, establishes and breaks (`FACTS`), and the IR fields it writes:
    `Operation.<field>` / `Buffer.<field>` (ir/graph.py declares them), `ops` and `buffers`
    (adds, removes or reorders them) and `signature` (the graph's inputs and outputs). The
    verifying instrument checks `writes` after every pass (ir/writes.py): a pass that changes
    a field it does not declare is an internal error, so this table is the whole truth."""

    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    invalidates: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.requires + self.provides + self.invalidates) - set(FACTS)
        assert not unknown, f"unknown facts {unknown}; known: {list(FACTS)}"


@dataclass(frozen=True)
class PassLoader:
    """Imports `spyrec.passes.<name>` on first call and returns its pass class."""

    name: str
    class_name: str
    contract: Contract

    def __call__(self) -> type["Pass"]:
        cls = getattr(importlib.import_module(f"spyrec.passes.{self.name}"), self.class_name)
        assert cls.name == self.name, f"{cls.__name__} registers as {cls.name!r}, not {self.name!r}"
        return cls


def _entry(name: str, class_name: str, **contract) -> tuple[str, PassLoader]:
    return name, PassLoader(name, class_name, Contract(**contract))


# What a pass that adds counted loops writes (flash_attention, symbolic_lengths and
# coarse_tiling: ranges shrunk to a tile, loops, per-tile buffers, accumulator ops).
LOOP_WRITES = ("ops", "buffers", "Operation.op", "Operation.ranges", "Operation.reduced",
               "Operation.constants", "Operation.loops", "Operation.inputs", "Operation.output",
               "Operation.index_inputs", "Buffer.host_size", "Buffer.layout", "Buffer.per_tile")

# Every pass, by name. Contracts are read from what each pass module reads and writes (see
# their docstrings), kept here so one table shows the whole dependency graph.
PASSES: dict[str, PassLoader] = dict([
    # Adds index-check ops and buffers and fuses gathers: runs before layouts exist.
    _entry("gather_coordinates", "GatherCoordinates",
           invalidates=("layouts", "core_splits", "hbm_addresses"),
           writes=("ops", "buffers", "Operation.inputs", "Operation.output",
                   "Operation.index_inputs", "Operation.index_bounds")),
    # Splits an op whose output is read in separate column blocks (new ops and buffers).
    _entry("split_outputs", "SplitOutputs",
           invalidates=("layouts", "core_splits", "hbm_addresses"),
           writes=("ops", "buffers", "Operation.inputs")),
    # An 8-bit weight's conversion and scale become its matmul's operands (ops removed).
    _entry("dequant_matmul", "DequantMatmul",
           invalidates=("layouts", "core_splits", "hbm_addresses"),
           writes=("ops", "buffers", "Operation.inputs", "Operation.constants")),
    # Lays out every buffer and inserts restickify copies and view copies (new ops, buffers).
    _entry("stick_layout", "StickLayout", provides=("layouts",),
           invalidates=("core_splits", "hbm_addresses"),
           writes=("ops", "buffers", "constants", "Buffer.layout", "Operation.op",
                   "Operation.inputs")),
    # Reads operand layouts to find K; adds a padded buffer, a fill and a copy per matmul.
    _entry("matmul_padding", "MatmulPadding", requires=("layouts",),
           invalidates=("core_splits", "hbm_addresses"),
           writes=("ops", "buffers", "Operation.inputs")),
    # Reads layouts and the program's symbolic lengths; rewrites an attention as counted
    # head, query and key loops with an online softmax (per-tile buffers, accumulators), its
    # key loop bound to a symbolic key length.
    _entry("flash_attention", "FlashAttention", requires=("layouts",),
           invalidates=("core_splits", "hbm_addresses"),
           writes=LOOP_WRITES + ("symbols", "Operation.lengths")),
    # Reads layouts and symbolic lengths; sizes the ops walking a length by it, or puts them
    # in loops bound by it (per-tile buffers, accumulators).
    _entry("symbolic_lengths", "SymbolicLengths", requires=("layouts",),
           invalidates=("core_splits", "hbm_addresses"),
           writes=LOOP_WRITES + ("symbols", "Operation.lengths")),
    # Reads layouts (whole-stick tiles, device-address shifts); shrinks ranges, adds loops,
    # per-tile buffers and accumulator ops.
    _entry("coarse_tiling", "CoarseTiling", requires=("layouts",),
           invalidates=("core_splits", "hbm_addresses"),
           writes=LOOP_WRITES),
    # Reads layouts; pads a matmul's N (a constant weight's zero rows, a padded output and
    # a copy of its real columns) when the padded op splits over more cores for less time.
    _entry("split_padding", "SplitPadding", requires=("layouts",),
           invalidates=("core_splits", "hbm_addresses"),
           writes=("ops", "buffers", "constants", "Operation.ranges", "Operation.inputs",
                   "Operation.output")),
    # Reads the output's layout to split whole sticks across cores; may replicate an op (its
    # declared copies, split over cores) so its readers find their slices in LX.
    _entry("work_division", "WorkDivision", requires=("layouts",), provides=("core_splits",),
           writes=("Operation.core_splits", "Operation.replicas", "Operation.replicas_fastest")),
    # Reads layouts, accesses and core splits; replaces ops SuperDSC cannot address by ops it
    # can (new ops, each with a core split).
    _entry("superdsc_legalize", "SuperdscLegalize", requires=("layouts", "core_splits"),
           invalidates=("hbm_addresses",),
           writes=("ops", "buffers", "Operation.ranges", "Operation.inputs", "Operation.output",
                   "Operation.index_inputs", "Operation.core_splits")),
    # Reads accesses, layouts and core splits; copies an input read alike several times into
    # an intermediate once (a new op with its core split, a new buffer).
    _entry("stage_inputs", "StageInputs", requires=("layouts", "core_splits"),
           invalidates=("hbm_addresses",),
           writes=("ops", "buffers", "Operation.inputs")),
    # Reads core splits, accesses and layouts of ops sized by a symbolic length; sets each
    # symbol's minimum share per length (`SymLength.min_shares`) by the cost model.
    _entry("length_shares", "LengthShares", requires=("layouts", "core_splits"),
           writes=("symbols",)),
    # Reads per-tile buffers, layouts, core splits and loops; places some in LX (no new ops); a
    # replicated writer whose output stays in HBM loses its copies (and their split).
    _entry("scratchpad_planning", "ScratchpadPlanning", requires=("layouts", "core_splits"),
           writes=("Buffer.lx_address", "Operation.core_splits", "Operation.replicas",
                   "Operation.replicas_fastest")),
    # Reads ops, loops, core splits and LX placement; names the fused SuperDSC of each op of
    # a producer chain that passes its values through LX (no new ops).
    _entry("fusion", "Fusion", requires=("layouts", "core_splits"),
           writes=("Operation.fused",)),
    # Reads every buffer's device bytes; addresses every buffer that has none.
    # Also merges a mutated buffer's new value into the buffer (in place: ops and buffers).
    _entry("memory_planning", "MemoryPlanning", requires=("layouts",),
           provides=("hbm_addresses",),
           writes=("Buffer.hbm_address", "ops", "buffers", "signature", "Operation.inputs",
                   "Operation.output", "Operation.index_inputs")),
])


def _default_planning():
    from spyrec.plan.trials import Planning     # numpy: not before a pipeline runs

    return Planning()


@dataclass
class CompileContext:
    """What passes may read besides the graph (configs; `planning`: how the pipeline plans,
    the configured options of its planning passes and the cost model's parameters, with
    which every planning decision and every trial prices: `plan/trials.py`) and write
    besides it (report rows)."""

    layouts_config: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)
    planning: Planning = field(default_factory=_default_planning)


# A report key a pass leaves out of report.json when it wrote nothing under it.
REPORT_OMIT = object()


@dataclass(frozen=True)
class Pass:
    """Base class. Contract (xDSL's): passes may assume a valid graph and must leave one.

    Each pass owns its part of the report: the report.json keys it writes into
    `CompileContext.report` (`report_keys`, each with what report.json holds when the pass
    wrote none, `REPORT_OMIT` to leave it out; `pipeline.run_passes` refuses a write under
    another key), their JSON schemas (report.schema.json's properties of those names,
    tests/passes/test_reports.py holds the two together) and its lines of report.txt
    (`report_text`). The compiler assembles the report from the passes that ran, in
    pipeline order, without knowing their names (`spyrec/compile_report.py`)."""

    name: ClassVar[str] = ""
    contract: ClassVar[Contract] = Contract()
    report_keys: ClassVar[dict[str, object]] = {}

    @classmethod
    def report_text(cls, report: dict) -> list[str]:
        """This pass's lines of report.txt, from the finished report (its keys in it)."""
        return []

    def check_options(self) -> None:
        """Raise ConfigError for option values the types allow but the pass does not (a
        range, a choice). Called when the pipeline is built, before the model is loaded.
        The default runs the pass's `_check_options` if it has one (stick_layout's does)."""
        check = getattr(self, "_check_options", None)
        if check is not None:
            check()

    def run(self, graph, ctx: CompileContext) -> None:
        raise NotImplementedError(type(self).__name__)


def register_pass(name: str):
    """Name a pass class and give it its registry contract; the name must be in `PASSES`."""
    assert name in PASSES, f"pass {name!r} is not in spyrec.passes.registry.PASSES; add it"

    def register(cls):
        cls.name = name
        if "contract" not in cls.__dict__:
            cls.contract = PASSES[name].contract
        return cls
    return register


def get_pass(name: str) -> type[Pass]:
    """The pass class registered as `name` (imports its module); KeyError if unknown."""
    return PASSES[name]()


def load_all() -> dict[str, type[Pass]]:
    """Every pass class by name (imports every pass module): for `--list-passes` and tests."""
    return {name: loader() for name, loader in PASSES.items()}


def providers(fact: str) -> list[str]:
    """Names of the registered passes that establish `fact`, for messages."""
    return sorted(n for n, loader in PASSES.items() if fact in loader.contract.provides)


def describe_passes() -> str:
    """`--list-passes`: each pass with the first paragraph of its module docstring (which
    starts `name — what it does`), its options (type and default) and its contract."""
    import dataclasses
    import sys

    blocks = []
    for name, cls in load_all().items():
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().split("\n\n")[0]
        doc = " ".join(doc.split())
        lines = [doc if doc.startswith(name) else f"{name} — {doc or 'no description'}"]
        fields = dataclasses.fields(cls)
        lines += [f"    {f.name}: {_type_name(f.type)} = {f.default!r}" for f in fields] or \
            ["    (no options)"]
        c = cls.contract
        for label, facts in (("needs", c.requires), ("provides", c.provides),
                             ("invalidates", c.invalidates)):
            if facts:
                lines.append(f"    {label}: {'; '.join(FACTS[f] for f in facts)}")
        if c.writes:
            lines.append(f"    writes: {', '.join(c.writes)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _type_name(t) -> str:
    return t if isinstance(t, str) else t.__name__
