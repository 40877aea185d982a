"""A program with a symbolic length (issue 30) runs at every admissible length: the run binds
the symbol from the input's shape, pads the input to the maximum, runs the bound loop's trips
for that length and cuts the output back (sim/lengths.py, sim/bundle.py `arith.divui`); an
inadmissible length is exit 2 naming the symbol, the input and dim, the value and the ladder.
The directory is made from a static compile (tests/sim/symbolic.py)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from spyrec.errors import InputFileError
from tests.programs import cli, load_json
from tests.sim.symbolic import build_symbolic_mlp


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return build_symbolic_mlp(tmp_path_factory.mktemp("symbolic"))


def _tokens(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((1, n, 128)).astype(np.float32)


@pytest.mark.parametrize("n, executions", [(128, 8), (192, 11), (256, 14)])
def test_each_admissible_length_runs_its_trips_and_equals_the_reference(mlp, n, executions):
    """Two staging copies run once, the three ops of the token loop n / 64 times; the output
    has exactly n tokens and equals relu(x W^T + b) of the unpadded input."""
    from spyrec.sim.runner import simulate

    x = _tokens(n)
    result = simulate(mlp.out, {"input": x})
    (out,) = result.outputs
    assert out.shape == (1, n, 256)
    np.testing.assert_allclose(out, mlp.expected(x), rtol=1e-5, atol=1e-5)
    assert result.cost["totals"]["executions"] == executions
    trips = {ex.loop for _, ex in result.program.trace if ex.loop}
    assert trips == {(("i_0", i),) for i in range(n // 64)}


def test_the_run_cost_is_the_curve_at_its_length(mlp):
    """`spyrec run --report` estimates the bound length; the compile-time curve (from the
    documents, without the files) gives the same numbers at each length, and its maximum is
    the compile's `cost`."""
    from spyrec.driver import cost_curve, estimate_cost
    from spyrec.sim.runner import simulate

    cost, _, _ = estimate_cost(mlp.output, mlp.out)
    curve = cost_curve(mlp.output, cost)
    assert [p["lengths"] for p in curve] == [{"s81": 128}, {"s81": 192}, {"s81": 256}]
    for point in curve:
        n = point["lengths"]["s81"]
        totals = simulate(mlp.out, {"input": _tokens(n)}).cost["totals"]
        assert point["time_us"] == totals["time_us"]
        assert point["hbm_bytes"] == totals["hbm_read_bytes"] + totals["hbm_write_bytes"]
    assert curve[-1]["time_us"] == cost["totals"]["time_us"]
    assert curve[0]["time_us"] < curve[1]["time_us"] < curve[2]["time_us"]
    # each 64-token trip reads its 32 KiB of input and writes 64 KiB of output
    assert curve[1]["hbm_bytes"] - curve[0]["hbm_bytes"] == 64 * 128 * 4 + 64 * 256 * 4


def test_a_length_off_the_ladder_is_exit_2_naming_symbol_input_dim_and_ladder(mlp, tmp_path,
                                                                               capsys):
    np.savez(tmp_path / "x.npz", input=_tokens(100))
    code, out, err = cli(capsys, "run", str(mlp.out), "--inputs", str(tmp_path / "x.npz"),
                         "-q")
    assert code == 2 and out == ""
    assert err.strip() == (f"spyrec: {tmp_path / 'x.npz'}: input 'input' dim 1 has "
                           f"length 100, which symbol s81 does not admit: its lengths are "
                           f"128..256 by 64")


def test_a_wrong_static_dim_names_the_symbolic_shape(mlp):
    from spyrec.sim.runner import simulate

    with pytest.raises(InputFileError) as e:
        simulate(mlp.out, {"input": np.zeros((1, 128, 64), np.float32)})
    assert "'input': shape [1, 128, 64], expected [1, s81, 128]" in str(e.value)
    assert "  input: shape [1, s81, 128], float32" in str(e.value)


