"""The device op vocabulary, as data, and define-by-run op bodies over an `OpsHandler`.

Every `Operation` has a body: a function of an ops handler that loads its operands, applies its
one device op and stores the result (seed 002, Inductor's virtualized ops). Analyses are just
handlers run over the same bodies: `ReadWriteRecorder` extracts dependencies, `FormatHandler`
prints a body for dumps. The semantics of each op are in docs/formats.md; the simulator's kernels
implement them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spyrec.indexing import Lin

if TYPE_CHECKING:
    from spyrec.ir.graph import Operation


@dataclass(frozen=True)
class OpKind:
    family: str     # pointwise | compare | reduction | matmul | copy | fill | index
    arity: int      # tensor operands (a scalar in op_info may stand for one)


_POINTWISE_1 = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid",
                "cos", "sin",
                "relufwd", "silu", "floor", "gelufwd", "pow", "clip")
_POINTWISE_2 = ("add", "sub", "mul", "realdiv", "maximum", "minimum",
                "truncdiv", "floordiv", "remainder", "fmod", "powtensor")
_COMPARE = ("equal", "notequal", "greaterthan", "greaterequal", "lesserthan", "lesserequal")

DEVICE_OPS: dict[str, OpKind] = {
    **{name: OpKind("pointwise", 1) for name in _POINTWISE_1},
    **{name: OpKind("pointwise", 2) for name in _POINTWISE_2},
    **{name: OpKind("compare", 2) for name in _COMPARE},
    "where3": OpKind("pointwise", 3),
    "sum": OpKind("reduction", 1), "max": OpKind("reduction", 1),
    "min": OpKind("reduction", 1), "mean": OpKind("reduction", 1),
    "argmax": OpKind("reduction", 1), "argmin": OpKind("reduction", 1),
    "batchmatmul": OpKind("matmul", 2),
    "identity": OpKind("copy", 1), "ReStickifyOpHBM": OpKind("copy", 1),
    "fill": OpKind("fill", 0),
    # out = v + size if v < 0 else v, for v in -size..size-1; any other v is a fault naming the
    # index tensor and position (constants: size, index_tensor, index_shape, used_by)
    "wrapindex": OpKind("index", 1),
}


class OpsHandler:
    """The protocol: what an op body calls. `compute` covers every device op by name."""

    def load(self, buffer: str, index: Lin) -> Any:
        raise NotImplementedError

    def indirect(self, buffer: str, index: Lin) -> Any:
        """Read an index tensor whose value becomes `IndirectAccess(buffer)` in other loads."""
        raise NotImplementedError

    def compute(self, op: str, operands: list, constants: dict, reduced: tuple) -> Any:
        raise NotImplementedError

    def store(self, buffer: str, index: Lin, value: Any) -> None:
        raise NotImplementedError


def run_body(op: "Operation", ops: OpsHandler) -> None:
    """The define-by-run body every Operation shares: index reads, loads, one op, one store."""
    assert op.op in DEVICE_OPS, f"unknown device op {op.op}"
    for a in op.index_inputs:
        ops.indirect(a.buffer, a.index)
    operands = [ops.load(a.buffer, a.index) for a in op.inputs]
    value = ops.compute(op.op, operands, op.constants, op.reduced)
    ops.store(op.output.buffer, op.output.index, value)


@dataclass
class ReadWriteRecorder(OpsHandler):
    """Records (buffer, index) for every read and write: dependency extraction."""

    reads: list[tuple[str, Lin]] = field(default_factory=list)
    writes: list[tuple[str, Lin]] = field(default_factory=list)

    def load(self, buffer, index):
        self.reads.append((buffer, index))
        return buffer

    def indirect(self, buffer, index):
        self.reads.append((buffer, index))
        return buffer

    def compute(self, op, operands, constants, reduced):
        return op

    def store(self, buffer, index, value):
        self.writes.append((buffer, index))


@dataclass
class FormatHandler(OpsHandler):
    """Renders a body as one line of text: `out[i] = op(a[i], b[j])`."""

    line: str = ""

    def load(self, buffer, index):
        return f"{buffer}[{index}]"

    def indirect(self, buffer, index):
        return None

    def compute(self, op, operands, constants, reduced):
        text = f"{op}({', '.join(operands)})"
        if reduced:
            text += f" reduce({', '.join(reduced)})"
        if constants:
            text += f" {constants}"
        return text

    def store(self, buffer, index, value):
        self.line = f"{buffer}[{index}] = {value}"


def reads_and_writes(op: "Operation") -> ReadWriteRecorder:
    rec = ReadWriteRecorder()
    run_body(op, rec)
    return rec


def format_body(op: "Operation") -> str:
    fmt = FormatHandler()
    run_body(op, fmt)
    return fmt.line
