"""`--check` judges a deep fp16 program like a numerics engineer (issue 28 item 5): a fixed
1e-2 allclose against fp16 eager does not scale with depth, so an output that fails it still
passes when spyrec's error against an fp32 eager run of the same program is no worse than
eager's own (rule 2, spyrec/sim/check.py); a real miscompile deep in the model still fails.

The deep model: 48 layers of `layer_norm(x + tanh(2 * x @ W))`, width 64, in fp16. Rounding
differences grow with depth: spyrec and fp16 eager differ by ~0.1 on dozens of elements
(allclose 1e-2 fails) while both are ~0.1 rms from the fp32 reference.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from spyrec.sim.check import K_MAX, K_RMS, compare, describe_failure, format_checks
from tests.programs import cli, compile_pt2, export, record_source
from tests.sealing import seal

DEPTH, WIDTH, GAIN = 48, 64, 2.0


def _weights(columns: int) -> torch.nn.ParameterList:
    """DEPTH fixed random WIDTH x `columns` weights, scaled to keep activations O(1)."""
    g = torch.Generator().manual_seed(0)
    return torch.nn.ParameterList(
        [torch.nn.Parameter(torch.randn(WIDTH, columns, generator=g) / WIDTH ** 0.5,
                            requires_grad=False) for _ in range(DEPTH)])


class Deep(torch.nn.Module):
    def __init__(self, wrong_layer: int | None = None):
        super().__init__()
        self.ws = _weights(WIDTH)
        self.wrong_layer = wrong_layer

    def forward(self, x):
        for i, w in enumerate(self.ws):
            # the miscompile: one layer deep in the model multiplies by W's transpose
            h = x @ (w.t() if i == self.wrong_layer else w)
            x = torch.nn.functional.layer_norm(x + torch.tanh(GAIN * h), (WIDTH,))
        return x


def _inputs(tmp_path):
    x = torch.randn(32, WIDTH, generator=torch.Generator().manual_seed(1)).half()
    np.savez(tmp_path / "in.npz", x=x.numpy())
    return x


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deep")
    x = _inputs(tmp)
    good = compile_pt2(export(tmp, Deep().half(), (x,), "good"), tmp / "good",
                       self_contained=True)
    wrong = compile_pt2(export(tmp, Deep(wrong_layer=DEPTH - 8).half(), (x,), "wrong"),
                        tmp / "wrong", self_contained=True)
    # spyrec ran the wrong program; --check runs the right one in eager
    record_source(wrong, good / "program.pt2")
    return tmp, good, wrong


def test_deep_fp16_passes_by_the_reference_rule(deep, capsys):
    tmp, good, _ = deep
    code, out, err = cli(capsys, "run", good, "--inputs", tmp / "in.npz", "--check", "-q",
                         "-o", tmp / "good_out.npz")
    assert code == 0, err
    row = out.splitlines()[1]
    assert "ok by reference rule" in row
    mismatches = int(row.split()[6].split("/")[0])
    assert mismatches > 0             # allclose 1e-2 alone would have rejected it
    code, out, err = cli(capsys, "run", good, "--inputs", tmp / "in.npz", "--check", "--json",
                         "-q", "-o", tmp / "good_out.npz")
    (c,) = json.loads(out)["check"]
    assert code == 0 and c["ok"] and c["rule"] == "reference" and c["mismatches"] > 0
    r = c["reference"]
    assert r["rms_err"] > 0.01 and r["rms_err"] <= 1.1 * r["eager_rms_err"]
    assert r["allowed_rms_err"] == K_RMS * r["eager_rms_err"]


def test_a_miscompile_deep_in_the_model_fails_naming_both_errors(deep, capsys):
    tmp, _, wrong = deep
    code, out, err = cli(capsys, "run", wrong, "--inputs", tmp / "in.npz", "--check", "-q",
                         "-o", tmp / "wrong_out.npz")
    assert code == 1
    assert "Traceback" not in err and "MISMATCH: worse than eager vs fp32" in out
    assert "output_0" in err and "vs fp32 reference spyrec rms" in err and "eager rms" in err
    code, out, _ = cli(capsys, "run", wrong, "--inputs", tmp / "in.npz", "--check", "--json",
                       "-q", "-o", tmp / "wrong_out.npz")
    (c,) = json.loads(out)["check"]
    assert code == 1 and not c["ok"] and c["rule"] == "reference"
    assert c["reference"]["rms_err"] > 3 * c["reference"]["allowed_rms_err"]


class Gated(torch.nn.Module):
    """48 layers of `layer_norm(x + tanh(2 * a) * sigmoid(b))`, `a, b = (x @ W).chunk(2)`,
    W 64 x 128: the compiler splits `x @ W` into two column matmuls (`matmul_<i>__cols0_64`
    and `__cols64_128`), each reading one 64-column stick group of W [2, 64, 64]."""

    def __init__(self):
        super().__init__()
        self.ws = _weights(2 * WIDTH)

    def forward(self, x):
        for w in self.ws:
            a, b = (x @ w).chunk(2, dim=-1)
            x = torch.nn.functional.layer_norm(x + torch.tanh(GAIN * a) * torch.sigmoid(b),
                                               (WIDTH,))
        return x


def _shift_weight_read_one_stick(out, op: str, weight: str) -> tuple[int, int]:
    """Move the HBM start address of op `op`'s KERNEL arg one stick (128 bytes) forward, on
    every core, in its `sdsc_<n>.json` (what the simulator executes; opspecs.json, which it
    never reads, keeps the compiled plan). Returns (old start, new start)."""
    manifest = json.loads((out / "manifest.json").read_text())
    (tensor,) = [t for t in manifest["tensors"] if t["name"] == weight]
    (path,) = [p for p in sorted(out.glob("sdsc_*.json"))
               if next(iter(json.loads(p.read_text()).values()))["debug_handle_"]
               .startswith(f"{op} (")]
    doc = json.loads(path.read_text())
    dsc = next(iter(next(iter(doc.values()))["dscs_"][0].values()))
    (i,) = [i for i, lds in enumerate(dsc["labeledDs_"]) if lds["dsType_"] == "KERNEL"]
    node = dsc["scheduleTree_"][i]
    assert node["component_"] == "hbm"
    starts = node["startAddressCoreCorelet_"]["data_"]
    (old,) = {int(a) for a in starts.values()}       # every core reads the whole half
    assert old == tensor["hbm_address"]              # the first stick group starts W
    for core in starts:
        starts[core] = str(old + 128)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    seal(out)
    return old, tensor["hbm_address"] + tensor["device_bytes"]


def test_an_access_one_stick_off_deep_in_the_model_fails(tmp_path, capsys):
    """The off-by-one-stick miscompile: layer DEPTH-8's first column matmul reads W's first
    stick group from one stick (128 bytes, 64 fp16) past its start, i.e. row k+1 of W[:, :64]
    for row k, and for the last row W[0, 64:] from the second group.

    Not `Deep`: every arg of a deep `Deep` op reads its whole tensor (each core's LX window is
    exactly its slice, each weight is read whole), so any stick shift leaves the tensor and
    the simulator refuses the directory (exit 2: "not inside one tensor of manifest.json")
    before --check compares anything. In `Gated` the half matmul reads 64 of W's 128 sticks,
    so the shifted read stays inside W: the program runs and gives wrong numbers, which only
    --check can catch. The unedited directory passes."""
    x = _inputs(tmp_path)
    good = compile_pt2(export(tmp_path, Gated().half(), (x,), "gated"), tmp_path / "good",
                       self_contained=True, sets=["fusion.enabled=false"])   # one-op files
    off = tmp_path / "off"
    shutil.copytree(good, off)
    layer = DEPTH - 8
    start, weight_end = _shift_weight_read_one_stick(off, f"matmul_{layer}__cols0_64",
                                                     f"p_ws_{layer}")
    assert start + 128 + WIDTH * 128 <= weight_end    # in range: 64 rows of one stick each
    inputs = tmp_path / "in.npz"
    code, out, err = cli(capsys, "run", good, "--inputs", inputs, "--check", "-q",
                         "-o", tmp_path / "good_out.npz")
    assert code == 0, err
    code, out, err = cli(capsys, "run", off, "--inputs", inputs, "--check", "-q",
                         "-o", tmp_path / "off_out.npz")
    assert code == 1, err              # not 2: the simulator ran it; --check rejected it
    assert "Traceback" not in err and "MISMATCH: worse than eager vs fp32" in out
    assert "output_0" in err and "vs fp32 reference spyrec rms" in err and "eager rms" in err
    code, out, _ = cli(capsys, "run", off, "--inputs", inputs, "--check", "--json", "-q",
                       "-o", tmp_path / "off_out.npz")
    (c,) = json.loads(out)["check"]
    assert code == 1 and not c["ok"] and c["rule"] == "reference"
    assert c["mismatches"] > c["total"] // 2
    assert c["reference"]["rms_err"] > 10 * c["reference"]["allowed_rms_err"]


def _check(sim, eager, reference, dtype="float16"):
    return compare(0, "y", dtype, np.asarray(sim, np.float16 if dtype == "float16" else None),
                   np.asarray(eager, np.float64), np.asarray(reference, np.float64))


def test_rule_numbers():
    ref = np.linspace(0.5, 4.0, 100)
    alt = np.where(np.arange(100) % 2, 1.0, -1.0)
    eager = ref + 0.02 * alt                                  # rms 0.02, max 0.02
    # spyrec 0.04 from eager (allclose 1e-2 fails at small values) but as far from ref
    good = _check(ref - 0.02 * alt, eager, ref)
    assert good.mismatches > 0 and good.rule == "reference" and good.ok
    r = good.reference
    assert abs(r.eager_rms - 0.02) < 1e-9 and abs(r.rms - 0.02) < 2e-3
    assert r.allowed_rms == K_RMS * r.eager_rms and r.allowed_max_abs == K_MAX * r.eager_max_abs
    assert "ok by reference rule" in format_checks([good])
    # rms within K_RMS x eager's, one element beyond K_MAX x eager's max (0.08): fails
    spike = _check(ref + np.where(np.arange(100) == 10, 0.1, 0.0), eager, ref)
    assert spike.reference.rms <= spike.reference.allowed_rms and not spike.ok
    # every element 0.05 off: max within K_MAX x eager's, rms beyond K_RMS x (0.04): fails
    broad = _check(ref + 0.05 * alt, eager, ref)
    assert broad.reference.max_abs <= broad.reference.allowed_max_abs and not broad.ok
    message = describe_failure(broad)
    assert "eager rms 0.02" in message and "allowed rms 0.04" in message


def test_floor_when_eager_is_exact():
    ref = np.array([1.0, 2.0, 3.0, 4.0]) * 100
    # eager exact; spyrec one fp16 ulp off at 400 (0.25): allclose fails, the floor passes it
    ulp = _check(ref + np.array([0, 0, 0, 0.25]), ref, ref)
    assert ulp.mismatches == 0 and ulp.ok        # within rtol at 400: rule 1 decides
    near = _check(np.array([0.0, 0.0]), np.array([0.0, 0.0]), np.array([0.0, 0.0]))
    assert near.ok and near.reference.floor_rms == 0
    r = _check(ref + np.array([0, 0, 0, 0.25]), ref, ref).reference
    assert r.eager_rms == 0 and r.floor_max == 400 * 2.0 ** -11 and r.ok
    wrong = _check(ref + np.array([0, 0, 0, 8.0]), ref, ref)
    assert not wrong.ok and wrong.rule == "reference"


def test_integers_and_nonfinite_keep_rule_one():
    """(fp32 outputs get rule 2 too, against a float64 reference: test_check_fp32.py.)"""
    ints = compare(0, "i", "int64", np.array([1, 3]), np.array([1, 2]), np.array([1, 3]))
    assert ints.reference is None and not ints.ok
    nan = _check([np.nan, 2.0], [1.0, 2.0], [1.0, 2.0])
    assert nan.rule == "allclose" and not nan.ok
    assert "MISMATCH: 1 NaN/Inf" in format_checks([nan])


class CastsItself(torch.nn.Module):
    """Casts its input to fp16 in the graph: the fp32 reference run meets an fp32 weight."""

    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.eye(64) * scale, requires_grad=False)

    def forward(self, x):
        return (x * 2).to(torch.float16) @ self.w


def test_the_fp32_reference_runs_only_for_an_output_allclose_rejects(tmp_path, capsys):
    """A passing fp16 output needs no fp32 run (it would hold every weight in fp32); a
    rejected one whose program cannot run upcast says why, and allclose's verdict stands."""
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(2)).half()
    np.savez(tmp_path / "in.npz", x=x.numpy())
    out = compile_pt2(export(tmp_path, CastsItself().half(), (x,)), tmp_path / "out",
                      self_contained=True)
    code, text, err = cli(capsys, "run", out, "--inputs", tmp_path / "in.npz", "--check",
                          "--json", "-q")
    (c,) = json.loads(text)["check"]
    assert code == 0, err
    assert c["ok"] and c["rule"] == "allclose" and c["reference"] is None
    assert c["no_reference"] is None                  # never attempted: nothing to decide
    # eager now runs a program whose weight is doubled: allclose rejects, upcast fails
    other = export(tmp_path, CastsItself(2.0).half(), (x,), "other")
    record_source(out, other)
    code, text, err = cli(capsys, "run", out, "--inputs", tmp_path / "in.npz", "--check",
                          "--json", "-q")
    (c,) = json.loads(text)["check"]
    assert code == 1 and not c["ok"] and c["reference"] is None
    assert c["no_reference"].startswith("with weights and inputs upcast to fp32, ")
    assert "failed in PyTorch eager" in c["no_reference"]


