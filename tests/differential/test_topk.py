"""torch.topk compiled and simulated against eager (spyrec/frontend/aten_moe.py).

Drawn: shapes of rank 1-3, the dim, k = 1..size, largest/smallest, sorted/unsorted, fp32/fp16,
values distinct or integer-valued (ties), with NaN and ±inf sprinkled in. Values always equal
eager's. Indices equal eager's when the row's values are distinct (and always for rows of at
most 3 elements); with ties eager's order is libstdc++'s nth_element artifact, and spyrec's is
the stable one (equal values by index), checked against a numpy stable sort.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyrec.errors import UnsupportedProgram
from spyrec.sim.runner import simulate
from tests.programs import Lambda, compile_pt2, export, load_json


def _topk_module(k: int, dim: int, largest: bool, sorted_: bool) -> torch.nn.Module:
    return Lambda(lambda self, x: tuple(torch.topk(x, k, dim=dim, largest=largest,
                                                   sorted=sorted_)))


def _compile_run(tmp, module, x: torch.Tensor) -> list[np.ndarray]:
    out = compile_pt2(export(tmp, module, (x,)), tmp / "out", frontend="fast")
    name = load_json(out / "manifest.json")["inputs"][0]
    return simulate(out, {name: x.numpy()}).outputs


def stable_topk(x: np.ndarray, k: int, dim: int, largest: bool) -> np.ndarray:
    """Indices of the stable order eager's comparator gives (NaN greatest for `largest`,
    last for smallest), equal values by index."""
    rows = np.moveaxis(x.astype(np.float64), dim, -1)
    nan = np.isnan(rows)
    key = np.where(nan, 0.0, -rows if largest else rows)
    nan_rank = ~nan if largest else nan   # lexsort: the last key is primary
    order = np.lexsort((np.broadcast_to(np.arange(rows.shape[-1]), rows.shape), key,
                        nan_rank), axis=-1)
    return np.moveaxis(order[..., :k], -1, dim)


def _has_ties(x: np.ndarray, dim: int) -> np.ndarray:
    rows = np.moveaxis(x, dim, -1)
    s = np.sort(np.where(np.isnan(rows), np.inf, rows), axis=-1)
    same = (s[..., 1:] == s[..., :-1]) | np.isnan(rows).sum(-1, keepdims=True).astype(bool)
    return same.any(-1) if rows.shape[-1] > 1 else np.zeros(rows.shape[:-1], bool)


def _refused_unsorted(n: int, k: int, sorted_: bool) -> bool:
    return not sorted_ and k >= 3 and 64 * k > n and n >= 4


@st.composite
def cases(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank))
    dim = draw(st.integers(-rank, rank - 1))
    if draw(st.booleans()):
        shape[dim] = draw(st.sampled_from([7, 16, 65, 130]))   # partial_sort needs 64k <= n
    n = shape[dim]
    k = draw(st.integers(1, n))
    dtype = draw(st.sampled_from([torch.float32, torch.float16]))
    seed = draw(st.integers(0, 2 ** 16))
    g = torch.Generator().manual_seed(seed)
    if draw(st.booleans()):  # ties: integer-valued floats
        x = torch.randint(-2, 3, shape, generator=g).to(dtype)
    else:
        x = (torch.randperm(int(np.prod(shape)), generator=g).reshape(shape) - 7).to(dtype)
    if draw(st.booleans()) and x.numel() > 1:
        flat = x.view(-1)
        for v in (float("nan"), float("inf"), float("-inf")):
            flat[int(torch.randint(0, x.numel(), (1,), generator=g))] = v
    return x, k, dim, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases())
def test_topk_equals_eager(tmp_path_factory, case):
    x, k, dim, largest, sorted_ = case
    tmp = tmp_path_factory.mktemp("topk")
    module = _topk_module(k, dim, largest, sorted_)
    n = x.shape[dim]
    if _refused_unsorted(n, k, sorted_):
        with pytest.raises(UnsupportedProgram, match="nth_element"):
            _compile_run(tmp, module, x)
        return
    values, indices = _compile_run(tmp, module, x)
    want_values, want_indices = (t.numpy() for t in module(x))
    np.testing.assert_array_equal(values, want_values)
    ties = np.expand_dims(_has_ties(x.numpy(), dim), dim)
    expected = np.where(ties | (n <= 3), stable_topk(x.numpy(), k, dim, largest),
                        want_indices) if n > 3 else want_indices
    np.testing.assert_array_equal(indices, expected)
    # the stable reference agrees with eager wherever the row has distinct values
    stable = stable_topk(x.numpy(), k, dim, largest)
    np.testing.assert_array_equal(np.where(ties, 0, stable), np.where(ties, 0, want_indices))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_small_rows_with_ties_is_exactly_eagers(tmp_path, dtype, largest):
    """Rows of 1-3 elements (std::nth_element sorts them by insertion): eager's tie order is
    the stable one, so every index matches, NaN and ±inf included."""
    x = torch.tensor([[1.0, 1.0, 0.0], [float("nan"), 2.0, float("nan")],
                      [float("-inf"), float("-inf"), float("inf")], [0.0, 0.0, 0.0]],
                     dtype=dtype)
    module = _topk_module(2, 1, largest, True)
    values, indices = _compile_run(tmp_path, module, x)
    want_values, want_indices = (t.numpy() for t in module(x))
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


def test_unsorted_topk_in_nth_element_order_is_refused(tmp_path):
    with pytest.raises(UnsupportedProgram, match=r"sorted=False.*use sorted=True"):
        _compile_run(tmp_path, _topk_module(3, -1, True, False), torch.randn(2, 8))
