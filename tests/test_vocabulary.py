"""The compiler's device ops and the simulator's kernels agree, both ways.

`DEVICE_OPS` (spyrec/ir/ops.py) is every op the compiler may emit (`LoweringContext.emit`
asserts it); `KERNELS` (spyrec/sim/kernels) is every op the simulator can execute. An op the
compiler emits without a kernel fails only when a model happens to use it; a kernel no op
reaches is dead code that still looks tested. The compiler side is read from the source: every
op name written literally at an emit site must be in the vocabulary, and every vocabulary entry
must be named somewhere in the front end or the passes. (tests/differential compile and
simulate programs that reach the kernels.)
"""

import ast
from pathlib import Path

import spyrec
from spyrec.ir import DEVICE_OPS
from spyrec.sim.kernels import KERNELS

ROOT = Path(spyrec.__file__).parent
COMPILER = sorted((ROOT / "frontend").rglob("*.py")) + sorted((ROOT / "passes").rglob("*.py"))
EMITTERS = {"emit": 0, "pointwise": 0, "Operation": 1}   # call -> position of the op name


def _trees():
    return [(p, ast.parse(p.read_text(), str(p))) for p in COMPILER]


def _emitted_literals() -> dict[str, str]:
    """Op names written as a literal at an emit site: name -> where."""
    found = {}
    for path, tree in _trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else \
                getattr(node.func, "id", None)
            if func not in EMITTERS:
                continue
            args = list(node.args)
            op = next((k.value for k in node.keywords if k.arg == "op"), None)
            if op is None and len(args) > EMITTERS[func]:
                op = args[EMITTERS[func]]
            if isinstance(op, ast.Constant) and isinstance(op.value, str):
                found[op.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def _string_constants() -> set[str]:
    return {node.value for _, tree in _trees() for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_every_device_op_has_a_kernel_and_every_kernel_an_op():
    assert sorted(set(DEVICE_OPS) - set(KERNELS)) == [], "device ops without a kernel"
    assert sorted(set(KERNELS) - set(DEVICE_OPS)) == [], "kernels no device op reaches"


def test_every_op_written_at_an_emit_site_is_in_the_vocabulary():
    emitted = _emitted_literals()
    assert {"batchmatmul", "identity", "fill", "ReStickifyOpHBM", "where3"} <= set(emitted)
    unknown = {op: where for op, where in emitted.items() if op not in DEVICE_OPS}
    assert not unknown, unknown


def test_every_vocabulary_entry_is_named_by_the_compiler():
    """No vocabulary entry (and so no kernel) that the front end and passes never produce:
    each is written in their source, or is the op part of an aten op they lower and pass
    through by name (`aten.fmod.Tensor` -> fmod, `aten.argmax.default` -> argmax)."""
    from spyrec.frontend.lowerings import register_lowerings
    from spyrec.frontend.registry import LOWERINGS

    register_lowerings()
    passed_through = {target.split(".")[1] for target in LOWERINGS if target.startswith("aten.")}
    unused = sorted(set(DEVICE_OPS) - _string_constants() - passed_through)
    assert not unused, unused
