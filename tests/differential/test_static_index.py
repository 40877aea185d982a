"""Indexing with a constant list is a static selection (a view, or one copy per run), not a
runtime gather; a gather with an empty index gives eager's empty result.

Falcon's `fused_qkv[..., [-2], :]` used to crash work division (a gather the op did not list)
or be refused ("no SuperDSC form"); the torch front end reaches the same list as
`clone(lifted_tensor)`, which now stays a constant.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from tests.differential.harness import run_and_compare
from tests.programs import load_json


def _gathers(out) -> int:
    """Ops that read an index tensor at run time (opspecs: args named as index inputs)."""
    def walk(specs):
        for s in specs:
            yield from walk(s["body"]) if "body" in s else [s]
    specs = [s for k in load_json(out / "opspecs.json")["kernels"] for s in walk(k["specs"])]
    return sum(any("IndirectAccess" in c for a in s["args"] for c in a["device_coordinates"])
               for s in specs)


class FalconSplit(torch.nn.Module):
    """transformers' Falcon `_split_heads` (new decoder architecture), then a product."""

    def forward(self, x):
        qkv = x.view(2, 5, -1, 4, 32)
        q, k, v = qkv[:, :, :, :-2], qkv[:, :, :, [-2]], qkv[:, :, :, [-1]]
        k, v = torch.broadcast_to(k, q.shape), torch.broadcast_to(v, q.shape)
        return (q * k + v).flatten(2, 3)


def test_falcon_split_heads_is_a_view(tmp_path):
    out = run_and_compare(tmp_path, FalconSplit(), (torch.randn(2, 5, 256),), frontend="fast")
    assert _gathers(out) == 0


@pytest.mark.parametrize("frontend", ["fast", "torch"])
def test_listed_rows_with_repeats_are_copies_per_run(tmp_path, frontend):
    class Pick(torch.nn.Module):
        def forward(self, x):
            return x[:, [0, 2, 2, 3, 4, 1]] + 1

    out = run_and_compare(tmp_path, Pick(), (torch.randn(3, 6, 40),), frontend=frontend)
    assert _gathers(out) == 0


def test_many_runs_fall_back_to_one_gather(tmp_path):
    class Shuffle(torch.nn.Module):
        def forward(self, x):
            return x[[11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]] * 2   # 12 runs of one row

    out = run_and_compare(tmp_path, Shuffle(), (torch.randn(12, 33),), frontend="fast")
    assert _gathers(out) == 1


@settings(max_examples=8, deadline=None, derandomize=True)
@given(rows=st.integers(1, 9), cols=st.integers(1, 70),
       picks=st.lists(st.integers(-9, 8), min_size=0, max_size=6), dim=st.sampled_from([0, 1]))
def test_constant_index_lists_equal_eager(tmp_path_factory, rows, cols, picks, dim):
    size = (rows, cols)[dim]
    picks = [p for p in picks if -size <= p < size]
    index = torch.tensor(picks, dtype=torch.long)

    class Select(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("index", index, persistent=False)

        def forward(self, x):
            return (x[self.index] if dim == 0 else x[:, self.index]) - 0.5

    x = torch.randn(rows, cols)
    run_and_compare(tmp_path_factory.mktemp("sel"), Select(), (x,), frontend="fast")


def test_gather_with_an_empty_index_is_empty(tmp_path):
    class Gather(torch.nn.Module):
        def forward(self, x, i):
            return torch.gather(x, 0, i)

    run_and_compare(tmp_path, Gather(), (torch.randn(5), torch.zeros(2, 0, dtype=torch.long)),
                    frontend="fast")


def test_runtime_index_into_a_split_fused_projection(tmp_path):
    """Falcon's split with the index a runtime input: the gathered value, once checked and
    wrapped, is known to lie in 0..5, so floor(v / 6) is 0 and the view has a SuperDSC form
    (it was refused: "floor(IndirectAccess('i__wrap6')/6) ... is not a digit")."""
    class Split(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 6 * 32, bias=False)

        def forward(self, x, i, j):
            qkv = self.proj(x).view(1, 16, -1, 6, 32)
            q, k, v = qkv[:, :, :, :-2], qkv[:, :, :, i], qkv[:, :, :, j]
            k, v = torch.broadcast_to(k, q.shape), torch.broadcast_to(v, q.shape)
            return (q * k + v).flatten(2, 3)

    inputs = (torch.randn(1, 16, 64), torch.tensor([-2]), torch.tensor([5]))
    out = run_and_compare(tmp_path, Split(), inputs, frontend="fast")
    assert _gathers(out) == 2
