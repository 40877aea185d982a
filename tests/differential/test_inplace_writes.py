"""In-place writes (`copy_`, `index_copy_`, `add_`) through the fast front end: functionalized
(`spyrec/frontend/functionalize.py`), lowered (`aten_mutation.py`), the written buffers back
under their FQN and equal to eager's after the call."""

import numpy as np
import pytest
import torch

from spyrec.errors import SimulatorFault, UnsupportedProgram
from spyrec.frontend.load import load_program
from spyrec.sim.runner import simulate
from tests.differential.harness import run_and_compare
from tests.programs import compile_pt2, export, load_json


class Cache(torch.nn.Module):
    """A static cache written at runtime positions, a length counter, an alias written
    through (`to` that keeps the dtype is the tensor itself)."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.register_buffer("cache", torch.arange(24, dtype=dtype).reshape(2, 6, 2))
        self.register_buffer("length", torch.zeros((), dtype=torch.int64))

    def forward(self, x, pos):
        self.length.copy_(pos[0])
        self.length.to(torch.int64).add_(x.shape[1])
        self.cache.index_copy_(1, pos, x)
        return self.cache.sum(1) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("pos", [[4], [5, 0, 2], [1, 1]])
def test_index_copy_and_copy_of_buffers_equal_eager(tmp_path, dtype, pos):
    """Several indices are applied in order: a duplicate takes the last slice, as eager's CPU
    kernel does."""
    x = torch.randn(2, len(pos), 2, generator=torch.Generator().manual_seed(0)).to(dtype)
    out = run_and_compare(tmp_path, Cache(dtype), (x, torch.tensor(pos)), frontend="fast")
    assert load_json(out / "report.json")["frontend"]["used"] == "fast"
    assert set(load_json(out / "manifest.json")["mutated_buffers"]) == {"cache", "length"}


def test_index_copy_out_of_range_index_faults_like_eager(tmp_path):
    x = torch.ones(2, 1, 2)
    pt2 = export(tmp_path, Cache(), (x, torch.tensor([3])))
    out = compile_pt2(pt2, tmp_path / "out", frontend="fast")
    with pytest.raises(IndexError, match="out of bounds"):
        Cache()(x, torch.tensor([-1]))
    for bad in (-1, 6):
        with pytest.raises(SimulatorFault, match="out of range"):
            simulate(out, {"x": x.numpy(), "pos": np.array([bad])})


class ViewWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 3))

    def forward(self, x):
        self.cache[1:3].copy_(x)
        return self.cache * 1


def test_a_write_into_a_view_is_left_to_torch(tmp_path):
    """The fast front end refuses what it cannot functionalize exactly; auto falls back."""
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    pt2 = export(tmp_path, ViewWrite(), (x,))
    with pytest.raises(UnsupportedProgram, match="writes into"):
        load_program(pt2, "fast")
    assert load_program(pt2, "auto").frontend == "torch"


class ReturnsTheCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(3, 4))

    def forward(self, x, pos):
        self.cache.index_copy_(0, pos, x)
        return self.cache


def test_the_written_buffer_as_a_user_output(tmp_path):
    out = run_and_compare(tmp_path, ReturnsTheCache(), (torch.ones(1, 4), torch.tensor([2])),
                          frontend="fast")
    assert load_json(out / "manifest.json")["mutated_buffers"].keys() == {"cache"}


class ViewBeforeWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(3, 4))

    def forward(self, x):
        v = self.cache.view(12)
        self.cache.add_(x)
        return v * 1


def test_a_view_read_after_a_write_is_left_to_torch(tmp_path):
    out = run_and_compare(tmp_path, ViewBeforeWrite(), (torch.ones(3, 4),), frontend="auto")
    frontend = load_json(out / "report.json")["frontend"]
    assert frontend["used"] == "torch" and "taken before an in-place write" in \
        frontend["fallback_reason"]
