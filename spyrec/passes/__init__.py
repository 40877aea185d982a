"""Passes over the Graph, one module each, behind one registry (`registry.py`).

A pass is a frozen dataclass with a `name` and `run(graph, ctx)`; its fields are the options a
pipeline YAML or `--set PASS.OPTION=VALUE` may set. `pipeline.py` reads and validates the YAML.
Passes are thin drivers: what several of them need (split candidates and estimates, LX
placement, staging, SuperDSC expressibility, tile proofs) is in `spyrec/plan`, so no pass
imports another.
"""

from spyrec.passes.registry import PASSES, CompileContext, Pass, register_pass

__all__ = ["PASSES", "CompileContext", "Pass", "register_pass"]
