"""LX: per-core scratchpads, the manifest's LX plan checked before anything runs, and every
LX read proven to see what that core wrote for that stick of the tile.

Program: z = ((a + b) * c) + a on fp16 [256, 512], compiled on 4 cores (rows split), tiled
2 x 2 by tests/sim/looped.py with y = a + b and w = y * c in LX. One tile is [128, 256] =
65,536 device bytes, so each core's slice of y or w is 16,384 bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from spyrec.device import LX_USABLE_BYTES_PER_CORE
from spyrec.errors import SimulatorFault
from spyrec.sim import simulate
from spyrec.sim.directory import read_output_dir
from tests.programs import Lambda, compile_pt2, export
from tests.sim.looped import loop_bundle, tile_directory
from tests.sealing import seal

SHAPE = (256, 512)
TENSOR_BYTES = 256 * 512 * 2
PER_CORE = 128 * 256 * 2 // 4
COUNTS = {"mb": 2, "out": 2}


@pytest.fixture(scope="module")
def untiled(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("lx")
    xs = tuple(torch.randn(*SHAPE, dtype=torch.float16) for _ in range(3))
    return compile_pt2(export(tmp, Lambda(lambda m, a, b, c: (a + b) * c + a), xs, "p"),
                       tmp / "out", sets=["work_division.cores=4", "stage_inputs.enabled=false",
                                          # intermediates in HBM: the tests place them
                                          "scratchpad_planning.intermediates=false"])


@pytest.fixture
def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(9)
    return {f"args_{i}": rng.standard_normal(SHAPE).astype(np.float16) for i in range(3)}


def eager(inputs) -> np.ndarray:
    a, b, c = (inputs[f"args_{i}"].astype(np.float32) for i in range(3))
    f16 = lambda x: x.astype(np.float16).astype(np.float32)  # noqa: E731
    return (f16(f16(a + b) * c) + a).astype(np.float16)


def in_lx(untiled, tmp_path, y=0, w=PER_CORE):
    return tile_directory(untiled, tmp_path / "looped", COUNTS, lx={"add": y, "mul": w})


def test_intermediates_in_lx_equal_eager_and_never_touch_hbm(untiled, tmp_path, inputs):
    looped = in_lx(untiled, tmp_path)
    manifest = json.loads((looped.path / "manifest.json").read_text())
    lx = {t["name"]: (t["hbm_address"], t["lx_address"], t["lx_bytes_per_core"])
          for t in manifest["tensors"] if t.get("lx_address") is not None}
    assert lx == {"add": (None, 0, PER_CORE), "mul": (None, PER_CORE, PER_CORE)}
    result = simulate(looped.path, inputs)
    assert np.array_equal(result.outputs[0], eager(inputs))
    totals = result.cost["totals"]
    # HBM: a read twice (add, add_1), b and c once, z written once; y and w only in LX
    assert totals["hbm_read_bytes"] == 4 * TENSOR_BYTES
    assert totals["hbm_write_bytes"] == TENSOR_BYTES
    assert totals["lx_write_bytes"] == 2 * TENSOR_BYTES
    assert totals["lx_read_bytes"] == 2 * TENSOR_BYTES
    mul = result.cost["ops"][1]
    assert (mul["lx_read_bytes"], mul["lx_write_bytes"], mul["hbm_read_bytes"]) == (
        4 * PER_CORE, 4 * PER_CORE, 4 * PER_CORE)


def test_lx_accesses_alike_share_their_per_stick_work(untiled, tmp_path, inputs, monkeypatch):
    """Each of the 4 tiles runs add, mul, add_1 again with the same LX accesses: the per-stick
    offsets are worked out once per distinct access (`access._LX_WORK`) and every later
    execution finds them; the base and the tensor's tag stay each binding's own (mul's output
    `mul` and add's `add` are accessed alike at LX offsets PER_CORE and 0: a shared base
    would read the wrong tensor's tags and stop the run). Then a consumer split differently
    is still caught after the memo holds the consistent program's accesses."""
    from spyrec.sim import access

    made = []
    original = access.ChunkAccess._stick_offsets
    monkeypatch.setattr(access, "_LX_WORK", access._Memo(1 << 20))
    monkeypatch.setattr(access.ChunkAccess, "_stick_offsets",
                        lambda self, b: made.append(b.arg.name) or original(self, b))
    looped = in_lx(untiled, tmp_path)
    calls = []
    sticks = access.ChunkAccess.lx_sticks
    monkeypatch.setattr(access.ChunkAccess, "lx_sticks",
                        lambda self, b: calls.append(b.arg.name) or sticks(self, b))
    assert np.array_equal(simulate(looped.path, inputs).outputs[0], eager(inputs))
    assert len(calls) == 4 * 4          # per tile: add writes, mul reads and writes, z reads
    assert 0 < len(made) <= 4 and len(made) < len(calls)
    _swap_cores(looped.path, "sdsc_1.json", 1, 2)       # as in the test below
    symbols = dict(looped.symbols)
    c = list(symbols["sdsc_1.json"])
    c[1], c[2] = (c[1][0], c[2][1], c[1][2]), (c[2][0], c[1][1], c[2][2])
    symbols["sdsc_1.json"] = c
    (looped.path / "bundle.mlir").write_text(
        loop_bundle(["sdsc_0.json", "sdsc_1.json", "sdsc_2.json"], symbols, COUNTS))
    seal(looped.path)
    with pytest.raises(SimulatorFault, match="core 2 reads LX arg 'add'.*holds stick 64 of "
                                             "the tile, not stick 32"):
        simulate(looped.path, inputs)


def test_lx_args_are_read_per_core(untiled, tmp_path):
    program = read_output_dir(in_lx(untiled, tmp_path).path)
    y = program.ops["sdsc_0.json"].output
    assert (y.name, y.lx_offset, y.hbm_address) == ("add", 0, None)
    assert y.layout.device_size == (4, 32, 64)          # one core's 32 rows x 4 sticks
    assert y.coordinate_texts()[1] == "Mod(mb, 32)"          # rows are core-local
    assert y.tile_strides_elems == (128, 1)              # the whole tile: 4 sticks x 128 rows


def test_overlapping_live_lx_tensors_are_refused_before_running(untiled, tmp_path, inputs):
    path = in_lx(untiled, tmp_path, w=128).path
    with pytest.raises(SimulatorFault, match=r"LX tensors 'add' \[0, 16384\) and 'mul' "
                                             r"\[128, 16512\) overlap in every core's LX while "
                                             r"both hold a value \(executions 0\.\.1 and 1\.\.2\)"):
        simulate(path, inputs)


def test_an_lx_offset_past_the_budget(untiled, tmp_path, inputs):
    w = LX_USABLE_BYTES_PER_CORE - 8192
    path = in_lx(untiled, tmp_path, w=w).path
    with pytest.raises(SimulatorFault, match=rf"LX tensor 'mul': bytes \[{w}, {w + PER_CORE}\) "
                                             rf"per core overflow the 1625344 usable bytes"):
        simulate(path, inputs)


def test_the_budget_itself_fits(untiled, tmp_path, inputs):
    path = in_lx(untiled, tmp_path, w=LX_USABLE_BYTES_PER_CORE - PER_CORE).path
    assert np.array_equal(simulate(path, inputs).outputs[0], eager(inputs))


def test_a_misaligned_lx_offset(untiled, tmp_path, inputs):
    path = in_lx(untiled, tmp_path, w=PER_CORE + 64).path
    with pytest.raises(SimulatorFault, match=r"LX tensor 'mul': lx_address 16448 is not "
                                             r"128-byte aligned"):
        simulate(path, inputs)


def _swap_cores(path: Path, name: str, a: int, b: int) -> None:
    doc = json.loads((path / name).read_text())
    ((_, wrapper),) = doc.items()
    slices = wrapper["coreIdToWkSlice_"]
    slices[str(a)], slices[str(b)] = slices[str(b)], slices[str(a)]
    (path / name).write_text(json.dumps(doc))
    seal(path)


def test_a_consumer_split_differently_reads_another_cores_slice(untiled, tmp_path, inputs):
    """mul runs rows 32..63 on core 2 and 64..95 on core 1, add the other way round: core 2's
    LX holds add's rows 64..95. The HBM symbols follow the swap (the bundle is rewritten), so
    only the LX read can notice."""
    looped = in_lx(untiled, tmp_path)
    _swap_cores(looped.path, "sdsc_1.json", 1, 2)
    symbols = dict(looped.symbols)
    c = list(symbols["sdsc_1.json"])           # c's four cores: the only HBM arg of mul
    c[1], c[2] = (c[1][0], c[2][1], c[1][2]), (c[2][0], c[1][1], c[2][2])
    symbols["sdsc_1.json"] = c
    ops = ["sdsc_0.json", "sdsc_1.json", "sdsc_2.json"]
    (looped.path / "bundle.mlir").write_text(loop_bundle(ops, symbols, COUNTS))
    seal(looped.path)
    with pytest.raises(SimulatorFault, match=(
            r"sdsc_1.json \(mul 'mul'.*\) at iteration i_0=0, i_1=0 .*: core 2 reads LX arg "
            r"'add' \(LX tensor 'add' at offset 0\) at .*mb=32.*a stick that holds stick 64 of "
            r"the tile, not stick 32: the op that wrote it split the tile over the cores "
            r"differently")):
        simulate(looped.path, inputs)


def test_reading_lx_before_it_is_written(untiled, tmp_path, inputs):
    """A plan that runs the consumer first: core 0 reads sticks no op wrote."""
    looped = in_lx(untiled, tmp_path)
    ops = ["sdsc_1.json", "sdsc_0.json", "sdsc_2.json"]
    (looped.path / "bundle.mlir").write_text(loop_bundle(ops, looped.symbols, COUNTS))
    seal(looped.path)
    with pytest.raises(SimulatorFault, match=r"sdsc_1.json \(mul 'mul'.*\) at iteration i_0=0, "
                                             r"i_1=0 .*: core 0 reads LX arg 'add' .*a stick "
                                             r"that no op wrote on this core"):
        simulate(looped.path, inputs)


def test_an_lx_offset_no_tensor_has(untiled, tmp_path, inputs):
    looped = in_lx(untiled, tmp_path)
    doc = json.loads((looped.path / "sdsc_2.json").read_text())
    ((_, wrapper),) = doc.items()
    ((_, dsc),) = wrapper["dscs_"][0].items()
    node = next(n for n in dsc["scheduleTree_"] if n["component_"] == "lx")
    node["startAddressCoreCorelet_"]["data_"] = {f"[{c}, 0, 0]": "128" for c in range(4)}
    (looped.path / "sdsc_2.json").write_text(json.dumps(doc))
    seal(looped.path)
    with pytest.raises(SimulatorFault, match=r"sdsc_2.json .*LX arg 'Tensor\d': no LX tensor of "
                                             r"manifest.json has lx_address 128"):
        simulate(looped.path, inputs)
