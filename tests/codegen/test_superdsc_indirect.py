"""SuperDSC for the accesses the reference's format has no example of, field by field: a
scatter (an indirect *output*), a gather through two index tensors, and a move inside a stick
(a view that starts 16 lanes in). spyrec's extensions (docs/formats.md "SuperDSC extensions"):
`indirectDim_` on the value tensor's node (the gathered dim and its extent) and a lane shift in
the stick fold's `beta_`. Expected values are written out by hand from the layouts printed in
each test's docstring; every program is also simulated and compared with eager."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from spyrec.sim.runner import simulate
from tests.programs import Lambda, compile_pt2, export

I = torch.tensor


def _build(tmp: Path, fn, inputs, cores: int) -> Path:
    # intermediates stay in HBM: these tests read their concrete start addresses
    out = compile_pt2(export(tmp, Lambda(fn), inputs, "prog"), tmp / "out",
                      sets=[f"work_division.cores={cores}", "work_division.strategy=greedy",
                            "scratchpad_planning.intermediates=false"])
    names = json.loads((out / "manifest.json").read_text())["inputs"]
    got = simulate(out, {n: t.numpy() for n, t in zip(names, inputs)}).outputs[0]
    with torch.no_grad():
        want = fn(None, *inputs)
    np.testing.assert_allclose(got.astype(np.float32), want.float().numpy(), rtol=1e-2,
                               atol=1e-2)
    return out


def _dsc(out: Path, n: int) -> tuple[str, dict, dict]:
    ((key, wrapper),) = json.loads((out / f"sdsc_{n}.json").read_text()).items()
    ((_, dsc),) = wrapper["dscs_"][0].items()
    return key, wrapper, dsc


def _starts(node: dict) -> list[int]:
    data = node["startAddressCoreCorelet_"]["data_"]
    return [int(data[f"[{c}, 0, 0]"]) for c in range(len(data))]


def _address(out: Path, name: str) -> int:
    tensors = json.loads((out / "manifest.json").read_text())["tensors"]
    return next(t["hbm_address"] for t in tensors if t["name"] == name)


def _folds(node: dict, label: str) -> tuple[list, list, list]:
    f = node["coordinates_"]["coordInfo"][label]["folds"]
    return ([a["Affine"]["alpha_"] for a in f["dim_prop_func"]],
            [a["Affine"]["beta_"] for a in f["dim_prop_func"]],
            [a["factor_"] for a in f["dim_prop_attr"]])


def test_scatter_marks_its_output_node_as_the_value_tensor(tmp_path):
    """index_put(x, (i,), v): x, v fp32 [6,40] / [3,40], device [2,6,32] / [2,3,32] (stick
    columns outer, rows at a 32-element pitch). The scatter (op 2) iterates v: mb = the
    gathered row (synthetic, N_ 1), x = v's row (3), out = the column (40, two sticks)."""
    out = _build(tmp_path, lambda m, x, i, v: torch.index_put(x, (i,), v),
                 (torch.randn(6, 40), I([4, -1, 0]), torch.randn(3, 40)), cores=2)
    key, wrapper, dsc = _dsc(out, 2)
    assert key == "2_identity"
    assert dsc["N_"] == {"name_": "n", "mb_": 1, "x_": 3, "out_": 40}
    assert wrapper["numWkSlicesPerDim_"] == {"mb": 1, "x": 1, "out": 1}
    index, value, dest = dsc["scheduleTree_"]
    assert dsc["computeOp_"][0]["inputLabeledDs"] == ["Tensor1-idx1"]
    assert dsc["computeOp_"][0]["outputLabeledDs"] == ["Tensor2-idx2"]
    assert dsc["computeOp_"][0]["indirectAccessIndexLabeledDs"] == ["Tensor0-idx0"]
    assert dsc["computeOp_"][0]["attributes_"]["scatter"] == "assign"
    # the index tensor: KERNEL_IDX, SENUINT32, pointing at the destination it addresses
    assert (index["indirectAllocType_"], index["relatedIndirectAccessAlloc_"],
            index["indexTensorType_"]) == ("index_tensor", "allocate-Tensor2_hbm", "index")
    assert dsc["labeledDs_"][0]["dsType_"] == "KERNEL_IDX"
    assert dsc["labeledDs_"][0]["dataFormat_"] == "SENUINT32"
    assert dsc["labeledDs_"][0]["memOrg_"] == {"hbm": {"isPresent": 1}}
    # the source is an ordinary input
    assert value["indirectAllocType_"] == "no_indirection"
    # the destination: a value tensor, rows through Tensor0 (6 rows, pitch 32 elements: one
    # row per stick, 6 rows -> back gap 6 - N_ 1 = 5), columns in two sticks at 6*32
    assert (dest["indirectAllocType_"], dest["relatedIndirectAccessAlloc_"]) == \
        ("value_tensor", "allocate-Tensor0_hbm")
    assert dest["indirectDim_"] == {"Tensor0": {"dim": "mb", "size": 6}}
    assert dest["layoutDimOrder_"] == ["mb", "out", "x"]
    assert dest["backGapCore_"] == {"mb": {"-1": "5"}}
    assert dsc["primaryDsInfo_"]["OUTPUT"]["layoutDimOrder_"] == ["x", "out", "mb"]
    assert dsc["labeledDs_"][2]["scale_"] == [-1, 1, 1]       # x (v's row) is not a dest dim
    assert _folds(dest, "mb") == ([1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1])
    assert _folds(dest, "out") == ([40, 0, 0, 32, 1], [0] * 5, [1, 1, 1, 2, 32])
    assert _starts(dest) == [_address(out, "index_put")]


