"""Device coordinates: the examples of reference/A-layout.md §5–6 with exact expected results,
and a randomized check that coordinates address exactly the element the host index names."""

import math

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from spyrec.indexing import Ranges, Var, device_coordinates, evaluate, indirect, parse_expr, var
from spyrec.layout import contiguous_strides, default_layout, stick_layout


def coords(host, layout, ranges, index, offset=0, strides=None):
    strides = strides or contiguous_strides(host)
    out = device_coordinates(host, strides, offset, layout.device_size, layout.stride_map,
                             ranges, parse_expr(index) if isinstance(index, str) else index)
    return [str(c) for c in out]


def test_seed_example_fp16_1024x256():
    """Element (r, c) of fp16 [1024, 256] is at device [c//64, r, c%64] of [4, 1024, 64]."""
    layout = default_layout([1024, 256], "float16")
    got = coords([1024, 256], layout, {"c0": (0, 1023), "c1": (0, 255)}, "256*c0 + c1")
    assert got == ["floor(c1/64)", "c0", "Mod(c1, 64)"]


def test_offset_on_padded_base_ref3797():
    """fp16 [4,100] sliced [1:, :]: offset 100 is row 1, col 0 — no spurious +36 on the lane."""
    layout = default_layout([4, 100], "float16")
    got = coords([4, 100], layout, {"c0": (0, 2), "c1": (0, 99)}, "100*c0 + c1", offset=100)
    assert got == ["floor(c1/64)", "c0 + 1", "Mod(c1, 64)"]


def test_reference_coordinate_unit_tests():
    """A §6.2 K: device [256,64,2,64] / [4096,64,1048576,1] (host [2,256,4096])."""
    host = [2, 256, 4096]
    layout = default_layout(host, "float16")
    assert (list(layout.device_size), list(layout.stride_map)) == \
        ([256, 64, 2, 64], [4096, 64, 1048576, 1])
    r4 = {"p0": (0, 1), "p1": (0, 31), "p2": (0, 255), "p3": (0, 127)}
    assert coords(host, layout, r4, "1048576*p0 + 128*p1 + 4096*p2 + p3") == \
        ["p2", "2*p1 + floor(p3/64)", "p0", "Mod(p3, 64)"]
    r2 = {"p0": (0, 511), "p1": (0, 4095)}
    assert coords(host, layout, r2, "4096*p0 + p1") == \
        ["Mod(p0, 256)", "floor(p1/64)", "floor(p0/256)", "Mod(p1, 64)"]
    r3 = {"p0": (0, 1), "p1": (0, 255), "p2": (0, 127)}
    assert coords(host, layout, r3, "1048576*p0 + 4096*p1 + p2", offset=128) == \
        ["p1", "floor(p2/64) + 2", "p0", "Mod(p2, 64)"]


def test_slices_of_fp16_128x256():
    """A §6.2 J. A slice starting inside a stick keeps the offset inside floor and Mod."""
    host, layout = [128, 256], default_layout([128, 256], "float16")
    r = {"c0": (0, 127), "c1": (0, 127)}
    assert coords(host, layout, r, "256*c0 + c1", offset=64) == \
        ["floor(c1/64) + 1", "c0", "Mod(c1, 64)"]
    # The reference prints [c1//64, c0, Mod(c1,64)+32]: wrong for c1 >= 32.
    assert coords(host, layout, r, "256*c0 + c1", offset=32) == \
        ["floor((c1 + 32)/64)", "c0", "Mod(c1 + 32, 64)"]
    r_rows = {"c0": (0, 63), "c1": (0, 255)}
    assert coords(host, layout, r_rows, "256*c0 + c1", offset=32 * 256) == \
        ["floor(c1/64)", "c0 + 32", "Mod(c1, 64)"]


def test_reduction_operands_and_sparse_output():
    """A §6.2 B: x[64,128].sum(1) reads [c1//64, c0, c1%64]; the sparse output is [0, c0, 0]."""
    x = default_layout([64, 128], "float16")
    assert coords([64, 128], x, {"c0": (0, 63), "c1": (0, 127)}, "128*c0 + c1") == \
        ["floor(c1/64)", "c0", "Mod(c1, 64)"]
    out = stick_layout([64], [1], "float16", [0, -1])
    assert coords([64], out, {"c0": (0, 63), "c1": (0, 127)}, "c0") == ["0", "c0", "0"]


def test_broadcast_operand_and_matmul_operands():
    """A §6.2 A and D."""
    b = default_layout([256], "float16")
    assert coords([256], b, {"c0": (0, 1023), "c1": (0, 255)}, "c1") == \
        ["floor(c1/64)", "Mod(c1, 64)"]
    r = {"c0": (0, 127), "c1": (0, 191), "c2": (0, 255)}
    x = default_layout([128, 256], "float16")
    assert coords([128, 256], x, r, "256*c0 + c2") == ["floor(c2/64)", "c0", "Mod(c2, 64)"]
    y = default_layout([256, 192], "float16")
    assert coords([256, 192], y, r, "192*c2 + c1") == ["floor(c1/64)", "c2", "Mod(c1, 64)"]


