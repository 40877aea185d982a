"""PyTorch's own OpInfo samples as spyrec programs: build, export, compile, simulate, compare.

Every sample of every OpInfo entry in `OPS` becomes a function of its tensor arguments (the
python scalars, lists and keyword arguments are baked in), exported with torch.export and run
through spyrec in-process. The verdict is one of:

- `passed`: the simulated outputs equal eager (DESIGN §9 tolerances, the `--check` rule);
- `refused`: compile raised `UnsupportedProgram` (exit 3) with a reason;
- `unexportable`: torch.export itself cannot export the sample (not spyrec's business);
- `failed`: anything else — a crash, another exception, a wrong shape, dtype or value.

Samples are generated under a fixed seed, so "sample 3 of add in fp16" is the same tensor on
every run and a failure can be reproduced by its id.
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
import types
import unittest
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch.utils import _pytree as pytree

# OpInfo's test utilities import `expecttest` at module level but never use it for samples;
# a stand-in keeps it out of spyrec's dependencies.
if "expecttest" not in sys.modules:
    try:
        import expecttest  # noqa: F401
    except ImportError:
        sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase)

DTYPES = {"float32": torch.float32, "float16": torch.float16}

# (OpInfo name, variant) of every op spyrec lowers or is about to lower (the ones another
# branch adds are refused here with exit 3 until it is merged; that is an accepted verdict).
OPS = [
    ("abs", ""), ("add", ""), ("sub", ""), ("mul", ""), ("rsub", ""),
    ("div", "no_rounding_mode"), ("div", "trunc_rounding"), ("div", "floor_rounding"),
    ("maximum", ""), ("minimum", ""), ("max", "binary"), ("min", "binary"),
    ("eq", ""), ("ne", ""), ("gt", ""), ("ge", ""), ("lt", ""), ("le", ""),
    ("neg", ""), ("exp", ""), ("log", ""), ("sqrt", ""), ("rsqrt", ""), ("reciprocal", ""),
    ("tanh", ""), ("sigmoid", ""), ("floor", ""), ("pow", ""),
    ("nn.functional.relu", ""), ("nn.functional.silu", ""), ("nn.functional.gelu", ""),
    ("nn.functional.hardtanh", ""),
    ("clamp", ""), ("clamp_min", ""), ("clamp_max", ""), ("where", ""),
    ("full_like", ""), ("ones_like", ""), ("zeros_like", ""),
    ("clone", ""), ("contiguous", ""), ("half", ""), ("float", ""), ("char", ""),
    ("view", ""), ("reshape", ""), ("view_as", ""), ("reshape_as", ""), ("flatten", ""),
    ("unflatten", ""), ("permute", ""), ("transpose", ""), ("t", ""), ("movedim", ""),
    ("expand", ""), ("expand_as", ""), ("unsqueeze", ""), ("squeeze", ""),
    ("squeeze", "multiple"), ("narrow", ""), ("select", ""), ("split", ""),
    ("split", "list_args"), ("split_with_sizes", ""), ("chunk", ""), ("unbind", ""),
    ("cat", ""), ("stack", ""), ("hstack", ""), ("vstack", ""), ("__getitem__", ""),
    ("index_select", ""), ("nn.functional.embedding", ""),
    ("sum", ""), ("mean", ""), ("amax", ""), ("amin", ""),
    ("max", "reduction_no_dim"), ("max", "reduction_with_dim"),
    ("min", "reduction_no_dim"), ("min", "reduction_with_dim"),
    ("mm", ""), ("bmm", ""), ("matmul", ""), ("addmm", ""), ("addmv", ""),
    ("nn.functional.linear", ""),
    ("softmax", ""), ("log_softmax", ""),
    ("nn.functional.layer_norm", ""), ("native_layer_norm", ""), ("nn.functional.rms_norm", ""),
    ("alias_copy", ""), ("expand_copy", ""), ("permute_copy", ""), ("t_copy", ""),
    ("transpose_copy", ""), ("unsqueeze_copy", ""), ("squeeze_copy", ""), ("view_copy", ""),
    ("narrow_copy", ""), ("split_with_sizes_copy", ""), ("unbind_copy", ""),
    # every other lowered aten op that has an OpInfo entry
    ("cos", ""), ("sin", ""), ("ceil", ""), ("sign", ""), ("square", ""),
    ("remainder", ""), ("fmod", ""), ("argmax", ""), ("argmin", ""),
    ("bitwise_and", ""), ("bitwise_or", ""), ("bitwise_xor", ""), ("bitwise_not", ""),
    ("logical_and", ""), ("logical_or", ""), ("logical_xor", ""), ("logical_not", ""),
    ("full", ""), ("ones", ""), ("zeros", ""), ("scalar_tensor", ""), ("broadcast_to", ""),
    ("as_strided", ""), ("as_strided_copy", ""), ("diagonal", ""), ("diagonal_copy", ""),
    ("unfold", ""), ("unfold_copy", ""),
    ("gather", ""), ("take_along_dim", ""), ("scatter", ""), ("scatter_add", ""),
    ("index_add", ""), ("index_copy", ""), ("index_put", ""),
    ("nn.functional.dropout", ""), ("nn.functional.alpha_dropout", ""),
    ("nn.functional.scaled_dot_product_attention", ""), ("baddbmm", ""),
    ("cumsum", ""), ("repeat", ""), ("repeat_interleave", ""), ("masked_fill", ""),
    ("isinf", ""), ("isnan", ""), ("isfinite", ""), ("any", ""), ("all", ""), ("baddbmm", ""),
    # issue 61's families: state-space hybrids, speech and vision towers
    ("nn.functional.pad", "constant"), ("log1p", ""), ("nn.functional.softplus", ""),
    ("slice_scatter", ""), ("select_scatter", ""), ("masked_scatter", ""),
    ("nn.functional.group_norm", ""), ("native_group_norm", ""), ("linalg.vector_norm", ""),
    ("nn.functional.interpolate", "nearest"), ("roll", ""), ("tril", ""), ("triu", ""),
    ("einsum", ""), ("nn.functional.glu", ""), ("fill", ""),
]

SEED = 0


def op_id(name: str, variant: str) -> str:
    return f"{name}.{variant}" if variant else name


@lru_cache(maxsize=None)
def _op_db() -> dict[str, object]:
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_id(o.name, o.variant_test_name): o for o in op_db}


def opinfo(op: str):
    return _op_db()[op]


@lru_cache(maxsize=4)  # the sweep runs every sample of one (op, dtype) in a row
def samples(op: str, dtype: str) -> list:
    """The OpInfo samples of `op` in `dtype`, generated under a fixed seed (deterministic)."""
    info = opinfo(op)
    if DTYPES[dtype] not in info.supported_dtypes("cpu"):
        return []
    torch.manual_seed(SEED)
    return list(info.sample_inputs("cpu", DTYPES[dtype], requires_grad=False))


class SampleModule(torch.nn.Module):
    """`fn(sample.input, *sample.args, **sample.kwargs)` as a module of the sample's tensors.

    The arguments are flattened with pytree; tensor leaves become forward() inputs in order,
    everything else (python scalars, shapes, dims, dtypes) is baked into the program.
    """

    def __init__(self, fn, sample) -> None:
        super().__init__()
        self.fn = fn
        leaves, self.spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        self.leaves = leaves
        self.slots = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def tensors(self) -> tuple:
        return tuple(self.leaves[i] for i in self.slots)

    def forward(self, *tensors):
        leaves = list(self.leaves)
        for i, t in zip(self.slots, tensors):
            leaves[i] = t
        x, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        out = self.fn(x, *args, **kwargs)
        return tuple(t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))


@dataclass(frozen=True)
class Verdict:
    outcome: str      # passed | failed | refused | unexportable
    detail: str = ""


def _host(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def run_sample(op: str, dtype: str, index: int, workdir: Path | None = None) -> Verdict:
    """Compile and simulate sample `index` of `op` in `dtype`; compare with eager."""
    sample = samples(op, dtype)[index]
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="spyrec-opinfo-") as tmp:
            return _run(opinfo(op), sample, Path(tmp))
    return _run(opinfo(op), sample, workdir)


def _run(info, sample, tmp: Path) -> Verdict:
    from spyrec.compiler import CompileOptions
    from spyrec.driver import compile_and_estimate
    from spyrec.errors import UnsupportedProgram
    from spyrec.sim.runner import simulate

    module = SampleModule(info.op, sample).eval()
    inputs = module.tensors()
    try:
        with torch.no_grad():
            expected = module(*inputs)
        ep = torch.export.export(module, inputs)
        torch.export.save(ep, str(tmp / "model.pt2"))
    except Exception as e:  # noqa: BLE001  (whatever torch.export refuses is not ours)
        return Verdict("unexportable", _first_line(e))
    try:
        compile_and_estimate(tmp / "model.pt2", tmp / "out", CompileOptions(verbose=-1, verify_each=True))
    except UnsupportedProgram as e:
        reason = str(e).strip()
        return Verdict("refused", reason) if reason else Verdict("failed", "refused, no reason")
    except Exception as e:  # noqa: BLE001
        return Verdict("failed", f"compile: {_crash(e)}")
    try:
        names = json.loads((tmp / "out" / "manifest.json").read_text())["inputs"]
        result = simulate(tmp / "out", {n: _host(t) for n, t in zip(names, inputs)})
    except Exception as e:  # noqa: BLE001
        return Verdict("failed", f"simulate: {_crash(e)}")
    problem = compare_outputs(result, expected)
    return Verdict("failed", problem) if problem else Verdict("passed")


def compare_outputs(result, expected: tuple) -> str | None:
    """None when every simulated output matches eager (shape, dtype and values)."""
    from spyrec.sim.check import compare
    from spyrec.sim.eager import _to_numpy

    if len(result.outputs) != len(expected):
        return f"{len(result.outputs)} outputs, eager gives {len(expected)}"
    for i, (got, dtype, want) in enumerate(zip(result.outputs, result.output_dtypes, expected)):
        want_dtype = str(want.dtype).removeprefix("torch.")
        if dtype != want_dtype:
            return f"output {i}: dtype {dtype}, eager gives {want_dtype}"
        check = compare(i, f"output_{i}", dtype, got, _to_numpy(want))
        if not check.ok:
            return (f"output {i}: " + (check.problem or f"{check.mismatches}/{check.total} "
                    f"mismatches, max abs err {check.max_abs:.3g}"))
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]


def _crash(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1]
    where = f"{Path(frame.filename).name}:{frame.lineno}"
    return f"{_first_line(e)} ({where})"
