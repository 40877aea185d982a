"""flash_attention, IR text in and out: the attention of `F.scaled_dot_product_attention(q, k,
v)` over 128 queries and keys (head dim 64, fp32), given tiles of 64 queries x 64 keys, becomes a
query loop fa0.0 around a key loop fa0.1: the query tile copied once per query tile with the
scale 1/sqrt(64) folded in (not a multiply of every score), the score tile, its max and sum per
tile buffers, the
running max and sum and the output accumulator filled once per query tile and rescaled per key
tile, and one divide of each output row at the end. That the loops compute what the
materialized attention does is the simulator's job (tests/passes/test_flash_attention.py)."""

from spyrec.passes.registry import CompileContext, get_pass
from tests.passes.textir import ir, run_pass

SEED = """
    buffer q: input float32[1, 1, 128, 64] device [1, 128, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32
    buffer k: input float32[1, 1, 128, 64] device [1, 64, 4, 1, 32] / [-1, 1, 2048, -1, 64] fp32
    buffer v: input float32[1, 1, 128, 64] device [1, 128, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32
    buffer o__1: intermediate float32[1, 1, 128, 128] device [1, 128, 4, 1, 32] / [-1, 128, 32, -1, 1] fp32
    buffer o__2: intermediate float32[1, 1, 128, 128] device [1, 128, 4, 1, 32] / [-1, 128, 32, -1, 1] fp32
    buffer o__3: intermediate float32[1, 1, 128, 1] device [1, 128, 1, 1, 1, 32] / [-1, 1, -1, -1, -1, -1] fp32
    buffer o__4: intermediate float32[1, 1, 128, 128] device [1, 128, 4, 1, 32] / [-1, 128, 32, -1, 1] fp32
    buffer o__5: intermediate float32[1, 1, 128, 128] device [1, 128, 4, 1, 32] / [-1, 128, 32, -1, 1] fp32
    buffer o__6: intermediate float32[1, 1, 128, 1] device [1, 128, 1, 1, 1, 32] / [-1, 1, -1, -1, -1, -1] fp32
    buffer o__7: intermediate float32[1, 1, 128, 128] device [1, 128, 4, 1, 32] / [-1, 128, 32, -1, 1] fp32
    buffer o: output float32[1, 1, 128, 64] device [1, 128, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32
    op o__1: o__1[128*c2 + c3] = batchmatmul(q[64*c2 + r0], k[64*c3 + r0]) over [c2<128, c3<128, r0<64] reduce [r0] node o
    op o__2: o__2[128*c2 + c3] = mul(o__1[128*c2 + c3]) over [c2<128, c3<128] attrs {"scalar": 0.125, "scalar_side": "rhs"} node o
    op o__3: o__3[c2] = max(o__2[128*c2 + r0]) over [c2<128, r0<128] reduce [r0] node o
    op o__4: o__4[128*c2 + c3] = sub(o__2[128*c2 + c3], o__3[c2]) over [c2<128, c3<128] node o
    op o__5: o__5[128*c2 + c3] = exp(o__4[128*c2 + c3]) over [c2<128, c3<128] node o
    op o__6: o__6[c2] = sum(o__5[128*c2 + r0]) over [c2<128, r0<128] reduce [r0] node o
    op o__7: o__7[128*c2 + c3] = realdiv(o__5[128*c2 + c3], o__6[c2]) over [c2<128, c3<128] node o
    op o: o[64*c2 + c3] = batchmatmul(o__7[128*c2 + r0], v[c3 + 64*r0]) over [c2<128, c3<64, r0<128] reduce [r0] node o
    inputs [q, k, v]
    outputs [o]
"""

