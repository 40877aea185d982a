"""coarse_tiling, IR text in and out, with a tiling config (`config:`, as `--tiling FILE.yaml`
gives it): the seed's `(a + b) * c` tiled 2 x 2 becomes two ops over one [64, 128] tile each
in a loop nest, the sum a per-tile buffer; `unroll` spells the nest out as one op per
iteration; a sum over a tiled dim becomes an fp32 accumulator filled before the loop, a
partial sum per trip added in, and a copy out. That the loops compute what the flat program
does is the simulator's job (tests/differential/test_tiling.py)."""

from spyrec.passes.registry import CompileContext, get_pass
from tests.passes.textir import ir, run_pass

F16 = "float16[128, 256] device [4, 128, 64] / [64, 256, 1] fp16"
TILE = "float16[64, 128] device [2, 64, 64] / [64, 128, 1] fp16"
X = "[256*c0 + c1]"
SEED = f"""
    buffer a: input {F16}
    buffer b: input {F16}
    buffer c: input {F16}
    buffer s: intermediate {F16}
    buffer z: output {F16}
    op s: s{X} = add(a{X}, b{X}) over [c0<128, c1<256] node add
    op z: z{X} = mul(s{X}, c{X}) over [c0<128, c1<256] node mul
    inputs [a, b, c]
    outputs [z]
"""
SEED_TILING = """\
dims: {a: [A, B], b: [A, B], c: [A, B]}
groups:
  - ops: [add, mul]
    loops: [{A: 2}, {B: 2}]
"""
LOOPS = "loops [2(c0)@g0.0, 2(c1)@g0.1]"


def tiling(tmp_path, text: str, **options):
    path = tmp_path / "tiling.yaml"
    path.write_text(text)
    return get_pass("coarse_tiling")(config=str(path), **options)


def test_the_seed_tiled_two_by_two_is_a_loop_nest_over_one_tile(tmp_path):
    """Both ops run over a [64, 128] tile in loops g0.0 (A) and g0.1 (B); the sum lives only
    in the loop body, so it shrinks to the tile (per_tile) and is indexed by the tile's own
    vars, while a, b, c and z keep their full indices (the loops move them)."""
    ctx = CompileContext()
    assert run_pass(tiling(tmp_path, SEED_TILING), SEED, ctx, facts=("layouts",)) == ir(f"""
    buffer a: input {F16}
    buffer b: input {F16}
    buffer c: input {F16}
    buffer s: intermediate {TILE} per_tile
    buffer z: output {F16}
    op s: s[128*c0 + c1] = add(a{X}, b{X}) over [c0<64, c1<128] {LOOPS} node add
    op z: z{X} = mul(s[128*c0 + c1], c{X}) over [c0<64, c1<128] {LOOPS} node mul
    inputs [a, b, c]
    outputs [z]
    """)
    assert ctx.report["tiling"]["groups"] == [{
        "group": 0, "loops": [{"dim": "A", "count": 2}, {"dim": "B", "count": 2}], "ops": 2,
        "nests": 1, "per_tile": ["s"], "accumulators": [], "hoisted": []}]


def test_unroll_spells_out_every_iteration_at_its_tile(tmp_path):
    """One op per iteration, named `.it<A>_<B>`, each moved to its tile: B's second tile is
    128 elements in, A's second 64 rows (16,384 elements) in."""
    ctx = CompileContext()
    after = run_pass(tiling(tmp_path, SEED_TILING, unroll=True), SEED, ctx, facts=("layouts",))
    space = "over [c0<64, c1<128]"
    ops = []
    for it, shift in (("0_0", ""), ("0_1", " + 128"), ("1_0", " + 16384"), ("1_1", " + 16512")):
        at = f"[256*c0 + c1{shift}]"
        ops += [f"op s.it{it}: s[128*c0 + c1] = add(a{at}, b{at}) {space} node add",
                f"op z.it{it}: z{at} = mul(s[128*c0 + c1], c{at}) {space} node mul"]
    assert [line for line in after.splitlines() if line.startswith("op ")] == ops
    assert "buffer s: intermediate float16[64, 128]" in after
    assert (ctx.report["tiling"]["unrolled"], ctx.report["tiling"]["unrolled_ops_added"]) == \
        (True, 6)


def test_a_sum_over_a_tiled_dim_accumulates_in_fp32(tmp_path):
    """Tiling K of a row sum: the accumulator is filled with 0 once (hoisted out of the
    loop), each trip sums its half of the row into a per-tile partial and adds it in, and a
    copy after the loop writes the fp16 result."""
    text = """
    buffer x: input float16[128, 256] device [4, 128, 64] / [64, 256, 1] fp16
    buffer t: output float16[128] device [1, 128, 64] / [-1, 1, -1] fp16
    op t: t[c0] = sum(x[256*c0 + r0]) over [c0<128, r0<256] reduce [r0] node sum_1
    inputs [x]
    outputs [t]
    """
    config = "dims: {x: [_, K]}\ngroups:\n  - ops: ['*']\n    loops: [{K: 2}]\n"
    ctx = CompileContext()
    fp32 = "float32[128] device [1, 128, 32] / [-1, 1, -1] fp32"
    half = "over [c0<128, r0<128] reduce [r0] loops [2(r0)@g0.0]"
    every_trip = "over [c0<128] loops [2()@g0.0]"      # in the loop, carrying no var
    assert run_pass(tiling(tmp_path, config), text, ctx, facts=("layouts",)) == ir(f"""
    buffer x: input float16[128, 256] device [4, 128, 64] / [64, 256, 1] fp16
    buffer t: output float16[128] device [1, 128, 64] / [-1, 1, -1] fp16
    buffer t__acc: intermediate {fp32}
    buffer t__part: intermediate {fp32} per_tile
    op t__acc: t__acc[c0] = fill() over [c0<128] attrs {{"value": 0.0}} node sum_1
    op t__part: t__part[c0] = sum(x[256*c0 + r0]) {half} node sum_1
    op t__acc.1: t__acc[c0] = add(t__acc[c0], t__part[c0]) {every_trip} node sum_1
    op t: t[c0] = identity(t__acc[c0]) over [c0<128] node sum_1
    inputs [x]
    outputs [t]
    """)
    (group,) = ctx.report["tiling"]["groups"]
    assert group["accumulators"] == [{"op": "t", "reduction": "sum", "accumulator": "t__acc",
                                      "partial": "t__part", "level": 0}]
    assert group["hoisted"] == ["t__acc"]


def test_without_a_config_a_program_with_no_attention_is_left_alone():
    assert run_pass(get_pass("coarse_tiling")(), SEED, facts=("layouts",)) == ir(SEED)
