"""Fused SuperDSCs, simulated (issue 58): the same programs compiled with fusion on and off
give the same outputs bit for bit (the members run in order, as their one-op files would),
`fusion.enabled=false` writes the files of the pipeline without the pass byte for byte, a
fused intermediate has no HBM address, and the cost model times a group as concurrent unit
streams: the slowest of PT, SFP and memory plus a pipeline fill, or the one-op sum at
`cost.unit_overlap=0`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyrec.costmodel import DEFAULT_PARAMS, CostParams, fused_us
from spyrec.sim import simulate
from tests.differential.harness import host_array
from tests.programs import Lambda, compile_pt2, export, load_json

OFF = ["fusion.enabled=false"]


def _on_off(tmp: Path, module, inputs, sets=(), name: str = "model") -> tuple[Path, Path]:
    """`module` compiled with fusion on and off (same `sets` besides); their outputs equal
    exactly (NaN where NaN)."""
    pt2 = export(tmp, module, inputs, name)
    on = compile_pt2(pt2, tmp / f"{name}_on", sets=list(sets))
    off = compile_pt2(pt2, tmp / f"{name}_off", sets=list(sets) + OFF)
    names = load_json(on / "manifest.json")["inputs"]
    feed = {n: host_array(t) for n, t in zip(names, inputs)}
    a, b = simulate(on, feed).outputs, simulate(off, feed).outputs
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), k
    return on, off


def _fused_files(out: Path) -> dict[str, dict]:
    docs = {p.name: json.loads(p.read_text()) for p in sorted(out.glob("sdsc_*.json"))}
    return {n: next(iter(d.values())) for n, d in docs.items()
            if next(iter(d)).endswith("_fused")}


class Linear(torch.nn.Module):
    """x @ w + b, then GELU: a matmul and its epilogue."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(256, 256, generator=g) / 16)
        self.b = torch.nn.Parameter(torch.randn(256, generator=g))

    def forward(self, x):
        return F.gelu(x @ self.w + self.b)


def test_a_matmul_bias_gelu_is_one_file_of_three_compute_ops(tmp_path):
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    on, off = _on_off(tmp_path, Linear(), (x,))
    (fused,) = _fused_files(on).values()
    assert [(c["exUnit"], c["opFuncName"]) for c in fused["computeOp_"]] == \
        [("pt", "batchmatmul"), ("sfp", "add"), ("sfp", "gelufwd")]
    assert len(list(on.glob("sdsc_*.json"))) == len(list(off.glob("sdsc_*.json"))) - 2
    report = load_json(on / "report.json")
    (row,) = report["fusion"]
    # the matmul's and the add's fp32 [64, 256] outputs, written and read once each: 256 KiB
    assert row["units"] == ["pt", "sfp", "sfp"] and row["hbm_bytes_kept"] == 4 * 64 * 256 * 4
    tensors = {t["name"]: t for t in load_json(on / "manifest.json")["tensors"]}
    assert all(tensors[b]["hbm_address"] is None and tensors[b]["lx_address"] is not None
               for b in row["kept"])
    # the HBM traffic is the unfused program's (scratchpad_planning keeps these in LX either
    # way); the time is the slowest stream plus the fill, not the sum
    cost_on, cost_off = report["cost"]["totals"], load_json(off / "report.json")["cost"]["totals"]
    assert cost_on["hbm_read_bytes"] == cost_off["hbm_read_bytes"]
    (group,) = report["cost"]["fused"]
    streams = {k: group[f"{k}_us"] for k in ("pt", "sfp", "memory")}
    assert group["time_us"] == pytest.approx(min(max(streams.values()) + group["fill_us"],
                                                 group["serial_us"]), abs=1e-5)
    assert group["time_us"] < group["serial_us"]
    assert cost_on["time_us"] == pytest.approx(
        cost_off["time_us"] - group["serial_us"] + group["time_us"], abs=1e-4)


