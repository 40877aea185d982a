"""The intermediate representation: Buffer, Access, Operation, Graph, and op bodies."""

from spyrec.ir.graph import ROLES, Access, Buffer, Graph, Loop, Operation
from spyrec.ir.ops import DEVICE_OPS, OpsHandler, format_body, reads_and_writes, run_body

__all__ = ["DEVICE_OPS", "ROLES", "Access", "Buffer", "Graph", "Loop", "OpsHandler", "Operation",
           "format_body", "reads_and_writes", "run_body"]