def test_a_mismatch_without_reference_says_why():
    from dataclasses import replace

    c = replace(_check([1.5, 2.0], [1.0, 2.0], [1.0, 2.0]), reference=None,
                no_reference="with weights and inputs upcast to fp32, m.pt2 failed")
    assert not c.ok and c.rule == "allclose"
    assert format_checks([c]).endswith("MISMATCH (no fp32 reference: with weights and inputs "
                                       "upcast to fp32, m.pt2 failed)")


def test_run_json_with_reference_errors_fits_the_schema():
    from types import SimpleNamespace

    from spyrec.sim.command import run_document
    from spyrec.sim.files import validator

    ref = np.linspace(0.5, 4.0, 100)
    alt = np.where(np.arange(100) % 2, 1.0, -1.0)
    checks = [_check(ref - 0.02 * alt, ref + 0.02 * alt, ref),
              compare(1, "z", "float32", ref.astype(np.float32), ref)]
    manifest = SimpleNamespace(outputs=["y", "z"], mutated_buffers=[])
    result = SimpleNamespace(wall_s=0.1, names=("output_0", "output_1"),
                             output_dtypes=["float16", "float32"],
                             outputs=[ref.astype(np.float16), ref.astype(np.float32)],
                             program=SimpleNamespace(manifest=manifest))
    doc = json.loads(json.dumps(run_document(result, "o.npz", checks, None), allow_nan=False))
    validator("run").validate(doc)
    y, z = doc["check"]
    assert y["rule"] == "reference" and y["ok"] and y["reference"]["eager_rms_err"] > 0.019
    assert z["rule"] == "allclose" and z["reference"] is None and z["no_reference"] is None


