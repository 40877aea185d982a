"""Looped bundles with symbolic start addresses (tiling contract §2–3): the simulator binds the
symbols per execution, proves every core's start and every tile window, and counts each
execution in the cost.

The program is (a + b) * c on fp16 [256, 512] (device [8, 256, 64], element strides 16384,
64, 1), compiled untiled on 4 cores (rows split) and rewritten by tests/sim/looped.py into a
2 x 2 loop nest: outer over rows (128 per tile), inner over columns (256 = 4 sticks per
tile). A tile advances 2 * 128 * 64 = 16384 bytes per row tile and 2 * 4 * 16384 = 131072
bytes per column tile; core c of a tile starts 2 * 32 * 64 * c = 4096 * c bytes further.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from spyrec.errors import InputFileError, SimulatorFault
from spyrec.sim import simulate
from spyrec.sim.directory import read_output_dir
from tests.programs import Lambda, compile_pt2, export
from tests.sim.looped import tile_directory
from tests.sealing import seal

SHAPE = (256, 512)
TENSOR_BYTES = 256 * 512 * 2          # 262,144: every tensor is whole sticks


@pytest.fixture(scope="module")
def untiled(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("looped")
    xs = tuple(torch.randn(*SHAPE, dtype=torch.float16) for _ in range(3))
    return compile_pt2(export(tmp, Lambda(lambda m, a, b, c: (a + b) * c), xs, "p"),
                       tmp / "out", sets=["work_division.cores=4",
                                          # intermediates in HBM: the tests place them
                                          "scratchpad_planning.intermediates=false"])


@pytest.fixture
def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(8)
    return {f"args_{i}": rng.standard_normal(SHAPE).astype(np.float16) for i in range(3)}


def eager(inputs) -> np.ndarray:
    a, b, c = (inputs[f"args_{i}"].astype(np.float32) for i in range(3))
    return ((a + b).astype(np.float16).astype(np.float32) * c).astype(np.float16)


def looped(untiled: Path, tmp_path: Path, **kw) -> Path:
    return tile_directory(untiled, tmp_path / "looped", {"mb": 2, "out": 2}, **kw).path


def edit_json(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    ((_, wrapper),) = doc.items()
    ((_, dsc),) = wrapper["dscs_"][0].items()
    edit(wrapper, dsc)
    path.write_text(json.dumps(doc))


def test_looped_program_equals_eager_and_moves_each_tile_once(untiled, tmp_path, inputs):
    path = looped(untiled, tmp_path)
    assert "symbol_ids = [-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12]" in (
        path / "bundle.mlir").read_text()
    assert "(s0 + 16384*d0 + 131072*d1)" in (path / "bundle.mlir").read_text()
    result = simulate(path, inputs)
    assert np.array_equal(result.outputs[0], eager(inputs))
    totals = result.cost["totals"]
    assert totals["executions"] == 8 and [r["executions"] for r in result.cost["ops"]] == [4, 4]
    # each execution moves its tile: add reads a, b and writes y; mul reads y, c, writes z
    tile = TENSOR_BYTES // 4
    assert [r["hbm_read_bytes"] for r in result.cost["ops"]] == [2 * tile, 2 * tile]
    assert totals["hbm_read_bytes"] == 4 * 4 * tile == 4 * TENSOR_BYTES
    assert totals["hbm_write_bytes"] == 2 * TENSOR_BYTES
    assert totals["lx_read_bytes"] == totals["lx_write_bytes"] == 0


def test_untiled_and_looped_cost_the_same_bytes(untiled, tmp_path, inputs):
    flat = simulate(untiled, inputs).cost["totals"]
    tiled = simulate(looped(untiled, tmp_path), inputs).cost["totals"]
    assert (flat["hbm_read_bytes"], flat["hbm_write_bytes"]) == (
        tiled["hbm_read_bytes"], tiled["hbm_write_bytes"]) == (4 * TENSOR_BYTES, 2 * TENSOR_BYTES)


def test_executions_carry_symbols_and_loop_indices(untiled, tmp_path):
    program = read_output_dir(looped(untiled, tmp_path))
    executes = [ex for _, ex in program.trace]
    assert [(ex.file, ex.loop) for ex in executes[:4]] == [
        ("sdsc_0.json", (("i_0", 0), ("i_1", 0))), ("sdsc_1.json", (("i_0", 0), ("i_1", 0))),
        ("sdsc_0.json", (("i_0", 0), ("i_1", 1))), ("sdsc_1.json", (("i_0", 0), ("i_1", 1)))]
    assert executes[7].iteration() == "i_0=1, i_1=1"
    assert executes[0].symbol_ids == tuple(range(-1, -13, -1))     # a, b, y: 4 cores each
    # operand k is symbol -(k+1): args_0 (at 0) core k at i_0=1, i_1=1
    assert executes[6].operands[:4] == tuple(16384 + 131072 + 4096 * k for k in range(4))
    assert executes[6].operands[4] == TENSOR_BYTES + 16384 + 131072          # args_1, core 0
    add = program.ops["sdsc_0.json"]
    assert [a.name for a in add.args] == ["args_0", "args_1", "add"]
    assert add.args[0].symbols == (-1, -2, -3, -4)
    assert add.args[0].core_origin_bytes == (0, 4096, 8192, 12288)
    assert add.args[0].span_bytes == 2 * (3 * 16384 + 127 * 64 + 64)   # 4 sticks x 128 rows


def test_bundle_symbol_ids_must_match_the_file(untiled, tmp_path):
    path = looped(untiled, tmp_path)
    text = (path / "bundle.mlir").read_text()
    (path / "bundle.mlir").write_text(text.replace("symbol_ids = [-1, -2, -3, -4,",
                                                   "symbol_ids = [-2, -1, -3, -4,"))
    seal(path)
    with pytest.raises(InputFileError, match=r"bundle.mlir:\d+:\d+: sdsc_execute of sdsc_0.json "
                                             r"\(add 'add'.*binds symbol_ids \[-2, -1, -3, -4, .*"
                                             r"but the file's symbolic start addresses use "
                                             r"\[-1, -2, -3, -4, "):
        read_output_dir(path)


def test_a_wrong_symbol_id_in_the_file(untiled, tmp_path):
    """Core 2 of args_1 refers to an id no execute binds."""
    path = looped(untiled, tmp_path)
    edit_json(path / "sdsc_0.json", lambda w, d: d["scheduleTree_"][1][
        "startAddressCoreCorelet_"]["data_"].update({"[2, 0, 0]": "-99"}))
    seal(path)
    with pytest.raises(InputFileError, match=r"sdsc_0.json .* use \[-1, -2, -3, -4, -5, -6, "
                                             r"-99, -8, "):
        read_output_dir(path)


def test_symbol_ids_count_must_match_operands(untiled, tmp_path):
    path = looped(untiled, tmp_path)
    text = (path / "bundle.mlir").read_text()
    (path / "bundle.mlir").write_text(text.replace("symbol_ids = [-1, -2, -3, -4,",
                                                   "symbol_ids = [-1, -2, -3,"))
    seal(path)
    # the dialect's verifier (codegen's) or the interpreter, whichever reads it first
    with pytest.raises(InputFileError, match="12 operands but 11 symbol_ids|11 symbol_ids for "
                                             "12 operands"):
        read_output_dir(path)


def test_a_core_symbol_off_by_one_stick_is_named_with_its_iteration(untiled, tmp_path,
                                                                        inputs):
    """%sym_7 (core 2 of args_1 in sdsc_0) one stick off: only that core's start is wrong."""
    path = looped(untiled, tmp_path)
    text = (path / "bundle.mlir").read_text()
    assert "%sym_7 = arith.constant 270336 : index" in text
    (path / "bundle.mlir").write_text(text.replace("%sym_7 = arith.constant 270336",
                                                   "%sym_7 = arith.constant 270464"))
    seal(path)
    with pytest.raises(SimulatorFault, match=(
            r"sdsc_0.json \(add 'add'.*\) at iteration i_0=0, i_1=0 \(.*bundle.mlir:\d+:\d+\): "
            r"arg 'args_1': core 2 starts at 270464 \(symbol id -7\), but its slice of the "
            r"tile that core 0 starts at 262144 begins at 270336")):
        simulate(path, inputs)


