"""Reductions and batchmatmul against PyTorch eager, padded sticks NaN-filled throughout."""

import numpy as np
import pytest
import torch

X_STICK_R0 = ["floor(r0/64)", "c0", "Mod(r0, 64)"]     # x[c0, r0], default layout of [64, 100]
SPARSE = dict(device_size=[1, 64, 64], stride_map=[-1, 1, -1])


def run(out, **inputs):
    return out.run(inputs).outputs


@pytest.mark.parametrize("op, fn", [
    ("sum", lambda t: t.sum(1)), ("max", lambda t: t.amax(1)), ("min", lambda t: t.amin(1)),
    ("mean", lambda t: t.mean(1)),
])
def test_reduce_the_stick_dim_into_a_sparse_output(out, rng, op, fn):
    x = (rng.standard_normal((64, 100)) * 4).astype(np.float16)
    out.input("x", [64, 100])
    out.output("y", [64], **SPARSE)
    constants = {"scaling_factor": 1 / 100} if op == "mean" else None
    out.op(op, {"c0": 64, "r0": 100}, [("x", X_STICK_R0), ("y", ["0", "c0", "0"])],
           reduced=["r0"], constants=constants, split={"c0": 4})
    (got,) = run(out, x=x)
    want = fn(torch.from_numpy(x)).numpy()
    if op in ("max", "min"):
        assert np.array_equal(got, want)
    else:   # fp32 accumulation in a different order than eager's: within one fp16 ulp
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=1e-3, atol=1e-3)


def test_sum_over_a_non_stick_dim_fp32(out, rng):
    x = rng.standard_normal((64, 100)).astype(np.float32)
    out.input("x", [64, 100], "float32")
    out.output("y", [100], "float32")
    out.op("sum", {"c0": 100, "r0": 64},
           [("x", ["floor(c0/32)", "r0", "Mod(c0, 32)"]), ("y", ["floor(c0/32)", "Mod(c0, 32)"])],
           reduced=["r0"])
    (got,) = run(out, x=x)
    np.testing.assert_allclose(got, x.sum(0, dtype=np.float64), rtol=1e-5, atol=1e-5)


def test_max_propagates_nan(out):
    x = np.zeros((64, 100), dtype=np.float16)
    x[5, 99] = np.nan
    out.input("x", [64, 100])
    out.output("y", [64], **SPARSE)
    out.op("max", {"c0": 64, "r0": 100}, [("x", X_STICK_R0), ("y", ["0", "c0", "0"])],
           reduced=["r0"])
    (got,) = run(out, x=x)
    assert np.isnan(got[5]) and np.isnan(got).sum() == 1


def test_reduction_split_across_cores_on_the_reduced_var(out, rng):
    x = rng.standard_normal((64, 100)).astype(np.float16)
    out.input("x", [64, 100])
    out.output("y", [64], **SPARSE)
    out.op("sum", {"c0": 64, "r0": 100}, [("x", X_STICK_R0), ("y", ["0", "c0", "0"])],
           reduced=["r0"], split={"c0": 2, "r0": 2})
    result = out.run({"x": x})
    np.testing.assert_allclose(result.outputs[0].astype(np.float32),
                               x.astype(np.float32).sum(1), rtol=1e-3, atol=1e-3)
    assert result.cost["ops"][0]["ring_us"] > 0      # K-split pays the partial-sum hops


def test_matmul_k100(out, rng):
    """[32,100] @ [100,80]: x sticked on K, y and the output on N; K is not a stick multiple."""
    x = rng.standard_normal((32, 100)).astype(np.float16)
    y = rng.standard_normal((100, 80)).astype(np.float16)
    out.input("x", [32, 100])
    out.input("y", [100, 80])
    out.output("z", [32, 80])
    out.op("batchmatmul", {"c0": 32, "c1": 80, "r0": 100},
           [("x", ["floor(r0/64)", "c0", "Mod(r0, 64)"]),
            ("y", ["floor(c1/64)", "r0", "Mod(c1, 64)"]),
            ("z", ["floor(c1/64)", "c0", "Mod(c1, 64)"])], reduced=["r0"], split={"c0": 4})
    (got,) = run(out, x=x, y=y)
    exact = x.astype(np.float64) @ y.astype(np.float64)
    want = (torch.from_numpy(x) @ torch.from_numpy(y)).numpy()
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3,
                               atol=2e-2)


def test_batched_matmul_3d_fp32(out, rng):
    x = rng.standard_normal((2, 16, 100)).astype(np.float32)
    y = rng.standard_normal((2, 100, 48)).astype(np.float32)
    out.input("x", [2, 16, 100], "float32")
    out.input("y", [2, 100, 48], "float32")
    out.output("z", [2, 16, 48], "float32")
    out.op("batchmatmul", {"c0": 2, "c1": 16, "c2": 48, "r0": 100},
           [("x", ["c1", "floor(r0/32)", "c0", "Mod(r0, 32)"]),
            ("y", ["r0", "floor(c2/32)", "c0", "Mod(c2, 32)"]),
            ("z", ["c1", "floor(c2/32)", "c0", "Mod(c2, 32)"])], reduced=["r0"])
    (got,) = run(out, x=x, y=y)
    np.testing.assert_allclose(got, np.matmul(x.astype(np.float64), y), rtol=1e-5, atol=1e-5)


def test_matmul_with_a_broadcast_weight(out, rng):
    """x [2,16,64] @ w [64,32]: w does not vary along the batch var c0."""
    x = rng.standard_normal((2, 16, 64)).astype(np.float32)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    out.input("x", [2, 16, 64], "float32")
    out.input("w", [64, 32], "float32")
    out.output("z", [2, 16, 32], "float32")
    out.op("batchmatmul", {"c0": 2, "c1": 16, "c2": 32, "r0": 64},
           [("x", ["c1", "floor(r0/32)", "c0", "Mod(r0, 32)"]),
            ("w", ["floor(c2/32)", "r0", "Mod(c2, 32)"]),
            ("z", ["c1", "floor(c2/32)", "c0", "Mod(c2, 32)"])], reduced=["r0"])
    (got,) = run(out, x=x, w=w)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)


def test_reading_padding_shows_up_as_nan(out, rng):
    """A spec that iterates over the padded lanes (128 instead of 100) reads the NaN fill."""
    x = rng.standard_normal((64, 100)).astype(np.float16)
    out.input("x", [64, 100])
    out.output("y", [64], **SPARSE)
    out.op("sum", {"c0": 64, "r0": 128}, [("x", X_STICK_R0), ("y", ["0", "c0", "0"])],
           reduced=["r0"])
    (got,) = run(out, x=x)
    assert np.isnan(got).all()
