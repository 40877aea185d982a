"""Lowerings of scans (cumulative sums) over runtime data.

A cumsum whose input depends only on shapes and weights is folded (fold.py); what reaches
here reads runtime data: RoBERTa's position ids `cumsum(input_ids != pad)`, BLOOM's alibi from
`attention_mask.cumsum(-1)`.

It is a Hillis–Steele scan built from existing device ops: ceil(log2 n) rounds, round k adding
to every element the one 2^k places before it (one `add` over the tail, one `identity` copying
the head, both writing the round's buffer). Why this and not a matmul with a constant
triangular matrix:
- integers must be exact for any length: each round's adds are integer adds (the simulator
  and the device add ints exactly), while a matmul accumulates in fp32 and loses integers
  above 2^24;
- the matmul's constant is n x n per scanned length (64 MiB in fp32 for n = 4096) and its work
  n^2 per row; the scan reads and writes each element once per round, n log n in all;
- the same lowering serves floats: intermediates are fp32 (eager accumulates fp16/bf16 in fp32
  too) and the last round rounds once to the result dtype. The association differs from
  eager's sequential order by rounding only, within the dtype's tolerance.
"""

from __future__ import annotations

from spyrec.frontend.context import LoweringContext, iteration_vars, names_of
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue
from spyrec.ir import Access

FLOATS = ("float16", "bfloat16", "float32")


@lowering("aten.cumsum.default")
def _cumsum(ctx: LoweringContext, node, x: TensorValue, dim: int, dtype=None) -> TensorValue:
    """cumsum(x, dim, dtype=): x cast to the result dtype first (eager's `dtype=` and its
    bool/int -> int64 promotion), then scanned with fp32 (floats) or int64 (ints) partials."""
    shape, out_dtype = ctx.out_meta()
    if x.dtype != out_dtype and not (_integral(x.dtype) and _integral(out_dtype)):
        x = ctx.pointwise("identity", [x], out_dtype=out_dtype, shape=x.shape)
    if x.rank == 0 or x.numel == 0 or x.shape[dim % x.rank] == 1:
        return ctx.pointwise("identity", [x], out_dtype=out_dtype, shape=shape)
    partial = "float32" if out_dtype in FLOATS else "int64"
    return scan_add(ctx, x, dim % x.rank, partial, out_dtype)


def _integral(dtype: str) -> bool:
    """bool and integer dtypes: their values reach an integer add unchanged."""
    return dtype not in FLOATS and dtype != "float64"


def scan_add(ctx: LoweringContext, x: TensorValue, dim: int, partial: str,
             out_dtype: str) -> TensorValue:
    """Inclusive prefix sums of `x` along `dim` (length n > 1) in ceil(log2 n) rounds; every
    round but the last writes `partial`, the last writes `out_dtype` (one rounding)."""
    n, shift, prev = x.shape[dim], 1, x
    while shift < n:
        last = 2 * shift >= n
        prev = _scan_round(ctx, prev, dim, shift, out_dtype if last else partial)
        shift *= 2
    return prev


def _scan_round(ctx: LoweringContext, prev: TensorValue, dim: int, shift: int,
                dtype: str) -> TensorValue:
    """y[i] = prev[i] + prev[i - shift] for i >= shift, y[i] = prev[i] below: two ops writing
    disjoint parts of one new buffer (as `cat` does), so no element is read out of range."""
    out = ctx.new_value(prev.shape, dtype, role="scan")
    cvars = iteration_vars(prev.shape)
    head = [(v, shift if i == dim else n) for i, (v, n) in enumerate(zip(names_of(cvars),
                                                                         prev.shape))]
    ctx.emit("identity", out, head, [Access(prev.buffer, prev.at(cvars))], out.at(cvars))
    moved = list(cvars)
    moved[dim] = cvars[dim] + shift
    tail = [(v, n - shift if i == dim else n) for i, (v, n) in enumerate(zip(names_of(cvars),
                                                                             prev.shape))]
    ctx.emit("add", out, tail, [Access(prev.buffer, prev.at(moved)),
                                Access(prev.buffer, prev.at(cvars))], out.at(moved))
    return out
