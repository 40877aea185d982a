"""The 256 MiB per-core span (ir/span.py, reference/A-layout.md §5.6): its value on known
accesses, work division keeping every core under it at real LM sizes (IR text, no data), the
verifier's line for a split over it, and the refusal when no split fits."""

import re

import pytest

from spyrec.device import MAX_SPAN_BYTES
from spyrec.errors import UnsupportedProgram
from spyrec.ir.parser import parse
from spyrec.ir.span import access_span, op_span
from spyrec.ir.verify import verify
from spyrec.passes.registry import CompileContext
from spyrec.passes.work_division import WorkDivision
from tests.passes.textir import ir

VOCAB, HIDDEN = 49155, 4096
TABLE_BYTES = 64 * VOCAB * 128          # [64 sticks of hidden, 49155 rows, 64 lanes] fp16

COPY = ir("""
    buffer x: input float16[1024, 256] device [4, 1024, 64] / [64, 256, 1] fp16
    buffer y: output float16[1024, 256] device [4, 1024, 64] / [64, 256, 1] fp16
    op y: y[256*c0 + c1] = exp(x[256*c0 + c1]) over [c0<1024, c1<256]
    inputs [x]
    outputs [y]
""")


def _span(text: str, splits: dict[str, int], buffer: str | None = None) -> int:
    graph = parse(text)
    op = graph.ops[0]
    if buffer is None:
        return op_span(graph, op, splits)[0]
    return access_span(graph, op, next(a for _, a in op.accesses() if a.buffer == buffer),
                       splits)


def test_a_split_of_the_stick_columns_leaves_one_column_of_whole_sticks():
    # A-layout's worked example: fp16 [1024, 256] is device [4, 1024, 64]; 4 cores on the
    # stick var c1 give each core one stick column: 1 x 1024 x 64 x 2 bytes
    assert _span(COPY, {"c0": 1, "c1": 4}, "x") == 1 * 1024 * 64 * 2 == 131072
    # rows split: every core still reaches all 4 stick columns, the outermost dim
    assert _span(COPY, {"c0": 4, "c1": 1}, "x") == 4 * 1024 * 64 * 2
    # one stick column and 8 rows: the outermost dim with extent > 1 is the rows
    assert _span(COPY, {"c0": 128, "c1": 4}, "x") == 8 * 64 * 2
    assert _span(COPY, {}) == 4 * 1024 * 64 * 2         # one core: the whole tensor


def test_a_coordinate_with_floor_is_measured_on_every_cores_slice():
    """[3, 40] read flat over 120 points, 4 cores of 30: core 0 reads row 0 only, core 1
    rows 0 and 1 (floor(c0/40) over 30..59), so the span is two rows of one stick each."""
    text = ir("""
    buffer x: input float16[3, 40] device [1, 3, 64] / [64, 40, 1] fp16
    buffer y: output float16[120] device [2, 64] / [64, 1] fp16
    op y: y[c0] = exp(x[c0]) over [c0<120]
    inputs [x]
    outputs [y]
    """)
    assert _span(text, {"c0": 4}, "x") == 2 * 128
    assert _span(text, {"c0": 120}, "x") == 128          # one element: one stick


def _gather(table_layout: str, tokens: int = 1) -> str:
    return ir(f"""
    buffer idx: input int64[{tokens}] device [1, 32] / [32, 1] int32
    buffer table: constant float16[{VOCAB}, {HIDDEN}] device {table_layout} fp16
    buffer out: output float16[{tokens}, {HIDDEN}] device [64, {tokens}, 64] / [64, {HIDDEN}, 1] fp16
    op out: out[{HIDDEN}*c0 + c1] = identity(table[c1 + {HIDDEN}*IndirectAccess('idx')]) over [c0<{tokens}, c1<{HIDDEN}] gather [idx[c0]] bounds [0..{VOCAB - 1}]
    inputs [idx]
    outputs [out]
    """)


DEFAULT_TABLE = f"[64, {VOCAB}, 64] / [64, {HIDDEN}, 1]"     # hidden sticks outermost
ROWS_OUTER_TABLE = f"[{VOCAB}, 64, 64] / [{HIDDEN}, 64, 1]"   # rows outermost


