"""In-place buffer updates (issue 59, `spyrec/plan/inplace.py`): a static cache written at
runtime positions compiles to a write of the changed rows into the buffer's own memory (no copy
of the whole cache), report.json `mutations` says so with the bytes written, and the result
equals eager's: the buffer after the call and the outputs read from it.

Hypothesis draws the cache's shape, the written dim, the positions (duplicates included: the
later row wins for index_copy_, as eager's CPU kernel does; index_put_ with accumulate sums
every contribution, eager's documented semantics) and whether the step reads the cache after
the write."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential.harness import run_and_compare
from tests.programs import load_json

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


class Step(torch.nn.Module):
    """A cache written at `pos` along `dim` (index_copy_, or index_put_ accumulating), then
    read whole; a length counter overwritten from the input."""

    def __init__(self, shape, dim, accumulate, dtype):
        super().__init__()
        g = torch.Generator().manual_seed(sum(shape))
        self.register_buffer("cache", torch.randn(shape, generator=g).to(dtype))
        self.register_buffer("length", torch.zeros((), dtype=torch.int64))
        self.dim, self.accumulate = dim, accumulate

    def forward(self, x, pos):
        self.length.copy_(pos[-1] + 1)
        if self.accumulate:         # dim 0: cache[pos] += x, every duplicate summed
            self.cache.index_put_((pos,), x, accumulate=True)
        else:
            self.cache.index_copy_(self.dim, pos, x)
        return self.cache.sum(self.dim) * 2


@st.composite
def cases(draw):
    rank = draw(st.integers(2, 4))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank - 1)) + (
        draw(st.sampled_from([8, 32, 64, 96])),)
    dim = draw(st.integers(0, rank - 2))     # a row dim: the stick dim stays whole
    pos = draw(st.lists(st.integers(0, shape[dim] - 1), min_size=1, max_size=4))
    accumulate = dim == 0 and draw(st.booleans())
    dtype = draw(st.sampled_from([torch.float32, torch.float16]))
    return shape, dim, pos, accumulate, dtype


@SETTINGS
@given(case=cases())
def test_row_writes_are_in_place_and_equal_eager(tmp_path_factory, case):
    shape, dim, pos, accumulate, dtype = case
    tmp = tmp_path_factory.mktemp("inplace")
    rows = list(shape)
    rows[dim] = len(pos)
    x = torch.randn(rows, generator=torch.Generator().manual_seed(len(pos))).to(dtype)
    out = run_and_compare(tmp, Step(shape, dim, accumulate, dtype), (x, torch.tensor(pos)),
                          frontend="torch" if accumulate else "auto")
    report = {r["buffer"]: r for r in load_json(out / "report.json")["mutations"]}
    assert set(report) == {"cache", "length"}
    cache = report["cache"]
    assert cache["in_place"] and cache["reason"] is None
    assert cache["elements_written"] == x.numel()
    assert cache["bytes_written"] == x.numel() * (4 if dtype == torch.float32 else 2)
    assert report["length"]["in_place"] and report["length"]["elements_written"] == 1
    manifest = load_json(out / "manifest.json")
    roles = {t["name"]: t["role"] for t in manifest["tensors"]}
    assert all(roles[name] == "constant" for name in manifest["mutated_buffers"].values())
    shapes = {t["name"]: t["host_shape"] for t in manifest["tensors"]}
    ops = load_json(out / "opspecs.json")
    assert not _copies_of_the_cache(ops, cache["tensor"], shapes)


def _copies_of_the_cache(tree, name, shapes) -> list:
    """Ops that read the cache to write another buffer of its shape (the copy a functional
    write needs and an in-place one does not)."""
    found = []
    for spec in _specs(tree):
        args = spec.get("args", [])
        outs = [a.get("name") for a in args if not a.get("is_input")]
        if spec.get("op") == "identity" and any(a.get("name") == name for a in args
                                                if a.get("is_input")) \
                and outs and outs[0] != name and shapes.get(outs[0]) == shapes[name]:
            found.append(spec)
    return found


def _specs(node):
    if isinstance(node, dict):
        if "op" in node:
            yield node
        for v in node.values():
            yield from _specs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _specs(v)


class PagedWrite(torch.nn.Module):
    """vLLM's `reshape_and_cache`: each new token's K row written through a slot mapping into
    a page pool [pages, page_size, heads, head_dim] (slot s: page s // page_size, row s %
    page_size), then the pool's pages of one sequence read through a block table."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k_pool", torch.randn(6, 4, 2, 64,
                                                   generator=torch.Generator().manual_seed(2)))

    def forward(self, k, slots, table):
        self.k_pool.index_put_((slots // 4, slots % 4), k)
        return self.k_pool[table].sum(1) * 1


@pytest.mark.parametrize("slots", [[5], [0, 9, 23], [7, 7]])
def test_a_slot_mapping_write_into_a_page_pool_is_in_place(tmp_path, slots):
    """Duplicate slots: the later row wins, as eager's CPU index_put_."""
    k = torch.randn(len(slots), 2, 64, generator=torch.Generator().manual_seed(len(slots)))
    out = run_and_compare(tmp_path, PagedWrite(), (k, torch.tensor(slots),
                                                   torch.tensor([1, 5, 2])))
    (row,) = load_json(out / "report.json")["mutations"]
    assert row["buffer"] == "k_pool" and row["in_place"]
    assert row["bytes_written"] == k.numel() * 4 and row["store"] == "rows"
