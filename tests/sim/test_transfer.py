"""Host <-> device transfers through layouts: padding stays NaN, dtypes convert, round trips,
and every offset equals an element-by-element loop over the documented placement rule."""

import itertools
import math

import numpy as np
import pytest

from spyrec.errors import InputFileError, SimulatorFault
from spyrec.layout import DeviceLayout
from spyrec.sim.memory import Hbm
from spyrec.bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from spyrec.sim.specs import TensorSpec
from spyrec.sim.transfer import element_offsets, read_tensor, write_tensor


def tensor(shape, host_dtype, size, stride_map, device_dtype, address=0, name="t"):
    layout = DeviceLayout(tuple(size), tuple(stride_map), device_dtype)
    return TensorSpec(name, "input", tuple(shape), host_dtype, layout, address,
                      layout.device_bytes, None)


def test_fp16_4x100_lands_at_the_documented_coordinates(rng):
    t = tensor([4, 100], "float16", [2, 4, 64], [64, 100, 1], "fp16", address=128)
    hbm = Hbm(128 + t.device_bytes)
    hbm.allocate("t", 128, t.device_bytes, "fp16")
    x = rng.standard_normal((4, 100)).astype(np.float16)
    write_tensor(hbm, t, x)
    dev = hbm.region(128, "fp16")[:512].reshape(2, 4, 64)   # element (r, c) at [c // 64, r, c % 64]
    assert np.array_equal(dev[0, 3, :], x[3, :64])
    assert np.array_equal(dev[1, 2, :36], x[2, 64:])
    assert np.isnan(dev[1, :, 36:]).all()            # the partial stick's padding
    assert np.array_equal(read_tensor(hbm, t), x)


def test_stick_on_dim0_layout_transposes(rng):
    # fp32 host [128, 256] with the stick on dim 0: device [4, 256, 32] / [8192, 1, 256]
    t = tensor([128, 256], "float32", [4, 256, 32], [8192, 1, 256], "fp32")
    hbm = Hbm(t.device_bytes)
    hbm.allocate("t", 0, t.device_bytes, "fp32")
    x = rng.standard_normal((128, 256)).astype(np.float32)
    write_tensor(hbm, t, x)
    dev = hbm.region(0, "fp32").reshape(4, 256, 32)
    assert np.array_equal(dev[1, 7, :], x[32:64, 7])
    assert np.array_equal(read_tensor(hbm, t), x)


def test_sparse_layout_uses_lane_zero_only(rng):
    t = tensor([64], "float16", [1, 64, 64], [-1, 1, -1], "fp16")
    hbm = Hbm(t.device_bytes)
    hbm.allocate("t", 0, t.device_bytes, "fp16")
    x = rng.standard_normal(64).astype(np.float16)
    write_tensor(hbm, t, x)
    dev = hbm.region(0, "fp16").reshape(64, 64)
    assert np.array_equal(dev[:, 0], x) and np.isnan(dev[:, 1:]).all()
    assert np.array_equal(element_offsets(t), np.arange(64) * 64)


def test_broadcast_dim_writes_every_replica():
    t = tensor([4], "float32", [3, 1, 32], [0, -1, 1], "fp32")
    hbm = Hbm(t.device_bytes)
    hbm.allocate("t", 0, t.device_bytes, "fp32")
    write_tensor(hbm, t, np.arange(4, dtype=np.float32))
    dev = hbm.region(0, "fp32").reshape(3, 32)
    assert np.array_equal(dev[:, :4], np.tile(np.arange(4), (3, 1)))


def test_bf16_bool_int64_conversions():
    hbm = Hbm(3 * 128)
    bf = tensor([3], "bfloat16", [1, 64], [-1, 1], "fp16", 0, "bf")
    b = tensor([3], "bool", [1, 64], [-1, 1], "fp16", 128, "b")
    i = tensor([3], "int64", [1, 32], [-1, 1], "int32", 256, "i")
    for t in (bf, b, i):
        hbm.allocate(t.name, t.hbm_address, t.device_bytes, t.layout.device_dtype)
    bits = float32_to_bf16_bits(np.array([1.5, -2.25, 30720.0], dtype=np.float32))
    write_tensor(hbm, bf, bits)
    write_tensor(hbm, b, np.array([True, False, True]))
    write_tensor(hbm, i, np.array([-5, 0, 2**31 - 1], dtype=np.int64))
    assert np.array_equal(hbm.region(0, "fp16")[:3], np.array([1.5, -2.25, 30720.0], dtype=np.float16))
    assert np.array_equal(hbm.region(128, "fp16")[:3], [1, 0, 1])
    assert np.array_equal(read_tensor(hbm, bf), bits)
    assert read_tensor(hbm, b).dtype == np.bool_
    assert np.array_equal(read_tensor(hbm, b), [True, False, True])
    out = read_tensor(hbm, i)
    assert out.dtype == np.int64 and np.array_equal(out, [-5, 0, 2**31 - 1])