def test_inputs_of_one_symbol_must_agree(mlp):
    """Two inputs with one symbol bind it only if their lengths agree (the manifest is
    rewritten as if the program had a second input of that length)."""
    from dataclasses import replace

    from spyrec.sim.lengths import bind_lengths
    from spyrec.sim.loader import read_spyrec_dir

    manifest = read_spyrec_dir(mlp.out).manifest
    second = replace(manifest.tensors["input"], name="mask")
    two = replace(manifest, inputs=("input", "mask"),
                  tensors={**manifest.tensors, "mask": second})
    assert bind_lengths(two, {"input": _tokens(192), "mask": _tokens(192)}, "d") == {"s81": 192}
    with pytest.raises(InputFileError) as e:
        bind_lengths(two, {"input": _tokens(192), "mask": _tokens(128)}, "d")
    assert str(e.value) == ("d: input 'mask' dim 1 has length 128 but input 'input' dim 1 has "
                            "192; both are symbol s81 (128..256 by 64), so they must agree")


def test_an_inexact_trip_count_names_the_bundle_line(mlp):
    from spyrec.sim.bundle import execute, parse_bundle

    text = (mlp.out / "bundle.mlir").read_text()
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "arith.divui" in t)
    with pytest.raises(InputFileError) as e:
        execute(parse_bundle(text, "bundle.mlir"), {"s81": 100})
    assert str(e.value) == (f"bundle.mlir:{line}:5: arith.divui: 100 / 64 is not an exact "
                            f"division of a length by a positive tile; the bundle and the "
                            f"length disagree: re-run spyrec compile")
    with pytest.raises(InputFileError, match=r"bundle.mlir:4:3: func.func: the bundle function "
                                             r"takes argument %s81 \(index\), which is not an "
                                             r"index named after a symbolic length"):
        execute(parse_bundle(text, "bundle.mlir"), {})


def test_check_runs_eager_on_the_unpadded_inputs(mlp, tmp_path, capsys):
    """`--check` calls the source (a dynamic export) on the inputs as given, 192 tokens."""
    np.savez(tmp_path / "x.npz", input=_tokens(192))
    code, out, err = cli(capsys, "run", str(mlp.out), "--inputs", str(tmp_path / "x.npz"),
                         "--check", "--json", "-q")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["outputs"][0]["shape"] == [1, 192, 256]
    assert doc["check"][0]["ok"] and doc["check"][0]["total"] == 192 * 256



def test_an_output_is_cut_only_along_the_symbols_bound(mlp):
    """Reading an output cuts each symbolic dim to its bound length before the conversion to
    the host dtype (past it a shorter run wrote nothing); an unbound symbol stays whole."""
    from spyrec.sim.lengths import sliced_to_lengths
    from spyrec.sim.loader import read_spyrec_dir

    relu = read_spyrec_dir(mlp.out).manifest.tensors["relu"]
    stored = np.arange(256 * 256, dtype=np.float32).reshape(1, 256, 256)
    cut = sliced_to_lengths(relu, stored, {"s81": 128})
    assert cut.shape == (1, 128, 256) and cut.flags.c_contiguous
    np.testing.assert_array_equal(cut, stored[:, :128])
    assert sliced_to_lengths(relu, stored, {}) is stored


@pytest.fixture(scope="module")
def decode(tmp_path_factory):
    """A decode step over a static cache of 1,024 slots whose key loop is bound by a length
    read from its `cache_position` input (tests/passes/test_symbolic_tiling.py)."""
    from spyrec.compiler import CompileOptions, compile_program
    from spyrec.driver import estimate_cost
    from tests.passes.test_symbolic_tiling import _decode_step
    from tests.programs import export

    tmp = tmp_path_factory.mktemp("decode")
    module, inputs = _decode_step()
    kept = []

    def keep(output, out_dir):
        kept.append(output)
        return estimate_cost(output, out_dir)
    compile_program(export(tmp, module, inputs), tmp / "out", CompileOptions(verbose=-1), keep)
    return tmp / "out", inputs, kept[0]


