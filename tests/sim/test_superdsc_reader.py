"""The simulator runs SuperDSC from its fields alone: change one field of one file and `run`
reports the inconsistency (naming the field) or `--check` fails — never silently the old
numbers. Also: the reader agrees with the published address algorithm (F §4.3)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from spyrec.errors import InputFileError
from spyrec.sim.runner import simulate
from spyrec.sim.directory import read_output_dir
from tests.programs import Lambda, compile_pt2, export
from tests.sealing import seal


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sdscfault")
    x = torch.randn(256, 128, dtype=torch.float16)
    y = torch.randn(256, 128, dtype=torch.float16)
    out = compile_pt2(export(tmp, Lambda(lambda m, a, b: (a + b).exp()), (x, y), "p"),
                      tmp / "out", sets=["work_division.cores=4",
                                          # one-op files: the fields edited are theirs (a
                                          # fused file's members: tests/passes/test_fusion.py)
                                          "fusion.enabled=false"])
    return out, {"args_0": x.numpy(), "args_1": y.numpy()}, (x + y).exp().numpy()


def _copy(built, tmp_path, edit):
    import shutil

    out, inputs, want = built
    dst = tmp_path / "edited"
    shutil.copytree(out, dst)
    doc = json.loads((dst / "sdsc_0.json").read_text())
    ((_, wrapper),) = doc.items()
    ((_, dsc),) = wrapper["dscs_"][0].items()
    edit(wrapper, dsc)
    (dst / "sdsc_0.json").write_text(json.dumps(doc))
    seal(dst)
    return dst, inputs, want


def _result(path, inputs):
    read_output_dir(path)           # the reader's checks, before anything runs
    return simulate(path, inputs).outputs[0]


def test_unedited_files_give_eager_numbers(built):
    out, inputs, want = built
    np.testing.assert_allclose(_result(out, inputs).astype(np.float32), want, rtol=1e-2,
                               atol=1e-2)


def _gap(dsc: dict, i: int, gap: str) -> dict:
    """A back gap entry for node i: one for the tensor in HBM, one per core in LX."""
    node = dsc["scheduleTree_"][i]
    cores = len(node["startAddressCoreCorelet_"]["data_"])
    return {str(c): gap for c in range(cores)} if node["component_"] == "lx" else {"-1": gap}


@pytest.mark.parametrize("edit, message", [
    (lambda w, d: d["scheduleTree_"][1]["startAddressCoreCorelet_"]["data_"].update(
        {"[2, 0, 0]": str(int(d["scheduleTree_"][1]["startAddressCoreCorelet_"]["data_"]
                              ["[2, 0, 0]"]) + 128)}),
     r"startAddressCoreCorelet_.data_.\[2, 0, 0\]: core 2 starts at"),
    (lambda w, d: d["scheduleTree_"][0]["coordinates_"]["coordInfo"]["mb"]["folds"]
     ["dim_prop_attr"][0].update(factor_=2),
     r"coordInfo.mb.folds: alphas \[64, 0, 0, 1\] and factors \[2, 1, 1, 64\]"),
    (lambda w, d: d["labeledDs_"][0].update(scale_=[1, 7]), r"scale_"),
    (lambda w, d: w["numWkSlicesPerDim_"].update(mb=2),
     r"numWkSlicesPerDim_: the splits multiply to 2, not numCoresUsed_ 4"),
    (lambda w, d: w["coreIdToWkSlice_"]["3"].update(mb=2), r"two cores run the same slice"),
    (lambda w, d: d["dataStageParam_"]["0"]["ss_"].update(mb_=32), r"ss_.mb_: 32"),
    (lambda w, d: d["primaryDsInfo_"]["OUTPUT"].update(stickSize_=[32]),
     r"do not make a 128-byte stick|stickSize_"),
    (lambda w, d: d["scheduleTree_"][0].update(backGapCore_={"out": _gap(d, 0, "5")}),
     r"backGapCore_.out: 5 is not whole sticks of 64"),
])
def test_an_edited_field_is_reported(built, tmp_path, edit, message):
    path, inputs, _ = _copy(built, tmp_path, edit)
    with pytest.raises(InputFileError, match=message):
        _result(path, inputs)


def test_a_wrong_but_consistent_layout_changes_the_numbers(built, tmp_path):
    """Swap one input's dim order (rows innermost vs stick columns): still a valid file, so
    nothing can flag it statically — the simulated numbers change, and --check would fail."""
    def swap(w, d):
        d["scheduleTree_"][0]["layoutDimOrder_"] = d["scheduleTree_"][0]["layoutDimOrder_"][::-1]
        for c in range(w["numCoresUsed_"]):   # keep the start addresses consistent
            d["scheduleTree_"][0]["startAddressCoreCorelet_"]["data_"][f"[{c}, 0, 0]"] = \
                d["scheduleTree_"][0]["startAddressCoreCorelet_"]["data_"]["[0, 0, 0]"]
        w["numWkSlicesPerDim_"] = {k: 1 for k in w["numWkSlicesPerDim_"]}
    path, inputs, want = _copy(built, tmp_path, swap)
    try:
        got = _result(path, inputs).astype(np.float32)
    except InputFileError:
        return      # the reader caught it: also fine
    assert not np.allclose(got, want, rtol=1e-2, atol=1e-2, equal_nan=True)
