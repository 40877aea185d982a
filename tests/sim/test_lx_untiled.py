"""Untiled intermediates in LX (scratchpad_planning beyond loop bodies, issue 10 §1), proven
by the simulator: the compiled plan equals eager and moves only compulsory HBM bytes, and
hand-broken plans (two live tensors sharing bytes, a consumer whose cores read slices other
cores wrote) are caught by name.

Program: z = ((a + b) * c) + a on fp16 [256, 512] (device [8, 256, 64], 262,144 bytes), on 4
cores split by rows: each core's slice of y = a + b or w = y * c is 64 rows x 8 sticks =
65,536 bytes. y dies at op 1 (mul), which writes w elementwise from it: w takes y's slot
(offset 0) in place.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from spyrec.errors import SimulatorFault
from spyrec.sim import simulate
from tests.programs import Lambda, compile_pt2, export
from tests.sealing import seal

SHAPE = (256, 512)
TENSOR_BYTES = 256 * 512 * 2
PER_CORE = TENSOR_BYTES // 4


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("lxflat")
    xs = tuple(torch.randn(*SHAPE, dtype=torch.float16) for _ in range(3))
    return compile_pt2(export(tmp, Lambda(lambda m, a, b, c: (a + b) * c + a), xs, "p"),
                       tmp / "out", sets=["work_division.cores=4",
                                          # `a` is read twice: keep it an input here (staging
                                          # it is tests/passes/test_stage_inputs.py's subject)
                                          "stage_inputs.enabled=false",
                                          # one-op files: the tests edit their LX fields
                                          "fusion.enabled=false"])


@pytest.fixture
def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {f"args_{i}": rng.standard_normal(SHAPE).astype(np.float16) for i in range(3)}


def eager(inputs) -> np.ndarray:
    a, b, c = (inputs[f"args_{i}"].astype(np.float32) for i in range(3))
    f16 = lambda x: x.astype(np.float16).astype(np.float32)  # noqa: E731
    return (f16(f16(a + b) * c) + a).astype(np.float16)


def copy(compiled: Path, tmp_path: Path) -> Path:
    out = tmp_path / "broken"
    shutil.copytree(compiled, out)
    return out


def test_the_plan_equals_eager_and_intermediates_never_touch_hbm(compiled, inputs):
    manifest = json.loads((compiled / "manifest.json").read_text())
    lx = {t["name"]: (t["hbm_address"], t["lx_address"], t["lx_bytes_per_core"])
          for t in manifest["tensors"] if t.get("lx_address") is not None}
    assert lx == {"add": (None, 0, PER_CORE), "mul": (None, 0, PER_CORE)}
    report = json.loads((compiled / "report.json").read_text())
    rows = {r["buffer"]: r for r in report["scratchpad"]["buffers"]}
    assert rows["mul"]["in_place_of"] == "add" and "in_place_of" not in rows["add"]
    result = simulate(compiled, inputs)
    assert np.array_equal(result.outputs[0], eager(inputs))
    totals = result.cost["totals"]
    # a read twice (add, add_1), b and c once, z written once: y and w only in LX
    assert totals["hbm_read_bytes"] == 4 * TENSOR_BYTES
    assert totals["hbm_write_bytes"] == TENSOR_BYTES
    assert (totals["lx_read_bytes"], totals["lx_write_bytes"]) == (2 * TENSOR_BYTES,
                                                                   2 * TENSOR_BYTES)


def _move_lx(path: Path, name: str, offset: int) -> None:
    """Put LX tensor `name` at `offset` in the manifest and in every file's LX node of it."""
    manifest = json.loads((path / "manifest.json").read_text())
    for t in manifest["tensors"]:
        if t["name"] == name:
            t["lx_address"] = offset
    (path / "manifest.json").write_text(json.dumps(manifest))
    seal(path)
    for file, args in manifest["lx_args"].items():
        doc = json.loads((path / file).read_text())
        ((_, wrapper),) = doc.items()
        ((_, dsc),) = wrapper["dscs_"][0].items()
        for i, arg_name in args.items():
            if arg_name == name:
                node = dsc["scheduleTree_"][int(i)]
                node["startAddressCoreCorelet_"]["data_"] = {
                    k: str(offset) for k in node["startAddressCoreCorelet_"]["data_"]}
        (path / file).write_text(json.dumps(doc))
        seal(path)


def test_two_live_lx_tensors_sharing_bytes_are_refused(compiled, tmp_path, inputs):
    path = copy(compiled, tmp_path)
    _move_lx(path, "mul", 128)
    with pytest.raises(SimulatorFault, match=r"LX tensors 'add' \[0, 65536\) and 'mul' "
                                             r"\[128, 65664\) overlap in every core's LX while "
                                             r"both hold a value \(executions 0\.\.1 and 1\.\.2\)"):
        simulate(path, inputs)


def test_a_core_reading_another_cores_slice_is_caught(compiled, tmp_path, inputs):
    """mul runs add's rows 64..127 on core 2 and 128..191 on core 1 (its HBM start addresses
    follow the swap): core 2's LX holds add's rows 128..191, which only the LX read notices."""
    path = copy(compiled, tmp_path)
    doc = json.loads((path / "sdsc_1.json").read_text())
    ((_, wrapper),) = doc.items()
    slices = wrapper["coreIdToWkSlice_"]
    slices["1"], slices["2"] = slices["2"], slices["1"]
    ((_, dsc),) = wrapper["dscs_"][0].items()
    for node in dsc["scheduleTree_"]:
        if node.get("component_") == "hbm":
            data = node["startAddressCoreCorelet_"]["data_"]
            data["[1, 0, 0]"], data["[2, 0, 0]"] = data["[2, 0, 0]"], data["[1, 0, 0]"]
    (path / "sdsc_1.json").write_text(json.dumps(doc))
    seal(path)
    with pytest.raises(SimulatorFault, match=r"sdsc_1.json \(mul 'mul'.*core 2 reads LX arg "
                                             r"'add'.*split the tile over the cores differently"):
        simulate(path, inputs)
