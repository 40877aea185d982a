"""The indirect fields and the lane shift are read, not trusted (the style of
test_superdsc_reader.py): change one of them in one file and `run` reports it naming the field,
faults naming the index, or gives numbers `--check` rejects — never the old numbers."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from spyrec.errors import InputFileError, SimulatorFault
from spyrec.sim.directory import read_output_dir
from spyrec.sim.runner import simulate
from tests.programs import Lambda, compile_pt2, export
from tests.sealing import seal

I = torch.tensor


def _compile(tmp, fn, inputs):
    out = compile_pt2(export(tmp, Lambda(fn), inputs, "p"), tmp / "out",
                      sets=["work_division.cores=2", "fusion.enabled=false"])   # one-op files
    with torch.no_grad():
        want = fn(None, *inputs).float().numpy()
    names = json.loads((out / "manifest.json").read_text())["inputs"]
    return out, {n: t.numpy() for n, t in zip(names, inputs)}, want


@pytest.fixture(scope="module")
def scatter(tmp_path_factory):
    """index_put: op 2 writes x's rows 4, 5, 0 through Tensor0 (see test_superdsc_indirect)."""
    return _compile(tmp_path_factory.mktemp("scatter"),
                    lambda m, x, i, v: torch.index_put(x, (i,), v),
                    (torch.randn(6, 40), I([4, -1, 0]), torch.randn(3, 40)))


@pytest.fixture(scope="module")
def shifted(tmp_path_factory):
    """op 2 writes lanes 16..31 of the cat's sticks (beta_ 16 on the stick fold)."""
    return _compile(tmp_path_factory.mktemp("shift"),
                    lambda m, x, y: torch.cat((-x[..., 16:], x[..., :16]), -1) + y,
                    (torch.randn(2, 4, 32), torch.randn(2, 4, 32)))


def _edited(built, tmp_path, n, edit):
    out, inputs, want = built
    dst = tmp_path / "edited"
    shutil.copytree(out, dst)
    doc = json.loads((dst / f"sdsc_{n}.json").read_text())
    ((_, wrapper),) = doc.items()
    ((_, dsc),) = wrapper["dscs_"][0].items()
    edit(dsc)
    (dst / f"sdsc_{n}.json").write_text(json.dumps(doc))
    seal(dst)
    return dst, inputs, want


def _run(path, inputs):
    read_output_dir(path)
    return simulate(path, inputs).outputs[0].astype(np.float32)


def _node(dsc, i):
    return dsc["scheduleTree_"][i]


def test_unedited_files_give_eager_numbers(scatter, shifted):
    for out, inputs, want in (scatter, shifted):
        np.testing.assert_allclose(_run(out, inputs), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("edit, error, message", [
    # the gathered dim names a tensor that is not an index tensor
    (lambda d: _node(d, 2)["indirectDim_"].update(
        {"Tensor1": _node(d, 2)["indirectDim_"].pop("Tensor0")}), InputFileError,
     r"indirectDim_.Tensor1: Tensor1 is not another tensor of the op marked"),
    # the gathered dim is not a size-1 synthetic dim
    (lambda d: _node(d, 2)["indirectDim_"]["Tensor0"].update(dim="out"), InputFileError,
     r"the gathered dim out must be a size-1, unsplit dim"),
    # the destination no longer says it is written through an index
    (lambda d: _node(d, 2).update(indirectAllocType_="no_indirection"), InputFileError,
     r"scheduleTree_\[2\]: indirectDim_ addresses it through \['allocate-Tensor0_hbm'\]"),
    (lambda d: _node(d, 0).update(relatedIndirectAccessAlloc_="allocate-Tensor1_hbm"),
     InputFileError, r"scheduleTree_\[0\].relatedIndirectAccessAlloc_: allocate-Tensor1_hbm"),
    (lambda d: _node(d, 1).update(indirectAllocType_="value_tensor"), InputFileError,
     r"scheduleTree_\[1\].indirectAllocType_: a value_tensor needs indirectDim_"),
    # fewer rows than the index reaches: row 4 is now out of range, a fault naming the index
    (lambda d: _node(d, 2)["indirectDim_"]["Tensor0"].update(size=3) or
     _node(d, 2).pop("backGapCore_"), SimulatorFault,
     r"gather index 4 read from index tensor '.*' is out of range"),
])
def test_an_edited_indirect_field_is_reported(scatter, tmp_path, edit, error, message):
    path, inputs, _ = _edited(scatter, tmp_path, 2, edit)
    with pytest.raises(error, match=message):
        _run(path, inputs)


def test_a_reordered_destination_changes_the_numbers(scatter, tmp_path):
    """Destination dims [out, mb, x] instead of [mb, out, x]: the two stick columns become
    adjacent and the rows sit at a 64-element pitch, within the same 384 elements. A valid
    file whose rows land elsewhere: only the numbers tell, and --check compares them."""
    path, inputs, want = _edited(scatter, tmp_path, 2, lambda d: _node(d, 2).update(
        layoutDimOrder_=["out", "mb", "x"]))
    got = _run(path, inputs)
    assert got.shape == want.shape and not np.allclose(got, want, rtol=1e-4, atol=1e-4)


def _beta(d, label, position, value):
    d["scheduleTree_"][1]["coordinates_"]["coordInfo"][label]["folds"]["dim_prop_func"][
        position]["Affine"]["beta_"] = value


@pytest.mark.parametrize("edit, message", [
    (lambda d: _beta(d, "mb", 3, 1), r"coordInfo.mb.folds: betas \[0, 0, 0, 1\]"),
    (lambda d: _beta(d, "y", 0, 16), r"coordInfo.y.folds: betas \[16, 0, 0, 0, 16\]"),
    (lambda d: _beta(d, "y", 4, -16), r"beta_: -16 is less than the minimum of 0"),
])
def test_a_beta_anywhere_but_the_lanes_of_a_stick_dim_is_reported(shifted, tmp_path, edit,
                                                                   message):
    path, inputs, _ = _edited(shifted, tmp_path, 2, edit)
    with pytest.raises(InputFileError, match=message):
        _run(path, inputs)


@pytest.mark.parametrize("beta", [0, 8])
def test_a_changed_lane_shift_changes_the_numbers(shifted, tmp_path, beta):
    """beta_ 0 writes x's first half over the negated second half; 8 straddles both."""
    path, inputs, want = _edited(shifted, tmp_path, 2, lambda d: _beta(d, "y", 4, beta))
    assert not np.allclose(_run(path, inputs), want, rtol=1e-4, atol=1e-4, equal_nan=True)
