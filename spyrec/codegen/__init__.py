"""Codegen: OpSpec/LoopSpec data, per-op JSON, bundle.mlir from the template, the output dir."""

from spyrec.codegen.writer import build_outputs, write_atomically

__all__ = ["build_outputs", "write_atomically"]
