"""The intermediate representation: Buffer, Access, Operation, Graph — plain records — and the
device op vocabulary. Text form: `ir/printer.py` and `ir/parser.py`; invariants: `ir/verify.py`."""

from spyrec.ir.graph import ROLES, Access, Buffer, Graph, Loop, LoopBound, Operation, TripSpan
from spyrec.ir.symbols import SymLength, ValueSource
from spyrec.ir.ops import DEVICE_OPS, OpKind

__all__ = ["DEVICE_OPS", "ROLES", "Access", "Buffer", "Graph", "Loop", "LoopBound", "OpKind", "Operation", "SymLength", "ValueSource",
           "TripSpan"]
