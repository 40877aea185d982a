"""Compile a module, simulate it, and compare with PyTorch eager (DESIGN §9 tolerances)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from spyrec.sim.runner import simulate
from tests.programs import compile_pt2, export, load_json

TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2,
             # an 8-bit value quantized from a 16-bit one an ulp away may land one step over
             torch.float8_e4m3fn: 2.0 ** -3, torch.float8_e5m2: 2.0 ** -2}
FP8_FORMATS = {torch.float8_e4m3fn: "fp8_e4m3", torch.float8_e5m2: "fp8_e5m2"}


def host_array(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def as_float(a: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    if dtype == torch.bfloat16 and a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    if dtype in FP8_FORMATS and a.dtype == np.uint8:        # bit patterns
        from spyrec.fp8 import FORMATS

        return FORMATS[FP8_FORMATS[dtype]].decode(a).astype(np.float64)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def run_and_compare(tmp: Path, module: torch.nn.Module, inputs: tuple,
                    export_kwargs: dict | None = None, **compile_opts) -> Path:
    """Export, compile, simulate, and compare every output with eager: the user outputs with
    the module's return values, then every buffer the program mutates (it comes back under its
    FQN, DESIGN §1) with the module's buffer after the eager call."""
    module = module.eval()
    pt2 = export(tmp, module, inputs, **(export_kwargs or {}))
    out = compile_pt2(pt2, Path(tmp) / "out", **compile_opts)
    names = load_json(out / "manifest.json")["inputs"]
    result = simulate(out, {n: host_array(t) for n, t in zip(names, inputs)})
    with torch.no_grad():
        expected = module(*inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    labels = [f"output {i}" for i in range(len(expected))]
    buffers = dict(module.named_buffers())
    for name in result.names[len(expected):]:  # the mutated buffers, by FQN
        expected.append(buffers[name])
        labels.append(f"buffer {name}")
    assert len(result.outputs) == len(expected), (result.names, labels)
    for label, got, want in zip(labels, result.outputs, expected):
        assert_close(got, want, label)
    return out


def assert_close(got: np.ndarray, want: torch.Tensor, label: str) -> None:
    """`got` (the simulator's) equals eager's `want` within the dtype's tolerance (integers
    exactly)."""
    assert tuple(got.shape) == tuple(want.shape), (label, got.shape, want.shape)
    if want.dtype.is_floating_point:
        tol = TOLERANCE[want.dtype]
        w = want.to(torch.float32).numpy().astype(np.float64)
        np.testing.assert_allclose(as_float(got, want.dtype), w, rtol=tol, atol=tol,
                                   err_msg=label)
    else:
        np.testing.assert_array_equal(got.astype(np.int64), want.numpy().astype(np.int64),
                                      err_msg=label)
