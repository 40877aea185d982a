"""HBM arena: alignment, bounds, overlaps of live allocations, NaN fill."""

import numpy as np
import pytest

from spyrec.errors import SimulatorFault
from spyrec.sim.memory import Hbm


def test_allocations_are_filled_with_nan_or_sentinel():
    hbm = Hbm(1024)
    hbm.allocate("a", 0, 256, "fp16")
    hbm.allocate("b", 256, 256, "fp32")
    hbm.allocate("c", 512, 256, "int32")
    assert np.isnan(hbm.region(0, "fp16")[:128]).all()
    assert np.isnan(hbm.region(256, "fp32")[:64]).all()
    assert (hbm.region(512, "int32")[:64] == np.iinfo(np.int32).min).all()
    assert hbm.host_bytes == 768                 # never allocated: no memory at all
    with pytest.raises(SimulatorFault, match="HBM address 768 is in no allocated tensor"):
        hbm.region(768, "fp16")


def test_typed_views_share_the_bytes():
    hbm = Hbm(256)
    hbm.allocate("t", 0, 256, "fp32")
    hbm.region(0, "fp32")[1] = 1.0
    assert hbm.region(0, "fp16")[2:4].tobytes() == np.float32(1.0).tobytes()


def test_segments_hold_only_allocated_bytes_and_merge_where_tensors_share_them():
    """Sparse HBM: a 1 GiB device holds two small tensors in two segments; an intermediate
    reusing part of one merges with it (its bytes kept), and a constant is its backing."""
    hbm = Hbm(1 << 30)
    hbm.allocate("a", 0, 256, "fp16", live=(0, 1))
    hbm.allocate("b", 1 << 29, 128, "fp32")
    hbm.region(0, "fp16")[0] = 3.0
    hbm.allocate("c", 128, 256, "fp16", live=(2, 3), fill=False)
    assert [(s.start, s.end) for s in hbm.segments] == [(0, 384), (1 << 29, (1 << 29) + 128)]
    assert hbm.region(0, "fp16")[0] == 3.0 and hbm.host_bytes == 512
    w = np.arange(128, dtype=np.uint8)
    hbm.allocate("w", 1024, 128, "int8", backing=w)
    assert hbm.region(1024, "int8")[5] == 5 and hbm.host_bytes == 512
    with pytest.raises(SimulatorFault, match="overlap in HBM while both are live"):
        hbm.allocate("d", 1024, 128, "fp16")


@pytest.mark.parametrize("address, nbytes, message", [
    (64, 128, "HBM address 64 is not 128-byte aligned"),
    (896, 256, r"bytes \[896, 1152\) are outside device memory \[0, 1024\)"),
])
def test_bad_addresses(address, nbytes, message):
    with pytest.raises(SimulatorFault, match=message):
        Hbm(1024).allocate("t", address, nbytes, "fp16")


def test_overlapping_live_allocations_fault():
    hbm = Hbm(1024)
    hbm.allocate("x", 0, 512, "fp16")
    with pytest.raises(SimulatorFault, match=r"tensors 'x' \[0, 512\) and 'y' \[384, 640\) "
                                             r"overlap in HBM while both are live"):
        hbm.allocate("y", 384, 256, "fp16")


def test_memory_reuse_with_disjoint_lifetimes_is_allowed():
    hbm = Hbm(1024)
    hbm.allocate("t1", 0, 512, "fp16", live=(0, 1))
    hbm.allocate("t2", 0, 512, "fp16", live=(2, 3))
    with pytest.raises(SimulatorFault, match=r"executions 0..1 and 1..2"):
        hbm.allocate("t3", 256, 128, "fp16", live=(1, 2))


def test_find_prefers_the_named_allocation():
    hbm = Hbm(1024)
    hbm.allocate("t1", 0, 512, "fp16", live=(0, 1))
    hbm.allocate("t2", 0, 512, "fp16", live=(2, 3))
    assert hbm.find(128, 128, "t2").name == "t2"
    assert hbm.find(128, 128).name == "t1"
    assert hbm.find(384, 256) is None


# --- the allocation table against the plain scans it replaces --------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from spyrec.sim.memory import ALWAYS_LIVE, Allocation, Lx, _overlap, _Table  # noqa: E402

_spans = st.tuples(st.integers(-1, 12), st.integers(0, 6)).map(lambda t: (t[0], t[0] + t[1]))
_allocations = st.builds(
    lambda a, n, live, values, always, name: Allocation(
        name, a * 128, n * 128, "fp16", ALWAYS_LIVE if always else live, tuple(values)),
    st.integers(0, 6), st.integers(0, 4), _spans, st.lists(_spans, max_size=3),
    st.booleans(), st.sampled_from("abcd"))


@settings(max_examples=300, deadline=None)
@given(st.lists(_allocations, min_size=1, max_size=12), st.integers(0, 800),
       st.integers(0, 300))
def test_table_answers_as_the_scans_do(allocs, address, nbytes):
    """`clashing` is the first earlier allocation `_overlap` flags (the hull and byte filters
    drop none of them); `holding` lists those containing a byte range, in order; `position`
    is `list.index`; `named` is the first of a name. Mutations caught: a strict `<` in the
    value-hull filter, dropping the byte filter's end test, a last-of-name index."""
    table = _Table()
    for alloc in allocs:
        want = next((o for o in table.items if _overlap(alloc, o)), None)
        assert table.clashing(alloc) is want
        table.add(alloc)
    assert table.holding(address, nbytes) == [a for a in allocs if a.contains(address, nbytes)]
    for alloc in allocs:
        assert table.position(alloc) == allocs.index(alloc)
        assert table.named(alloc.name) is next(a for a in allocs if a.name == alloc.name)


def test_lx_hands_over_only_within_one_slot():
    """A slot's next value born at the execution that last reads the previous one keeps the
    bytes; a tensor of another size at that offset does not count, nor one that ended
    earlier."""
    lx = Lx(2, 1 << 16)
    old = lx.allocate("old", 0, 256, "fp16", values=((0, 3),))
    other = lx.allocate("other", 0, 128, "fp16", values=((6, 7),))
    new = lx.allocate("new", 0, 256, "fp16", values=((3, 5),))
    late = lx.allocate("late", 0, 128, "fp16", values=((8, 9),))
    assert lx.handed_over(new) and not lx.handed_over(old)
    assert not lx.handed_over(late)           # `other` ends at 7, not 8
    assert lx.find("other") is other and lx.tag(new, np.int64(0)) == 3 << 40