def test_the_fused_time_by_hand():
    """PT 30 µs, SFP 12, memory 5: concurrent 30 plus the fill while the first FIFO (16
    sticks of 64 lanes, 1,024 points of the 8,192: 1/8 of the work) passes the SFP and the
    memory stream, (12 + 5) / 8 = 2.125 µs; at unit_overlap 0 the one-op sum, 40; at 0.5
    their mean."""
    units = {"pt": 30.0, "sfp": 12.0, "memory": 5.0}
    assert fused_us(units, 40.0, 8192)["time_us"] == pytest.approx(32.125)
    assert fused_us(units, 40.0, 8192, CostParams(unit_overlap=0.0))["time_us"] == 40.0
    assert fused_us(units, 40.0, 8192, CostParams(unit_overlap=0.5))["time_us"] == \
        pytest.approx((32.125 + 40) / 2)
    # a group too small to pipeline: one piece, the fill is the whole of the other streams,
    # and the time never exceeds the serial sum
    assert fused_us(units, 40.0, 100)["time_us"] == 40.0
    assert DEFAULT_PARAMS.unit_overlap == 1.0


def test_unit_overlap_zero_prices_the_fused_program_as_the_unfused_one(tmp_path):
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(2))
    pt2 = export(tmp_path, Linear(), (x,))
    serial = compile_pt2(pt2, tmp_path / "serial", sets=["cost.unit_overlap=0"])
    off = compile_pt2(pt2, tmp_path / "off", sets=OFF)
    a = load_json(serial / "report.json")["cost"]["totals"]
    b = load_json(off / "report.json")["cost"]["totals"]
    assert a["time_us"] == pytest.approx(b["time_us"], abs=1e-4)
    assert load_json(serial / "manifest.json")["cost_params"] == {"unit_overlap": 0.0}


def test_disabled_writes_the_files_of_the_pipeline_without_the_pass(tmp_path):
    from samples.models import SAMPLES
    from spyrec.passes.pipeline import DEFAULT_PIPELINE

    stages = [line for line in DEFAULT_PIPELINE.read_text().splitlines()
              if "pass: fusion" not in line]
    (tmp_path / "nofusion.yaml").write_text("\n".join(stages) + "\n")
    module, inputs = SAMPLES["decoder_fp32"]()
    pt2 = export(tmp_path, module, inputs, "dec")
    off = compile_pt2(pt2, tmp_path / "off", sets=OFF)
    without = compile_pt2(pt2, tmp_path / "without", pipeline=tmp_path / "nofusion.yaml")
    names = sorted(p.name for p in off.iterdir() if p.name.startswith("sdsc_"))
    assert names and names == sorted(p.name for p in without.iterdir()
                                     if p.name.startswith("sdsc_"))
    for name in names + ["bundle.mlir", "opspecs.json"]:
        assert (off / name).read_bytes() == (without / name).read_bytes(), name


@pytest.mark.parametrize("sample", ["mlp_fp16", "attention_fp32", "layernorm_fp16",
                                    "decoder_fp32", "add_mul_fp16"])
def test_samples_fused_equal_unfused(tmp_path, sample):
    from samples.models import SAMPLES

    module, inputs = SAMPLES[sample]()
    on, _ = _on_off(tmp_path, module, inputs, name=sample)
    if sample != "add_mul_fp16":    # its ops read program inputs only (nothing in LX)
        assert _fused_files(on)


def test_flash_attention_tile_body_is_fused(tmp_path):
    """The online-softmax body inside the K/V loop becomes one fused SuperDSC per trip."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 64, generator=g).to(torch.float16) for _ in range(3))
    sdpa = Lambda(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    sets = ["flash_attention.mode=always", "flash_attention.query_tile=64",
            "flash_attention.key_tile=64"]
    on, _ = _on_off(tmp_path, sdpa, (q, k, v), sets)
    units = [[c["exUnit"] for c in f["computeOp_"]] for f in _fused_files(on).values()]
    body = max(units, key=len)
    assert body.count("pt") == 2 and body.count("sfp") >= 4      # QK^T and PV, the softmax
    assert "scf.for" in (on / "bundle.mlir").read_text()


_UNARY = ["exp", "tanh", "sigmoid", "relu", "neg", "silu", "gelu", "abs"]
_BINARY = ["add", "mul", "sub", "max"]


def _chain(steps: list[tuple[str, str]], matmul: bool):
    def fn(m, x, y, w):
        h = x @ w if matmul else x
        for kind, name in steps:
            if kind == "u":
                h = getattr(torch, name)(h) if name not in ("relu", "silu", "gelu") else \
                    getattr(F, name)(h)
            elif name == "max":
                h = torch.maximum(h, y)
            else:
                h = getattr(torch, name)(h, y)
        return h
    return Lambda(fn)


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(st.tuples(st.just("u"), st.sampled_from(_UNARY)),
                                st.tuples(st.just("b"), st.sampled_from(_BINARY))),
                      min_size=1, max_size=5),
       matmul=st.booleans(), dtype=st.sampled_from([torch.float32, torch.float16]),
       rows=st.sampled_from([32, 64, 100]))
def test_random_chains_fused_equal_unfused(tmp_path_factory, steps, matmul, dtype, rows):
    """Pointwise chains, alone or as a matmul's epilogue, fused and not: the same bits."""
    tmp = tmp_path_factory.mktemp("chain")
    g = torch.Generator().manual_seed(len(steps))
    x = torch.randn(rows, 128, generator=g).to(dtype)
    y = torch.randn(rows, 128, generator=g).to(dtype)
    w = (torch.randn(128, 128, generator=g) / 12).to(dtype)
    _on_off(tmp, _chain(steps, matmul), (x, y, w))


