"""Data movement and layouts: gather, restickify, transposed reads, casts, broadcast, fill."""

import numpy as np
import pytest
import torch

from spyrec.errors import SimulatorFault
from tests.sim.builder import rowmajor2d


def run(out, **inputs):
    return out.run(inputs).outputs


def gather_program(out):
    """out[c0, c1] = w[idx[c0], c1]: embedding of 10 int64 indices into a [1000, 128] table."""
    out.input("idx", [10], "int64")
    out.input("w", [1000, 128])
    out.output("e", [10, 128])
    out.op("identity", {"c0": 10, "c1": 128},
           [("idx", ["floor(c0/32)", "Mod(c0, 32)"]),
            ("w", ["floor(c1/64)", "IndirectAccess('idx')", "Mod(c1, 64)"]),
            ("e", rowmajor2d())], split={"c1": 2})
    return out


def test_gather_with_indirect_access(out, rng):
    idx = rng.integers(0, 1000, 10).astype(np.int64)
    idx[3] = idx[7]                                      # repeats are fine for a gather
    w = rng.standard_normal((1000, 128)).astype(np.float16)
    (got,) = run(gather_program(out), idx=idx, w=w)
    assert np.array_equal(got, torch.nn.functional.embedding(torch.from_numpy(idx),
                                                            torch.from_numpy(w)).numpy())


@pytest.mark.parametrize("bad", [1000, -1])
def test_out_of_range_gather_index_names_tensor_and_value(out, rng, bad):
    idx = np.arange(10, dtype=np.int64)
    idx[4] = bad
    w = rng.standard_normal((1000, 128)).astype(np.float16)
    with pytest.raises(SimulatorFault, match=(
            rf"sdsc_0.json \(identity 'identity_0', model.py:10 in forward\): gather index "
            rf"{bad} read from index tensor 'idx' is out of range for arg 'w' device dim 1 "
            rf"\(coordinate IndirectAccess\('idx'\), valid 0..999\) at c0=4")):
        run(gather_program(out), idx=idx, w=w)


def test_restickify_moves_the_stick_to_dim0(out, rng):
    x = rng.standard_normal((100, 70)).astype(np.float16)
    out.input("x", [100, 70])
    out.output("y", [100, 70], device_size=[2, 70, 64], stride_map=[4480, 1, 70])
    out.op("ReStickifyOpHBM", {"c0": 100, "c1": 70},
           [("x", rowmajor2d()), ("y", ["floor(c0/64)", "c1", "Mod(c0, 64)"])])
    result = out.run({"x": x})
    assert np.array_equal(result.outputs[0], x)
    # the device really holds columns in sticks now: y's stick (j, c) = x[64j:64j+64, c]
    from spyrec.sim.runner import place_tensors
    from spyrec.sim.transfer import write_tensor
    from spyrec.sim.executor import run_op
    program = out.load()
    hbm = place_tensors(program)
    write_tensor(hbm, program.manifest.tensors["x"], x)
    run_op(program.ops["sdsc_0.json"], program.trace[0][1], hbm)
    y = program.manifest.tensors["y"]
    dev = hbm.region(y.hbm_address, "fp16")[:2 * 70 * 64].reshape(2, 70, 64)
    assert np.array_equal(dev[0, 5], x[:64, 5]) and np.array_equal(dev[1, 69, :36], x[64:, 69])
    assert np.isnan(dev[1, :, 36:]).all()


def test_transposed_read_plus(out, rng):
    """out = a.t() + x with a [128, 64] read through its own (stick on a's dim 1) layout."""
    a = rng.standard_normal((128, 64)).astype(np.float16)
    x = rng.standard_normal((64, 128)).astype(np.float16)
    out.input("a", [128, 64])
    out.input("x", [64, 128])
    out.output("z", [64, 128])
    out.op("add", {"c0": 64, "c1": 128},
           [("a", ["floor(c0/64)", "c1", "Mod(c0, 64)"]), ("x", rowmajor2d()),
            ("z", rowmajor2d())], split={"c1": 2})
    (got,) = run(out, a=a, x=x)
    assert np.array_equal(got, (torch.from_numpy(a).t() + torch.from_numpy(x)).numpy())


def test_broadcast_row_vector(out, rng):
    a = rng.standard_normal((4, 100)).astype(np.float32)
    b = rng.standard_normal(100).astype(np.float32)
    out.input("a", [4, 100], "float32")
    out.input("b", [100], "float32")
    out.output("z", [4, 100], "float32")
    out.op("mul", {"c0": 4, "c1": 100},
           [("a", rowmajor2d(32)), ("b", ["floor(c1/32)", "Mod(c1, 32)"]),
            ("z", rowmajor2d(32))])
    (got,) = run(out, a=a, b=b)
    assert np.array_equal(got, a * b)


@pytest.mark.parametrize("src, dst", [("float16", "float32"), ("float32", "float16"),
                                      ("float32", "int64"), ("bool", "float16"),
                                      ("bfloat16", "float32")])
def test_identity_casts_like_torch_to(out, rng, src, dst):
    from tests.sim.builder import LANES, elementwise
    from spyrec.bf16 import float32_to_bf16_bits
    x = (rng.standard_normal((4, 100)) * 50).astype(np.float32)
    host = {"float16": x.astype(np.float16), "float32": x, "bool": x > 0,
            "bfloat16": float32_to_bf16_bits(x)}[src]
    got = run(elementwise(out, "identity", {"x": src}, dst), x=host)[0]
    t = torch.from_numpy(host) if src != "bfloat16" else \
        torch.from_numpy(host.view(np.int16)).view(torch.bfloat16)
    want = t.to(getattr(torch, dst)).numpy()
    assert LANES[dst] and got.dtype == want.dtype and np.array_equal(got, want)


def test_fill(out):
    out.output("z", [4, 100])
    out.op("fill", {"c0": 4, "c1": 100}, [("z", rowmajor2d())], constants={"value": -np.inf})
    (got,) = run(out)
    assert got.shape == (4, 100) and (got == -np.inf).all()


def test_output_may_name_an_input_twice(out, rng):
    x = rng.standard_normal((4, 100)).astype(np.float16)
    out.input("x", [4, 100])
    out.outputs += ["x", "x"]
    got = out.run({"x": x}).outputs
    assert len(got) == 2 and all(np.array_equal(g, x) for g in got)
