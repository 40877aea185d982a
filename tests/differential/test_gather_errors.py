"""Bad index data is one clear message with exit 2 (DESIGN §1), never a silent read, and
hypothesis-generated gathers and scatters (negatives, duplicates, every value and index dtype)
equal eager."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyrec.errors import InputFileError, SimulatorFault, UnsupportedProgram
from spyrec.sim.runner import simulate
from tests.cli_lines import error_line
from tests.differential.harness import run_and_compare
from tests.programs import Lambda, compile_pt2, export


def _compiled(tmp_path, fn, inputs, **params):
    pt2 = export(tmp_path, Lambda(fn, **params), inputs)
    return compile_pt2(pt2, tmp_path / "out")


def _run_cli(out, npz):
    return subprocess.run([sys.executable, "-m", "spyrec.cli", "run", str(out), "--inputs",
                           str(npz)], capture_output=True, text=True)


def test_out_of_range_index_in_the_inputs_is_exit_2_naming_tensor_position_value(tmp_path):
    x = torch.randn(5, 40)
    out = _compiled(tmp_path, lambda m, x, i: x[i] * 2, (x, torch.tensor([[0, 1], [2, 3]])))
    np.savez(tmp_path / "bad.npz", args_0=x.numpy(), args_1=np.array([[0, -5], [7, -6]]))
    done = _run_cli(out, tmp_path / "bad.npz")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "index tensor 'args_1' (used by index): the value 7 at position [1, 0] is out of range " \
           "for a dim of size 5 (valid -5..4)" in error_line(done.stderr)


def test_negative_index_is_an_error_where_eager_raises(tmp_path):
    x = torch.randn(5, 40)
    out = _compiled(tmp_path, lambda m, x, i: x.index_select(0, i) + 1, (x, torch.tensor([1])))
    with pytest.raises(IndexError):
        x.index_select(0, torch.tensor([-1]))
    with pytest.raises(SimulatorFault, match=r"value -1 at position \[0\] .*\(valid 0\.\.4\)"):
        simulate(out, {"args_0": x.numpy(), "args_1": np.array([-1])})


def test_an_index_that_does_not_fit_int32_is_a_clear_input_error(tmp_path):
    x = torch.randn(5, 40)
    out = _compiled(tmp_path, lambda m, x, i: x[i], (x, torch.tensor([1])))
    with pytest.raises(InputFileError, match="does not fit int32"):
        simulate(out, {"args_0": x.numpy(), "args_1": np.array([2 ** 40])})


def test_a_float_index_array_is_refused_naming_the_input(tmp_path):
    x = torch.randn(5, 40)
    out = _compiled(tmp_path, lambda m, x, i: x[i], (x, torch.tensor([1])))
    with pytest.raises(InputFileError, match="'args_1'"):
        simulate(out, {"args_0": x.numpy(), "args_1": np.array([1.0])})


def test_an_out_of_range_constant_index_is_refused_at_compile_time(tmp_path):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("pos", torch.tensor([0, 2]))

        def forward(self, x):
            return x.index_select(0, self.pos) * 2

    pt2 = export(tmp_path, M(), (torch.randn(3, 8),))
    compile_pt2(pt2, tmp_path / "ok")
    with pytest.raises(UnsupportedProgram, match=r"constant index tensor .* holds 2 at position"
                                                  r" \[1\], outside 0\.\.1"):
        compile_pt2(export(tmp_path, M(), (torch.randn(2, 8),), "small"), tmp_path / "bad")


VALUE_DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])
INDEX_DTYPES = st.sampled_from([torch.int32, torch.int64])


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.integers(1, 9), cols=st.sampled_from([1, 5, 64, 70]),
       index_shape=st.lists(st.integers(1, 4), min_size=1, max_size=2),
       dim=st.integers(0, 1), dtype=VALUE_DTYPES, idx_dtype=INDEX_DTYPES,
       seed=st.integers(0, 2 ** 16))
def test_random_gathers_equal_eager(tmp_path_factory, rows, cols, index_shape, dim, dtype,
                                    idx_dtype, seed):
    """x[i] or x[:, i] with any index shape; values from -size..size-1 (negatives and
    duplicates included), then a pointwise reader (the gather fuses into it)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g).to(dtype)
    size = x.shape[dim]
    i = torch.randint(-size, size, index_shape, generator=g, dtype=idx_dtype)
    fn = (lambda m, x, i: x[i] * 2) if dim == 0 else (lambda m, x, i: x[:, i] + 1)
    run_and_compare(tmp_path_factory.mktemp("g"), Lambda(fn), (x, i))


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.integers(1, 7), cols=st.sampled_from([3, 64]), count=st.integers(1, 6),
       accumulate=st.booleans(), dtype=VALUE_DTYPES, idx_dtype=INDEX_DTYPES,
       seed=st.integers(0, 2 ** 16))
def test_random_index_puts_equal_eager(tmp_path_factory, rows, cols, count, accumulate, dtype,
                                       idx_dtype, seed):
    """index_put of rows, duplicates likely (count may exceed rows): summed with accumulate,
    the last write wins without (as eager's CPU kernel)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g).to(dtype)
    i = torch.randint(-rows, rows, (count,), generator=g, dtype=idx_dtype)
    v = torch.randn(count, cols, generator=g).to(dtype)
    run_and_compare(tmp_path_factory.mktemp("s"), Lambda(
        lambda m, x, i, v: torch.index_put(x, (i,), v, accumulate=accumulate)), (x, i, v))
