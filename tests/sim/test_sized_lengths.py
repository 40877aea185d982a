"""Ops whose size is a symbolic length (issue 30, `symbolic_lengths.mode: sized`): an op that
walks the length outside attention runs once over the whole length instead of in a loop of
granularity tiles. Its files are planned at the maximum and say which dim is the length
(`dimToSymbolMapping_`, opspecs.json `lengths`); each core runs the same share of the
length, so an HBM arg's per-core start is an `affine.apply` of the length in bundle.mlir,
and a run (and the cost curve) takes the op at the bound length (`OpSpec.at`).

The program: `layer_norm(relu(x @ W^T + b))` over x[1, S, 128], S = 64 * Dim(min=2, max=4)
(128..256 tokens), exported dynamic and compiled once."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from spyrec.errors import InputFileError
from tests.programs import compile_pt2, export, load_json
from tests.sealing import seal

SIZED = ["symbolic_lengths.mode=sized"]
# the minimum share length_shares chose, by length (up to length: share): 16 rows at every
# length, 128 tokens / the broadcast cohort of 8 (a divisor of 64); the projection's 16
# cores then run 8 busy at 128 tokens, all 16 from 256 (`plan/length_shares.py`)
FLOORS = {256: 16}


class _Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(256, 128) / 16, requires_grad=False)
        self.b = torch.nn.Parameter(torch.randn(256), requires_grad=False)

    def forward(self, x):
        return F.layer_norm(torch.relu(x @ self.w.T + self.b), (256,))


def _module():
    return _Mlp()


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    """(module, OUT) of the dynamic MLP compiled with sized ops."""
    tmp = tmp_path_factory.mktemp("sized")
    module = _module()
    pt2 = export(tmp, module, (torch.randn(1, 256, 128),), "mlp", dynamic_shapes={
        "x": {1: 64 * torch.export.Dim("s", min=2, max=4)}})
    return module, compile_pt2(pt2, tmp / "out", sets=SIZED)


def _tokens(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, n, 128)).astype(np.float32)


def _eager(module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def test_no_op_loops_and_each_file_names_its_length(sized):
    """No loop at all; every op but the weights' is sized: its sdsc file maps the token
    label to the symbol, opspecs.json says so, N_ holds the maximum."""
    _, out = sized
    symbol = load_json(out / "manifest.json")["symbols"][0]["name"]
    specs = load_json(out / "opspecs.json")["kernels"][0]["specs"]
    assert all("loop" not in s for s in specs)
    sized_specs = [s for s in specs if "lengths" in s]
    assert len(sized_specs) >= 4
    for s in sized_specs:
        (var, name), = s["lengths"].items()
        assert name == symbol and s["iteration_space"][var][0] == 256
        (wrapper,) = load_json(out / f"sdsc_{specs.index(s)}.json").values()
        (label, name2), = wrapper["dimToSymbolMapping_"].items()
        (dsc,) = wrapper["dscs_"][0].values()
        assert name2 == symbol and dsc["N_"][f"{label}_"] == 256


def test_a_split_length_starts_each_core_at_its_share(sized):
    """Core c of a length split k ways starts c * share rows in, share = max(L / k, the
    minimum share at L) (`SymLength.share`): bundle.mlir computes `%share_<s>_<k>` from the
    length argument and adds `(share floordiv unit) * (slice * row bytes)` to the start at length
    0; the operands of each sized op's execution at two lengths differ by exactly that."""
    from spyrec.sim.bundle import read_bundle

    _, out = sized
    text = (out / "bundle.mlir").read_text()
    (symbol,) = re.findall(r"func.func @sdsc_bundle\(%(\w+): index", text)
    (entry,) = load_json(out / "manifest.json")["symbols"]
    steps = entry.get("min_shares", [])

    def floor(n: int) -> int:
        return next((m for upto, m in steps if n <= upto), 0)
    maps = {}
    for k, expr in re.findall(r"#map_(\d+) = affine_map<\(\)\[s0, s1\] -> \(s0 \+ (.+)\)>", text):
        unit, b = (re.fullmatch(r"\(s1 floordiv (\d+)\) \* (\d+)", expr) or
                   re.fullmatch(r"()s1 \* (\d+)", expr)).groups()
        maps[k] = (int(unit or 1), int(b))
    assert maps, "no per-core start moves with the length"
    applied = {n: (k, int(cores)) for n, k, cores in re.findall(
        r"%addr_(\d+) = affine\.apply #map_(\d+)\(\)\[%sym_\d+, %share_\w+?_(\d+)\]", text)}
    short, full = read_bundle(out / "bundle.mlir", {symbol: 128}), \
        read_bundle(out / "bundle.mlir", {symbol: 256})
    assert [e.file for e in short] == [e.file for e in full]      # no loop: once each
    for a, b in zip(short, full):
        for sid, x, y in zip(a.symbol_ids, a.operands, b.operands):
            if str(-sid) not in applied:
                assert x == y
                continue
            k, cores = applied[str(-sid)]
            unit, step = maps[k]
            share = [max(n // cores, floor(n)) for n in (128, 256)]
            assert y - x == (share[1] // unit - share[0] // unit) * step


@pytest.mark.parametrize("n", [128, 192, 256])
def test_each_length_equals_eager(sized, n):
    from spyrec.sim.runner import simulate

    module, out = sized
    x = _tokens(n)
    (got,) = simulate(out, {"x": x}).outputs
    assert got.shape == (1, n, 256)
    np.testing.assert_allclose(got, _eager(module, x), rtol=1e-4, atol=1e-4)


@settings(max_examples=6, deadline=None)
@given(granules=st.integers(2, 4), seed=st.integers(0, 2**16))
def test_random_lengths_and_data_equal_eager(sized, granules, seed):
    from spyrec.sim.runner import simulate

    module, out = sized
    x = _tokens(64 * granules, seed) * 3
    (got,) = simulate(out, {"x": x}).outputs
    np.testing.assert_allclose(got, _eager(module, x), rtol=1e-4, atol=1e-4)


def test_the_curve_prices_each_length_as_its_run_does(sized):
    """report.json's cost curve at each length is `spyrec run --report`'s total there, and
    a sized op's traffic grows with the length: 64 more tokens read 64 rows of x (fp32,
    128) and write 64 rows of each 256-wide intermediate that goes to HBM at least."""
    from spyrec.sim.runner import simulate

    _, out = sized
    curve = load_json(out / "report.json")["cost_curve"]
    assert [next(iter(p["lengths"].values())) for p in curve] == [128, 192, 256]
    for point in curve:
        n = next(iter(point["lengths"].values()))
        totals = simulate(out, {"x": _tokens(n)}).cost["totals"]
        assert point["time_us"] == totals["time_us"]
        assert point["hbm_bytes"] == totals["hbm_read_bytes"] + totals["hbm_write_bytes"]
    assert curve[0]["time_us"] < curve[1]["time_us"] < curve[2]["time_us"]
    assert curve[1]["hbm_bytes"] - curve[0]["hbm_bytes"] >= 64 * 128 * 4 + 64 * 256 * 4


def test_every_busy_core_runs_an_equal_share_of_the_length(sized):
    """`OpSpec.at`: the busy cores' ranges of the length var tile 0..L exactly, each
    share = max(L / k, the minimum share at L) long, in slice order; the cores past the
    length are idle (an empty range); the other vars' ranges are the maximum's."""
    from spyrec.sim.runner import load_output_dir

    program = load_output_dir(sized[1])
    shares = program.manifest.min_shares
    (name,) = program.manifest.maxima()
    floors = dict((upto, m) for upto, m in shares.get(name, ()))
    assert floors == FLOORS, floors
    for spec in program.ops.values():
        if not spec.lengths:
            continue
        (v,) = spec.lengths
        for n in (128, 192):
            at = spec.at({name: n}, shares)
            k = at.iteration_space[v][1]
            m = next(m for upto, m in sorted(floors.items()) if n <= upto)
            share = max(n // k, m) if k > 1 else n
            assert at.iteration_space[v][0] == n and at.slice_size(v) == share
            busy = sorted({c.ranges[v] for c in at.cores if c.ranges[v][1] > c.ranges[v][0]})
            assert busy == [(i * share, (i + 1) * share) for i in range(n // share)]
            assert sum(1 for c in at.cores if not c.points) == \
                len(at.cores) - len(at.cores) * (n // share) // k
            for c, c0 in zip(at.cores, spec.cores):
                assert {u: r for u, r in c.ranges.items() if u != v} == \
                    {u: r for u, r in c0.ranges.items() if u != v}
        assert spec.at({name: 256}, shares) is spec


def _tampered(out, tmp_path, change):
    """A copy of OUT whose first sized sdsc file's wrapper `change` edits; its path."""
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    path = next(p for p in sorted(bad.glob("sdsc_*.json"))
                if "dimToSymbolMapping_" in p.read_text())
    doc = json.loads(path.read_text())
    (wrapper,) = doc.values()
    change(wrapper)
    path.write_text(json.dumps(doc))
    seal(bad)
    return bad, path


def test_a_mapping_to_a_dim_the_op_has_not_is_refused(sized, tmp_path):
    from spyrec.sim.runner import load_output_dir

    bad, _ = _tampered(sized[1], tmp_path,
                       lambda w: w.update(dimToSymbolMapping_={"zz": "s81"}))
    with pytest.raises(InputFileError, match=r"dimToSymbolMapping_\.zz: zz is not a dim of N_"):
        load_output_dir(bad)


def test_a_mapping_to_a_symbol_the_manifest_has_not_is_refused(sized, tmp_path):
    from spyrec.sim.runner import load_output_dir

    def rename(w):
        (label,) = w["dimToSymbolMapping_"]
        w["dimToSymbolMapping_"] = {label: "t7"}
    bad, path = _tampered(sized[1], tmp_path, rename)
    with pytest.raises(InputFileError) as e:
        load_output_dir(bad)
    assert str(e.value).startswith(f"{path}: dimToSymbolMapping_.")
    assert "'t7' is not a symbolic length of an input's shape in manifest.json" in str(e.value)


def test_an_unknown_symbolic_mode_is_refused_naming_the_choices(tmp_path, capsys):
    from tests.programs import cli

    pt2 = export(tmp_path, _module(), (torch.randn(1, 256, 128),), "m")
    code, out, err = cli(capsys, "compile", pt2, "-o", tmp_path / "o", "--set",
                         "symbolic_lengths.mode=loops")
    assert code == 2 and not (tmp_path / "o").exists()
    assert "symbolic_lengths.mode must be one of sized, tiled, got 'loops'" in err


TEXT = """buffer x: input float32[256, 128]
buffer y: output float32[256, 128]
op y: y[128*a + b] = exp(x[128*a + b]) over [a<256, b<128] cores [a:32, b:1] lengths [a=s]
inputs [x]
outputs [y]
symbol s 128..256 by 16 at [x:0, y:0]
"""


def test_lengths_print_and_parse_back():
    from spyrec.ir.parser import parse
    from spyrec.ir.printer import format_graph

    graph = parse(TEXT)
    assert graph.ops[0].lengths == (("a", "s"),)
    assert format_graph(graph) == TEXT


def test_a_length_split_that_does_not_divide_the_granularity_is_a_verify_problem():
    """32 cores would each run 8 tokens at 256 but 4.5 at 144: refused; 16 cores, a
    whole token count at every length, pass; a length var that names no symbol, or whose
    range is not the maximum, is named."""
    from spyrec.ir.parser import parse
    from spyrec.ir.verify import verify

    problems = verify(parse(TEXT))
    assert any("a runs the symbolic length s (128..256 by 16), which 32 cores cannot share "
               "in whole values" in p for p in problems), problems
    assert not any("lengths" in p or "share" in p
                   for p in verify(parse(TEXT.replace("a:32", "a:16"))))
    assert any("lengths [a=t]: t is not a symbolic length" in p
               for p in verify(parse(TEXT.replace("a:32", "a:16").replace("a=s", "a=t"))))
    assert any("lengths [b=s]: b<128, but s's maximum is 256" in p
               for p in verify(parse(TEXT.replace("a:32", "a:16").replace("a=s", "b=s"))))


class _Causal(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("n", [128, 192, 256])
def test_causal_attention_of_the_length_equals_eager(tmp_path_factory, n):
    """One query tile of every query, the key loop bound by the length: the causal mask
    tile, computed from position constants no symbol names, is sized with its readers
    (else at 128 of 256 its cores would hold other rows than theirs: the LX check)."""
    from spyrec.sim.runner import simulate

    tmp = tmp_path_factory.getbasetemp() / "causal"
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 64, generator=g) for _ in range(3))
    out = tmp / "out"
    if not out.exists():
        s = 64 * torch.export.Dim("s", min=2, max=4)
        pt2 = export(tmp.mkdir(exist_ok=True) or tmp, _Causal(), (q, k, v), "causal",
                     dynamic_shapes={"q": {2: s}, "k": {2: s}, "v": {2: s}})
        compile_pt2(pt2, out)
    specs = load_json(out / "opspecs.json")["kernels"][0]["specs"]
    assert any("loop" in s for s in specs)          # the key loop
    inputs = {name: t[:, :, :n].numpy() for name, t in zip(("q", "k", "v"), (q, k, v))}
    (got,) = simulate(out, inputs).outputs
    with torch.no_grad():
        want = _Causal()(*(t[:, :, :n] for t in (q, k, v))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_at_the_minimum_the_weight_reaches_8_cores_and_is_read_once(sized):
    """The projection splits its rows; at 128 tokens each busy core runs its minimum share, 16 rows,
    so 8 cores read the fp32 weight [256, 128] (a cohort of 8: read once) and x's 128 rows
    once; at 256 tokens 16 cores are busy, the weight read twice."""
    from spyrec.sim.runner import simulate

    _, out = sized
    for n, cores, weight_reads in ((128, 8, 1), (256, 16, 2)):
        (mm,) = [o for o in simulate(out, {"x": _tokens(n)}).cost["ops"]
                 if o["op"] == "batchmatmul"]
        assert mm["cores_used"] == cores
        assert mm["hbm_read_bytes"] == weight_reads * 256 * 128 * 4 + n * 128 * 4


def test_a_symbols_min_share_prints_parses_and_bounds_the_split():
    """`share [M to L, ...]` on the symbol line round-trips; a split whose k * M passes the
    maximum where M binds is a verify problem (a busy core's share would not fit the slice
    it holds there), and so is a negative share."""
    from spyrec.ir.parser import parse
    from spyrec.ir.printer import format_graph
    from spyrec.ir.verify import verify

    text = TEXT.replace("by 16 at", "by 16 share [16 to 192, 8 to 256] at")
    graph = parse(text)
    s = graph.symbols["s"]
    assert s.min_shares == ((192, 16), (256, 8)) and format_graph(graph) == text
    assert [s.min_share(n) for n in (128, 192, 208, 256)] == [16, 16, 8, 8]
    assert s.share(128, 16) == 16 and s.share(256, 8) == 32 and s.share(208, 32) == 8
    assert not any("share" in p for p in verify(parse(text.replace("a:32", "a:16"))))
    # 32 cores x 16 values pass the maximum 256 where 16 binds (128 < 32 * 16)
    assert any("whose busy cores each take at least [16 to 256] values: at some length a "
               "busy core's share would pass the 8 it holds at the maximum" in p
               for p in verify(parse(TEXT.replace("by 16 at", "by 32 share [16 to 256] at"))))
    assert any("share -4 to 256 is negative" in p
               for p in verify(parse(TEXT.replace("by 16 at", "by 16 share [-4 to 256] at"))))


@settings(max_examples=40, deadline=None)
@given(granules=st.integers(2, 4), floor=st.integers(1, 16))
def test_a_short_last_slice_ends_at_the_length(sized, granules, floor):
    """A minimum share that does not divide the length (`plan/length_shares.py` moves it one
    busy core at a time) leaves the last busy slice short: busy slices tile 0..L exactly,
    each `max(L / k, floor)` values but the last, which ends at L; the rest idle."""
    from spyrec.sim.runner import load_output_dir

    program = load_output_dir(sized[1])
    (name,) = program.manifest.maxima()
    n = 64 * granules
    for spec in program.ops.values():
        (v,) = spec.lengths or (None,)
        if v is None:
            continue
        k = spec.iteration_space[v][1]
        if k * floor > 256:
            continue            # the share would not fit a core's slice at the maximum
        at = spec.at({name: n}, {name: ((256, floor),)})
        share = max(n // k, floor) if k > 1 else n
        busy = sorted({c.ranges[v] for c in at.cores if c.ranges[v][1] > c.ranges[v][0]})
        assert busy == [(lo, min(lo + share, n)) for lo in range(0, n, share)]
        assert at.slice_size(v) == share