def test_a_map_stride_that_overruns_on_the_last_iteration(untiled, tmp_path, inputs):
    """1.5 column tiles per step: iteration (0, 1) of `add` runs past the end of args_0."""
    path = looped(untiled, tmp_path)
    text = (path / "bundle.mlir").read_text()
    (path / "bundle.mlir").write_text(text.replace("131072*d1", "196608*d1"))
    seal(path)
    with pytest.raises(SimulatorFault, match=(
            r"sdsc_0.json \(add 'add'.*\) at iteration i_0=0, i_1=1 .*: arg 'args_0': the tile "
            r"window \[196608, 311296\) leaves tensor 'args_0' \[0, 262144\): it runs 49152 "
            r"bytes past its end")):
        simulate(path, inputs)


def test_one_trip_too_many_never_lands_in_the_neighbour(untiled, tmp_path, inputs):
    """A third column tile of args_0 would start exactly on args_1: named, not written."""
    path = looped(untiled, tmp_path)
    text = (path / "bundle.mlir").read_text()
    (path / "bundle.mlir").write_text(text.replace("%loop_bound_1 = arith.constant 2",
                                                   "%loop_bound_1 = arith.constant 3"))
    seal(path)
    with pytest.raises(SimulatorFault, match=(
            r"at iteration i_0=0, i_1=2 .*arg 'args_0': the tile window \[262144, 376832\) "
            r"leaves tensor 'args_0' \[0, 262144\): it starts 0 bytes past its end")):
        simulate(path, inputs)


