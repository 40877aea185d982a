"""`--check`: run the source program in PyTorch eager and compare every output.

The output directory carries `program.pt2`, so the reference needs nothing else:
`torch.export.load(...).module()(*inputs in manifest order)`. Comparison uses torch.testing's
allclose rule `|sim - eager| <= atol + rtol * |eager|` with atol = rtol = the dtype's tolerance
(DESIGN §9: fp32 1e-4, fp16/bf16 1e-2; integers and bools exact). NaN matches only NaN and an
infinity only the same infinity, so a padding leak (NaN where eager is finite) is a mismatch.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from spyrec.errors import InputFileError
from spyrec.sim.numerics import bf16_bits_to_float32

TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}


@dataclass(frozen=True)
class OutputCheck:
    index: int
    name: str
    dtype: str
    tolerance: float
    max_abs: float
    max_rel: float
    mismatches: int
    total: int
    problem: str | None = None    # shape or count mismatch: no element comparison possible
    key: str | None = None        # outputs.npz key when not output_<index> (a buffer's FQN)

    @property
    def ok(self) -> bool:
        return self.problem is None and self.mismatches == 0


def to_torch(array: np.ndarray, host_dtype: str):
    import torch

    if host_dtype == "bfloat16":
        return torch.from_numpy(_c_order(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(_c_order(array))


def _c_order(array: np.ndarray) -> np.ndarray:
    """C-contiguous with the same shape (np.ascontiguousarray turns a 0-d array into 1-d)."""
    return np.require(np.asarray(array), None, "C")


def _flatten(value) -> list:
    """Tensors of an eager result in pytree order (tensor, tuple/list, dict by insertion)."""
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flatten(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flatten(v)]
    return [value]


RERUN = "re-run spyrec compile to restore it, or run without --check"


def check_reference_program(out_dir: Path) -> Path:
    """OUT/program.pt2, after the checks that need no torch: it exists and is an exported
    program archive (a zip with models/*.json), not text or a TorchScript file. Called before
    simulating, so a broken --check fails at once."""
    path = Path(out_dir) / "program.pt2"
    if not path.exists():
        raise InputFileError(f"{path}: missing; --check runs it in PyTorch eager: {RERUN}")
    if not path.is_file() or not zipfile.is_zipfile(path):
        raise InputFileError(f"{path}: not a torch.export archive (not a zip file); {RERUN}")
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (OSError, zipfile.BadZipFile) as e:
        raise InputFileError(f"{path}: damaged archive ({e}); {RERUN}") from None
    if not any(n.split("/")[-2:-1] == ["models"] and n.endswith(".json") for n in names):
        kind = "a TorchScript file" if any(n.endswith("/code/") or "/code/" in n
                                            for n in names) else "a zip file"
        raise InputFileError(f"{path}: {kind}, not a torch.export program (no models/*.json); "
                             f"{RERUN}")
    return path


def eager_outputs(out_dir: Path, input_names: list[str], host_dtypes: dict[str, str],
                  inputs: dict[str, np.ndarray],
                  mutated: tuple[str, ...] = ()) -> list[np.ndarray]:
    """Outputs of program.pt2 run in eager mode, as float64/int64/bool numpy arrays, then the
    values of the `mutated` buffers (FQNs) after the run: the module updates them in place."""
    import torch

    from spyrec.pt2archive import load_exported

    path = check_reference_program(out_dir)
    try:
        module = load_exported(path).module()
    except InputFileError:
        raise
    except Exception as e:  # noqa: BLE001 - torch raises many types here; all mean "damaged"
        first = (str(e).strip().splitlines() or [""])[0]
        raise InputFileError(f"{path}: torch.export.load failed ({type(e).__name__}: "
                             f"{first}); {RERUN}") from None
    args = [to_torch(inputs[n], host_dtypes[n]) for n in input_names]
    with torch.no_grad():
        result = module(*args)
    after = [module.get_buffer(fqn) for fqn in mutated]
    return [_to_numpy(t) for t in _flatten(result)] + [_to_numpy(t) for t in after]


def _to_numpy(t) -> np.ndarray:
    import torch

    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    t = t.detach().cpu()
    if t.is_floating_point():
        return t.to(torch.float64).numpy()
    return t.numpy()


def comparable(array: np.ndarray, host_dtype: str) -> np.ndarray:
    """A simulated output in the same numeric form as `_to_numpy` gives for eager."""
    if host_dtype == "bfloat16":
        return bf16_bits_to_float32(array).astype(np.float64)
    if array.dtype.kind == "f":
        return array.astype(np.float64)
    return array


def compare(index: int, name: str, host_dtype: str, sim: np.ndarray,
            eager: np.ndarray) -> OutputCheck:
    tol = TOLERANCE.get(host_dtype, 0.0)
    sim = comparable(sim, host_dtype)
    eager = np.asarray(eager)
    if sim.shape != eager.shape:
        return OutputCheck(index, name, host_dtype, tol, np.nan, np.nan, sim.size, sim.size,
                           f"shape {list(sim.shape)}, eager gives {list(eager.shape)}")
    if sim.dtype.kind in "iub" and eager.dtype.kind in "iub":
        bad = int(np.count_nonzero(sim != eager))
        diff = np.abs(sim.astype(np.int64) - eager.astype(np.int64)) if sim.size else sim
        worst = float(diff.max()) if sim.size else 0.0
        return OutputCheck(index, name, host_dtype, tol, worst, worst, bad, sim.size)
    a, b = sim.astype(np.float64), eager.astype(np.float64)
    close = np.isclose(a, b, rtol=tol, atol=tol, equal_nan=True)
    finite = np.isfinite(a) & np.isfinite(b)
    diff = np.abs(a[finite] - b[finite])
    rel = diff / np.maximum(np.abs(b[finite]), np.finfo(np.float64).tiny)
    return OutputCheck(index, name, host_dtype, tol, float(diff.max()) if diff.size else 0.0,
                       float(rel.max()) if rel.size else 0.0,
                       int(np.count_nonzero(~close)), a.size)


def check_outputs(out_dir: Path, manifest, inputs: dict[str, np.ndarray],
                  sim_outputs: list[np.ndarray]) -> list[OutputCheck]:
    """Compare every simulated output (and mutated buffer, after the user outputs, as
    `simulate` returns them) with eager PyTorch on the same inputs."""
    host = {n: t.host_dtype for n, t in manifest.tensors.items()}
    mutated = manifest.mutated_buffers
    eager = eager_outputs(out_dir, list(manifest.inputs), host, inputs,
                          tuple(fqn for fqn, _ in mutated))
    n_user = len(eager) - len(mutated)
    expected = eager[:n_user] + [None] * (len(manifest.outputs) - n_user) + eager[n_user:]
    names = list(manifest.outputs) + [name for _, name in mutated]
    checks = []
    for i, name in enumerate(names):
        if expected[i] is None:
            checks.append(OutputCheck(i, name, host[name], 0.0, np.nan, np.nan, 0, 0,
                                      f"eager returns only {n_user} outputs"))
            continue
        checks.append(compare(i, name, host[name], sim_outputs[i], expected[i]))
    for k, (fqn, _) in enumerate(mutated):
        checks[len(manifest.outputs) + k] = replace(checks[len(manifest.outputs) + k], key=fqn)
    return checks


def format_checks(checks: list[OutputCheck]) -> str:
    lines = [f"{'output':<10} {'tensor':<16} {'dtype':<9} {'max abs err':>12} "
             f"{'max rel err':>12} {'tolerance':>9} {'mismatches':>12}  result"]
    for c in checks:
        verdict = "ok" if c.ok else "MISMATCH" + (f": {c.problem}" if c.problem else "")
        label = c.key or f"output_{c.index}"
        lines.append(f"{label:<10} {c.name:<16.16} {c.dtype:<9} {c.max_abs:>12.4g} "
                     f"{c.max_rel:>12.4g} {c.tolerance:>9.0e} {c.mismatches:>5}/{c.total:<6}  "
                     f"{verdict}")
    return "\n".join(lines)
