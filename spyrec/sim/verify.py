"""Static checks of a loaded program: what must hold before any data moves.

The schema says what each file looks like; these checks say the files agree with each other and
with the op table (docs/formats.md): the op exists with the right number of inputs and the
constants it needs, outputs are indexed by every output var and by no reduced var, index
tensors are integers, the per-core split covers the iteration space exactly once, and every
`arg_start_bytes` is the address the arg's coordinates give at its core's first point. The last
two cost nothing at run time and catch work-division and codegen bugs that a vectorized
simulation (which ignores cores) would otherwise hide.

`op_problems` returns the reasons as text (tests compare them); `verify_program` raises one
InputFileError listing every problem of every op.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from spyrec.device import CORES
from spyrec.errors import InputFileError
from spyrec.indexing import Indirect, Var, evaluate
from spyrec.sim.kernels import KERNELS
from spyrec.sim.kernels.scatter import MODES as SCATTER_MODES
from spyrec.sim.program import OutputProgram
from spyrec.sim.numerics import is_integer
from spyrec.sim.specs import OpSpec

MAX_CORES = CORES
_MAX_COVERAGE_CELLS = 1 << 20


def verify_program(program: OutputProgram) -> None:
    problems = []
    for spec in program.ops.values():
        problems += [f"{spec.file}: {p}" for p in op_problems(spec)]
    problems += unwritten_outputs(program)
    if problems:
        raise InputFileError(f"{program.out_dir} is not a consistent spyrec output directory:\n"
                             + "\n".join(f"  - {p}" for p in problems))


def unwritten_outputs(program: OutputProgram) -> list[str]:
    """Outputs (and returned buffers) no executed op writes: reading them would return whatever
    the arena holds (NaN), so a bundle with an op removed would pass for a result."""
    written = {program.ops[execute.file].output.name for _, execute in program.trace
               if execute.file in program.ops}
    manifest = program.manifest
    names = list(manifest.outputs) + [name for _, name in manifest.mutated_buffers]
    problems = []
    for name in names:
        tensor = manifest.tensors[name]
        if tensor.role in ("input", "constant") or tensor.numel == 0 or name in written:
            continue
        problems.append(f"manifest.json: output '{name}' is written by no executed op")
    return problems


def op_problems(spec: OpSpec) -> list[str]:
    kern = KERNELS.get(spec.op)
    if kern is None:
        return [f"op '{spec.op}' is not in the op table (known: {', '.join(sorted(KERNELS))})"]
    out = []
    expected = kern.inputs_expected(spec.constants)
    if len(spec.value_inputs) != expected:
        out.append(f"op '{spec.op}' takes {expected} value input(s) with constants "
                   f"{sorted(spec.constants)}, got {len(spec.value_inputs)}")
    missing = [k for k in kern.requires if k not in spec.constants]
    if missing:
        out.append(f"op '{spec.op}' needs op_info.constants {missing}")
    if spec.reduced and not spec.is_reduction:
        out.append(f"reduced vars {list(spec.reduced)} on an op with is_reduction false")
    out += _output_problems(spec)
    for a in spec.index_args:
        if not is_integer(a.device_dtype):
            out.append(f"index tensor '{a.name}' has device dtype {a.device_dtype}, not an "
                       f"integer")
    out += _core_problems(spec)
    return out


def _output_problems(spec: OpSpec) -> list[str]:
    # an LX output's own coordinates are core-local; the tile coordinates say which element
    # of the whole tile each point writes (a var split over cores picks the core)
    coords = spec.output.tile_coordinates if spec.output.in_lx and \
        spec.output.tile_coordinates else spec.output.coordinates
    used = {leaf for c in coords for leaf in c.free_atoms()}
    out = []
    names = {leaf.name for leaf in used if isinstance(leaf, Var)}
    gathered = {leaf.tensor for leaf in used if isinstance(leaf, Indirect)}
    if gathered and spec.constants.get("scatter") not in SCATTER_MODES:
        out.append(f"the output uses IndirectAccess (a scatter) but op_info.constants.scatter "
                   f"is {spec.constants.get('scatter')!r}, not one of {list(SCATTER_MODES)}")
    for a in spec.index_args:   # a scatter's destination also varies with its index reads
        if a.name in gathered:
            names |= {leaf.name for c in a.coordinates for leaf in c.free_atoms()
                      if isinstance(leaf, Var)}
    for v in spec.reduced:
        if v in names:
            out.append(f"reduced var {v} indexes the output")
    replica = spec.replica_vars if spec.output.in_lx else ()
    for v, (n, _) in spec.iteration_space.items():
        if spec.constants.get("scatter") in SCATTER_MODES:
            break                # a scatter says what several points on one element do
        if v in replica:
            continue             # a replica dim: each core writes its own LX once
        if v not in spec.reduced and n > 1 and v not in names:
            out.append(f"output var {v} (range {n}) does not index the output, so every "
                       f"output element would be written {n} times")
    return out


def _core_problems(spec: OpSpec) -> list[str]:
    slices = math.prod(k for _, k in spec.iteration_space.values())
    out = []
    if slices > MAX_CORES:
        out.append(f"iteration_space asks for {slices} core slices; the device has {MAX_CORES}")
    if len(spec.cores) != slices:
        out.append(f"iteration_space asks for {slices} core slices, cores lists "
                   f"{len(spec.cores)}")
    ids = [c.core for c in spec.cores]
    if len(set(ids)) != len(ids):
        out.append(f"a core appears twice in cores: {ids}")
    for c in spec.cores:
        for v, (lo, hi) in c.ranges.items():
            if not 0 <= lo <= hi <= spec.iteration_space[v][0]:
                out.append(f"core {c.core}: range {v} [{lo}, {hi}) is outside "
                           f"[0, {spec.iteration_space[v][0]})")
    if not out:
        out += _coverage_problems(spec)
        out += _start_problems(spec)
    return out


def _coverage_problems(spec: OpSpec) -> list[str]:
    """The core boxes must tile the iteration space: every point run by exactly one core.
    Decided once per distinct space and split (`OpSpec.split_signature`): a transformer's
    layers repeat them (Granite-8B width d40: 2,056 ops; 0.8 s of loading before)."""
    return list(_coverage(spec.split_signature))


@lru_cache(maxsize=1 << 12)
def _coverage(signature: tuple) -> tuple[str, ...]:
    """`_coverage_problems` of a space and its cores' boxes (`OpSpec.split_signature`)."""
    space, cores = signature
    vars_ = tuple(v for v, _ in space)
    extents = tuple(n for _, (n, _) in space)
    boxes = [tuple(dict(ranges)[v] for v in vars_) for _, ranges in cores]
    cuts = [np.array(sorted({0, n} | {b for box in boxes for b in box[i]}))
            for i, n in enumerate(extents)]
    cells = math.prod(len(c) - 1 for c in cuts)
    if cells > _MAX_COVERAGE_CELLS:   # not a product split: settle for the volume
        covered = sum(math.prod(hi - lo for lo, hi in box) for box in boxes)
        return () if covered == math.prod(extents) else (
            f"cores cover {covered} iteration points, the space has {math.prod(extents)}",)
    count = np.zeros([len(c) - 1 for c in cuts], dtype=np.int32)
    for box in boxes:
        count[tuple(slice(int(np.searchsorted(cut, lo)), int(np.searchsorted(cut, hi)))
                    for cut, (lo, hi) in zip(cuts, box))] += 1
    if (count == 1).all():
        return ()
    kind = "twice" if (count > 1).any() else "by no core"
    bad = np.argwhere(count != 1)[0]
    at = ", ".join(f"{v}={int(cut[i])}" for v, cut, i in zip(vars_, cuts, bad))
    return (f"the cores do not split the iteration space exactly: the point {at} is run "
            f"{kind}",)


