"""The Python API: `spyrec.compile` and `spyrec.run`, the two CLI commands as functions.

They do what `spyrec compile` and `spyrec run` do, through the same code, without the CLI's
printing and exit codes: problems raise the `spyrec.errors` exceptions (`ConfigError`,
`InputFileError`, `UnsupportedProgram`, `CheckMismatch`, ...), never `SystemExit`. Imported
lazily by `spyrec/__init__.py`, so `import spyrec` stays cheap.

    ep = torch.export.export(model, (x,))
    out = spyrec.compile(ep, "build/out", sets={"work_division.cores": 8})
    outputs = spyrec.run(out, {"x": x.numpy()}, check=True)   # {"output_0": array, ...}
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from spyrec.errors import ConfigError, InputFileError

PathLike = str | os.PathLike


def compile(program: Any, out: PathLike, *, pipeline: PathLike | None = None,  # noqa: A001
            tiling: PathLike | None = None, layouts: PathLike | None = None,
            sets: Mapping[str, Any] | list[str] | None = None, frontend: str = "auto",
            verbose: int = -1, self_contained: bool = False) -> Path:
    """Compile `program` (a `torch.export.ExportedProgram`, or the path of a `.pt2` file from
    `torch.export.save`) into the output directory `out`; returns `out` as a Path.

    `pipeline`, `tiling` and `layouts` are YAML files as for the CLI; `sets` overrides pipeline
    options, as `{"PASS.OPTION": value}` or a list of `"PASS.OPTION=VALUE"` strings. An
    ExportedProgram is saved to a temporary .pt2 and compiled like a file; that file is gone
    afterwards, so its copy is kept in `out` (as with `self_contained=True`, which copies a
    `.pt2` path's file into `out/program.pt2` for `run(check=True)` after the source moves).
    `verbose=-1` prints nothing; 0 prints what the CLI prints on stderr, 1 adds per-pass
    logging.
    """
    from spyrec.compiler import CompileOptions
    from spyrec.driver import compile_and_estimate

    opts = CompileOptions(pipeline=_path(pipeline), tiling=_path(tiling),
                          layouts=_path(layouts), sets=_sets(sets), verbose=verbose,
                          frontend=frontend, self_contained=self_contained)
    out = Path(out)
    if isinstance(program, (str, os.PathLike)):
        compile_and_estimate(Path(program), out, opts)
        return out
    opts.self_contained = True     # the temporary .pt2 is deleted: --check needs the copy
    with tempfile.TemporaryDirectory(prefix="spyrec-api-") as tmp:
        compile_and_estimate(_save_exported(program, Path(tmp) / "program.pt2"), out, opts)
    return out


def _path(value: PathLike | None) -> Path | None:
    return None if value is None else Path(value)


def _sets(sets: Mapping[str, Any] | list[str] | None) -> list[str]:
    """`--set` strings; dict values are written as JSON, which the YAML reader takes back."""
    if sets is None:
        return []
    if isinstance(sets, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in sets.items()]
    if isinstance(sets, str) or not all(isinstance(s, str) for s in sets):
        raise ConfigError(f"sets={sets!r}: give a dict {{'PASS.OPTION': value}} or a list of "
                          f"'PASS.OPTION=VALUE' strings")
    return list(sets)


def _save_exported(program: Any, path: Path) -> Path:
    import torch

    if not isinstance(program, torch.export.ExportedProgram):
        raise InputFileError(f"spyrec.compile: got a {type(program).__name__}; give a "
                             f"torch.export.ExportedProgram or the path of a .pt2 file")
    torch.export.save(program, str(path))
    return path


def run(out: PathLike, inputs: Mapping[str, Any] | PathLike, *,
        check: bool = False, model: PathLike | None = None) -> dict[str, np.ndarray]:
    """Simulate the compiled directory `out` on `inputs`; returns what `spyrec run -o` writes.

    `inputs` maps the program's input names to numpy arrays (or torch tensors), or is the path
    of an .npz / .safetensors file. A bf16 input may be a torch bfloat16 tensor or uint16 bits.
    The result maps `output_0`, `output_1`, ... (then mutated buffers by FQN) to arrays; a bf16
    output is uint16 bits with a `__dtype__.<key>` = "bfloat16" entry, as in outputs.npz.
    `check=True` also runs the source program in PyTorch eager and raises `CheckMismatch` when
    an output differs beyond its dtype's tolerance: `model` (a `.pt2` path) when given, else
    `out/program.pt2` (self-contained), else the path the manifest records; a missing or
    changed file raises `InputFileError` before anything is simulated.
    """
    from spyrec.sim.inputs import npz_arrays
    from spyrec.sim.run_directory import run_directory

    if model is not None and not check:
        raise InputFileError(f"spyrec.run: model={model!r} is read only with check=True")
    if not isinstance(inputs, (str, os.PathLike, Mapping)):
        raise InputFileError(f"spyrec.run: inputs is a {type(inputs).__name__}; give a "
                             f"dict of arrays or the path of an .npz/.safetensors file")
    if isinstance(inputs, Mapping):
        inputs = {k: _numpy(v) for k, v in inputs.items()}
    outcome = run_directory(Path(out), inputs, check=check, model=_path(model))
    mismatch = outcome.mismatch()
    if mismatch is not None:
        raise mismatch
    result = outcome.result
    return npz_arrays(result.outputs, result.output_dtypes, result.names)


def _numpy(value: Any) -> np.ndarray:
    """A caller's value as a host array; a torch tensor without importing torch ourselves
    (bfloat16 becomes its uint16 bits)."""
    if type(value).__module__.split(".")[0] == "torch":
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            import torch

            return value.contiguous().view(torch.int16).numpy().view(np.uint16)
        return value.numpy()
    return np.asarray(value)
