"""Bad .pt2 files and unsupported programs: one clear message, the right exit code, no traceback."""

import json
import subprocess
import sys
import zipfile

import pytest
import torch

from spyrec.errors import InputFileError, UnsupportedProgram
from spyrec.frontend import load_program, lower_program
from tests.programs import Lambda, export


def _spyrec(*args):
    return subprocess.run([sys.executable, "-m", "spyrec", *map(str, args)], capture_output=True,
                          text=True)


def test_missing_file(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        load_program(tmp_path / "nope.pt2")


def test_not_a_zip(tmp_path):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(InputFileError, match="not a .pt2 archive"):
        load_program(bad)


def test_truncated_archive(tmp_path):
    good = export(tmp_path, Lambda(lambda m, x: x + 1), (torch.randn(4, 8),))
    cut = tmp_path / "cut.pt2"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(InputFileError, match="not a .pt2 archive"):
        load_program(cut)


def test_random_zip(tmp_path):
    z = tmp_path / "other.pt2"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(InputFileError, match="without an exported program"):
        load_program(z)


def test_aotinductor_package(tmp_path):
    z = tmp_path / "aoti.pt2"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("model/data/aotinductor/model/abc.wrapper.so", b"\x7fELF")
    with pytest.raises(InputFileError, match="AOTInductor package"):
        load_program(z)


def test_unregistered_custom_op_is_named(tmp_path):
    z = tmp_path / "custom.pt2"
    model = {"graph_module": {"graph": {"nodes": [
        {"target": "torch.ops.aten.add.Tensor"}, {"target": "torch.ops.myops.scale2.default"}]}}}
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("custom/models/model.json", json.dumps(model))
    with pytest.raises(InputFileError, match="myops.scale2.default"):
        load_program(z)


def test_cli_exit_code_2_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.pt2"
    bad.write_text("nope")
    r = _spyrec("compile", bad, "-o", tmp_path / "out")
    assert r.returncode == 2
    assert "not a .pt2 archive" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


class TwoUnsupported(torch.nn.Module):
    def forward(self, x):
        a = torch.cumprod(x, 0)          # unsupported 1
        b = torch.kthvalue(x, 2, dim=1).values.unsqueeze(1)  # unsupported 2
        return a + b


def test_every_unsupported_op_is_listed_with_its_line(tmp_path):
    pt2 = export(tmp_path, TwoUnsupported(), (torch.randn(4, 8),))
    with pytest.raises(UnsupportedProgram) as err:
        lower_program(load_program(pt2))
    text = str(err.value)
    assert "aten.cumprod.default" in text and "aten.kthvalue.default" in text
    line = TwoUnsupported.forward.__code__.co_firstlineno
    assert f"test_load_errors.py:{line + 1} in forward" in text
    assert f"test_load_errors.py:{line + 2} in forward" in text
    r = _spyrec("compile", pt2, "-o", tmp_path / "out")
    assert r.returncode == 3 and "aten.cumprod.default" in r.stderr and "aten.kthvalue" in r.stderr


def test_dynamic_shapes_say_how_to_reexport(tmp_path):
    ep = torch.export.export(Lambda(lambda m, x: x * 2), (torch.randn(4, 8),),
                             dynamic_shapes={"args": ({0: torch.export.Dim("batch", max=64)},)})
    pt2 = tmp_path / "dyn.pt2"
    torch.export.save(ep, str(pt2))
    with pytest.raises(UnsupportedProgram, match="re-export with static shapes"):
        load_program(pt2)


class UsesAsStridedOfATranspose(torch.nn.Module):
    def forward(self, x):
        # eager keeps the transposed strides of x.t() in the product: its storage is not ours
        return torch.ops.aten.as_strided_copy.default(x.t() * 2, [4, 8], [8, 1])


def test_as_strided_of_a_view_is_refused_with_a_reason(tmp_path):
    """max.dim indices, once the example here, are lowered now (test_index_reductions.py)."""
    pt2 = export(tmp_path, UsesAsStridedOfATranspose(), (torch.randn(4, 8),))
    with pytest.raises(UnsupportedProgram, match=r"as_strided over a view or outside its "
                                                 r"tensor; only as_strided of a whole "
                                                 r"contiguous tensor is supported"):
        lower_program(load_program(pt2))


class _MutatesAPlainTensor(torch.nn.Module):
    """Changes a tensor that is not a registered buffer in place (as transformers' static
    cache does under a non-strict export): torch lifts it as a constant and then cannot
    decompose the program."""

    def __init__(self):
        super().__init__()
        self.cache = torch.zeros(8, 4)

    def forward(self, x, pos):
        self.cache.index_copy_(0, pos, x)
        return self.cache * 2


def test_a_program_torch_cannot_decompose_is_refused_with_torchs_reason(tmp_path):
    pt2 = export(tmp_path, _MutatesAPlainTensor(), (torch.randn(1, 4), torch.tensor([3])))
    with pytest.raises(UnsupportedProgram) as e:
        load_program(pt2)
    assert str(e.value) == (
        f"{pt2}: the graph uses aten.index_copy_.default, which spyrec does not lower "
        f"directly, and torch {torch.__version__} cannot decompose this program "
        f"(RuntimeError: Constant cache is mutated in the forward method. Pls register it "
        f"as buffer); a module that changes a tensor in place must hold it as a registered "
        f"buffer, and transformers' static-cache recipes export with strict=True: re-export "
        f"accordingly.")