def test_a_length_read_from_an_input_runs_its_tiles_rounded_up(decode):
    """manifest `value`: the keys are cache_position + 1, clamped to 0..1024; the bundle
    rounds the length over its 512-key tile up (`arith.ceildivui`), and every position's
    result equals eager's, which attends over every slot with a mask."""
    from spyrec.sim.check import check_outputs
    from spyrec.sim.directory import load_output_dir
    from spyrec.sim.runner import simulate

    out, inputs, _ = decode
    (symbol,) = load_json(out / "manifest.json")["symbols"]
    assert symbol == {"name": "args_3_keys", "granularity": 1, "minimum": 0, "maximum": 1024,
                      "where": "keys up to args_3[0] + 1",
                      "value": {"input": "args_3", "index": 0, "offset": 1}}
    assert "    %loop_bound_0 = arith.ceildivui %args_3_keys, %c512 : index" in \
        (out / "bundle.mlir").read_text().splitlines()
    manifest = load_output_dir(out).manifest
    for position, trips in [(-3, 0), (0, 1), (300, 1), (511, 1), (512, 2), (1023, 2),
                            (5000, 2)]:
        arrays = dict(zip(manifest.inputs, [t.numpy() for t in inputs[:3]] +
                          [np.array([position])]))
        result = simulate(out, arrays)
        assert {ex.loop for _, ex in result.program.trace if ex.loop} == {
            (("i_0", i),) for i in range(trips)}, position
        (check,) = check_outputs(out, manifest, arrays, result.outputs)
        assert check.ok and check.mismatches == 0, position


def test_the_cost_curve_of_a_long_ladder_samples_33_lengths(decode):
    """0..1024 keys by 1: 33 evenly spaced lengths, 0 and 1024 included, each priced with the
    trips it runs (none at 0 keys, two 512-key tiles from 513 on); the curve fits the
    report's schema."""
    from spyrec.driver import cost_curve, estimate_cost
    from spyrec.sim.files import validate

    out, _, output = decode
    cost, _, _ = estimate_cost(output, out)
    curve = cost_curve(output, cost)
    keys = [p["lengths"]["args_3_keys"] for p in curve]
    assert len(keys) == 33 and keys[:3] == [0, 32, 64] and keys[-1] == 1024
    times = {n: p["time_us"] for n, p in zip(keys, curve)}
    assert times[0] < times[32] == times[512] < times[544] == times[1024] == \
        cost["totals"]["time_us"]
    report = load_json(out / "report.json")
    validate({k: report[k] for k in ("format", "build", "passes", "restickify", "layouts", "ops",
                                     "cost")} | {"cost_curve": json.loads(json.dumps(curve))},
             "report", "report.json")


def test_a_dynamic_export_runs_at_each_length_with_its_folded_position_table(tmp_path, capsys):
    """spyrec compile of a dynamic export: `x * arange(tokens)` folds the arange into a
    constant stored at the maximum and marked with the symbol (manifest `symbolic_dims` on a
    constant, which a run leaves alone); each length equals numpy, and `--check` calls the
    dynamic export in eager at the input's length."""
    import torch

    from spyrec.sim.runner import simulate
    from tests.programs import Lambda, compile_pt2, export

    module = Lambda(lambda m, x: x * torch.arange(x.shape[1], dtype=torch.float32)[None, :, None])
    tokens = 64 * torch.export.Dim("s", min=2, max=4)
    out = compile_pt2(export(tmp_path, module, (torch.randn(1, 256, 64),),
                             dynamic_shapes=(({1: tokens},),)))
    marked = {t["name"]: (t["role"], t["host_shape"], t["symbolic_dims"])
              for t in load_json(out / "manifest.json")["tensors"] if "symbolic_dims" in t}
    assert sorted(role for role, _, _ in marked.values()) == ["constant", "input", "output"]
    assert all(shape[int(d)] == 256 for _, shape, dims in marked.values() for d in dims)
    for n in (128, 192):
        x = _tokens(n)[:, :, :64]
        (y,) = simulate(out, {"args_0": x}).outputs
        np.testing.assert_array_equal(y, x * np.arange(n, dtype=np.float32)[None, :, None])
    np.savez(tmp_path / "x.npz", args_0=_tokens(192)[:, :, :64])
    code, text, err = cli(capsys, "run", str(out), "--inputs", str(tmp_path / "x.npz"),
                          "--check", "--json", "-q")
    assert code == 0, err
    assert json.loads(text)["check"][0]["ok"] and json.loads(text)["check"][0]["total"] == 192 * 64