def _start_problems(spec: OpSpec) -> list[str]:
    """Each core's arg_start_bytes against the arg's coordinates at the core's first point,
    evaluated for all cores at once (one numpy evaluation per coordinate)."""
    cores = [c for c in spec.cores if c.points]
    if not cores:
        return []
    env = {Var(v): np.array([c.ranges[v][0] for c in cores], dtype=np.int64) for v in spec.vars}
    out = []
    for i, arg in enumerate(spec.args):
        if arg.hbm_address is None:
            continue
        if any(isinstance(leaf, Indirect) for c in arg.coordinates for leaf in c.free_atoms()):
            continue                      # data-dependent: null or any value is accepted
        offset = sum((np.asarray(evaluate(c, env), dtype=np.int64) * stride for c, stride in
                      zip(arg.coordinates, arg.layout.device_strides_elems)), np.int64(0))
        expected = np.broadcast_to(arg.hbm_address + offset * arg.itemsize, (len(cores),))
        for core, want in zip(cores, expected.tolist()):
            given = core.arg_start_bytes[i]
            if given is None:
                out.append(f"core {core.core}: arg_start_bytes[{i}] ('{arg.name}') is null, "
                           f"but its address does not depend on data: {want}")
            elif given != want:
                out.append(f"core {core.core}: arg_start_bytes[{i}] ('{arg.name}') is "
                           f"{given}, but its coordinates at the core's first point give {want}")
    return out
