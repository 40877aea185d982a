"""spyrec.compile / spyrec.run (spyrec/api.py): the CLI's work as functions that raise."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import spyrec
from spyrec.errors import CheckMismatch, ConfigError, InputFileError
from spyrec.bf16 import bf16_bits_to_float32
from tests.programs import Lambda, export, record_source


class Mixed(torch.nn.Module):
    """fp32 in; an fp32 and a bf16 output, so both host forms come back."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 96), requires_grad=False)

    def forward(self, x, y):
        return x * self.w + y, (x - y).to(torch.bfloat16)


def inputs():
    g = torch.Generator().manual_seed(7)
    return torch.randn(4, 96, generator=g), torch.randn(4, 96, generator=g)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    ep = torch.export.export(Mixed().eval(), inputs())
    return ep, spyrec.compile(ep, tmp / "out", sets={"work_division.cores": 8})


def test_compile_an_exported_program_and_run_it(compiled):
    ep, out = compiled
    assert (out / "bundle.mlir").is_file()
    manifest = json.loads((out / "manifest.json").read_text())
    assert {"pass": "work_division", "options": {"cores": 8, "strategy": "cost", "lx_intermediates": True,
                                                 "chain_moves": True, "k_split": True,
                                                 "replicas": True, "overlap_moves": False,
                                                 "spread_within": 0.02}} in \
        manifest["pipeline"]
    x, y = inputs()
    result = spyrec.run(out, {"x": x, "y": y.numpy()}, check=True)
    assert sorted(result) == ["__dtype__.output_1", "output_0", "output_1"]
    want0, want1 = Mixed()(x, y)
    np.testing.assert_allclose(result["output_0"], want0.numpy(), rtol=1e-6, atol=1e-6)
    assert result["output_1"].dtype == np.uint16 and str(result["__dtype__.output_1"]) == "bfloat16"
    # bf16 lives as fp16 on the device (DESIGN §3): within the bf16 tolerance, not bit-exact
    np.testing.assert_allclose(bf16_bits_to_float32(result["output_1"]), want1.float().numpy(),
                               rtol=1e-2, atol=1e-2)


def test_a_path_compiles_to_the_same_files_as_the_cli(compiled, tmp_path):
    from spyrec.cli import main

    ep, out = compiled
    pt2 = tmp_path / "m.pt2"
    torch.export.save(ep, str(pt2))
    api_out = spyrec.compile(str(pt2), tmp_path / "api", sets=["work_division.cores=8"])
    main(["compile", str(pt2), "-o", str(tmp_path / "cli"), "-q", "--set",
          "work_division.cores=8"])
    for name in ("bundle.mlir", "opspecs.json", "manifest.json", "sdsc_0.json"):
        assert (api_out / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    assert (out / "opspecs.json").read_bytes() == (api_out / "opspecs.json").read_bytes()


def test_inputs_from_a_file_and_bf16_tensors(tmp_path):
    module = Lambda(lambda m, a: a * 2 + 1)
    a = torch.randn(3, 70).to(torch.bfloat16)
    out = spyrec.compile(export(tmp_path, module, (a,)), tmp_path / "out")
    from_tensor = spyrec.run(out, {"args_0": a})
    np.savez(tmp_path / "in.npz", args_0=a.view(torch.int16).numpy().view(np.uint16),
             **{"__dtype__.args_0": np.array("bfloat16")})
    from_file = spyrec.run(out, tmp_path / "in.npz", check=True)
    np.testing.assert_array_equal(from_tensor["output_0"], from_file["output_0"])
    want = (a.float() * 2 + 1).numpy()
    np.testing.assert_allclose(bf16_bits_to_float32(from_file["output_0"]), want, rtol=1e-2,
                               atol=1e-2)


def test_errors_raise_the_spyrec_exceptions(compiled, tmp_path):
    ep, out = compiled
    with pytest.raises(ConfigError, match="give a dict"):
        spyrec.compile(ep, tmp_path / "o", sets="work_division.cores=8")
    with pytest.raises(ConfigError, match="pass 'work_divison' is not in the pipeline"):
        spyrec.compile(ep, tmp_path / "o", sets={"work_divison.cores": 8})
    with pytest.raises(InputFileError, match="got a int; give a torch.export.ExportedProgram"):
        spyrec.compile(3, tmp_path / "o")
    with pytest.raises(InputFileError, match="missing 'y'"):
        spyrec.run(out, {"x": np.zeros((4, 96), np.float32)})
    with pytest.raises(InputFileError, match="inputs is a list"):
        spyrec.run(out, [np.zeros((4, 96), np.float32)])


def test_check_mismatch_raises(compiled, tmp_path):
    """A program.pt2 that computes something else: run(check=True) raises, naming outputs."""
    import shutil

    _, out = compiled
    other = tmp_path / "other"
    shutil.copytree(out, other)
    wrong = Lambda(lambda m, x, y: (x * 3 + y, (x + y).to(torch.bfloat16)))
    torch.export.save(torch.export.export(wrong.eval(), inputs()), str(tmp_path / "w.pt2"))
    record_source(other, tmp_path / "w.pt2")
    x, y = inputs()
    with pytest.raises(CheckMismatch, match=r"2 of 2 outputs differ .*output_0 \(.*output_1"):
        spyrec.run(other, {"x": x, "y": y}, check=True)
    assert sorted(spyrec.run(other, {"x": x, "y": y})) == sorted(
        ["output_0", "output_1", "__dtype__.output_1"])


def modules_after(code: str) -> set[str]:
    return set(subprocess.run([sys.executable, "-c", code + "\nimport sys\n"
                               "print(' '.join(sorted(sys.modules)))"],
                              capture_output=True, text=True, check=True).stdout.split())


def test_import_spyrec_stays_cheap():
    assert not {"torch", "numpy", "sympy", "xdsl", "spyrec.api"} & modules_after(
        "import spyrec")
    lazy = modules_after("import spyrec\nspyrec.run")
    assert "spyrec.api" in lazy and "torch" not in lazy
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        spyrec.nope  # noqa: B018