def test_a_gathered_row_spans_the_whole_dim_it_indexes():
    text = _gather(DEFAULT_TABLE)
    # one token, but any of the 49155 rows may be read: with 2 stick columns per core the
    # span is 2 x 49155 rows of sticks; unsplit, the whole table
    assert _span(text, {"c0": 1, "c1": 32}, "table") == 2 * VOCAB * 128
    assert _span(text, {}, "table") == TABLE_BYTES == 402_677_760
    # rows outermost: the gathered dim comes first, so no split narrows it
    assert _span(_gather(ROWS_OUTER_TABLE), {"c0": 1, "c1": 32}, "table") == TABLE_BYTES


def test_an_argument_in_lx_has_no_device_memory_span():
    text = COPY.replace("buffer y: output float16[1024, 256] device [4, 1024, 64] / "
                        "[64, 256, 1] fp16", "buffer y: output float16[1024, 256] device "
                        "[4, 1024, 64] / [64, 256, 1] fp16 @lx 0")
    graph = parse(text)
    op = graph.ops[0]
    assert op_span(graph, op, {}) == (4 * 1024 * 64 * 2, op.inputs[0])
    graph.buffers["x"].lx_address = 0
    assert op_span(graph, op, {}) == (0, None)


HEAD_BYTES = 4096 * 769 * 128     # the weight's K x vocab sticks x 128 bytes: 384.5 MiB
K_OUTER = "[4096, 769, 64] / [1, 262144, 4096]"      # K outermost, then the vocab's sticks
VOCAB_OUTER = "[769, 4096, 64] / [262144, 1, 4096]"  # what stick_layout picks today


def _lm_head(weight_layout: str) -> str:
    return ir(f"""
    buffer h: input float16[1, {HIDDEN}] device [64, 1, 64] / [64, {HIDDEN}, 1] fp16
    buffer w: constant float16[{VOCAB}, {HIDDEN}] device {weight_layout} fp16
    buffer logits: output float16[1, {VOCAB}] device [769, 1, 64] / [64, {VOCAB}, 1] fp16
    op lm_head: logits[{VOCAB}*c0 + c1] = batchmatmul(h[{HIDDEN}*c0 + r0], w[{HIDDEN}*c1 + r0]) over [c0<1, c1<{VOCAB}, r0<{HIDDEN}] reduce [r0] source "model.py:7"
    inputs [h]
    outputs [logits]
    """)


@pytest.mark.parametrize("strategy", ["cost", "greedy"])
def test_work_division_keeps_a_decode_lm_head_under_the_limit(strategy):
    """[1, 4096] x [49155, 4096]^T, the weight K outermost: N (49155 columns) is not whole
    sticks, so only K splits; on one core the weight spans 384.5 MiB, a K-split halves it
    at least."""
    graph = parse(_lm_head(K_OUTER))
    op = graph.ops[0]
    assert op_span(graph, op, {}) == (HEAD_BYTES, op.inputs[1])
    assert HEAD_BYTES == 403_177_472 > MAX_SPAN_BYTES
    WorkDivision(strategy=strategy).run(graph, CompileContext())
    span = op_span(graph, op, op.core_splits)[0]
    k = op.core_splits["r0"]
    assert k >= 2 and span == 4096 // k * 769 * 128 <= MAX_SPAN_BYTES
    if strategy == "greedy":     # the greedy split falls back to the widest K that fits
        assert op.core_splits == {"c0": 1, "c1": 1, "r0": 32}
    assert verify(graph, ("layouts", "core_splits")) == []


def test_work_division_splits_an_embedding_tables_sticks_for_a_prefill_gather():
    """32 tokens: greedy would give each core one token (rows of the output) and the whole
    384 MiB table; a split of the hidden sticks brings each core's table columns under 256."""
    graph = parse(_gather(DEFAULT_TABLE, tokens=32))
    op = graph.ops[0]
    assert op_span(graph, op, {"c0": 32, "c1": 1})[0] == TABLE_BYTES
    WorkDivision().run(graph, CompileContext())
    assert op.core_splits["c1"] >= 2
    assert op_span(graph, op, op.core_splits)[0] == \
        64 // op.core_splits["c1"] * VOCAB * 128 <= MAX_SPAN_BYTES
    assert verify(graph, ("layouts", "core_splits")) == []


