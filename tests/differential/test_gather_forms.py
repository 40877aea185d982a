"""Every indexing form a decoder uses, exported with torch, compiled, simulated, equal to eager:
advanced indexing (several index tensors, any rank, mixed with slices, negatives), embedding,
index_select, torch.gather / take_along_dim, and the scatters (index_put with and without
accumulate, index_copy, index_add, scatter, scatter_add), fused and unfused."""

import numpy as np
import pytest
import torch

from tests.differential.harness import run_and_compare
from tests.programs import Lambda, load_json

F = torch.nn.functional


def r(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def ints(lo, hi, *shape, seed=0, dtype=torch.int64):
    return torch.randint(lo, hi, shape, generator=torch.Generator().manual_seed(seed),
                         dtype=dtype)


I = torch.tensor
GATHERS = {
    "rows_negative": (lambda m, x, i: x[i] * 2, (r(50, 100), I([3, -1, 49, -50, 3]))),
    "cols": (lambda m, x, i: x[:, i] + 1, (r(6, 70), I([[0, -1], [69, 5]]))),
    "ellipsis_middle": (lambda m, x, i: x[..., i, :].exp(),
                        (r(2, 3, 9, 40), I([8, 0, -2]))),
    "two_indices_broadcast": (lambda m, x, i, j: x[i, j] * 3,
                              (r(7, 9, 33), I([[1], [-1], [6]]), I([0, 8, -9, 4]))),
    "split_by_slice": (lambda m, x, i, j: x[i, :, j] - 1,
                       (r(5, 4, 6), I([0, 4, -5]), I([5, -6, 2]))),
    "two_steps": (lambda m, x, i, j: x[i][:, j] * 2, (r(8, 10, 3), I([7, 0, -1]), I([9, 2]))),
    "slice_then_index": (lambda m, x, i: x[1:5, ::2][i] + 0.5, (r(9, 66), I([0, 3, -4]))),
    "embedding_padding_idx": (lambda m, i: F.embedding(i, m.w, padding_idx=0) * 2.0 + 1,
                              (ints(0, 30, 2, 5),), {"w": r(30, 64, seed=3)}),
    "index_select_middle": (lambda m, x, i: x.index_select(1, i).sigmoid(),
                            (r(3, 12, 5), I([11, 0, 0, 4]))),
    "gather_dims": (lambda m, x, a, b, c: (torch.gather(x, 0, a), torch.gather(x, 1, b) * 2,
                                           torch.gather(x, 2, c)),
                    (r(5, 7, 40), ints(0, 5, 3, 7, 40, seed=1), ints(0, 7, 5, 2, 40, seed=2),
                     ints(0, 40, 5, 7, 3, seed=3))),
    "take_along_dim": (lambda m, x, i: torch.take_along_dim(x, i, dim=1) + 1,
                       (r(4, 50), ints(-50, 50, 4, 6))),
    "take_along_dim_flat": (lambda m, x, i: torch.take_along_dim(x, i) * 2,
                            (r(4, 50), ints(0, 200, 9))),
}


def _case(table, name):
    fn, inputs, *params = table[name]
    return Lambda(fn, **(params[0] if params else {})), inputs


@pytest.mark.parametrize("name", sorted(GATHERS))
def test_gather_form_equals_eager(tmp_path, name):
    module, inputs = _case(GATHERS, name)
    run_and_compare(tmp_path, module, inputs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_two_index_gather_in_half_precisions_and_int32_indices(tmp_path, dtype, idx_dtype):
    x = r(6, 8, 64, dtype=dtype)
    i, j = I([[0], [-1]], dtype=idx_dtype), I([7, -8, 3], dtype=idx_dtype)
    run_and_compare(tmp_path, Lambda(lambda m, x, i, j: x[i, j] * 2), (x, i, j))


def test_fusion_is_counted_and_can_be_turned_off(tmp_path):
    """`emb(ids) * scale` fuses (one op reads the table through IndirectAccess); a gather read
    twice stays unfused; fuse=false keeps both."""
    def fn(m, ids, x, i):
        y = x[i]
        return F.embedding(ids, m.w) * 8.0, y + y.sum()
    module = Lambda(fn, w=r(20, 64, seed=4))
    inputs = (I([[1, 19, -1 + 20]]), r(6, 32), I([5, 0, -6]))
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    out = run_and_compare(tmp_path / "on", module, inputs)
    report = load_json(out / "report.json")["gather_coordinates"]
    assert (report["gathers"], report["fused"], report["unfused"]) == (2, 1, 1)
    out = run_and_compare(tmp_path / "off", module, inputs,
                          sets=["gather_coordinates.fuse=false"])
    report = load_json(out / "report.json")["gather_coordinates"]
    assert (report["fused"], report["unfused"]) == (0, 2)


SCATTERS = {
    "index_put_rows": (lambda m, x, i, v: torch.index_put(x, (i,), v),
                       (r(6, 40), I([4, -1, 0]), r(3, 40, seed=1))),
    "index_put_accumulate_duplicates": (
        lambda m, x, i, v: torch.index_put(x, (i,), v, accumulate=True),
        (r(6, 40), I([4, -2, 4, 1, 4]), r(5, 40, seed=1))),
    "index_put_two_indices_broadcast_value": (
        lambda m, x, i, j, v: torch.index_put(x, (i, j), v),
        (r(5, 7, 33), I([0, 4, -1]), I([6, 1, 2]), r(33, seed=2))),
    "index_put_cols_duplicates_last_wins": (
        lambda m, x, i, v: x.index_put((torch.arange(3)[:, None], i[None, :]), v),
        (r(3, 70), I([5, 69, 5]), r(3, 3, seed=3))),
    "index_copy_dim1_duplicates": (lambda m, x, i, s: x.index_copy(1, i, s) * 1,
                                   (r(2, 6, 2), I([1, 1, 5]), r(2, 3, 2, seed=1))),
    "index_add_alpha": (lambda m, x, i, s: x.index_add(0, i, s, alpha=2.0),
                        (r(5, 40), I([0, 4, 0, 2]), r(4, 40, seed=1))),
    "scatter_src": (lambda m, x, i, s: x.scatter(1, i, s),
                    (r(4, 50), torch.stack([torch.randperm(50, generator=torch.Generator()
                                                           .manual_seed(k))[:7]
                                            for k in range(4)]), r(4, 9, seed=1))),
    "scatter_add_duplicates": (lambda m, x, i, s: x.scatter_add(0, i, s),
                               (r(3, 40), ints(0, 3, 5, 40, seed=5), r(5, 40, seed=1))),
    "scatter_value": (lambda m, x, i: x.scatter(1, i, 7.0), (r(3, 40), ints(0, 40, 3, 2))),
}


@pytest.mark.parametrize("name", sorted(SCATTERS))
def test_scatter_form_equals_eager(tmp_path, name):
    module, inputs = _case(SCATTERS, name)
    out = run_and_compare(tmp_path, module, inputs)
    assert load_json(out / "report.json")["gather_coordinates"]["scatters"] >= 1


class Cache(torch.nn.Module):
    """The KV-cache writes of a decoder step, as torch.export functionalizes them."""

    def __init__(self, dtype):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(2, 8, 64, dtype=dtype))
        self.register_buffer("v_cache", torch.ones(2, 8, 64, dtype=dtype))

    def forward(self, k, v, pos):
        self.k_cache[:, pos] = k
        self.v_cache.index_copy_(1, pos, v)
        return self.k_cache.sum(-1) + self.v_cache[:, :, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("frontend", ["fast", "torch"])
def test_in_place_cache_writes_return_the_buffers(tmp_path, dtype, frontend):
    k, v = r(2, 3, 64, dtype=dtype), r(2, 3, 64, seed=1, dtype=dtype)
    out = run_and_compare(tmp_path, Cache(dtype), (k, v, I([5, 0, 7])), frontend=frontend)
    assert set(load_json(out / "manifest.json")["mutated_buffers"]) == {"k_cache", "v_cache"}


def test_negative_wraps_only_where_eager_wraps(tmp_path):
    """x[i] and index_put wrap -1 to the last row; index_copy is an error for -1 in eager, and
    a fault in the simulator (see test_gather_errors)."""
    x = r(4, 32)
    run_and_compare(tmp_path, Lambda(lambda m, x, i: (x[i], torch.index_put(x, (i,), x[:2]))),
                    (x, I([-1, -4])))
    np.testing.assert_array_equal(x[I([-1])].numpy(), x[3:4].numpy())
