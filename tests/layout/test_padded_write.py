"""write_device_padded (weights.bin's padded constants, split_padding's `__npad` lm_head)
writes the bytes write_device writes for the np.pad-ed array, on every stick layout, without
making that array."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spyrec.layout import SPARSE, stick_layout
from spyrec.layout.device_layout import contiguous_strides
from spyrec.layout.storage import STORAGE, placement, write_device, write_device_padded


@st.composite
def padded_cases(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 70 if rank < 3 else 9), min_size=rank,
                                max_size=rank)))
    pad = tuple(draw(st.lists(st.sampled_from([0, 0, 1, 3, 64]), min_size=rank,
                              max_size=rank)))
    padded = tuple(n + p for n, p in zip(shape, pad))
    dtype = draw(st.sampled_from(["float16", "float32", "int32"]))
    order = tuple(draw(st.permutations(range(rank))))
    if draw(st.booleans()):
        order += (SPARSE,)
    layout = stick_layout(padded, contiguous_strides(padded), dtype, order)
    return shape, pad, dtype, layout, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=150, deadline=None)
@given(padded_cases())
def test_padded_write_is_the_padded_arrays_write(case):
    shape, pad, dtype, layout, seed = case
    rng = np.random.default_rng(seed)
    host = (rng.standard_normal(shape) * 100).astype(dtype)
    storage = STORAGE[layout.device_dtype]
    expected = np.full(layout.device_elems + 5, 7, storage)
    write_device(expected, 5, np.pad(host, [(0, p) for p in pad]), dtype, layout, fill=True)
    got = np.full(layout.device_elems + 5, 7, storage)       # stale bytes: all overwritten
    write_device_padded(got, 5, host, pad, dtype, layout, fill=True)
    bits = np.dtype(f"u{storage.itemsize}")
    assert np.array_equal(got.view(bits), expected.view(bits))


def test_leading_keeps_the_slots_of_the_elements_it_keeps():
    """A [130, 64] fp16 host in the layout of its [192, 64] padding: row r's stick is where
    the padded array's row r is; nothing past row 129 is written."""
    layout = stick_layout((192, 64), (64, 1), "float16", (0, 1))
    device = np.full(layout.device_elems, np.nan, np.float16)
    host = np.arange(130 * 64, dtype=np.float16).reshape(130, 64)
    placement((192, 64), layout).leading((130, 64)).scatter(device, 0, host)
    assert np.array_equal(device[:130 * 64].reshape(130, 64), host)
    assert np.isnan(device[130 * 64:]).all()


@settings(max_examples=200, deadline=None)
@given(padded_cases(), st.data())
def test_rows_written_piece_by_piece_are_the_whole_write(case, data):
    """weights.bin's writer makes a big constant's device form a few device rows at a time
    (`write_device_rows`): any cut into row ranges gives the whole write's bytes, padding,
    fill and zero padding included."""
    from spyrec.layout.storage import device_rows, write_device_rows

    shape, pad, dtype, layout, seed = case
    padded = tuple(n + p for n, p in zip(shape, pad))
    if device_rows(padded, layout) is None:
        return
    host = (np.random.default_rng(seed).standard_normal(shape) * 100).astype(dtype)
    storage = STORAGE[layout.device_dtype]
    expected = np.full(layout.device_elems, 7, storage)
    write_device_padded(expected, 0, host, pad, dtype, layout, fill=True)
    rows = layout.device_size[0]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, rows - 1), max_size=4))
                      if rows > 1 else []))
    row = layout.device_elems // rows
    got = np.full(layout.device_elems, 7, storage)
    for a, b in zip([0] + cuts, cuts + [rows]):
        write_device_rows(got[a * row:b * row], host, pad, dtype, layout, range(a, b),
                          fill=True)
    bits = np.dtype(f"u{storage.itemsize}")
    assert np.array_equal(got.view(bits), expected.view(bits))


def test_rows_are_split_where_the_layout_allows_it():
    """A weight [N, K] in its matmul layout [N/64, K, 64] has one row per 64 of N; the
    embedding layout [K/64, N, 64] one per 64 of K; a layout whose dim 0 is a replica none."""
    from spyrec.layout.device_layout import DeviceLayout
    from spyrec.layout.storage import device_rows

    assert device_rows((256, 128), stick_layout((256, 128), (128, 1), "float16", (1, 0))) \
        == (0, 64)
    assert device_rows((256, 128), stick_layout((256, 128), (128, 1), "float16", (0, 1))) \
        == (1, 64)
    assert device_rows((4, 64), DeviceLayout((3, 4, 64), (0, 64, 1), "fp16")) is None
    assert device_rows((64,), DeviceLayout((1, 64), (-1, 1), "fp16")) is None
