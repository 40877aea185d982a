"""Coarse tiling, proven by simulation (issue 8 §4): every tiled program equals eager, and the
looped bundle and its unrolled form give bit-identical outputs.

Three sources of programs: the shipped configs with their sample programs (configs/tiling/,
samples/tiling.py), hand-picked shapes the reference got wrong (reference/G §5: column tiles,
size-1 tiles, a reduction over the tiled dim consumed in the same group, matmul K under an
outer M loop), and hypothesis-generated programs with random valid tilings of one, two and
three levels over pointwise ops, reductions (over tiled and untiled dims) and a matmul.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from samples.tiling import TILING_SAMPLES
from spyrec.sim.runner import simulate
from tests.differential.harness import assert_close, host_array
from tests.passes.test_constant_layouts import constant_restickifies
from tests.programs import compile_pt2, export, load_json

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "tiling"


def tiled_run(tmp: Path, module, inputs, tiling: Path, **opts):
    """Compile with `tiling` (looped) and simulate; returns (out dir, outputs)."""
    pt2 = export(tmp, module, inputs)
    out = compile_pt2(pt2, tmp / "looped", tiling=tiling, **opts)
    names = load_json(out / "manifest.json")["inputs"]
    return out, simulate(out, {n: host_array(t) for n, t in zip(names, inputs)}).outputs


def check_tiled(tmp: Path, module, inputs, tiling: Path, unrolled: bool = True) -> Path:
    """Looped == eager, and unrolled == looped bit for bit."""
    module = module.eval()
    out, looped = tiled_run(tmp, module, inputs, tiling)
    with torch.no_grad():
        want = module(*inputs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    for i, (got, w) in enumerate(zip(looped, want)):
        assert_close(got, w, f"output {i} (looped)")
    assert load_json(out / "report.json")["tiling"]["groups"], "nothing was tiled"
    assert constant_restickifies(out) == []     # DESIGN §3: a constant's layouts are free
    if unrolled:
        flat = compile_pt2(tmp / "model.pt2", tmp / "unrolled", tiling=tiling,
                           sets=["coarse_tiling.unroll=true"])
        assert "scf.for" not in (flat / "bundle.mlir").read_text()
        names = load_json(flat / "manifest.json")["inputs"]
        outs = simulate(flat, {n: host_array(t) for n, t in zip(names, inputs)}).outputs
        for i, (a, b) in enumerate(zip(looped, outs)):
            assert a.tobytes() == b.tobytes(), f"output {i}: unrolled differs from looped"
    return out


@pytest.mark.parametrize("name", sorted(TILING_SAMPLES))
def test_shipped_config_equals_eager_looped_and_unrolled(tmp_path, name):
    module, inputs = TILING_SAMPLES[name]()
    out = check_tiled(tmp_path, module, inputs, CONFIGS / f"{name}.yaml")
    assert "scf.for" in (out / "bundle.mlir").read_text()


def test_seed_moves_exactly_the_compulsory_bytes_and_y_never_touches_hbm(tmp_path):
    module, inputs = TILING_SAMPLES["seed_add_mul"]()
    out = check_tiled(tmp_path, module, inputs, CONFIGS / "seed_add_mul.yaml", unrolled=False)
    totals = load_json(out / "report.json")["cost"]["totals"]
    # a, b, c read once and z written once: 4 x 1024 x 4096 x 2 bytes
    assert totals["hbm_read_bytes"] + totals["hbm_write_bytes"] == 33_554_432
    assert totals["hbm_write_bytes"] == 8_388_608
    y = next(t for t in load_json(out / "manifest.json")["tensors"] if t["name"] == "add")
    assert y["hbm_address"] is None and y["lx_address"] is not None
    bundle = (out / "bundle.mlir").read_text()
    assert "#map_0 = affine_map<(d0, d1)[s0] -> (s0 + 65536*d0 + 2097152*d1)>" in bundle


def write_tiling(tmp: Path, dims: dict, loops: list[dict], ops=("*",)) -> Path:
    path = tmp / "tiling.yaml"
    path.write_text(yaml.safe_dump({"dims": dims, "groups": [{"ops": list(ops),
                                                               "loops": loops}]}))
    return path


class Fn(torch.nn.Module):
    """fn(self, x) with named parameters (the input is named `x` in the exported program)."""

    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        for k, v in params.items():
            self.register_parameter(k, torch.nn.Parameter(v, requires_grad=False))

    def forward(self, x):
        return self.fn(self, x)


class Fn2(Fn):
    """fn(self, a, b): two inputs named `a` and `b`."""

    def forward(self, a, b):
        return self.fn(self, a, b)


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


@pytest.mark.parametrize("loops", [[{"C": 4}], [{"R": 2}, {"C": 2}], [{"C": 2}, {"R": 4}],
                                   [{"R": 1}], [{"C": 1}, {"R": 8}]],
                         ids=["columns", "rows-then-columns", "columns-then-rows",
                              "count-1", "size-1-tiles"])
def test_softmax_over_a_tiled_reduced_dim_is_three_nests_and_exact(tmp_path, loops):
    """softmax tiled over its own reduced dim needs the full max before the subtraction:
    the pass compiles it as separate nests (never tile-local and wrong)."""
    x = randn(8, 256, seed=1) * 4
    check_tiled(tmp_path, Fn(lambda m, x: torch.softmax(x, dim=-1)), (x,),
                write_tiling(tmp_path, {"x": ["R", "C"]}, loops))


def test_matmul_k_under_an_outer_m_loop_accumulates_per_m_tile(tmp_path):
    x, w = randn(128, 512, seed=2), randn(96, 512, seed=3)
    check_tiled(tmp_path, Fn(lambda m, x: torch.relu(x @ m.w.t()), w=w), (x,),
                write_tiling(tmp_path, {"x": ["M", "K"], "w": ["_", "K"]},
                             [{"M": 2}, {"K": 4}]))


def test_transposed_input_and_3d_fp16_tiles(tmp_path):
    a, b = randn(4, 64, 128, dtype=torch.float16, seed=4), randn(4, 128, 64,
                                                                 dtype=torch.float16, seed=5)
    check_tiled(tmp_path, Fn2(lambda m, a, b: (a + b.transpose(1, 2)).tanh()), (a, b),
                write_tiling(tmp_path, {"a": ["B", "R", "C"], "b": ["B", "C", "R"]},
                             [{"B": 2}, {"R": 2}, {"C": 2}]))


def test_mean_over_the_tiled_rows_divides_once_by_the_count(tmp_path):
    x = randn(256, 64, seed=6)
    check_tiled(tmp_path, Fn(lambda m, x: x - x.mean(0, keepdim=True)), (x,),
                write_tiling(tmp_path, {"x": ["R", "C"]}, [{"R": 4}]))


# --- hypothesis: random programs, random valid tilings ---------------------------------------

STEP = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(["tanh", "sigmoid", "relu", "exp_neg"])),
    st.tuples(st.just("binary"), st.sampled_from(["add", "mul", "max"])),
    st.tuples(st.just("scalar"), st.sampled_from([0.5, -2.0])),
    st.tuples(st.just("center"), st.sampled_from(["amax", "sum", "mean"]),
              st.sampled_from([-1, -2])),
    # a transpose moves names with the dims; a reshape that merges dims drops them by design
    # (DESIGN §6), which would make the generated tilings invalid
    st.tuples(st.just("view"), st.just("transpose")),
)


def apply_step(step, t, y):
    kind = step[0]
    if kind == "unary":
        return torch.exp(-t.abs()) if step[1] == "exp_neg" else getattr(torch, step[1])(t)
    if kind == "binary":
        return {"add": lambda: t + y, "mul": lambda: t * y,
                "max": lambda: torch.maximum(t, y)}[step[1]]()
    if kind == "scalar":
        return t * step[1]
    if kind == "view":   # an op through a view and back: names move with the dims
        return torch.tanh(t.transpose(-2, -1)).transpose(-2, -1)
    _, op, dim = step
    reduced = {"amax": t.amax, "sum": t.sum, "mean": t.mean}[op](dim, keepdim=True)
    return t - reduced / (t.shape[dim] if op == "sum" else 1)


class Steps(torch.nn.Module):
    def __init__(self, steps, w=None):
        super().__init__()
        self.steps = steps
        self.w = None if w is None else torch.nn.Parameter(w, requires_grad=False)

    def forward(self, x, y):
        t = x
        for step in self.steps:
            t = apply_step(step, t, y)
        return t if self.w is None else t @ self.w


@st.composite
def tiled_programs(draw):
    """A program over x, y of rank 2 or 3 (sizes multiples of 64, so every tile is whole
    sticks whatever stick dim the layout search picks) and a tiling of 1-3 levels."""
    rank = draw(st.sampled_from([2, 3]))
    sizes = [draw(st.sampled_from([64, 128, 192, 256])) for _ in range(2)]
    if rank == 3:
        sizes = [draw(st.sampled_from([2, 3]))] + sizes
    names = ["B", "R", "C"][-rank:]
    dtype = draw(st.sampled_from([torch.float32, torch.float16]))
    steps = draw(st.lists(STEP, min_size=1, max_size=4))
    matmul = draw(st.booleans())
    levels = []
    for name, n in zip(names, sizes):   # loops in this order: B, R, C
        if draw(st.booleans()) or (name == names[-1] and not levels):
            unit = 1 if name == "B" else 64
            counts = [k for k in range(1, n // unit + 1) if n % (k * unit) == 0]
            levels.append({name: draw(st.sampled_from(counts))})
    return rank, sizes, names, dtype, steps, matmul, levels


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(tiled_programs())
def test_random_tiled_programs_equal_eager_and_unroll_exactly(tmp_path_factory, program):
    rank, sizes, names, dtype, steps, matmul, levels = program
    tmp = tmp_path_factory.mktemp("tiled")
    x, y = randn(*sizes, dtype=dtype, seed=7), randn(*sizes, dtype=dtype, seed=8)
    w = randn(sizes[-1], 64, dtype=dtype, seed=9) / 8 if matmul else None
    dims = {"x": names, "y": names}
    if matmul:
        dims["w"] = [names[-1], "_"]
    check_tiled(tmp, Steps(steps, w), (x, y), write_tiling(tmp, dims, levels))


def test_distinct_tiles_land_in_their_own_place(tmp_path):
    """Every element differs (an arange), so a tile written to the wrong place fails."""
    x = torch.arange(256 * 128, dtype=torch.float32).reshape(256, 128)
    check_tiled(tmp_path, Fn(lambda m, x: x * 2), (x,),
                write_tiling(tmp_path, {"x": ["R", "C"]}, [{"R": 4}, {"C": 2}]))


def test_inspect_shows_the_loop_nest_tiles_placement_and_selectable_names(tmp_path):
    from spyrec.inspect_dir import inspect_directory

    module, inputs = TILING_SAMPLES["seed_add_mul"]()
    out = compile_pt2(export(tmp_path, module, inputs), tmp_path / "out",
                      tiling=CONFIGS / "seed_add_mul.yaml")
    text = inspect_directory(out)
    nest = text[text.index("ops (file"):].splitlines()
    assert nest[1] == "  loop 2x over [c0]"
    assert nest[2] == "    loop 4x over [c1]"
    # add and mul are one fused SuperDSC: its compute ops are sdsc_0.json#0 and #1
    assert nest[3].split() == ["sdsc_0.json#0", "add", "node", "add", "[c0<512,", "c1<1024]",
                               "a@hbm,", "b@hbm,", "add@lx:0"]
    assert nest[4].split()[:4] == ["sdsc_0.json#1", "mul", "node", "mul"]
    assert "scratchpad (LX per core)" in text or "add" in text


class Embed(torch.nn.Module):
    """An embedding read per token tile, scaled and shifted (issue 9 §5)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 128)
        self.pos = torch.nn.Parameter(randn(64, 128, seed=11), requires_grad=False)

    def forward(self, ids):
        return self.emb(ids) * 2.0 + self.pos


