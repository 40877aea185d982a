"""`spyrec inspect`: reads only the output directory."""

import pytest
import torch

from spyrec.errors import InputFileError
from spyrec.inspect_dir import inspect_directory
from tests.programs import Lambda, compile_pt2, export


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inspect")
    pt2 = export(tmp, Lambda(lambda m, a, x: a.t() + x), (torch.randn(128, 64).half(),
                                                          torch.randn(64, 128).half()))
    return compile_pt2(pt2, tmp / "out", sets=["stick_layout.input_layouts=default"])


def test_summary_lists_tensors_restickifies_and_cost(out):
    text = inspect_directory(out)
    assert "args_0" in text and "[1, 128, 64] / [64, 64, 1] fp16" in text
    assert "restickify: 1 copies inserted, 8192 device elements moved" in text
    assert "estimated" in text


def test_tensor_view_shows_every_access(out):
    text = inspect_directory(out, "args_1")
    assert "device_size [2, 64, 64]" in text
    assert "ReStickifyOpHBM  reads  [floor(c1/64), c0, Mod(c1, 64)]" in text


def test_unknown_tensor_suggests_near_names(out):
    with pytest.raises(InputFileError, match="no tensor named 'args0'; did you mean args_0"):
        inspect_directory(out, "args0")


def test_not_an_output_directory(tmp_path):
    with pytest.raises(InputFileError, match="is .* a spyrec compile output directory"):
        inspect_directory(tmp_path)
