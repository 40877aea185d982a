"""The simulator's converting copies give the same bits through numpy and through torch's
vectorized copy (used for programs with >= 3 GiB of weights): fp16 -> fp32 is exact,
infinities, signed zeros and subnormals included, from strided and read-only views; a NaN
stays a NaN (torch quiets a signaling NaN's payload, which no op can observe)."""

import numpy as np
import pytest

from spyrec.sim import cast


@pytest.mark.parametrize("writeable", [True, False])
def test_torch_and_numpy_casts_give_the_same_bits(writeable, monkeypatch):
    bits = np.arange(1 << 16, dtype=np.uint16)               # every fp16 value
    device = np.resize(bits, (8, 1024, 64)).view(np.float16)   # 8 sticks of 64 x 1024 rows
    box = np.lib.stride_tricks.as_strided(device, (1024, 8, 64),
                                          (128, 1024 * 128, 2), writeable=writeable)
    by_numpy = np.empty((1024, 8, 64), np.float32)
    np.copyto(by_numpy, box, casting="unsafe")
    if not cast.use_torch_casts():
        pytest.skip("torch is not installed")
    by_torch = np.empty_like(by_numpy)
    cast.cast_copy(by_torch, box)
    assert box.size >= cast._MIN_ELEMENTS
    nan = np.isnan(by_numpy)
    assert np.array_equal(np.isnan(by_torch), nan) and nan.sum() == 2 * 1023 * 8   # every NaN pattern of both signs
    assert np.array_equal(by_torch.view(np.uint32)[~nan], by_numpy.view(np.uint32)[~nan])


def test_unused_axes_take_the_vectorized_copy(monkeypatch):
    """A strided read's unused vars are axes of one element with stride 0 (anywhere in the
    shape): they are dropped, so the copy still goes through torch; a negative stride falls
    back to numpy with the axes where they were."""
    if not cast.use_torch_casts():
        pytest.skip("torch is not installed")
    device = np.random.default_rng(0).standard_normal(8 * 1024 * 64).astype(np.float16)
    box = np.lib.stride_tricks.as_strided(device, (1024, 1, 8, 64, 1),
                                          (128, 0, 1024 * 128, 2, 0), writeable=False)
    want = box.astype(np.float32)

    def no_numpy(*args, **kwargs):
        raise AssertionError("numpy's scalar cast was used")

    got = np.empty(box.shape, np.float32)
    with monkeypatch.context() as m:
        m.setattr(cast.np, "copyto", no_numpy)
        cast.cast_copy(got, box)
    assert np.array_equal(got, want)
    backwards = box[::-1]
    got = np.empty(backwards.shape, np.float32)
    cast.cast_copy(got, backwards)
    assert np.array_equal(got, want[::-1])