class CacheWrite(torch.nn.Module):
    """A KV-cache write per token tile: rows `pos` of the cache take `k` (issue 9 §5)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(96, 64))

    def forward(self, pos, k):
        self.cache.index_copy_(0, pos, k)
        return k * 2.0


def test_an_embedding_inside_a_token_loop_tiles_the_ids_not_the_table(tmp_path):
    ids = torch.randint(0, 100, (64,), generator=torch.Generator().manual_seed(3))
    module = Embed()
    torch.nn.init.normal_(module.emb.weight, generator=torch.Generator().manual_seed(4))
    check_tiled(tmp_path, module, (ids,), write_tiling(tmp_path, {"ids": ["T"]}, [{"T": 2}]))


def test_a_cache_write_inside_a_token_loop_scatters_each_tile(tmp_path):
    pos = torch.randperm(96, generator=torch.Generator().manual_seed(5))[:64]
    k = randn(64, 64, seed=6)
    tiling = write_tiling(tmp_path, {"pos": ["T"], "k": ["T", "_"]}, [{"T": 2}])
    module = CacheWrite().eval()
    pt2 = export(tmp_path, module, (pos, k))
    out = compile_pt2(pt2, tmp_path / "looped", tiling=tiling)
    result = simulate(out, {"pos": host_array(pos), "k": host_array(k)})
    with torch.no_grad():
        want = module(pos, k)
    assert_close(result.outputs[0], want, "output")
    assert_close(result.outputs[1], module.cache, "buffer cache")
    assert "scf.for" in (out / "bundle.mlir").read_text()
