"""The intermediate representation: Buffer, Access, Operation, Graph."""

from spyrec.ir.graph import ROLES, Access, Buffer, Graph, Operation

__all__ = ["ROLES", "Access", "Buffer", "Graph", "Operation"]
