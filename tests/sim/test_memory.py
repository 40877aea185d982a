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
