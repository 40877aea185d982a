"""Read `bundle.mlir`: parse and verify it with xDSL, then flatten it into an execution list.

The bundle is a tiny program (docs/formats.md, DESIGN §5): its function's arguments are
symbolic lengths (bound from the inputs: `lengths`), `arith.constant`/`arith.addi` for
addresses, `arith.divui` / `arith.ceildivui` for a trip count that is a length over a tile
(exact for a shape's length, rounded up for one read from a value), `arith.cmpi` /
`arith.select` / `arith.maxsi` for a sized op's per-core share of a length, nested `scf.for` with
constant bounds or, for a loop whose trips depend on the enclosing loop's index, bounds
computed by `affine.min` and `arith.maxsi` (a clamped line in that index), `affine.apply`
for per-iteration tile bases, and one `sdscbundle.sdsc_execute` per device op. Interpreting
it up front gives the simulator a flat list of `Execute(file, operands, symbol_ids, loop
indices)` in execution order; the data work happens elsewhere.

Why a real MLIR parser (xDSL) rather than regexes: the contract says the bundle must parse and
verify with one, and a file that only our own regexes accept would not. xDSL keeps no source
positions on ops and skips use-before-def checks, so `_LocatingParser` records where each op
starts and we add the def-use walk; every error names `bundle.mlir:LINE:COL`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from xdsl.context import Context
from xdsl.dialects import affine, arith, func, scf
from xdsl.dialects.builtin import ArrayAttr, Builtin, IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span

from spyrec.errors import InputFileError
from spyrec.sim.dialect import SdscBundle
from spyrec.sim.files import read_text
from spyrec.sim.specs import Execute  # noqa: F401  (defined without xDSL; re-exported)


def make_context() -> Context:
    """The dialects a bundle may use; anything else fails to parse ("not registered")."""
    ctx = Context()
    for dialect in (Builtin, func.Func, arith.Arith, scf.Scf, affine.Affine, SdscBundle):
        ctx.load_dialect(dialect)
    return ctx


class _LocatingParser(Parser):
    """A Parser that remembers where each op starts, so later errors can point at it."""

    def __init__(self, ctx: Context, text: str, name: str):
        super().__init__(ctx, text, name)
        self.op_start: dict[Operation, int] = {}

    def location(self, op: Operation) -> str:
        start = self.op_start.get(op)
        if start is None:
            return self.lexer.input.name
        loc = Span(start, start, self.lexer.input).get_location()
        return f"{loc.file}:{loc.line}:{loc.col}"

    def parse_optional_operation(self) -> Operation | None:
        start = self.pos
        try:
            op = super().parse_optional_operation()
        except VerifyException as e:   # attribute constraints fail inside the parser, unplaced
            self.raise_error(str(e), start, self.pos)
        if op is not None:
            self.op_start[op] = start
        return op

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        try:
            return super().parse_module(allow_implicit_module)
        except ParseError:
            # xDSL reports undefined values at end of file; point at the first user instead.
            for name, refs in self.forward_ssa_references.items():
                users = [use.operation for value in refs.values() for use in value.uses]
                if users and users[0] in self.op_start:
                    self.raise_error(f"use of undefined value %{name}", self.op_start[users[0]])
            raise


@dataclass(frozen=True)
class ParsedBundle:
    module: ModuleOp
    locate: Callable[[Operation], str]


def parse_bundle(text: str, name: str = "bundle.mlir") -> ParsedBundle:
    """Parse and verify; an InputFileError with `name:LINE:COL` on any problem."""
    parser = _LocatingParser(make_context(), text, name)
    try:
        module = parser.parse_module()
    except ParseError as e:
        raise InputFileError(f"{name} does not parse:\n{e}") from None

    def fail(op: Operation, msg: str) -> None:
        raise InputFileError(f"{parser.location(op)}: {op.name}: {msg}")

    for op in module.walk():   # module.verify() would stop without saying where
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as e:
            fail(op, str(e))
    _check_defs_before_uses(module.body.block, set(), fail)
    return ParsedBundle(module, _once_per_op(parser.location))


def _once_per_op(locate: Callable[[Operation], str]) -> Callable[[Operation], str]:
    """`locate`, computed once per op: each execution of a looped op carries its location,
    and finding a line and column scans the text (3.7 s of a 44,000-execution bundle)."""
    seen: dict[int, str] = {}

    def located(op: Operation) -> str:
        key = id(op)
        if key not in seen:
            seen[key] = locate(op)
        return seen[key]
    return located


def _check_defs_before_uses(block: Block, visible: set[SSAValue], fail) -> None:
    visible = visible | set(block.args)
    for op in block.ops:
        for value in op.operands:
            if value not in visible:
                fail(op, f"operand %{value.name_hint} is used before its definition")
        for region in op.regions:
            for inner in region.blocks:
                _check_defs_before_uses(inner, visible, fail)
        visible |= set(op.results)


# --- interpretation -------------------------------------------------------------------------


@dataclass
class _State:
    env: dict[SSAValue, int]
    trace: list[Execute]
    locate: Callable[[Operation], str]
    iterations: int = 0
    loop: list[tuple[str, int]] = field(default_factory=list)   # enclosing scf.for indices

    def fail(self, op: Operation, msg: str) -> None:
        raise InputFileError(f"{self.locate(op)}: {op.name}: {msg}")


# Loop iterations a whole bundle may run. Every spyrec loop nest tiles one op (DESIGN §5), so
# real programs run thousands; the bound only stops a damaged bound (10**12) from spinning.
MAX_ITERATIONS = 1_000_000

_Handler = Callable[[Operation, _State], None]
_HANDLERS: dict[str, _Handler] = {}


def _handles(*names: str):
    def register(fn: _Handler) -> _Handler:
        for name in names:
            _HANDLERS[name] = fn
        return fn
    return register


@_handles("arith.constant")
def _constant(op: Operation, st: _State) -> None:
    value = op.value  # type: ignore[attr-defined]
    if not isinstance(value, IntegerAttr):
        st.fail(op, f"only integer constants are executable, got {value}")
    st.env[op.results[0]] = value.value.data


@_handles("arith.addi")
def _addi(op: Operation, st: _State) -> None:
    st.env[op.results[0]] = st.env[op.operands[0]] + st.env[op.operands[1]]


@_handles("affine.apply")
def _affine_apply(op: Operation, st: _State) -> None:
    amap = op.map.data  # type: ignore[attr-defined]
    values = [st.env[v] for v in op.operands]          # dims first, then symbols
    (st.env[op.results[0]],) = amap.eval(values[:amap.num_dims], values[amap.num_dims:])


@_handles("arith.divui")
def _divui(op: Operation, st: _State) -> None:
    """A trip count: a symbolic length over its tile, which must divide it (the tile divides
    every admissible length)."""
    a, b = st.env[op.operands[0]], st.env[op.operands[1]]
    if b <= 0 or a < 0 or a % b:
        st.fail(op, f"{a} / {b} is not an exact division of a length by a positive tile; the "
                    f"bundle and the length disagree: re-run spyrec compile")
    st.env[op.results[0]] = a // b


@_handles("arith.ceildivui")
def _ceildivui(op: Operation, st: _State) -> None:
    """A trip count over a length read from a value: its tiles, the last one partial."""
    a, b = st.env[op.operands[0]], st.env[op.operands[1]]
    if b <= 0 or a < 0:
        st.fail(op, f"{a} / {b}: a trip count divides a length by a positive tile; the bundle "
                    f"and the length disagree: re-run spyrec compile")
    st.env[op.results[0]] = -(-a // b)


@_handles("arith.maxsi")
def _maxsi(op: Operation, st: _State) -> None:
    st.env[op.results[0]] = max(st.env[op.operands[0]], st.env[op.operands[1]])


# arith.cmpi predicates (MLIR's numbering) on index values, which are never negative here
_COMPARE = {0: int.__eq__, 1: int.__ne__, 2: int.__lt__, 3: int.__le__, 4: int.__gt__,
            5: int.__ge__, 6: int.__lt__, 7: int.__le__, 8: int.__gt__, 9: int.__ge__}


@_handles("arith.cmpi")
def _cmpi(op: Operation, st: _State) -> None:
    """A length against a step of its minimum share (`arith.cmpi ule`)."""
    predicate = op.predicate.value.data  # type: ignore[attr-defined]
    st.env[op.results[0]] = int(_COMPARE[predicate](st.env[op.operands[0]],
                                                    st.env[op.operands[1]]))


@_handles("arith.select")
def _select(op: Operation, st: _State) -> None:
    """The minimum share of the step a length falls in."""
    cond, yes, no = (st.env[v] for v in op.operands)
    st.env[op.results[0]] = yes if cond else no


@_handles("affine.min")
def _affine_min(op: Operation, st: _State) -> None:
    amap = op.map.data  # type: ignore[attr-defined]
    values = [st.env[v] for v in op.operands]          # dims first, then symbols
    st.env[op.results[0]] = min(amap.eval(values[:amap.num_dims], values[amap.num_dims:]))


@_handles("scf.for")
def _for(op: Operation, st: _State) -> None:
    assert isinstance(op, scf.ForOp)
    if op.iter_args:
        st.fail(op, "loop-carried values (iter_args) are not part of the bundle format")
    body = op.body.block
    induction = body.args[0]
    lb, ub, step = st.env[op.lb], st.env[op.ub], st.env[op.step]
    if step <= 0:
        st.fail(op, f"step {step}: a loop step must be positive (the bundle's loops count "
                    f"up); re-run spyrec compile")
    trips = len(range(lb, ub, step))
    st.iterations += trips          # counted up front, so an empty body cannot spin either
    if st.iterations > MAX_ITERATIONS:
        st.fail(op, f"{trips} iterations ({lb} to {ub} step {step}) take the bundle past "
                    f"{MAX_ITERATIONS} loop iterations in all, more than any compiled program "
                    f"runs; the loop bound is damaged: re-run spyrec compile")
    name = f"i_{len(st.loop)}"       # induction vars are numbered by depth (contract §2)
    st.loop.append((name, lb))
    for i in range(lb, ub, step):
        st.env[induction] = i
        st.loop[-1] = (name, i)
        _run_block(body, st)
    st.loop.pop()


@_handles("sdscbundle.sdsc_execute")
def _execute(op: Operation, st: _State) -> None:
    filename = op.sdsc_filename.data  # type: ignore[attr-defined]
    symbol_ids = _symbol_ids(op, st)
    st.trace.append(Execute(filename, tuple(st.env[v] for v in op.operands), st.locate(op),
                            symbol_ids, tuple(st.loop)))


def _symbol_ids(op: Operation, st: _State) -> tuple[int, ...]:
    """The optional `symbol_ids` attribute: operand k binds id symbol_ids[k] (negative)."""
    attr = op.attributes.get("symbol_ids")
    if attr is None:
        return ()
    if not isinstance(attr, ArrayAttr) or not all(isinstance(a, IntegerAttr) for a in attr):
        st.fail(op, f"symbol_ids must be an array of integers, got {attr}")
    ids = tuple(a.value.data for a in attr)
    if len(ids) != len(op.operands):
        st.fail(op, f"{len(ids)} symbol_ids for {len(op.operands)} operands; operand k binds "
                    f"symbol_ids[k], so the counts must agree: re-run spyrec compile")
    if any(i >= 0 for i in ids) or len(set(ids)) != len(ids):
        st.fail(op, f"symbol_ids {list(ids)} must be distinct negative ids: re-run spyrec "
                    f"compile")
    return ids


@_handles("scf.yield", "func.return")
def _terminator(op: Operation, st: _State) -> None:
    if op.operands:
        st.fail(op, "returns values; the bundle function returns nothing")


def _run_block(block: Block, st: _State) -> None:
    for op in block.ops:
        handler = _HANDLERS.get(op.name)
        if handler is None:
            st.fail(op, f"cannot execute this op (executable: {', '.join(sorted(_HANDLERS))})")
        handler(op, st)


def execute(parsed: ParsedBundle, lengths: Mapping[str, int] | None = None) -> list[Execute]:
    """The flat execution list of a verified bundle, in textual/loop order. `lengths`: the
    value of each symbolic length (manifest.json `symbols`) the function takes as an argument
    of that name."""
    module = parsed.module
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp)]
    others = [op for op in module.ops if not isinstance(op, func.FuncOp)]
    state = _State({}, [], parsed.locate)
    if others:
        state.fail(others[0], "only func.func may appear at module level")
    if len(funcs) != 1:
        raise InputFileError(f"{parsed.locate(module)}: the bundle must define exactly one "
                             f"func.func, found {len(funcs)}")
    fn = funcs[0]
    _bind_arguments(fn, lengths or {}, state)
    _run_block(fn.body.block, state)
    return state.trace


def _bind_arguments(fn: func.FuncOp, lengths: Mapping[str, int], st: _State) -> None:
    """Each function argument is a symbolic length of that name (docs/formats.md)."""
    for arg in fn.body.block.args:
        if arg.name_hint not in lengths or not isinstance(arg.type, IndexType):
            declared = ", ".join(sorted(lengths)) or "none"
            st.fail(fn, f"the bundle function takes argument %{arg.name_hint} "
                        f"({arg.type}), which is not an index named after a symbolic length "
                        f"of manifest.json $.symbols (declared: {declared}); re-run spyrec "
                        f"compile")
        st.env[arg] = lengths[arg.name_hint]


def read_bundle(path: Path, lengths: Mapping[str, int] | None = None) -> list[Execute]:
    """Parse, verify and interpret one bundle file (at symbolic `lengths`)."""
    return read_bundle_text(read_text(Path(path)), path, lengths)


def read_bundle_text(text: str, path: Path,
                     lengths: Mapping[str, int] | None = None) -> list[Execute]:
    """Parse, verify and interpret one bundle's `text` (read from `path`, for messages)."""
    return execute(_parsed(text, Path(path)), lengths)


_PARSED: dict[tuple, ParsedBundle] = {}


def _parsed(text: str, path: Path) -> ParsedBundle:
    """The parsed bundle of `text`, kept while it is the same (a run at symbolic lengths
    interprets the bundle the loader read at the maxima again; parsing is most of that)."""
    key = (str(path), text)
    if key not in _PARSED:
        _PARSED.clear()                       # one bundle at a time: its module is large
        _PARSED[key] = parse_bundle(text, str(path))
    return _PARSED[key]