def test_the_verifier_names_a_core_over_the_limit():
    text = _lm_head(K_OUTER).replace("reduce [r0] source", "reduce [r0] cores [c0:1, c1:1, "
                                     "r0:1] source")
    assert verify(parse(text), ("layouts", "core_splits")) == [
        "op 'lm_head' (model.py:7): cores [c0:1, c1:1, r0:1]: one core addresses 384.5 MiB "
        "of w[4096*c1 + r0], over the 256 MiB per-core span limit"]
    assert verify(parse(text.replace("r0:1] source", "r0:2] source")),
                  ("layouts", "core_splits")) == []


def test_the_verifier_checks_an_op_without_splits_once_its_buffers_are_placed():
    text = _lm_head(K_OUTER)
    assert verify(parse(text), ("layouts",)) == []     # work division still to come
    placed = text
    for name, address in (("h", 0), ("w", 8192), ("logits", 8192 + HEAD_BYTES)):
        placed = re.sub(f"(buffer {name}: .* fp16)\n", f"\\1 @hbm {address}\n", placed)
    assert placed.count("@hbm") == 3
    assert verify(parse(placed), ("layouts",)) == [
        "op 'lm_head' (model.py:7): cores none (one core): one core addresses 384.5 MiB "
        "of w[4096*c1 + r0], over the 256 MiB per-core span limit"]


def test_an_lm_head_whose_vocab_sticks_come_first_is_refused():
    """The weight vocab-sticks outermost (stick_layout's choice for Granite today): N is
    not whole sticks, so it cannot split, and a K-split leaves every core all 769 stick
    columns: no split fits."""
    with pytest.raises(UnsupportedProgram) as e:
        WorkDivision().run(parse(_lm_head(VOCAB_OUTER)), CompileContext())
    assert str(e.value) == (
        "op 'lm_head' (model.py:7): no core split keeps each core within the 256 MiB "
        "per-core span limit: at best (cores [c0:1, c1:1, r0:1]) a core addresses 384.5 MiB "
        "of 'w', 769 steps of device dim 0 of [769, 4096, 64] and everything inside them; "
        "tile the op with --tiling FILE.yaml (examples in configs/tiling/) so that each tile "
        "spans less")


def test_a_gather_from_a_table_laid_out_rows_first_is_refused_with_every_offender():
    """A table laid out rows outermost: a gathered row may be any of 49155, so every core
    spans the whole table whatever the split; the LM head beside it is refused too."""
    gather = _gather(ROWS_OUTER_TABLE, tokens=32).replace("bounds [0..49154]",
                                               'bounds [0..49154] source "model.py:3"')
    head = _lm_head(VOCAB_OUTER).splitlines()
    text = "\n".join(gather.splitlines()[:-2] + head[:3] + head[3:4] + gather.splitlines()[-2:])
    with pytest.raises(UnsupportedProgram) as e:
        WorkDivision().run(parse(text.replace("outputs [out]", "outputs [out, logits]")),
                           CompileContext())
    assert str(e.value).splitlines() == [
        "op 'out' (model.py:3): no core split keeps each core within the 256 MiB per-core "
        "span limit: at best (cores [c0:1, c1:1]) a core addresses 384.0 MiB of 'table', "
        "49155 steps of device dim 0 of [49155, 64, 64] and everything inside them; tile the "
        "op with --tiling FILE.yaml (examples in configs/tiling/) so that each tile spans "
        "less",
        "op 'lm_head' (model.py:7): no core split keeps each core within the 256 MiB "
        "per-core span limit: at best (cores [c0:1, c1:1, r0:1]) a core addresses 384.5 MiB "
        "of 'w', 769 steps of device dim 0 of [769, 4096, 64] and everything inside them; "
        "tile the op with --tiling FILE.yaml (examples in configs/tiling/) so that each tile "
        "spans less"]