class RmsNormFp16(torch.nn.Module):
    """Llama's RMSNorm: `.to(float32)` and back to the input dtype, which torch.export pins
    with dtype asserts on the fp16 input."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 64), requires_grad=False)

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.w * h.to(x.dtype)


def test_the_fp32_reference_runs_a_program_whose_export_pins_fp16(tmp_path):
    """The recorded `.to()` dtype asserts would refuse fp32 inputs (a 16-layer Llama had no
    reference before): the upcast run drops them from its own copy. Casts the graph spells
    out (`h.to(x.dtype)`, recorded as fp16) still round, as the module docstring says; the
    rest runs in fp32."""
    from spyrec.sim.eager import eager_outputs

    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3)).half()
    out = compile_pt2(export(tmp_path, RmsNormFp16().half(), (x,)), tmp_path / "out",
                      self_contained=True)
    host = {"x": "float16"}
    fp16, = eager_outputs(out, ["x"], host, {"x": x.numpy()})
    fp32, = eager_outputs(out, ["x"], host, {"x": x.numpy()}, upcast="float32")
    h = x.float()
    spelled = (torch.linspace(0.5, 1.5, 64).half().float() *
               (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).half().float())
    assert np.abs(fp32 - spelled.double().numpy()).max() < 1e-6   # fp32 weight, no fp16 product
    assert np.abs(fp16 - fp32).max() > 1e-4                       # the fp16 run rounds more