def test_a_two_index_gather_has_one_gathered_dim_per_index_tensor(tmp_path):
    """x[i, j] * 2: x fp16 [6,8,64] on device [8,1,6,64] (j's dim outermost, at 6*64, i's
    rows at 64), i [2,1], j [3] -> out [2,3,64]; 2 cores split out's first dim (y)."""
    out = _build(tmp_path, lambda m, x, i, j: x[i, j] * 2,
                 (torch.randn(6, 8, 64).half(), I([[0], [-1]]), I([7, -8, 3])), cores=2)
    key, wrapper, dsc = _dsc(out, 2)
    assert key == "2_mul"
    assert dsc["N_"] == {"name_": "n", "mb_": 1, "x_": 1, "y_": 2, "i_": 3, "out_": 64}
    assert wrapper["numWkSlicesPerDim_"] == {"mb": 1, "x": 1, "y": 2, "i": 1, "out": 1}
    i_node, j_node, x_node, o_node = dsc["scheduleTree_"]
    assert dsc["computeOp_"][0]["indirectAccessIndexLabeledDs"] == \
        ["Tensor0-idx0", "Tensor1-idx1"]
    assert dsc["computeOp_"][0]["inputLabeledDs"] == ["Tensor2-idx2"]
    # two index layouts (i is one value per stick, j has its values in the lanes): the
    # first takes KERNEL_IDX, the second the next free label
    assert [d["dsType_"] for d in dsc["labeledDs_"]] == ["KERNEL_IDX", "OUTPUT", "KERNEL",
                                                         "KERNEL"]
    assert [n["indirectAllocType_"] for n in dsc["scheduleTree_"]] == \
        ["index_tensor", "index_tensor", "value_tensor", "no_indirection"]
    assert x_node["indirectDim_"] == {"Tensor1": {"dim": "x", "size": 8},
                                      "Tensor0": {"dim": "mb", "size": 6}}
    assert x_node["layoutDimOrder_"] == ["out", "mb", "x", "y", "i"]
    assert x_node["backGapCore_"] == {"mb": {"-1": "5"}}      # 6 rows of the i dim
    assert dsc["labeledDs_"][2]["scale_"] == [1, 1, 1, -1, -1]
    assert _starts(x_node) == [_address(out, "args_0")] * 2   # gathered: no core offset
    # the split dim y moves i's index stick and the output by one row (64 el * 2 B)
    assert [a - _starts(i_node)[0] for a in _starts(i_node)] == [0, 128]
    assert [a - _starts(o_node)[0] for a in _starts(o_node)] == [0, 128]
    assert _folds(i_node, "y") == ([1, 0, 0, 1], [0] * 4, [2, 1, 1, 1])


def test_a_move_inside_a_stick_carries_its_lane_shift_in_beta(tmp_path):
    """cat((-x[..., 16:], x[..., :16]), -1) + y, fp32 [2,4,32]: the second half of the cat
    (op 2, a ReStickifyOpHBM) writes lanes 16..31 of each output stick: device [4,1,2,32],
    coordinates [c1, 0, c0, c2 + 16]. Nothing else changes: no start offset, no gap."""
    out = _build(tmp_path, lambda m, x, y: torch.cat((-x[..., 16:], x[..., :16]), -1) + y,
                 (torch.randn(2, 4, 32), torch.randn(2, 4, 32)), cores=2)
    key, wrapper, dsc = _dsc(out, 2)
    assert key == "2_ReStickifyOpHBM"
    assert dsc["N_"] == {"name_": "n", "mb_": 2, "x_": 4, "y_": 16, "out_": 1}
    assert wrapper["numWkSlicesPerDim_"] == {"mb": 2, "x": 1, "y": 1, "out": 1}
    src, dst = dsc["scheduleTree_"]
    assert dsc["primaryDsInfo_"]["KERNEL"] == {"layoutDimOrder_": ["y", "mb", "x", "out"],
                                               "stickDimOrder_": ["y"], "stickSize_": [32]}
    assert dsc["labeledDs_"][1]["dsType_"] == "KERNEL"
    # the shift: coordinate of y = 16*core + 32*stick + lane + 16
    assert _folds(dst, "y") == ([16, 0, 0, 32, 1], [0, 0, 0, 0, 16], [1, 1, 1, 1, 32])
    assert "backGapCore_" not in dst
    assert _starts(dst) == [_address(out, "cat"), _address(out, "cat") + 128]
    # the source reads x's first 16 elements (x on device [4,32,1,2,32]: one value per stick)
    assert _folds(src, "y") == ([16, 0, 0, 1], [0] * 4, [1, 1, 1, 16])
    assert src["backGapCore_"] == {"y": {"-1": "16"}}
    assert _starts(src) == [_address(out, "args_0"), _address(out, "args_0") + 128]
