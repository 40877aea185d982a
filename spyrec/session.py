"""`spyrec.Session`: state that stays on the device between calls, as a serving loop needs.

A plain run (`spyrec run`, `spyrec.run`) starts every buffer from its stored value, so no
generation loop can be simulated with it: a decode step's KV cache would be empty again at the
next token. A session loads an output directory once and keeps, in simulated device memory,
the bytes of every buffer the programs update in place (docs/formats.md, the alias): each call
starts from what the previous one left, on the device and here alike. `reset()` restores the
stored initial values.

A directory of several programs (`spyrec compile prefill.pt2 decode.pt2 -o OUT`, issue 59)
shares those buffers between its programs by FQN: the cache prefill fills is the one decode
reads, one set of device bytes (the programs place a shared buffer at one layout; a program
whose layout of it differs is refused when the session opens).

    with spyrec.Session("build/out") as s:
        logits = s.run("prefill", {"input_ids": ids, "cache_position": pos})["output_0"]
        s.run("decode", {...})
        s.reset()
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from spyrec.errors import InputFileError

PathLike = str | os.PathLike


@dataclass
class _Loaded:
    """One program of the directory, read and verified once."""

    name: str
    path: Path
    program: Any                                    # sim.program.OutputProgram
    shared: dict[str, str] = field(default_factory=dict)   # tensor -> buffer FQN


class Session:
    """Programs of one output directory run against one simulated device memory."""

    def __init__(self, out: PathLike):
        from spyrec.programs_dir import program_dirs

        self.out = Path(out)
        self._programs = {name: _load(name, path)
                          for name, path in program_dirs(self.out).items()}
        self._layouts: dict[str, tuple] = {}
        for loaded in self._programs.values():
            self._check_layouts(loaded)
        self._state: dict[str, np.ndarray] = {}     # FQN -> device bytes
        self.last = None                            # the last call's runner.SimResult

    @property
    def programs(self) -> list[str]:
        return list(self._programs)

    def program(self, name: str | None = None):
        """The loaded program `name` (the only one when None), for its manifest."""
        return self._pick(name).program

    def run(self, program: str | Mapping | None, inputs: Mapping[str, Any] | None = None
            ) -> dict[str, np.ndarray]:
        """Run `program` (its name; may be left out when the directory holds one) on
        `inputs`; returns what `spyrec.run` returns. The buffers updated in place keep the
        values this call leaves for the next."""
        from spyrec.api import _numpy
        from spyrec.sim.inputs import npz_arrays
        from spyrec.sim.runner import simulate

        if isinstance(program, Mapping) and inputs is None:
            program, inputs = None, program
        if not isinstance(inputs, Mapping):
            raise InputFileError("Session.run: give the inputs as a dict of arrays by input "
                                 "name")
        loaded = self._pick(program)
        state = {tensor: self._state[fqn] for tensor, fqn in loaded.shared.items()
                 if fqn in self._state}
        arrays = {k: _numpy(v) for k, v in inputs.items()}
        result = simulate(loaded.path, arrays, program=loaded.program, state=state)
        for tensor, fqn in loaded.shared.items():
            self._state[fqn] = state[tensor]
        self.last = result
        return npz_arrays(result.outputs, result.output_dtypes, result.names)

    def reset(self) -> None:
        """Every buffer back to its stored initial value (the next call starts from it)."""
        self._state.clear()

    def close(self) -> None:
        for loaded in self._programs.values():
            files = getattr(loaded.program, "files", None)
            if files is not None:
                files.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _pick(self, name: str | None) -> _Loaded:
        if name is None:
            if len(self._programs) == 1:
                return next(iter(self._programs.values()))
            raise InputFileError(f"{self.out}: holds the programs {', '.join(self._programs)}; "
                                 f"name the one to run")
        if name not in self._programs:
            raise InputFileError(f"{self.out}: no program {name!r}; it holds "
                                 f"{', '.join(self._programs)}")
        return self._programs[name]

    def _check_layouts(self, loaded: _Loaded) -> None:
        """A buffer shared by several programs has one device form in all of them (the
        bytes are shared as they are)."""
        tensors = loaded.program.manifest.tensors
        for tensor, fqn in loaded.shared.items():
            t = tensors[tensor]
            form = (tuple(t.layout.device_size), tuple(t.layout.stride_map),
                    t.layout.device_dtype, t.device_bytes)
            first = self._layouts.setdefault(fqn, form)
            if first != form:
                raise InputFileError(f"{self.out}: program {loaded.name!r} stores buffer {fqn} "
                                     f"in another device layout than an earlier program "
                                     f"({form[0]} vs {first[0]}: their ops read it "
                                     f"differently), so one set of device bytes cannot serve "
                                     f"both; run them in separate sessions")


def _load(name: str, path: Path) -> _Loaded:
    from spyrec.sim.directory import load_output_dir
    from spyrec.sim.runner import in_place_tensors

    program = load_output_dir(path)
    manifest = program.manifest
    fqn_of = {tensor: fqn for fqn, tensor in manifest.mutated_buffers}
    shared = {tensor: fqn_of[tensor] for tensor in in_place_tensors(manifest)}
    return _Loaded(name, path, program, shared)