def test_int64_that_does_not_fit_int32_is_an_error():
    t = tensor([2], "int64", [1, 32], [-1, 1], "int32")
    hbm = Hbm(128)
    hbm.allocate("t", 0, 128, "int32")
    with pytest.raises(InputFileError, match=r"input 't': value 4294967296 does not fit int32"):
        write_tensor(hbm, t, np.array([1, 2**32], dtype=np.int64))


def test_bool_output_never_written_is_reported():
    t = tensor([3], "bool", [1, 64], [-1, 1], "fp16")
    hbm = Hbm(128)
    hbm.allocate("t", 0, 128, "fp16")
    with pytest.raises(SimulatorFault, match="holds NaN on the device"):
        read_tensor(hbm, t)


def test_layout_that_collides_is_a_fault():
    t = tensor([4, 64], "float16", [1, 2, 64], [-1, 1, 1], "fp16")   # rows fold onto 2
    with pytest.raises(SimulatorFault, match=r"tensor .t.: device layout \[1, 2, 64\]"):
        element_offsets(t)


def test_bf16_bits_round_to_nearest_even():
    values = np.array([1.0, 1.00390625, 1.01171875, -0.0, np.inf, np.nan], dtype=np.float32)
    bits = float32_to_bf16_bits(values)
    assert list(bits[:5]) == [0x3F80, 0x3F80, 0x3F82, 0x8000, 0x7F80]
    assert np.isnan(bf16_bits_to_float32(bits[5:])).all()



from hypothesis import given, settings, strategies as st  # noqa: E402

from spyrec.layout import SPARSE, stick_layout  # noqa: E402
from spyrec.layout.device_layout import contiguous_strides  # noqa: E402


@st.composite
def layouts(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 70), min_size=rank, max_size=rank)))
    dtype = draw(st.sampled_from(["float16", "float32", "int32", "int64", "bool", "bfloat16"]))
    order = tuple(draw(st.permutations(range(rank))))
    return shape, dtype, stick_layout(shape, contiguous_strides(shape), dtype, order)


def fp16_normal(x: np.ndarray) -> np.ndarray:
    """bf16 is stored as fp16: values below fp16's normal range lose bits, so keep clear."""
    return np.where(np.abs(x) < 2.0**-12, 1.0, x)


@settings(max_examples=60, deadline=None)
@given(layouts(), st.integers(0, 2**32 - 1))
def test_round_trip_through_any_stick_layout(case, seed):
    """Every host element lands in its own slot and comes back; the rest stays unwritten."""
    shape, dtype, layout = case
    t = TensorSpec("t", "input", shape, dtype, layout, 128, layout.device_bytes, None)
    hbm = Hbm(128 + layout.device_bytes)
    hbm.allocate("t", 128, layout.device_bytes, layout.device_dtype)
    rng = np.random.default_rng(seed)
    x = {"float16": lambda: rng.standard_normal(shape).astype(np.float16),
         "float32": lambda: rng.standard_normal(shape).astype(np.float32),
         "int32": lambda: rng.integers(-2**31 + 1, 2**31, shape, dtype=np.int32),
         "int64": lambda: rng.integers(-2**31 + 1, 2**31, shape, dtype=np.int64),
         "bool": lambda: rng.random(shape) < 0.5,
         "bfloat16": lambda: float32_to_bf16_bits(fp16_normal(rng.standard_normal(shape)))}[dtype]()
    write_tensor(hbm, t, x)
    assert np.array_equal(read_tensor(hbm, t), x)
    dev = hbm.region(128, layout.device_dtype)[:layout.device_elems]
    unwritten = np.isnan(dev) if dev.dtype.kind == "f" else dev == np.iinfo(dev.dtype).min
    assert int((~unwritten).sum()) == int(np.prod(shape))


def documented_position(x: tuple, order: tuple, elems_per_stick: int) -> tuple:
    """Where host element `x` lives, by the documented rule alone (DESIGN §3, A-layout §2-3):
    device dims are the order's middle dims, then the stick dim's tiles, then the first dim's
    rows, then the lanes: `[a,b]` -> `[b // E, a, b % E]`. A trailing SPARSE puts one element
    per stick: the last dense dim becomes a plain dim and the lane is 0."""
    e = elems_per_stick
    if order[-1] == SPARSE:
        dense = order[:-1]
        return tuple(x[d] for d in dense[1:]) + (0, x[dense[0]], 0)
    if len(order) == 1:
        return (x[order[0]] // e, x[order[0]] % e)
    stick = order[-1]
    return tuple(x[d] for d in order[1:-1]) + (x[stick] // e, x[order[0]], x[stick] % e)


@st.composite
def documented_layouts(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 9 if rank > 2 else 70), min_size=rank,
                                max_size=rank)))
    dtype = draw(st.sampled_from(["float16", "float32", "int8"]))
    order = tuple(draw(st.permutations(range(rank))))
    if draw(st.booleans()):
        order += (SPARSE,)
    return shape, dtype, order


