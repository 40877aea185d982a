"""Several programs in one directory (issue 59) and `generate`'s refusal of programs that are
not causal-LM steps, on small programs (no transformers)."""

import numpy as np
import torch

from tests.cli_lines import error_line
from tests.programs import cli, export


class Scale(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.register_buffer("w", torch.arange(64.0))

    def forward(self, x):
        return x * self.w * self.k


def test_run_program_picks_one_of_several_and_each_is_a_plain_directory(tmp_path, capsys):
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    a = export(tmp_path, Scale(2.0), (x,), name="double")
    b = export(tmp_path, Scale(3.0), (x,), name="triple")
    code, _, err = cli(capsys, "compile", a, b, "-o", tmp_path / "out", "-q")
    assert code == 0, err
    code, _, err = cli(capsys, "compile", a, b, "-o", tmp_path / "out", "-q")  # again
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "double", "programs.json", "triple"]       # no serving report: not LM steps
    code, _, err = cli(capsys, "compile", a, "-o", tmp_path / "one", "-q")
    assert code == 0, err
    for name in ("bundle.mlir", "opspecs.json", "sdsc_0.json"):   # as a one-program compile
        assert (tmp_path / "out" / "double" / name).read_bytes() == \
            (tmp_path / "one" / name).read_bytes()
    np.savez(tmp_path / "in.npz", x=x.numpy())
    for name, k in (("double", 2.0), ("triple", 3.0)):
        code, _, err = cli(capsys, "run", tmp_path / "out", "--program", name, "--inputs",
                           tmp_path / "in.npz", "-o", tmp_path / f"{name}.npz", "-q")
        assert code == 0, err
        got = np.load(tmp_path / f"{name}.npz")["output_0"]
        np.testing.assert_allclose(got, x.numpy() * np.arange(64.0) * k, rtol=1e-6)
    code, _, err = cli(capsys, "run", tmp_path / "out", "--inputs", tmp_path / "in.npz")
    assert code == 2
    assert error_line(err) == (f"spyrec: {tmp_path / 'out'}: holds 2 programs (double, "
                               f"triple); name one with --program NAME")
    code, _, err = cli(capsys, "generate", tmp_path / "out", "--prompt", "1",
                       "--new-tokens", "1")
    assert code == 2
    assert error_line(err) == (
        f"spyrec: {tmp_path / 'out'}: program 'double' takes x; spyrec generate runs "
        f"causal-LM programs taking exactly input_ids [1, T] and cache_position [T] "
        f"(transformers' static-cache export recipe)")


def test_two_programs_of_one_name_are_refused(tmp_path, capsys):
    x = torch.randn(4, 64)
    a = export(tmp_path, Scale(2.0), (x,), name="step")
    (tmp_path / "b").mkdir()
    b = export(tmp_path / "b", Scale(3.0), (x,), name="step")
    code, _, err = cli(capsys, "compile", a, b, "-o", tmp_path / "out")
    assert code == 2
    assert error_line(err) == ("spyrec: programs step: two .pt2 files with one name; each "
                               "program is named by its file stem, so rename one")