def test_the_sample_decoder_block_equals_eager_at_each_length(tmp_path):
    """The decoder block of the snapshot (attention over every token, not causal: its key
    loop runs the length's tiles too) at 128, 192 and 256 tokens of one compile."""
    import torch

    from samples.models import Decoder, _init, _randn
    from spyrec.sim.runner import simulate
    from tests.differential.harness import assert_close
    from tests.programs import compile_pt2, export

    module = _init(Decoder(depth=1)).eval()
    x = _randn(2, 256, 256)
    pt2 = export(tmp_path, module, (x,),
                 dynamic_shapes={"x": {1: 64 * torch.export.Dim("s", max=4)}})
    out = compile_pt2(pt2, tmp_path / "out")
    for tokens in (128, 192, 256):
        (got,) = simulate(out, {"x": x[:, :tokens].numpy()}).outputs
        with torch.no_grad():
            assert_close(got, module(x[:, :tokens]), f"{tokens} tokens")
    from spyrec.inspect_dir import inspect_directory

    text = inspect_directory(out)
    (s,) = re.findall(r"^symbol (\w+): 128\.\.256 by 64 \(input x dim 1 \(64\*\w+\)\); shapes "
                      r"below are at the maximum$", text, re.M)
    loops = [line.strip() for line in text.splitlines() if line.strip().startswith("loop ")]
    assert loops and all(line.endswith(f", runs ceil({s}/64) of them") or line.endswith(
        f", runs ceil({s}/128) of them, the last past the length") for line in loops), loops


def test_a_sum_over_the_length_adds_only_the_tiles_the_length_has(tmp_path):
    """A reduction over the symbolic dim is tiled as any reduction: its accumulator adds
    the trips the length runs, so the padding up to the maximum never enters the sum."""
    import torch

    from spyrec.sim.runner import simulate
    from tests.differential.harness import assert_close
    from tests.programs import Lambda, compile_pt2, export

    module = Lambda(lambda m, x: (x * 2).sum(dim=1))
    x = torch.randn(1, 256, 64, generator=torch.Generator().manual_seed(0))
    out = compile_pt2(export(tmp_path, module, (x,), dynamic_shapes={
        "args": ({1: 64 * torch.export.Dim("s", max=4)},)}), tmp_path / "out")
    for tokens in (128, 192):
        (got,) = simulate(out, {"args_0": x[:, :tokens].numpy()}).outputs
        assert_close(got, module(x[:, :tokens]), f"{tokens} tokens")


def test_a_sum_over_attention_rows_adds_only_the_rows_the_length_has(tmp_path):
    """Flash attention writes its output rows from per-tile accumulators, which carry no
    length; the ops reading those rows must still stop at the length. Summing them over the
    tokens at 128 of 256 adds no row the run never wrote, and the output projection runs the
    length's tiles, not the maximum's (it had run once at 256 rows)."""
    import torch

    from spyrec.sim.runner import simulate
    from tests.differential.harness import assert_close
    from tests.programs import Lambda, compile_pt2, export

    def attend_then_pool(m, x):
        q = x.view(1, -1, 2, 32).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, q * 0.5, q, is_causal=True)
        return (a.transpose(1, 2).reshape(1, -1, 64) @ m.w).sum(dim=1)

    module = Lambda(attend_then_pool)
    module.w = torch.nn.Parameter(torch.randn(64, 64, generator=torch.Generator().manual_seed(1)))
    x = torch.randn(1, 256, 64, generator=torch.Generator().manual_seed(0))
    pt2 = export(tmp_path, module, (x,), dynamic_shapes={
        "args": ({1: 64 * torch.export.Dim("s", max=4)},)})
    tiled = compile_pt2(pt2, tmp_path / "tiled", sets=["symbolic_lengths.mode=tiled"])
    sized = compile_pt2(pt2, tmp_path / "sized")
    for tokens in (128, 192):
        result = simulate(tiled, {"args_0": x[:, :tokens].numpy()})
        with torch.no_grad():
            assert_close(result.outputs[0], module(x[:, :tokens]), f"{tokens} tokens")
        runs = {r["name"]: r["executions"] for r in result.cost["ops"]}
        assert runs["matmul"] == runs["sum_1__part"] == tokens // 64, runs
        # sized: the attention's output op and the sum run once, over the length's rows
        result = simulate(sized, {"args_0": x[:, :tokens].numpy()})
        with torch.no_grad():
            assert_close(result.outputs[0], module(x[:, :tokens]), f"{tokens} tokens, sized")
        runs = {r["name"]: r["executions"] for r in result.cost["ops"]}
        assert runs["matmul"] == runs["sum_1"] == 1, runs