def test_the_compiler_prices_a_group_as_the_simulator_does(tmp_path):
    """plan/fusion.py `fused_estimate_us` (from the IR, before any file) and the report's
    `cost.fused` row (from the files) give the fused matmul + bias + GELU the same time,
    at full overlap and serialized."""
    from spyrec.ir.parser import parse
    from spyrec.plan.fusion import fused_estimate_us, fusion_groups

    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(3))
    pt2 = export(tmp_path, Linear(), (x,))
    for overlap in (1.0, 0.0):
        out = compile_pt2(pt2, tmp_path / f"o{overlap}", sets=[f"cost.unit_overlap={overlap}"],
                          print_ir_after_all=tmp_path / f"ir{overlap}")
        text = next((tmp_path / f"ir{overlap}").glob("*_fusion.ir")).read_text()
        graph = parse(text)
        (group,) = fusion_groups(graph)
        mine = fused_estimate_us(graph, group.ops, CostParams(unit_overlap=overlap))
        (row,) = load_json(out / "report.json")["cost"]["fused"]
        assert mine["time_us"] == pytest.approx(row["time_us"], rel=1e-3)
        assert {k: mine[k] for k in ("pt", "sfp", "memory")} == pytest.approx(
            {k: row[f"{k}_us"] for k in ("pt", "sfp", "memory")}, rel=1e-3, abs=1e-4)


@pytest.mark.parametrize("edit, message", [
    (lambda w: w["computeOp_"][1].update(exUnit="pt"),
     r"at \$.0_fused.computeOp_\[1\]: says .* its member's computeOp_ says"),
    (lambda w: w["computeOp_"][2].update(fusedDsc_=1),
     r"at \$.0_fused.computeOp_\[2\].fusedDsc_: 1: compute ops name their members in order"),
    (lambda w: w["computeOp_"].pop(),
     r"at \$.0_fused.computeOp_: 2 compute ops for 3 members"),
    (lambda w: next(iter(w["fusedDscs_"][1].values())).update(numCoresUsed_=7),
     r"at \$.0_fused.fusedDscs_\[1\]: member runs on 7 cores, the fused SuperDSC on 32"),
    (lambda w: (lambda m: m["coreIdToWkSlice_"].update({"1": m["coreIdToWkSlice_"]["0"]}))(
        next(iter(w["fusedDscs_"][2].values()))),
     r"at \$.0_fused.fusedDscs_\[2\].0_gelufwd.coreIdToWkSlice_: two cores run the same "
     r"slice"),
])
def test_an_edited_fused_file_is_reported(tmp_path, edit, message):
    """The fused form's own fields are checked, and a member's by the one-op reader, each
    named by its path in the file."""
    from spyrec.errors import InputFileError
    from tests.sealing import seal

    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(4))
    out = compile_pt2(export(tmp_path, Linear(), (x,)), tmp_path / "out")
    path = out / "sdsc_0.json"
    doc = json.loads(path.read_text())
    edit(doc["0_fused"])
    path.write_text(json.dumps(doc))
    seal(out)
    with pytest.raises(InputFileError, match=message):
        simulate(out, {"x": x.numpy()})
