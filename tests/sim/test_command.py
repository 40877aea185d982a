"""`spyrec run` end to end: a compiled output directory plus a program.pt2 of our choice."""

import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from spyrec.errors import CheckMismatch, InputFileError
from spyrec.sim.command import run_command
from spyrec.bf16 import float32_to_bf16_bits
from tests.programs import compile_pt2, export, record_source


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class Sub(torch.nn.Module):
    def forward(self, x, y):
        return x - y


def example(dtype: str) -> tuple:
    return tuple(torch.zeros(4, 100, dtype=getattr(torch, dtype)) for _ in range(2))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """`x + y` over [4, 100] compiled once per dtype: dtype -> its output directory."""
    built = {}

    def get(dtype: str):
        if dtype not in built:
            tmp = tmp_path_factory.mktemp(dtype)
            built[dtype] = compile_pt2(export(tmp, Add(), example(dtype), "add"))
        return built[dtype]
    return get


@pytest.fixture
def directory(compiled, tmp_path):
    """A copy of the compiled `add` directory whose program.pt2 is `module` (so --check can
    disagree)."""
    def make(module, dtype="float16"):
        path = shutil.copytree(compiled(dtype), tmp_path / "out")
        pt2 = tmp_path / "program.pt2"
        torch.export.save(torch.export.export(module, example(dtype)), str(pt2))
        record_source(path, pt2)
        return path
    return make


def inputs(tmp_path, rng, dtype="float16"):
    arrays = {n: rng.standard_normal((4, 100)).astype(np.float32) for n in ("x", "y")}
    if dtype == "bfloat16":
        arrays = {n: float32_to_bf16_bits(a) for n, a in arrays.items()}
        arrays.update({f"__dtype__.{n}": np.array("bfloat16") for n in ("x", "y")})
    else:
        arrays = {n: a.astype(dtype) for n, a in arrays.items()}
    np.savez(tmp_path / "in.npz", **arrays)
    return tmp_path / "in.npz", arrays


def invoke(*args):
    return CliRunner().invoke(run_command, [str(a) for a in args])


def test_run_writes_outputs_and_checks(directory, tmp_path, rng):
    path = directory(Add())
    data, arrays = inputs(tmp_path, rng)
    result = invoke(path, "--inputs", data, "--check", "--report")
    assert result.exit_code == 0, result.output
    with np.load(path / "outputs.npz") as saved:
        assert list(saved.files) == ["output_0"]
        assert np.array_equal(saved["output_0"], arrays["x"] + arrays["y"])
    assert "output_0   add" in result.stdout and " ok" in result.stdout
    assert "sdsc_0.json" in result.stdout and "total:" in result.stdout
    assert "written to" in result.stderr and "written to" not in result.stdout


def test_check_mismatch_exits_1(directory, tmp_path, rng):
    path = directory(Sub())
    data, _ = inputs(tmp_path, rng)
    result = invoke(path, "--inputs", data, "--check", "-q", "-o", tmp_path / "o.npz")
    assert isinstance(result.exception, CheckMismatch) and result.exception.exit_code == 1
    assert "1 of 1 outputs differ from PyTorch eager beyond tolerance: output_0 (add)" \
        in str(result.exception)
    assert "MISMATCH" in result.stdout and result.stderr == ""
    assert (tmp_path / "o.npz").exists()


def test_bf16_round_trip_with_check(directory, tmp_path, rng):
    path = directory(Add(), "bfloat16")
    data, _ = inputs(tmp_path, rng, "bfloat16")
    result = invoke(path, "--inputs", data, "--check", "-v")
    assert result.exit_code == 0, result.output
    assert "[1/1] main: sdsc_0.json (add 'add'" in result.stderr
    with np.load(path / "outputs.npz") as saved:
        assert saved["output_0"].dtype == np.uint16
        assert str(saved["__dtype__.output_0"]) == "bfloat16"


def test_bad_input_file_is_exit_2(directory, tmp_path):
    path = directory(Add())
    np.savez(tmp_path / "in.npz", x=np.zeros((4, 100), np.float16))
    result = invoke(path, "--inputs", tmp_path / "in.npz")
    assert isinstance(result.exception, InputFileError) and result.exception.exit_code == 2
    assert "missing 'y'" in str(result.exception)


@pytest.fixture
def cli_with_run():
    """spyrec's real entry point with `run` registered (cli.py registers it separately)."""
    from spyrec.cli import cli, main
    had = "run" in cli.commands
    cli.add_command(run_command)
    yield main
    if not had:
        del cli.commands["run"]


def test_exit_codes_through_the_cli(directory, tmp_path, rng, cli_with_run, capsys):
    path = directory(Sub())
    data, _ = inputs(tmp_path, rng)
    with pytest.raises(SystemExit) as e:
        cli_with_run(["run", str(path), "--inputs", str(data), "--check", "-q"])
    assert e.value.code == 1
    assert "spyrec: 1 of 1 outputs differ" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli_with_run(["run", str(path), "--inputs", str(tmp_path / "none.npz")])
    assert e.value.code == 2
