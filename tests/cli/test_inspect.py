"""`spyrec inspect`: reads only the output directory."""

import pytest
import torch

from spyrec.errors import InputFileError
from spyrec.inspect_dir import inspect_directory
from tests.programs import Lambda, compile_pt2, export
from tests.sealing import seal


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


@pytest.fixture
def broken(out, tmp_path):
    """A private copy of `out` a test may break."""
    import shutil

    return shutil.copytree(out, tmp_path / "out")


@pytest.mark.parametrize("damage, words", [
    (None, "no such file"),               # missing
    (b'{"0_add": {', "not valid JSON"),   # truncated
    (b"<html>", "not valid JSON"),        # not JSON at all
])
def test_every_view_refuses_a_broken_sdsc_file(broken, tmp_path, damage, words):
    """Issue: `inspect OUT TENSOR` exited 0 with an sdsc file missing or not JSON."""
    from spyrec.inspect_dir import inspect_data, write_svg, write_trace

    victim = broken / "sdsc_0.json"
    if damage is None:
        victim.unlink()
    else:
        victim.write_bytes(damage)
        seal(broken)    # damaged, but of the build: what the reader says of the damage
    views = [lambda: inspect_directory(broken), lambda: inspect_directory(broken, "args_1"),
             lambda: inspect_data(broken), lambda: inspect_data(broken, "args_1"),
             lambda: write_svg(broken, "args_1", tmp_path / "x.svg"),
             lambda: write_trace(broken, tmp_path / "t.json")]
    for view in views:
        with pytest.raises(InputFileError, match=f"sdsc_0.json.*{words}"):
            view()
    assert not (tmp_path / "x.svg").exists() and not (tmp_path / "t.json").exists()