FLASH = """
    buffer q: input float32[1, 1, 128, 64] device [1, 128, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32
    buffer k: input float32[1, 1, 128, 64] device [1, 64, 4, 1, 32] / [-1, 1, 2048, -1, 64] fp32
    buffer v: input float32[1, 1, 128, 64] device [1, 128, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32
    buffer o: output float32[1, 1, 128, 64] device [1, 128, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32
    buffer o__1__tile: intermediate float32[1, 1, 64, 64] device [1, 64, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32 per_tile
    buffer o__3__tile: intermediate float32[1, 1, 64, 1] device [1, 64, 1, 1, 1, 32] / [-1, 1, -1, -1, -1, -1] fp32 per_tile
    buffer o__6__tile: intermediate float32[1, 1, 64, 1] device [1, 64, 1, 1, 1, 32] / [-1, 1, -1, -1, -1, -1] fp32 per_tile
    buffer o__flash_max: intermediate float32[1, 1, 64, 1] device [1, 64, 1, 1, 1, 32] / [-1, 1, -1, -1, -1, -1] fp32 per_tile
    buffer o__flash_sum: intermediate float32[1, 1, 64, 1] device [1, 64, 1, 1, 1, 32] / [-1, 1, -1, -1, -1, -1] fp32 per_tile
    buffer o__flash_newmax: intermediate float32[1, 1, 64, 1] device [1, 64, 1, 1, 1, 32] / [-1, 1, -1, -1, -1, -1] fp32 per_tile
    buffer o__flash_rescale: intermediate float32[1, 1, 64, 1] device [1, 64, 1, 1, 1, 32] / [-1, 1, -1, -1, -1, -1] fp32 per_tile
    buffer o__flash_acc: intermediate float32[1, 1, 64, 64] device [1, 64, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32 per_tile
    buffer o__flash_pv: intermediate float32[1, 1, 64, 64] device [1, 64, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32 per_tile
    buffer q__qtile: intermediate float32[1, 1, 64, 64] device [1, 64, 2, 1, 32] / [-1, 64, 32, -1, 1] fp32 per_tile
    op o__flash_max.fill: o__flash_max[c2] = fill() over [c2<64] attrs {"value": -3.4028234663852886e+38} loops [2(c2)@fa0.0] node o
    op o__flash_sum.fill: o__flash_sum[c2] = fill() over [c2<64] attrs {"value": 0.0} loops [2(c2)@fa0.0] node o
    op o__flash_acc.fill: o__flash_acc[64*c2 + c3] = fill() over [c2<64, c3<64] attrs {"value": 0.0} loops [2(c2)@fa0.0] node o
    op q__qtile.copy: q__qtile[64*c2 + r0] = mul(q[64*c2 + r0]) over [c2<64, r0<64] attrs {"scalar": 0.125, "scalar_side": "rhs"} loops [2(c2)@fa0.0] node o
    op o__1: o__1__tile[64*c2 + c3] = batchmatmul(q__qtile[64*c2 + r0], k[64*c3 + r0]) over [c2<64, c3<64, r0<64] reduce [r0] loops [2(c2)@fa0.0, 2(c3)@fa0.1] node o
    op o__3: o__3__tile[c2] = max(o__1__tile[64*c2 + r0]) over [c2<64, r0<64] reduce [r0] loops [2(c2)@fa0.0, 2(r0)@fa0.1] node o
    op o__flash_newmax: o__flash_newmax[c2] = maximum(o__flash_max[c2], o__3__tile[c2]) over [c2<64] loops [2(c2)@fa0.0, 2()@fa0.1] node o
    op o__flash_rescale.step: o__flash_rescale[c2] = sub(o__flash_max[c2], o__flash_newmax[c2]) over [c2<64] loops [2(c2)@fa0.0, 2()@fa0.1] node o
    op o__flash_rescale: o__flash_rescale[c2] = exp(o__flash_rescale[c2]) over [c2<64] loops [2(c2)@fa0.0, 2()@fa0.1] node o
    op o__4: o__1__tile[64*c2 + c3] = sub(o__1__tile[64*c2 + c3], o__flash_newmax[c2]) over [c2<64, c3<64] loops [2(c2)@fa0.0, 2(c3)@fa0.1] node o
    op o__5: o__1__tile[64*c2 + c3] = exp(o__1__tile[64*c2 + c3]) over [c2<64, c3<64] loops [2(c2)@fa0.0, 2(c3)@fa0.1] node o
    op o__6: o__6__tile[c2] = sum(o__1__tile[64*c2 + r0]) over [c2<64, r0<64] reduce [r0] loops [2(c2)@fa0.0, 2(r0)@fa0.1] node o
    op o__flash_sum.rescale: o__flash_sum[c2] = mul(o__flash_sum[c2], o__flash_rescale[c2]) over [c2<64] loops [2(c2)@fa0.0, 2()@fa0.1] node o
    op o__flash_sum.update: o__flash_sum[c2] = add(o__flash_sum[c2], o__6__tile[c2]) over [c2<64] loops [2(c2)@fa0.0, 2()@fa0.1] node o
    op o__flash_pv: o__flash_pv[64*c2 + c3] = batchmatmul(o__1__tile[64*c2 + r0], v[c3 + 64*r0]) over [c2<64, c3<64, r0<64] reduce [r0] loops [2(c2)@fa0.0, 2(r0)@fa0.1] node o
    op o__flash_acc.rescale: o__flash_acc[64*c2 + c3] = mul(o__flash_acc[64*c2 + c3], o__flash_rescale[c2]) over [c2<64, c3<64] loops [2(c2)@fa0.0, 2()@fa0.1] node o
    op o__flash_acc.update: o__flash_acc[64*c2 + c3] = add(o__flash_acc[64*c2 + c3], o__flash_pv[64*c2 + c3]) over [c2<64, c3<64] loops [2(c2)@fa0.0, 2()@fa0.1] node o
    op o__flash_max.update: o__flash_max[c2] = identity(o__flash_newmax[c2]) over [c2<64] loops [2(c2)@fa0.0, 2()@fa0.1] node o
    op o: o[64*c2 + c3] = realdiv(o__flash_acc[64*c2 + c3], o__flash_sum[c2]) over [c2<64, c3<64] loops [2(c2)@fa0.0] node o
    inputs [q, k, v]
    outputs [o]
"""


def _flash(**options):
    return get_pass("flash_attention")(**options)


def test_given_tiles_make_query_and_key_loops_with_an_online_softmax():
    ctx = CompileContext()
    got = run_pass(_flash(mode="always", query_tile=64, key_tile=64), SEED, ctx,
                   facts=("layouts",))
    assert got == ir(FLASH)
    (row,) = ctx.report["attention"]
    assert (row["query_tile"], row["key_tile"], row["head_tile"]) == (64, 64, 1)


def test_mode_never_and_a_small_attention_under_auto_are_left_alone():
    """128 x 128 fp32 scores fit on chip: `auto` leaves them materialized, as `never` does."""
    for mode in ("never", "auto"):
        ctx = CompileContext()
        assert run_pass(_flash(mode=mode), SEED, ctx, facts=("layouts",)) == ir(SEED)
        assert "attention" not in ctx.report
