"""copy_strided equals np.copyto bit for bit, on every arrangement of the two arrays, and takes
the word passes exactly where its docstring says."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spyrec.layout import transpose
from spyrec.layout.storage import device_bytes_of, placement
from spyrec.layout.transpose import copy_strided

DTYPES = [np.uint8, np.float16, np.int16, np.float32, np.int32, np.float64]


@st.composite
def copies(draw):
    """A destination view and a source of one shape: each a permutation of a contiguous
    array's axes, possibly with a step along one axis; values with NaN payloads for floats."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    ndim = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 8, 12, 16]), min_size=ndim,
                                max_size=ndim)))

    def arranged(fill):
        perm = draw(st.permutations(range(ndim)))
        base_shape = [shape[i] for i in np.argsort(perm)]
        step_axis = draw(st.integers(-1, ndim - 1))
        if step_axis >= 0:
            base_shape[step_axis] *= 2
        n = int(np.prod(base_shape))
        base = fill(n).reshape(base_shape)
        if step_axis >= 0:
            index = [slice(None)] * ndim
            index[step_axis] = slice(None, None, 2)
            base = base[tuple(index)]
        return base.transpose(perm)

    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    bits = np.dtype(f"u{dtype.itemsize}")
    src = arranged(lambda n: rng.integers(0, np.iinfo(bits).max, n, dtype=bits,
                                          endpoint=True).view(dtype))
    dst = arranged(lambda n: np.zeros(n, dtype))
    assert src.shape == dst.shape == shape
    return dst, src


@settings(max_examples=300, deadline=None)
@given(copies(), st.sampled_from([0, 1 << 16]), st.sampled_from([64, 1 << 21]),
       st.sampled_from([1, 3, 8, 1024]))
def test_copy_strided_is_copyto_bit_for_bit(case, min_bytes, chunk, block):
    dst, src = case
    expected = np.empty_like(dst)
    np.copyto(expected, src)
    copy_strided(dst, src, min_bytes=min_bytes, chunk_bytes=chunk, block_words=block)
    bits = np.dtype(f"u{dst.itemsize}")
    assert np.array_equal(dst.view(bits) if dst.flags.c_contiguous else
                          np.ascontiguousarray(dst).view(bits), expected.view(bits))


def test_the_word_passes_serve_a_stick_transpose_and_nothing_else():
    """A linear weight [out, in] with sticks along out is a transpose of the 64-lane axis: the
    word plan; a copy whose contiguous axes agree, a dtype conversion, an odd contiguous
    extent and a small array are plain copies."""
    w = np.zeros((256, 512), np.float16)
    box = np.empty((4, 512, 64), np.float16).transpose(0, 2, 1)   # [out/64, lane, in]
    src = w.reshape(4, 64, 512)
    assert transpose._word_plan(box, src) == (2, [0, 2, 1], np.dtype(np.complex128))
    assert transpose._word_plan(np.empty_like(src), src) is None
    assert transpose._word_plan(box, src.astype(np.float32)) is None
    odd = np.zeros((4, 64, 510), np.float16)
    assert transpose._word_plan(np.empty((4, 510, 64), np.float16).transpose(0, 2, 1),
                                odd) is None
    assert transpose._word_plan(box[:, :, :8], src[:, :, :8]) is None       # 4 KiB
    four = np.zeros((4, 64, 516), np.float16)           # whole 8-byte words, not 16-byte ones
    assert transpose._word_plan(np.empty((4, 516, 64), np.float16).transpose(0, 2, 1),
                                four) == (2, [0, 2, 1], np.dtype(np.uint64))
    assert transpose._word_plan(np.empty((4, 512, 64)), src) is None         # fp64: no lanes


def test_blocks_bound_the_words_read_across_rows():
    """The Granite-8B MLP weight's transpose [out/64, lane, in] <- [out, in]: the first pass
    walks lane x out/64 rows innermost, so the cut is out/64 at 1024 // 64 = 16 (1024 rows
    of 16-byte words), and the outer axis (in) takes 4 MiB // (16 x 64 x 2 B) = 2048 rows."""
    assert transpose._block((200, 64, 4096), [2, 0, 1], 2, 1024) == (0, 16)
    assert transpose._block((16, 64, 4096), [2, 0, 1], 2, 1024) is None      # 1,024 rows
    shape = (200, 64, 4096)
    dst = np.empty((4096, 200, 64), np.float16).transpose(1, 2, 0)  # [in, out/64, lane]
    src = np.empty(shape, np.float16)
    seen = []
    real = transpose._two_passes
    transpose._two_passes = lambda d, s, *rest: seen.append(d.shape)
    try:
        copy_strided(dst, src)
    finally:
        transpose._two_passes = real
    assert seen[0] == (16, 64, 2048) and len(seen) == 13 * 2


def test_a_weight_in_device_form_round_trips_through_the_word_passes():
    """weights.bin's conversion of an fp16 weight whose sticks run along its rows, and the
    loader's gather back, equal a per-element reading of the layout definition."""
    from spyrec.layout.device_layout import DeviceLayout

    rows, cols = 192, 320
    host = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float16)
    layout = DeviceLayout(device_size=(rows // 64, cols, 64), stride_map=(64 * cols, 1, cols),
                          device_dtype="fp16")
    device = device_bytes_of(host, "float16", layout)
    d0, k, j = np.meshgrid(np.arange(rows // 64), np.arange(cols), np.arange(64),
                           indexing="ij")
    assert np.array_equal(device.reshape(rows // 64, cols, 64), host[d0 * 64 + j, k])
    back = placement(host.shape, layout).gather(device, 0)
    assert np.array_equal(back.view(np.uint16), host.view(np.uint16))


def test_other_dtypes_convert_as_assignment_does():
    dst = np.zeros((3, 4), np.int32)
    src = np.arange(12, dtype=np.float64).reshape(3, 4) + 0.75
    copy_strided(dst, src)
    expected = np.zeros((3, 4), np.int32)
    expected[...] = src
    assert np.array_equal(dst, expected)


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="differ"):
        copy_strided(np.empty((2, 3)), np.empty((3, 2)))
