"""Ops of the stored (pre-dispatch / training) op set that torch would otherwise decompose.

`torch.export.save` stores the graph before decomposition. The fast front end lowers what it
finds there directly, so these ops need lowerings of their own rather than torch's
`run_decompositions`: inference no-ops (dropout in eval, same-dtype `to`), shape-only views
(flatten, unflatten) and one-line composites (square). Each says what it is in eager terms.
"""

from __future__ import annotations

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.aten_ops import binary
from spyrec.frontend.lower import lowering, source_of


@lowering("aten.dropout.default", "aten.feature_dropout.default", "aten.alpha_dropout.default",
          "aten.feature_alpha_dropout.default")
def _dropout(ctx, node, x, p=0.5, train=False):
    """Identity at inference (`train=False`, or p = 0); training-mode dropout is random."""
    if train and p:
        raise UnsupportedProgram(f"{node.target} with train=True and p={p} (node {node.name}, "
                                 f"{source_of(node) or 'unknown source line'}): export the "
                                 f"model in eval mode (model.eval()) so dropout is the identity")
    return x


@lowering("aten.flatten.using_ints")
def _flatten(ctx, node, x, start_dim=0, end_dim=-1):
    return x.reshape(ctx.out_meta()[0])


@lowering("aten.unflatten.int")
def _unflatten(ctx, node, x, dim, sizes):
    return x.reshape(ctx.out_meta()[0])


@lowering("aten.square.default")
def _square(ctx, node, x):
    return binary(ctx, "mul", x, x)


@lowering("aten.to.dtype_layout", "aten.to.device", "aten.to.other", "aten.type_as.default",
          "aten.to.prim_dtype")
def _to(ctx, node, x, *args, **kwargs):
    """A cast when the dtype changes (one rounding, as eager), else the tensor itself: spyrec
    has one device, so device and layout arguments change nothing."""
    shape, dtype = ctx.out_meta()
    if dtype == x.dtype:
        return x
    return ctx.pointwise("identity", [x], out_dtype=dtype, shape=shape)