def test_transposed_reads():
    """A §6.2 F and H: a.t() reads its stick on c0; a 3-D transpose reads [c2, c1//64, c0, c1%64]."""
    a = default_layout([256, 128], "float16")
    assert coords([256, 128], a, {"c0": (0, 127), "c1": (0, 255)}, "128*c1 + c0") == \
        ["floor(c0/64)", "c1", "Mod(c0, 64)"]
    a3 = default_layout([2, 256, 128], "float16")
    r = {"c0": (0, 1), "c1": (0, 127), "c2": (0, 255)}
    assert coords([2, 256, 128], a3, r, "32768*c0 + 128*c2 + c1") == \
        ["c2", "floor(c1/64)", "c0", "Mod(c1, 64)"]
    w = stick_layout([512, 256], [256, 1], "float16", [1, 0])  # stick on dim 0
    assert coords([512, 256], w, {"c0": (0, 511), "c1": (0, 255)}, "256*c0 + c1") == \
        ["floor(c0/64)", "c1", "Mod(c0, 64)"]


def test_gathered_row_is_indirect_access():
    """Embedding: out[i, j] = W[idx[i], j]; the row coordinate is the gathered value."""
    w = default_layout([1000, 256], "float16")
    index = indirect("idx").scale(256) + var("c1")
    got = coords([1000, 256], w, {"c0": (0, 7), "c1": (0, 255)}, index)
    assert got == ["floor(c1/64)", "IndirectAccess('idx')", "Mod(c1, 64)"]


def test_sympy_index_in_sympy_out():
    c0, c1 = sympy.symbols("c0 c1", integer=True)
    layout = default_layout([1024, 256], "float16")
    got = device_coordinates([1024, 256], [256, 1], 0, layout.device_size, layout.stride_map,
                             {c0: (0, 1023), c1: (0, 255)}, 256 * c0 + c1)
    assert got == [sympy.floor(c1 / 64), c0, sympy.Mod(c1, 64)]


# --- randomized: coordinates must address exactly the host element -----------------------------

@st.composite
def strided_access(draw):
    """A random base tensor, layout (any dim order), and an in-bounds box-shaped view of it."""
    rank = draw(st.integers(1, 4))
    host = [draw(st.sampled_from([1, 2, 3, 5, 7, 64, 100, 130])) for _ in range(rank)]
    dtype = draw(st.sampled_from(["float16", "float32", "int8"]))
    order = draw(st.permutations(list(range(rank))))
    starts = [draw(st.integers(0, n - 1)) for n in host]
    extents = [draw(st.integers(1, n - s)) for n, s in zip(host, starts)]
    return host, dtype, list(order), starts, extents


@settings(max_examples=150, deadline=None)
@given(strided_access())
def test_coordinates_address_the_host_element(case):
    host, dtype, order, starts, extents = case
    strides = contiguous_strides(host)
    layout = stick_layout(host, strides, dtype, order)
    offset = sum(s * st_ for s, st_ in zip(starts, strides))
    names = [f"c{i}" for i in range(len(host))]
    index = sum((var(n).scale(s) for n, s in zip(names, strides)), start=var(names[0]).scale(0))
    ranges = Ranges({Var(n): (0, e - 1) for n, e in zip(names, extents)})
    got = device_coordinates(host, strides, offset, layout.device_size, layout.stride_map,
                             ranges, index)
    for point in _sample_points(extents):
        env = dict(zip(names, point))
        values = [evaluate(c, env) for c in got]
        assert all(0 <= v < n for v, n in zip(values, layout.device_size)), (values, layout)
        flat = offset + sum(p * s for p, s in zip(point, strides))
        assert sum(v * m for v, m in zip(values, layout.stride_map) if m > 0) == flat


def _sample_points(extents):
    corners = [[0] * len(extents), [e - 1 for e in extents]]
    mid = [e // 2 for e in extents]
    step = [max(1, e // 3) for e in extents]
    grid = [list(range(0, e, s)) for e, s in zip(extents, step)]
    return corners + [mid] + [list(p) for p in _product(grid)][: 64]


def _product(lists):
    if not lists:
        yield ()
        return
    for head in lists[0]:
        for tail in _product(lists[1:]):
            yield (head,) + tail


def test_sample_helper_covers_corners():
    assert [0, 0] in _sample_points([3, 4]) and [2, 3] in _sample_points([3, 4])
    assert math.prod([3, 4]) >= len(set(map(tuple, _sample_points([3, 4])))) - 3
