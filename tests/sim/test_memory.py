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
    assert np.isnan(hbm.view("fp16")[:128]).all()
    assert np.isnan(hbm.view("fp32")[64:128]).all()
    assert (hbm.view("int32")[128:192] == np.iinfo(np.int32).min).all()
    assert (hbm.arena[768:] == 0).all()          # never allocated: untouched


def test_typed_views_share_the_bytes():
    hbm = Hbm(256)
    hbm.view("fp32")[1] = 1.0
    assert hbm.arena[4:8].tobytes() == np.float32(1.0).tobytes()


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
