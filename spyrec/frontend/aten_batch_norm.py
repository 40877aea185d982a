"""Lowerings of inference batch norm (vision and audio front ends).

An eval batch norm that is a convolution's only user, with constant statistics and affine
parameters, is folded into that convolution's constant weights and bias (`aten_conv.py` asks
`folded_batch_norm`; its statistics are dropped too), and lowers to nothing. Any other eval
batch norm is a per-channel affine y = x * scale + shift (mul, add), the scale and shift
computed at compile time when the statistics are constants, on the device otherwise. Training
mode is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spyrec.frontend.aten_reductions import FP32
from spyrec.frontend.context import LoweringContext, Scalar, Unlowered
from spyrec.frontend.indexed import constant_numbers
from spyrec.frontend.program import Ref
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue

BATCH_NORMS = ("aten.batch_norm.default",
               "aten._native_batch_norm_legit_no_training.default")


@dataclass(frozen=True)
class BatchNormFold:
    """What folding batch norm `node` into the conv before it multiplies (`scale`) and adds
    (`shift`) per output channel."""

    node: str
    scale: np.ndarray
    shift: np.ndarray

    def __iter__(self):
        return iter((self.scale, self.shift))


def folded_batch_norm(ctx: LoweringContext, node) -> BatchNormFold | None:
    """(scale, shift) per output channel of an eval batch norm that is this conv's only
    user and has constant statistics and affine parameters, else None."""
    users = ctx.program.users(node.name)
    if len(users) != 1 or users[0].target not in BATCH_NORMS:
        return None
    bn = users[0]
    args = _bn_args(bn)
    if args is None or args["input"] != Ref(node.name):
        return None
    arrays = {}
    for key in ("weight", "bias", "mean", "var"):
        ref = args[key]
        arrays[key] = None if ref is None else _parameter(ctx, ref)
        if ref is not None and arrays[key] is None:
            return None
    if arrays["mean"] is None or arrays["var"] is None:
        return None
    scale, shift = _scale_shift(arrays["mean"], arrays["var"], arrays["weight"],
                                arrays["bias"], args["eps"])
    return BatchNormFold(bn.name, scale, shift)


def _scale_shift(mean: np.ndarray, var: np.ndarray, weight: np.ndarray | None,
                 bias: np.ndarray | None, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Batch norm as y = x * scale + shift per channel, in float64:
    scale = weight / sqrt(var + eps), shift = bias - mean * scale."""
    scale = 1.0 / np.sqrt(var.astype(np.float64) + float(eps))
    if weight is not None:
        scale = scale * weight.astype(np.float64)
    shift = -mean.astype(np.float64) * scale
    if bias is not None:
        shift = shift + bias.astype(np.float64)
    return scale, shift


def _bn_args(bn) -> dict | None:
    """The arguments of a batch norm node by meaning (both schemas), or None in training."""
    names = ("input", "weight", "bias", "mean", "var", "training", "momentum", "eps") \
        if bn.target == "aten.batch_norm.default" else \
        ("input", "weight", "bias", "mean", "var", "momentum", "eps")
    args = dict(zip(names, bn.args))
    args.update(bn.kwargs)
    if args.get("training", False):
        return None
    args.setdefault("eps", 1e-5)
    return args


def _parameter(ctx: LoweringContext, ref) -> np.ndarray | None:
    """The stored value of a parameter or buffer placeholder, or None."""
    if not isinstance(ref, Ref):
        return None
    spec = next((s for s in ctx.program.inputs if s.name == ref.name), None)
    if spec is None or spec.kind == "user_input" or spec.target is None:
        return None
    fqn = ctx.program.aliases.get(spec.target, spec.target)
    value = ctx.program.state.get(fqn)
    if value is None or ctx.program.state_dtypes.get(fqn) == "bfloat16":
        return None
    return np.asarray(value)


@lowering("aten.batch_norm.default")
def _batch_norm(ctx, node, x, weight, bias, running_mean, running_var, training, momentum,
                eps, cudnn_enabled=True):
    if training:
        ctx.refuse("in training mode", "export the model in eval mode (model.eval())")
    return batch_norm(ctx, node, x, weight, bias, running_mean, running_var, eps)


@lowering("aten._native_batch_norm_legit_no_training.default")
def _batch_norm_no_training(ctx, node, x, weight, bias, running_mean, running_var, momentum,
                            eps):
    y = batch_norm(ctx, node, x, weight, bias, running_mean, running_var, eps)
    unused = Unlowered(f"{node.name}: the saved statistics of a batch norm (empty in eval)")
    return (y, unused, unused)


def batch_norm(ctx: LoweringContext, node, x: TensorValue, weight, bias, mean, var_,
               eps: float) -> TensorValue:
    """y = (x - mean) / sqrt(var + eps) * weight + bias per channel (dim 1). Folded into the
    preceding conv when it could be (that conv already wrote y); else a per-channel affine
    y = x * scale + shift, the scale and shift computed at compile time when the statistics
    are constants, on the device otherwise."""
    if node.name in ctx.folded_batch_norms:
        for t in (weight, bias, mean, var_):
            if isinstance(t, TensorValue):
                ctx.release_parameter(node, t)
        return x
    dtype = ctx.out_meta()[1]
    chan = [1] * x.rank
    chan[1 if x.rank > 1 else 0] = x.shape[1 if x.rank > 1 else 0]
    stats = [constant_numbers(ctx, t) if isinstance(t, TensorValue) else None
             for t in (mean, var_)]
    if all(s is not None for s in stats) and all(
            t is None or constant_numbers(ctx, t) is not None for t in (weight, bias)):
        weight_values, bias_values = (None if t is None else constant_numbers(ctx, t)
                                      for t in (weight, bias))
        scale, shift = _scale_shift(stats[0], stats[1], weight_values, bias_values, eps)
        s = ctx.new_constant(scale.astype(np.float32).reshape(chan), FP32, "scale")
        b = ctx.new_constant(shift.astype(np.float32).reshape(chan), FP32, "shift")
        for t in (weight, bias, mean, var_):
            if isinstance(t, TensorValue):
                ctx.release_parameter(node, t)
        y = ctx.pointwise("mul", [x, s], out_dtype=FP32, shape=x.shape)
        return ctx.pointwise("add", [y, b], out_dtype=dtype, shape=x.shape)
    xc = ctx.pointwise("sub", [x, mean.reshape(chan)], out_dtype=FP32, shape=x.shape)
    ve = ctx.pointwise("add", [var_.reshape(chan), Scalar(eps)], out_dtype=FP32,
                       constants={"scalar": float(eps), "scalar_side": "rhs"}, shape=chan)
    r = ctx.pointwise("rsqrt", [ve], out_dtype=FP32, shape=chan)
    last = weight is None and bias is None
    y = ctx.pointwise("mul", [xc, r], out_dtype=dtype if last else FP32, shape=x.shape)
    steps = [(op, t) for op, t in (("mul", weight), ("add", bias)) if t is not None]
    for i, (op, t) in enumerate(steps):
        y = ctx.pointwise(op, [y, t.reshape(chan)], shape=x.shape,
                          out_dtype=dtype if i == len(steps) - 1 else FP32)
    return y