@settings(max_examples=80, deadline=None)
@given(documented_layouts())
def test_offsets_equal_a_brute_force_loop_over_the_documented_rule(case):
    """Element by element, with no numpy and nothing of the simulator's derivation: every host
    element's device offset is the row-major offset of its documented position."""
    shape, dtype, order = case
    layout = stick_layout(shape, contiguous_strides(shape), dtype, order)
    t = TensorSpec("t", "input", shape, dtype, layout, 0, layout.device_bytes, None)
    offsets = element_offsets(t)
    seen = set()
    for x in itertools.product(*(range(n) for n in shape)):
        position = documented_position(x, order, layout.elems_per_stick)
        assert len(position) == len(layout.device_size)
        assert all(0 <= p < n for p, n in zip(position, layout.device_size)), (x, position)
        flat = 0
        for p, n in zip(position, layout.device_size):
            flat = flat * n + p
        assert offsets[x] == flat, (x, position, layout)
        seen.add(flat)
    assert len(seen) == math.prod(shape)


def test_the_seed_example_by_hand():
    """Seed 001: fp16 [1024, 256] -> device [4, 1024, 64]; (r, c) at [c // 64, r, c % 64]."""
    t = tensor([1024, 256], "float16", [4, 1024, 64], [64, 256, 1], "fp16")
    offsets = element_offsets(t)
    assert offsets[5, 130] == 2 * 65536 + 5 * 64 + 2
    assert offsets[1023, 255] == 3 * 65536 + 1023 * 64 + 63


@pytest.mark.parametrize("shape, size, stride_map, message", [
    ([4, 64], [1, 2, 64], [-1, 1, 1], r"host dims \[0, 1\] do not round-trip"),
    ([4, 64], [1, 4, 64], [-1, 64, 2], r"host dims \[1\] do not round-trip"),
    ([1, 1], [2, 32], [3, -1], r"stride_map\[0\] = 3 steps along no dim of a \[1, 1\]"),
])
def test_a_layout_that_does_not_place_every_element_once_is_a_fault(shape, size, stride_map,
                                                                     message):
    dtype = "float16" if size[-1] == 64 else "float32"
    t = tensor(shape, dtype, size, stride_map, "fp16" if size[-1] == 64 else "fp32")
    with pytest.raises(SimulatorFault, match=message):
        element_offsets(t)


def test_transfer_shares_no_code_with_the_compilers_coordinate_algebra():
    """Both sides computing the placement with one function would hide a layout bug."""
    from pathlib import Path

    import spyrec.sim.transfer as transfer
    from tests.sim.test_imports import imported_modules

    assert not [m for m in imported_modules(Path(transfer.__file__))
                if m.startswith("spyrec.indexing")]


@settings(max_examples=80, deadline=None)
@given(documented_layouts(), st.integers(0, 3), st.booleans())
def test_strided_transfer_places_every_element_at_its_defined_offset(case, lead, filled):
    """`write_tensor` assigns through strided views (`Placement`), never per-element offsets;
    the arena it leaves must equal a scatter by the defining offsets (`element_offsets`), the
    rest of the tensor's bytes the fill (also when the arena held data before: sparse lanes
    and partial sticks must not keep it), and `read_tensor` must give the host array back."""
    shape, dtype, order = case
    layout = stick_layout(shape, contiguous_strides(shape), dtype, order)
    address = lead * 128
    t = TensorSpec("t", "input", shape, dtype, layout, address, layout.device_bytes, None)
    hbm = Hbm(address + t.device_bytes)
    hbm.allocate("t", address, t.device_bytes, layout.device_dtype, fill=filled)
    view = hbm.region(address, layout.device_dtype)
    if not filled:
        view[:] = 7
    x = (np.arange(math.prod(shape)) % 97 + 1).astype(dtype).reshape(shape)
    write_tensor(hbm, t, x)
    expected = np.full(t.device_bytes // view.itemsize, np.nan, dtype=view.dtype) \
        if view.dtype.kind == "f" else np.full(t.device_bytes // view.itemsize,
                                              np.iinfo(view.dtype).min, dtype=view.dtype)
    expected[element_offsets(t) - address // view.itemsize] = x
    assert np.array_equal(view, expected, equal_nan=True)
    assert np.array_equal(read_tensor(hbm, t), x)
