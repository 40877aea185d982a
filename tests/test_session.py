"""`spyrec.Session` (issue 59): buffers updated in place stay in simulated device memory
between calls, as on the device; `reset()` restores the stored values; a plain run always
starts from them."""

import numpy as np
import pytest
import torch

import spyrec
from spyrec.errors import InputFileError
from tests.programs import compile_pt2, export


class Step(torch.nn.Module):
    """A running sum and a cache written one row per call, read whole."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(6, 64))
        self.register_buffer("total", torch.zeros(64))

    def forward(self, x, pos):
        self.cache.index_copy_(0, pos, x)
        self.total.add_(x[0])
        return self.cache.sum(0) + self.total


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("session")
    x = torch.ones(1, 64)
    return compile_pt2(export(tmp, Step(), (x, torch.tensor([0]))), tmp / "out")


def _steps(n):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(1, 64, generator=g), torch.tensor([i % 6])) for i in range(n)]


def test_a_session_carries_the_buffers_from_call_to_call_as_eager(compiled):
    eager = Step()
    with spyrec.Session(compiled) as session:
        assert session.programs == ["model"]
        for x, pos in _steps(8):      # the cache wraps: rows are overwritten
            got = session.run("model", {"x": x, "pos": pos})
            want = eager(x, pos)
            np.testing.assert_allclose(got["output_0"], want.numpy(), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["cache"], eager.cache.numpy(), rtol=0, atol=0)
            np.testing.assert_allclose(got["total"], eager.total.numpy(), rtol=1e-6)


def test_reset_restores_the_stored_values_and_plain_runs_start_from_them(compiled):
    (x0, p0), (x1, p1) = _steps(2)
    with spyrec.Session(compiled) as session:
        session.run({"x": x0, "pos": p0})
        session.reset()
        got = session.run({"x": x1, "pos": p1})
    fresh = Step()
    np.testing.assert_allclose(got["output_0"], fresh(x1, p1).numpy(), rtol=1e-6)
    for _ in range(2):          # spyrec.run: no state between calls
        plain = spyrec.run(compiled, {"x": x1.numpy(), "pos": p1.numpy()})
        np.testing.assert_allclose(plain["output_0"], got["output_0"], rtol=0)


def test_an_unknown_program_is_named(compiled):
    with spyrec.Session(compiled) as session:
        with pytest.raises(InputFileError, match="no program 'decode'; it holds model"):
            session.run("decode", {})


class ReadsTransposed(torch.nn.Module):
    """Writes buffer `cache`, then reads it as a matmul's transposed operand (its layout puts
    the written dim on the stick) or element-wise (the last dim on the stick)."""

    def __init__(self, transposed: bool):
        super().__init__()
        self.register_buffer("cache", torch.zeros(128, 64))
        self.transposed = transposed

    def forward(self, x, pos):
        self.cache.index_copy_(0, pos, x)
        return x @ self.cache.t() if self.transposed else self.cache * 2


def test_programs_storing_a_shared_buffer_differently_are_refused(tmp_path, capsys):
    from tests.programs import cli

    x = torch.randn(1, 64)
    a = export(tmp_path, ReadsTransposed(True), (x, torch.tensor([3])), name="a")
    b = export(tmp_path, ReadsTransposed(False), (x, torch.tensor([3])), name="b")
    code, _, err = cli(capsys, "compile", a, b, "-o", tmp_path / "out", "-q")
    assert code == 0, err
    with pytest.raises(InputFileError, match=r"program 'b' stores buffer cache in another "
                                             r"device layout than an earlier program"):
        spyrec.Session(tmp_path / "out")
