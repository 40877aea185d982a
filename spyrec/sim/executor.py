"""Execute one `sdsc_execute`: read the inputs, run the kernel, round once, write the output.

The whole iteration space runs at once (in a few large chunks), not core by core: cores run
disjoint slices of the same computation, so the numbers are the same (reference/C-simulator.md
§5.4), and the per-core split is checked statically (`verify`) and costed (`cost`) instead.

A big op's chunks run on the host's cores (`spyrec.sim.threads`): each chunk converts its slice
of the operands and multiplies it with a one-thread BLAS, so a weight-bound matmul converts and
multiplies on every core at once, in slices that stay in cache. Chunk boundaries depend only on
the op, never on the thread count or the load (one thread runs the same chunks in order), and
chunks write disjoint outputs, so the numbers are the same on any machine (`parallel_safe`
says when an op qualifies).
"""

from __future__ import annotations

import numpy as np

from spyrec.costmodel import MATMUL
from spyrec.errors import SimulatorFault
from spyrec.sim import threads
from spyrec.sim.access import ChunkAccess, one_to_one
from spyrec.sim.binding import Binding, bind
from spyrec.sim.dequant import dequantized
from spyrec.sim.chunking import Chunk, arg_vars, chunks
from spyrec.sim.kernels import KERNELS, Kernel, KernelContext, scatter
from spyrec.sim.memory import Hbm, Lx
from spyrec.sim.numerics import assignable, is_integer, storage_dtype
from spyrec.sim.specs import Execute, OpSpec
from spyrec.sim.torch_kernels import half_matmuls


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


def operand_dtype(spec: OpSpec, compute: np.dtype) -> np.dtype:
    """The dtype the operands are read in: `compute`, but fp16 for a batchmatmul of fp16
    operands into an fp16 output when torch's half matmul is in use (sim/torch_kernels.py:
    the same float32 accumulation and single rounding, without converting the weights)."""
    if spec.op == "batchmatmul" and compute == np.float32 and half_matmuls() and \
            all(storage_dtype(a.device_dtype) == np.float16
                for a in (*spec.value_inputs, spec.output)):
        return np.dtype(np.float16)
    return compute


def run_op(spec: OpSpec, ex: Execute, hbm: Hbm, lx: Lx | None = None) -> None:
    """Execute `spec` once with the operands of `ex` (tile bases, symbol values) on the
    arenas `hbm` and `lx`."""
    kern = KERNELS[spec.op]
    bindings = bind(spec, ex, hbm, lx)
    compute = compute_dtype(spec, kern)
    operands = operand_dtype(spec, compute)
    reduced_axes = tuple(spec.vars.index(v) for v in spec.reduced)
    values_in = [b for b in bindings[:-1] if not b.arg.is_index]
    padding = _padding(spec)

    shared: dict[int, np.ndarray] = {}
    arena_order = kern.cost_class == MATMUL     # BLAS takes either order (`Strided.read`)

    def run_chunk(chunk: Chunk) -> None:
        with np.errstate(all="ignore"):   # inf/NaN are data here, as in eager (per thread)
            access = ChunkAccess(spec, bindings, chunk, hbm, lx, ex.where())
            inputs = [_masked(spec, chunk, _at_rank(
                          shared[i] if i in shared else access.read(b, operands, arena_order),
                          len(chunk.shape)))
                      for i, b in enumerate(values_in)]
            inputs = dequantized(spec, inputs)      # an 8-bit weight converted on chip
            ctx = KernelContext(spec.op, spec.constants, chunk.shape, reduced_axes, compute,
                                chunk.lo, padding)
            result = kern.fn(ctx, inputs)
            _write(spec, bindings[-1], access, result, reduced_axes)

    if parallel_safe(spec, bindings):       # the same chunks whatever the thread count
        work = list(chunks(spec, threads.CHUNK_POINTS))
        shared.update(_invariant_reads(spec, bindings, values_in, work, hbm, lx, ex, operands,
                                       arena_order))
        threads.run_all(run_chunk, work)
        return
    for chunk in chunks(spec):
        run_chunk(chunk)


def _invariant_reads(spec: OpSpec, bindings: list[Binding], values_in: list[Binding],
                     work: list[Chunk], hbm: Hbm, lx: Lx | None, ex: Execute,
                     compute: np.dtype, arena_order: bool) -> dict[int, np.ndarray]:
    """The inputs no chunk boundary cuts (a matmul's activations when its weight is split over
    N), read once for every chunk instead of once per chunk; chunks only read them. HBM args
    only: an LX arg's values also depend on the core a point runs on, which the split var can
    change even where the arg's coordinates do not use it."""
    if len(work) < 2:
        return {}
    split = next(v for v, a, b in zip(spec.vars, work[0].lo, work[1].lo) if a != b)
    first = ChunkAccess(spec, bindings, work[0], hbm, lx, ex.where())
    shared = {i: first.read(b, compute, arena_order) for i, b in enumerate(values_in)
              if b.lx is None and split not in arg_vars(spec, b.arg)}
    for values in shared.values():
        values.flags.writeable = False      # a kernel that wrote its input would fail here
    return shared


def parallel_safe(spec: OpSpec, bindings: list[Binding]) -> bool:
    """Whether the op's chunks may run concurrently with the same result as one after another:
    the output written one point per element over the whole space (no scatter, no two chunks
    on one element) and no input sharing a byte with the output in the same arena (an in-place
    op would read what another chunk writes). An LX output's stick tags are per stick; two
    chunks sharing a partial stick write it the same tag. Small ops are not worth a thread:
    some arg must span more than `CHUNK_POINTS`."""
    out = bindings[-1]
    if scatter.is_scatter(spec, out.arg):
        return False
    if max(a.extent_bytes // a.itemsize for a in spec.args) <= threads.CHUNK_POINTS:
        return False
    whole = Chunk(spec.vars, (0,) * len(spec.vars), tuple(spec.extents))
    if not one_to_one(spec, out, whole):
        return False
    arena, lo, hi = _byte_range(out)
    return all(b_arena != arena or hi <= b_lo or b_hi <= lo
               for b_arena, b_lo, b_hi in map(_byte_range, bindings[:-1]))


def _byte_range(b: Binding) -> tuple[str, int, int]:
    """The arena and bytes an arg may touch (in LX: every core's window, at the same offset
    of each core's LX)."""
    start = b.base_elems * b.arg.itemsize
    return ("lx" if b.lx is not None else "hbm"), start, start + b.arg.extent_bytes


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
    stored = assignable(np.broadcast_to(result, shape), b.arg.device_dtype, what)
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
