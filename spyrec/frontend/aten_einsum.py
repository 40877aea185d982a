"""einsum as views, sums and one batched matmul per contraction.

Mamba-2's chunked scan (and every model built on it: Granite 4 hybrid, Bamba, Falcon-H1)
writes its four contractions as einsums (`bclhn,bcshn->bclsh`, ...). Each pair of operands
becomes one `batchmatmul`: the letters both operands and the result keep are batch dims, the
letters only one operand and the result keep are its M (left) or N (right), the letters both
operands share but the result drops are K. Several letters in one role are merged by a
reshape, a letter only one operand has and nothing else needs is summed first. Everything
else is a permute or reshape (views: index arithmetic, no copy). More than two operands
contract left to right, as torch.einsum does without opt_einsum. A pair sharing no dropped
letter (an outer product) is one broadcast `mul`, not a matmul of inner size 1.
"""

from __future__ import annotations

import math

from spyrec.frontend.aten_reductions import matmul, reduce
from spyrec.frontend.context import LoweringContext
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue


@lowering("aten.einsum.default")
def _einsum(ctx, node, equation, operands, path=None):
    terms, result = _parse(ctx, equation, len(operands))
    out_dtype = ctx.out_meta()[1]
    value, letters = operands[0], terms[0]
    for k in range(1, len(operands)):
        later = set(result).union(*terms[k + 1:])
        value, letters = _contract(ctx, value, letters, operands[k], terms[k], later,
                                   out_dtype)
    value, letters = _sum_unused(ctx, value, letters, set(result), out_dtype)
    return value.permute([letters.index(ch) for ch in result])


def _parse(ctx, equation: str, count: int) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    if "." in eq:
        ctx.refuse("with an ellipsis", "name every dim with a letter")
    lhs, arrow, result = eq.partition("->")
    terms = lhs.split(",")
    if not arrow:  # implicit output: the letters used once, sorted
        result = "".join(sorted(ch for ch in set(lhs) - {","} if lhs.count(ch) == 1))
    if len(terms) != count or any(len(set(t)) != len(t) for t in terms):
        ctx.refuse(f"with equation {equation!r}", "a letter repeated inside one operand "
                   "(a diagonal) is not lowered; take the diagonal first")
    return terms, result


def _sum_unused(ctx, x: TensorValue, letters: str, needed: set[str], dtype: str):
    drop = [i for i, ch in enumerate(letters) if ch not in needed]
    if not drop:
        return x, letters
    kept = "".join(ch for ch in letters if ch in needed)
    return reduce(ctx, "sum", x, drop, False, dtype), kept


def _contract(ctx: LoweringContext, a: TensorValue, la: str, b: TensorValue, lb: str,
              later: set[str], dtype: str) -> tuple[TensorValue, str]:
    a, la = _sum_unused(ctx, a, la, later | set(lb), dtype)
    b, lb = _sum_unused(ctx, b, lb, later | set(la), dtype)
    batch = [ch for ch in la if ch in lb and ch in later]
    k = [ch for ch in la if ch in lb and ch not in later]
    m = [ch for ch in la if ch not in lb]
    n = [ch for ch in lb if ch not in la]
    size = {**dict(zip(la, a.shape)), **dict(zip(lb, b.shape))}
    if not k:  # nothing to contract: a broadcast product (an outer product per batch)
        left = _placed(a, la, batch + m + n)
        right = _placed(b, lb, batch + m + n)
        return ctx.pointwise("mul", [left, right], out_dtype=dtype,
                             shape=[size[ch] for ch in batch + m + n]), "".join(batch + m + n)
    lead = [size[ch] for ch in batch]
    left = _grouped(a, la, batch, [m, k], size)
    right = _grouped(b, lb, batch, [k, n], size)
    product = matmul(ctx, left, right, dtype)
    shape = lead + [size[ch] for ch in m] + [size[ch] for ch in n]
    return product.reshape(shape), "".join(batch + m + n)


def _placed(x: TensorValue, letters: str, order: list[str]) -> TensorValue:
    """x permuted to `order`'s letters it has, with a size-1 dim for each it lacks."""
    own = [ch for ch in order if ch in letters]
    x = x.permute([letters.index(ch) for ch in own])
    for i, ch in enumerate(order):
        if ch not in letters:
            x = x.unsqueeze(i)
    return x


def _grouped(x: TensorValue, letters: str, batch: list[str], groups: list[list[str]],
             size: dict[str, int]) -> TensorValue:
    """x permuted to (batch..., group 0..., group 1...) and each group merged into one dim
    (size 1 when the group is empty)."""
    order = batch + groups[0] + groups[1]
    x = x.permute([letters.index(ch) for ch in order])
    shape = [size[ch] for ch in batch] + [math.prod(size[ch] for ch in g) for g in groups]
    return x.reshape(shape)
