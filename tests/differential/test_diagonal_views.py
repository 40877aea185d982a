"""Diagonal views under the device layout, compiled to SuperDSC and simulated against eager.

A diagonal reads element (i, i + k): its stick variable is also its row, which no SuperDSC
dim can say, so superdsc_legalize fixes the variable modulo the stick (`c0 = E·c1 + j`, one
op per lane j). Each piece reads one constant lane of every stick: a size-1 stick dim whose
coordinate starts at lane j (`beta_`). The numbers here are derived from that: E ops for a
diagonal whose length E divides, one per element when nothing divides.
"""

import json

import pytest
import torch

from spyrec.errors import UnsupportedProgram
from tests.differential.harness import run_and_compare
from tests.programs import Lambda, compile_pt2, export, load_json, op_documents

DEFAULT = ["stick_layout.input_layouts=default"]


def r(*shape, dtype=torch.float16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _input_node(out, n: int) -> dict:
    """Op n's input node (its file's, or its member's in a fused file)."""
    ((_, body),) = op_documents(out)[n].items()
    ((_, dsc),) = body["dscs_"][0].items()
    return dsc, dsc["scheduleTree_"][0]


@pytest.mark.parametrize("shape, offset, dtype, pieces, per_piece", [
    ((512, 512), 0, torch.float16, 64, [("c1", 8)]),     # 512 = 64 lanes x 8 sticks
    ((288, 256), -32, torch.float32, 32, [("c1", 8)]),   # 256 = 32 lanes x 8
    ((40, 40), 0, torch.float16, 40, []),                # 40 < 64: one op per element
])
def test_a_diagonal_is_one_op_per_lane(shape, offset, dtype, pieces, per_piece, tmp_path):
    out = run_and_compare(tmp_path, Lambda(lambda m, x: torch.diagonal(x, offset) * 2),
                          (r(*shape, dtype=dtype),), sets=DEFAULT)
    (row,) = load_json(out / "report.json")["superdsc_legalize"]["list"]
    assert row["ops"] == pieces
    assert row["rewrite"].startswith(f"{pieces} op(s) over "
                                     f"[{', '.join(f'{v}<{n}' for v, n in per_piece)}]")
    for j in (1, 5, pieces - 1):
        dsc, node = _input_node(out, j)
        lanes = {d: i["folds"]["dim_prop_func"][-1]["Affine"]["beta_"]
                 for d, i in node["coordinates_"]["coordInfo"].items() if i["elemArr"] == 2}
        # piece j reads lane j of every stick: a size-1 stick dim starting at lane j
        (stick,) = [d for d, beta in lanes.items() if beta]
        assert lanes[stick] == j and dsc["N_"][f"{stick}_"] == 1


def test_a_diagonal_too_long_to_split_is_refused_naming_the_op(tmp_path):
    pt2 = export(tmp_path, Lambda(lambda m, x: torch.diagonal(x) * 2), (r(200, 200),))
    with pytest.raises(UnsupportedProgram, match=r"no SuperDSC form found for op args_0__view "
                       r"\(.*\): the stick variable c0 also appears outside its stick .* "
                       r"superdsc_legalize.max_pieces = 128 ops exists; raise it"):
        compile_pt2(pt2, tmp_path / "out", sets=DEFAULT)
    assert not (tmp_path / "out").exists()
    out = compile_pt2(pt2, tmp_path / "more", sets=DEFAULT + ["superdsc_legalize.max_pieces=200"])
    assert json.loads((out / "report.json").read_text())["sdsc"]["files"] == 201