def test_a_misaligned_tile_start(untiled, tmp_path, inputs):
    path = looped(untiled, tmp_path)
    text = (path / "bundle.mlir").read_text()
    (path / "bundle.mlir").write_text(text.replace("16384*d0", "16448*d0"))
    seal(path)
    with pytest.raises(SimulatorFault, match=r"at iteration i_0=1, i_1=0 .*arg 'args_0': the "
                                             r"tile starts at 16448, not on a 128-byte stick"):
        simulate(path, inputs)


def test_spyrec_run_reports_the_overrun_in_one_line(untiled, tmp_path, inputs):
    path = looped(untiled, tmp_path)
    text = (path / "bundle.mlir").read_text()
    (path / "bundle.mlir").write_text(text.replace("131072*d1", "196608*d1"))
    seal(path)
    np.savez(tmp_path / "in.npz", **inputs)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    env.pop("SPYREC_DEBUG", None)
    run = subprocess.run([sys.executable, "-m", "spyrec", "run", str(path), "--inputs",
                          str(tmp_path / "in.npz"), "-q"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()   # -q: no progress lines on a slow machine
    assert len(lines) == 1 and "Traceback" not in run.stderr
    assert "sdsc_0.json (add 'add'" in lines[0] and "i_0=0, i_1=1" in lines[0]
    assert "tensor 'args_0'" in lines[0]
    assert not (path / "outputs.npz").exists()


def test_operands_without_symbols_are_refused(untiled, tmp_path):
    """An untiled op executed with operands but no symbol_ids binds nothing: refused."""
    path = tmp_path / "flat"
    shutil.copytree(untiled, path)
    text = (path / "bundle.mlir").read_text()
    text = text.replace("  func.func @sdsc_bundle() {",
                        "  func.func @sdsc_bundle() {\n    %x = arith.constant 0 : index")
    text = text.replace('sdsc_execute () {sdsc_filename = "sdsc_0.json"}',
                        'sdsc_execute (%x) {sdsc_filename = "sdsc_0.json"}')
    (path / "bundle.mlir").write_text(text)
    seal(path)
    with pytest.raises(InputFileError, match="passes 1 operands without symbol_ids, but the "
                                             "file has 0 symbolic start addresses"):
        read_output_dir(path)
