"""Execute one `sdsc_execute`: read the inputs, run the kernel, round once, write the output.

The whole iteration space runs at once (in a few large chunks), not core by core: cores run
disjoint slices of the same computation, so the numbers are the same (reference/C-simulator.md
§5.4), and the per-core split is checked statically (`verify`) and costed (`cost`) instead.
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import SimulatorFault
from spyrec.sim.access import Binding, Chunk, ChunkAccess, bind, chunks, one_to_one
from spyrec.sim.kernels import KERNELS, Kernel, KernelContext, scatter
from spyrec.sim.memory import Hbm, Lx
from spyrec.sim.numerics import is_integer, to_storage
from spyrec.sim.specs import Execute, OpSpec


def compute_dtype(spec: OpSpec, kern: Kernel) -> np.dtype:
    """float32 unless every operand that picks the type is an integer (then int64).

    Torch promotes int op float to float, and a float scalar counts as float; comparisons of
    ints stay integer. `fill` has no inputs: its output dtype decides.
    """
    if kern.float_only:
        return np.dtype(np.float32)
    dtypes = [a.device_dtype for a in spec.value_inputs[kern.conditions:]]
    if not spec.value_inputs:
        dtypes = [spec.output.device_dtype]
    floats = any(not is_integer(d) for d in dtypes) or any(
        isinstance(v, float) for v in spec.constants.values())
    return np.dtype(np.float32 if floats else np.int64)


def run_op(spec: OpSpec, ex: Execute, hbm: Hbm, lx: Lx | None = None) -> None:
    """Execute `spec` once with the operands of `ex` (tile bases, symbol values) on the
    arenas `hbm` and `lx`."""
    kern = KERNELS[spec.op]
    bindings = bind(spec, ex, hbm, lx)
    compute = compute_dtype(spec, kern)
    reduced_axes = tuple(spec.vars.index(v) for v in spec.reduced)
    values_in = [b for b in bindings[:-1] if not b.arg.is_index]
    padding = _padding(spec)
    with np.errstate(all="ignore"):   # inf/NaN are data here, as in eager
        for chunk in chunks(spec):
            access = ChunkAccess(spec, bindings, chunk, hbm, lx, ex.where())
            inputs = [_masked(spec, chunk, _at_rank(access.read(b, compute),
                                                    len(chunk.shape)))
                      for b in values_in]
            ctx = KernelContext(spec.op, spec.constants, chunk.shape, reduced_axes, compute,
                                chunk.lo, padding)
            result = kern.fn(ctx, inputs)
            _write(spec, bindings[-1], access, result, reduced_axes)


def _padding(spec: OpSpec) -> tuple[int, ...]:
    """Per axis, the padding points at the end of a masked reduced var (none elsewhere)."""
    extents = dict(zip(spec.vars, spec.extents))
    pads = {v: count for v, (start, count) in spec.masking.items()
            if start + count == extents[v]}
    return tuple(pads.get(v, 0) for v in spec.vars)


def _masked(spec: OpSpec, chunk, values: np.ndarray) -> np.ndarray:
    """Padding lanes of a reduced partial stick read as the mask constant (coordinateMasking_,
    `samv-maskvalue`): the reduction's identity, so padding never counts as data."""
    for v, (start, count) in spec.masking.items():
        axis = spec.vars.index(v)
        lo = chunk.lo[axis]
        coords = np.arange(lo, chunk.hi[axis]).reshape(
            [-1 if a == axis else 1 for a in range(len(chunk.shape))])
        pad = (coords >= start) & (coords < start + count)
        if pad.any():
            values = np.where(pad, values.dtype.type(spec.constants["samv-maskvalue"]),
                              values)
    return values


def _at_rank(values: np.ndarray, rank: int) -> np.ndarray:
    """An operand read at no varying coordinate comes back 0-d; kernels index its axes."""
    return values.reshape((1,) * (rank - values.ndim) + values.shape)


def _write(spec: OpSpec, b: Binding, access: ChunkAccess, result: np.ndarray,
           reduced_axes: tuple[int, ...]) -> None:
    chunk = access.chunk
    shape = tuple(1 if a in reduced_axes else n for a, n in enumerate(chunk.shape))
    result = np.asarray(result)
    assert np.broadcast_shapes(result.shape, shape) == shape, (spec.op, result.shape, shape)
    if scatter.is_scatter(spec, b.arg):
        if b.lx is not None:
            raise SimulatorFault(f"{spec.describe()}: a scatter into LX ('{b.arg.name}') is "
                                 f"not simulated; keep scatter outputs in HBM")
        scatter.write(spec, b, access, result, shape)
        return
    what = f"output '{b.arg.name}' of {spec.describe()}"
    unique = one_to_one(spec, b, chunk)
    form = access.strided(b) if unique else None
    stored = to_storage(np.broadcast_to(result, shape), b.arg.device_dtype, what)
    if form is not None and form.lengths == shape:
        form.write(access.base_view(b), stored)
    else:
        where = np.broadcast_to(access.relative(b), shape)
        if not unique:
            _check_unique(spec, b, chunk, where)
        access.base_view(b)[where] = stored
    if b.lx is not None:
        access.mark_written(b, shape)


def _check_unique(spec: OpSpec, b: Binding, chunk: Chunk, where: np.ndarray) -> None:
    """Two iteration points writing one element is a codegen bug, never a valid program."""
    if where.size < 2:
        return
    flat = where.ravel()
    lo = flat.min()
    counts = np.bincount(flat - lo)
    if counts.max() > 1:
        dup = int(np.argmax(counts > 1)) + lo
        first = np.unravel_index(int(np.argmax(flat == dup)), where.shape)
        raise SimulatorFault(
            f"{spec.describe()}: output '{b.arg.name}' writes device element "
            f"{dup + b.base_elems} more than once (first at "
            f"{chunk.point(tuple(int(i) for i in first), where.shape)}); its coordinates "
            f"{list(b.arg.coordinate_texts())} are not one-to-one")
