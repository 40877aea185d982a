"""simulate(): execute a compiled output directory on host arrays.

Order of work, each step able to fail with a message that names the file: load and validate the
directory (schemas, structure), verify it statically (op table, core splits, start addresses),
check the inputs (binding any symbolic length from their shapes and padding them to the
maximum the program is planned for: `lengths.py`), place every tensor in HBM (alignment,
bounds, live overlaps), transfer inputs and constants into their layouts (padding stays NaN),
run every `sdsc_execute` in bundle order, read the outputs back (cut to the bound lengths);
the cost estimate is computed when asked for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np

from spyrec.hostmem import no_automatic_collections
from spyrec.sim.torch_kernels import TORCH_FROM_BYTES, torch_run, use_torch
from spyrec.costmodel import CostParams
from spyrec.sim.program_cost import program_cost
from spyrec.sim import threads
from spyrec.sim.prefetch import SMALL_BYTES, Prefetcher
from spyrec.sim.relayouts import Relayouts
from spyrec.sim.executor import run_op
from spyrec.sim.inputs import check_inputs
from spyrec.sim.weights import constant_bytes
from spyrec.sim.lengths import bind_lengths, padded_to_maximum
from spyrec.sim.directory import load_output_dir
from spyrec.sim.fused import expand_executes
from spyrec.sim.program import OutputProgram
from spyrec.device import CORES, LX_USABLE_BYTES_PER_CORE
from spyrec.sim.memory import ALWAYS_LIVE, Allocation, Hbm, Lx
from spyrec.sim.numerics import FILL_VALUE, storage_dtype
from spyrec.sim.transfer import read_tensor, write_tensor

Log = Callable[[str], None]


@dataclass(frozen=True)
class SimResult:
    """Outputs in program order, then the mutated buffers; host form (bf16 as uint16 bits;
    `output_dtypes` says which). `names` are their outputs.npz keys: output_0, …, then FQNs.

    `cost` is estimated on first use: it is data-independent, `spyrec run` prints it only
    under `--report`, and it costs a sixth of a run of a 2-layer decoder."""

    outputs: list[np.ndarray]
    output_dtypes: list[str]
    program: OutputProgram = field(repr=False, compare=False)
    wall_s: float
    names: tuple[str, ...] = ()

    @cached_property
    def cost(self) -> dict:
        return program_cost(self.program)


def _quiet(_: str) -> None:
    pass


def cost_for_directory(out_dir: str | Path, params: CostParams | None = None) -> dict:
    """Cost estimate of an output directory on disk, no inputs needed (with the parameters it
    was compiled with unless `params` says others)."""
    return program_cost(load_output_dir(out_dir), params)


def live_ranges(program: OutputProgram) -> dict[str, tuple[int, int]]:
    """First and last execution that touches each tensor; inputs, constants and outputs are
    live throughout. Args are matched to tensors by name, else by address."""
    manifest = program.manifest
    live: dict[str, tuple[int, int]] = {}
    by_address = sorted((t for t in manifest.tensors.values() if t.hbm_address is not None),
                        key=lambda t: t.hbm_address)
    for i, (_, ex) in enumerate(program.trace):
        for arg in program.ops[ex.file].args:
            name = arg.name if arg.name in manifest.tensors else next(
                (t.name for t in by_address if arg.hbm_address is not None and
                 t.hbm_address <= arg.hbm_address < t.hbm_address + t.device_bytes), None)
            if name is not None:
                lo, hi = live.get(name, (i, i))
                live[name] = (min(lo, i), max(hi, i))
    kept = set(manifest.outputs) | {name for _, name in manifest.mutated_buffers}
    for t in manifest.tensors.values():
        if t.role in ("input", "constant") or t.name in kept:
            live[t.name] = ALWAYS_LIVE
    return live


def place_tensors(program: OutputProgram, constants: dict[str, np.ndarray] | None = None) -> Hbm:
    """Every manifest HBM tensor allocated, each byte filled once: constants are their
    mapped bytes of weights.bin (device form: nothing to convert or copy), inputs are filled
    by their transfer (`write_tensor`), intermediates born after the first execution when
    their life starts (`_refill`), the rest here. `constants`: the mapped weights
    (`constant_bytes`), mapped here when not given."""
    hbm = Hbm(program.manifest.hbm_bytes)
    live = live_ranges(program)
    weights = constants if constants is not None else constant_bytes(
        program.weights_file, program.weights, program.manifest.tensors)
    for t in program.manifest.tensors.values():
        if t.hbm_address is None:
            continue
        span = live.get(t.name, (1 << 62, -1))
        hbm.allocate(t.name, t.hbm_address, t.device_bytes, t.layout.device_dtype, span,
                     fill=not (t.role == "input" or span[0] > 0), backing=weights.get(t.name))
    return hbm


def lx_values(program: OutputProgram) -> dict[str, list[tuple[int, int]]]:
    """Per LX tensor, the execution spans of the values it holds: each write (by an op that
    does not also read the tensor) starts a value, which lasts until its last read (a loop
    body rewrites its per-tile buffers every iteration, so their bytes are free between two
    values). A value built by several writers (slices of a cat) is several spans here; the
    stick tags still catch a clobber between them when the value is read."""
    names = {t.name for t in program.manifest.tensors.values() if t.in_lx}
    spans: dict[str, list[list[int]]] = {}
    for i, (_, ex) in enumerate(program.trace):
        args = program.ops[ex.file].args
        read = {a.name for a in args if a.is_input and a.name in names}
        for arg in args:
            if arg.name not in names:
                continue
            if not arg.is_input and arg.name not in read:
                spans.setdefault(arg.name, []).append([i, i])
            elif arg.name in spans:
                spans[arg.name][-1][1] = i
    return {name: [tuple(s) for s in v] for name, v in spans.items()}


def place_lx(program: OutputProgram) -> Lx:
    """Every core's LX with the manifest's LX tensors allocated (checked: alignment, budget,
    live overlaps), before anything runs."""
    lx = Lx(CORES, LX_USABLE_BYTES_PER_CORE)
    live = live_ranges(program)
    values = lx_values(program)
    for t in program.manifest.tensors.values():
        if t.in_lx:
            lx.allocate(t.name, t.lx_address, t.lx_bytes_per_core, t.layout.device_dtype,
                        live.get(t.name, (1 << 62, -1)), tuple(values.get(t.name, ())))
    lx.build()
    return lx


def _births(allocations: list[Allocation]) -> dict[int, list[Allocation]]:
    """Tensors by the execution that starts their life (their bytes are reset then)."""
    births: dict[int, list[Allocation]] = {}
    for a in allocations:
        births.setdefault(max(a.live[0], 0), []).append(a)
    return births


def _refill(hbm: Hbm, alloc: Allocation) -> None:
    """Reset an HBM tensor's bytes to its fill when its life starts: memory_planning reuses
    the bytes of dead intermediates, and padding must still read as NaN, never as the data
    of the tensor that lived there before (DESIGN §8)."""
    itemsize = storage_dtype(alloc.device_dtype).itemsize
    hbm.region(alloc.address, alloc.device_dtype)[:alloc.nbytes // itemsize] = \
        FILL_VALUE[alloc.device_dtype]


def _prefetcher(program: OutputProgram, constants: dict[str, np.ndarray]) -> Prefetcher | None:
    """A reader of the weights ahead of the ops (`sim/prefetch.py`) when there are enough
    of them to wait for."""
    if sum(v.size for v in constants.values()) < SMALL_BYTES:
        return None
    steps = [[constants[a.name] for a in program.ops[ex.file].args if a.name in constants]
             for _, ex in program.trace]
    return Prefetcher(steps)


def at_lengths(program: OutputProgram, lengths: dict[str, int]) -> OutputProgram:
    """The program run at symbolic `lengths` (manifest `symbols`): its bundles executed again
    with those arguments (the loader's trace is at the maxima), and the ops whose size is a
    length at that length (`OpSpec.at`). The ops and the statements are those already read
    and checked; only the trips and those sizes differ."""
    fused = {f: tuple(program.ops[k] for k in keys) for f, keys in program.fused.items()}
    trace = tuple((kernel.name, ex) for kernel in program.manifest.kernels
                  for ex in expand_executes(_bundle(program, kernel.bundle, lengths), fused))
    shares = program.manifest.min_shares
    ops = {name: spec.at(lengths, shares) for name, spec in program.ops.items()}
    return replace(program, trace=trace, ops=ops)


def _bundle(program: OutputProgram, name: str, lengths: dict[str, int]):
    """A bundle of `program` interpreted at `lengths`: the text the loader read (through the
    directory's handle: the same build), else the file."""
    from spyrec.sim.bundle import read_bundle, read_bundle_text

    if program.files is None:
        return read_bundle(program.out_dir / name, lengths)
    return read_bundle_text(program.files.read_text(name), program.files.label(name), lengths)


def simulate(out_dir: str | Path, inputs: dict[str, np.ndarray], log: Log = _quiet,
             program: OutputProgram | None = None,
             state: dict[str, np.ndarray] | None = None) -> SimResult:
    """Run the compiled program in `out_dir` on `inputs` (name -> host array), with the
    cyclic collector paused (`no_automatic_collections`: the run's arrays and specs make no
    cycles; loading pauses it too, `load_output_dir`). `state`: device bytes of the buffers
    updated in place, by tensor name, that the run starts from and leaves its writes in (a
    session's, `spyrec/session.py`); without it a run starts from the stored values."""
    with no_automatic_collections():
        return _simulate(out_dir, inputs, log, program, state)


def _simulate(out_dir: str | Path, inputs: dict[str, np.ndarray], log: Log,
              program: OutputProgram | None,
              state: dict[str, np.ndarray] | None = None) -> SimResult:
    start = time.perf_counter()
    threads.count()             # a bad SPYREC_SIM_THREADS fails now, not at the first big op
    program = program or load_output_dir(out_dir)
    manifest = program.manifest
    big = program.weights is not None and program.weights.nbytes >= TORCH_FROM_BYTES
    if big:
        use_torch()     # faster weight reads and fp16 matmuls (sim/torch_kernels.py)
    host_inputs = check_inputs(manifest, inputs)
    lengths = bind_lengths(manifest, host_inputs, "the input dict")
    if lengths != manifest.maxima():
        program = at_lengths(program, lengths)
        host_inputs = {name: padded_to_maximum(manifest.tensors[name], array)
                       for name, array in host_inputs.items()}
    with _weights_guard(program) as check_weights:
        later: dict[str, Callable[[], None]] = {}
        constants = constant_bytes(program.weights_file, program.weights,
                                   program.manifest.tensors, later)
        constants.update(_written_constants(manifest, constants, state))
        hbm = place_tensors(program, constants)
        lx = place_lx(program)
        for name, array in host_inputs.items():
            write_tensor(hbm, manifest.tensors[name], array)
        log(f"loaded {len(program.ops)} ops, {len(program.trace)} executions, "
            f"{manifest.hbm_bytes} bytes of HBM")
        with torch_run(big):
            _run_trace(program, constants, later, hbm, lx, log, check_weights)
        tensors = list(manifest.outputs) + [name for _, name in manifest.mutated_buffers]
        outputs = [read_tensor(hbm, manifest.tensors[name], lengths) for name in tensors]
    dtypes = [manifest.tensors[name].host_dtype for name in tensors]
    names = tuple(f"output_{i}" for i in range(len(manifest.outputs))) + tuple(
        fqn for fqn, _ in manifest.mutated_buffers)
    return SimResult(outputs, dtypes, program, time.perf_counter() - start, names)


def in_place_tensors(manifest) -> list[str]:
    """The constants a run writes: mutated buffers updated in place (docs/formats.md, the
    alias), whose new value is the constant's own device memory."""
    return [name for _, name in manifest.mutated_buffers
            if manifest.tensors[name].role == "constant"]


def _written_constants(manifest, constants: dict[str, np.ndarray],
                       state: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """The device bytes each in-place buffer is updated in: `state`'s (a session's, kept
    from its last call; filled from the stored value on first use), else a private copy of
    the stored value, so every plain run starts from weights.bin's."""
    found = {}
    for name in in_place_tensors(manifest):
        if state is None:
            found[name] = constants[name].copy()
        else:
            found[name] = state.setdefault(name, constants[name].copy())
    return found


def _weights_guard(program: OutputProgram):
    """weights.bin guarded while the run reads it (`WeightsFile.guarded`), where there is one."""
    import contextlib

    if program.weights_file is None:
        return contextlib.nullcontext(lambda: None)
    return program.weights_file.guarded()


def _run_trace(program: OutputProgram, constants: dict[str, np.ndarray],
               later: dict[str, Callable[[], None]], hbm: Hbm, lx: Lx, log: Log,
               check_weights: Callable[[], None] = lambda: None) -> None:
    """Execute the trace in order on `hbm` and `lx`: each LX and HBM tensor started where its
    life does, the weights read from disk ahead of the ops (`_prefetcher`), the constants
    of `later` laid out on a thread until an op needs them; `check_weights()` between two
    ops (a weights.bin changed under the run stops it there)."""
    births = _births(lx.allocations)
    hbm_births = _births([a for a in hbm.allocations if a.live[0] > 0])
    prefetch = _prefetcher(program, {name: v for name, v in constants.items()
                                     if name not in later})
    relayouts = Relayouts(later)       # laid out on a thread while the ops run
    try:
        for i, (kernel, ex) in enumerate(program.trace):
            check_weights()
            spec = program.ops[ex.file]
            t0 = time.perf_counter()
            if relayouts:
                relayouts.ready(a.name for a in spec.args)
            if prefetch is not None:
                prefetch.at(i)
            for alloc in births.get(i, ()):
                if not lx.handed_over(alloc):
                    lx.begin(alloc)
            for alloc in hbm_births.get(i, ()):
                _refill(hbm, alloc)
            run_op(spec, ex, hbm, lx)
            log(f"[{i + 1}/{len(program.trace)}] {kernel}: {spec.describe()} "
                f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
        relayouts.finish()
    finally:
        relayouts.close()
        if prefetch is not None:
            prefetch.close()
