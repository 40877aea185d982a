"""`--check`: run the source program in PyTorch eager and compare every output.

Which `.pt2` is the reference, and the checks that it can run at all, made before the
simulation starts, are `sim/reference_program.py`; running it in eager (inputs passed as its
in_spec says, weights upcast for rule 2) is `sim/eager.py`. This module judges each output.

Comparison, per output, decided by the first of two rules that applies (`OutputCheck.rule`):

1. allclose: torch.testing's rule `|sim - eager| <= atol + rtol * |eager|` with atol = rtol =
   the dtype's tolerance (DESIGN §9: fp32 1e-4, fp16/bf16 1e-2; integers and bools exact).
   NaN matches only NaN and an infinity only the same infinity, so a padding leak (NaN where
   eager is finite) is a mismatch. An output that passes it passes.
2. reference (floating outputs): a fixed tolerance does not scale with depth or with
   conditioning. Two correct fp16 implementations round in different places (fp32
   accumulation order, fused or separate ops) and drift apart layer after layer: a correct
   16-layer Llama prefill differs from fp16 eager by up to 0.019 on 838 of 8.2 M logits,
   while against an fp32 run of the same weights its error equals eager's own (rms 0.00285
   vs 0.00289). An ill-conditioned fp32 program does the same in one op: row sums of 1024
   values of size 1e4 that cancel to ~0.1 differ between spyrec and fp32 eager by up to
   0.13 (1e-4 allowed), while against float64 both are ~0.03 rms off (spyrec 0.031 / max
   0.072, eager 0.035 / 0.099; tests/sim/test_check_fp32.py). So the same program also runs
   eagerly with its floating weights, buffers and inputs upcast (`eager_outputs(upcast=)`:
   to fp32 for a fp16/bf16 output, to float64 for a fp32 one, `REFERENCE_DTYPE`; casts the
   graph itself spells out still happen), and an output that failed rule 1 passes when
   spyrec's error against that reference is not materially worse than eager's own
   (`ReferenceErrors.ok`):

       rms_spyrec <= K_RMS * max(rms_eager, u * rms(ref))
       max_spyrec <= K_MAX * max(max_eager, u * max|ref|)

   K_RMS = 2: on average spyrec may lose at most one bit against eager's own rounding error
   (the rms is a mean over many elements, so it is stable); K_MAX = 4: the max is one
   extreme element, noisier, so two bits. The floor, one rounding (unit roundoff u of the
   output's dtype: fp16 2^-11, bf16 2^-8, fp32 2^-24) of the reference's size, stands in for
   eager's error when eager happens to be exact (a copy, an output of few ops). A miscompile
   (a swapped operand, an access off by one stick, a dropped term) gives errors the size of
   the signal, orders above either bound, and fails. The upcast run happens only when rule 1
   rejected an output on finite elements: it holds every weight in fp32 (float64), twice
   the program's bytes, which a program that passes rule 1 never needs; a program with both
   kinds of outputs runs each upcast it needs once. The random sweep
   (tests/differential/test_random_programs.py) judges its fp32 programs with this rule.
   When the upcast run is impossible (a cast the graph spells out meeting an upcast weight,
   an op without a kernel for the wider dtype, a constant the module does not own), rule 1
   alone decides (`rule` stays `allclose`) and `no_reference` and the table say why.

Non-finite values are never hidden. `OutputCheck.nonfinite` counts the elements where exactly
one side is NaN, or where an infinity differs (inf vs a finite value, +inf vs -inf); the
`--check` table shows it in its own column (`nan/inf`), `run --json` as
`nonfinite_mismatches`, and any such element fails the check. When that count is not zero the
max abs and max rel errors are `inf` (the error at those elements is unbounded), never the
largest error among the finite elements alone; `run --json` writes them as null (JSON has no
infinity), next to the non-zero count that says why. Elements that are NaN on both sides, or
the same infinity on both sides, agree and are left out of the max columns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from spyrec.bf16 import bf16_bits_to_float32
from spyrec.errors import InputFileError, InternalError
from spyrec.sim.eager import eager_outputs
from spyrec.sim.reference_program import check_reference_program


TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
# rule 2 (module docstring): the dtype each floating output's reference run computes in, and
# the output dtype's unit roundoff (the floor's one rounding)
REFERENCE_DTYPE = {"float16": "float32", "bfloat16": "float32", "float32": "float64"}
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24}
SHORT = {"float32": "fp32", "float64": "fp64"}
K_RMS = 2.0     # rule 2 (module docstring): spyrec's rms error <= K_RMS x eager's
K_MAX = 4.0     # and its max abs error <= K_MAX x eager's, each with a one-rounding floor


@dataclass(frozen=True)
class ReferenceErrors:
    """spyrec's and eager's errors against the upcast eager reference (rule 2): rms and max
    abs over the elements finite in all three, and the floors `ok` uses for eager's."""
    rms: float
    max_abs: float
    eager_rms: float
    eager_max_abs: float
    floor_rms: float
    floor_max: float

    @property
    def allowed_rms(self) -> float:
        return K_RMS * max(self.eager_rms, self.floor_rms)

    @property
    def allowed_max_abs(self) -> float:
        return K_MAX * max(self.eager_max_abs, self.floor_max)

    @property
    def ok(self) -> bool:
        return self.rms <= self.allowed_rms and self.max_abs <= self.allowed_max_abs


def reference_errors(sim: np.ndarray, eager: np.ndarray, reference: np.ndarray,
                     host_dtype: str) -> ReferenceErrors:
    """Rule 2's numbers for one floating output of dtype `host_dtype` (float64 arrays of one
    shape: spyrec's, eager's, and the upcast run's). `tests/differential` judges its random
    fp32 programs with it too."""
    finite = np.isfinite(sim) & np.isfinite(eager) & np.isfinite(reference)
    ref = reference[finite]

    def errors(a: np.ndarray) -> tuple[float, float]:
        d = np.abs(a[finite] - ref)
        return (float(np.sqrt(np.mean(d * d))), float(d.max())) if d.size else (0.0, 0.0)

    u = UNIT_ROUNDOFF[host_dtype]
    (rms, worst), (eager_rms, eager_worst) = errors(sim), errors(eager)
    scale_rms, scale_max = errors(np.zeros_like(reference))
    return ReferenceErrors(rms, worst, eager_rms, eager_worst, u * scale_rms, u * scale_max)


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
    nonfinite: int = 0            # elements where NaN/Inf differ from eager (module docstring)
    reference: ReferenceErrors | None = None   # rule 2's errors vs the upcast eager reference
    no_reference: str | None = None            # why a floating output has no reference

    @property
    def reference_dtype(self) -> str | None:
        """The dtype rule 2's reference run computes in: fp32 for fp16/bf16, fp64 for fp32."""
        return REFERENCE_DTYPE.get(self.dtype)

    @property
    def rule(self) -> str:
        """The rule that decides (module docstring): "allclose", or "reference" when rule 1
        failed only on elements that are finite and a reference exists."""
        if self.problem or self.nonfinite or self.mismatches == 0 or self.reference is None:
            return "allclose"
        return "reference"

    @property
    def ok(self) -> bool:
        if self.problem is not None or self.nonfinite:
            return False
        return self.mismatches == 0 or (self.reference is not None and self.reference.ok)


def comparable(array: np.ndarray, host_dtype: str) -> np.ndarray:
    """A simulated output in the same numeric form as `_to_numpy` gives for eager."""
    if host_dtype == "bfloat16":
        return bf16_bits_to_float32(array).astype(np.float64)
    if array.dtype.kind == "f":
        return array.astype(np.float64)
    return array


def compare(index: int, name: str, host_dtype: str, sim: np.ndarray,
            eager: np.ndarray, reference: np.ndarray | None = None) -> OutputCheck:
    """One output against eager (rule 1) and, given the fp32 `reference` of a fp16/bf16
    output, both against the reference (rule 2)."""
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
    nonfinite = nonfinite_mismatches(a, b)
    finite = np.isfinite(a) & np.isfinite(b)
    diff = np.abs(a[finite] - b[finite])
    with np.errstate(over="ignore"):     # eager 0, spyrec not: an infinite relative error
        rel = diff / np.maximum(np.abs(b[finite]), np.finfo(np.float64).tiny)
    if nonfinite:       # unbounded error at those elements: never a small finite number
        max_abs = max_rel = np.inf
    else:
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float(rel.max()) if rel.size else 0.0
    errors = None
    if reference is not None and host_dtype in UNIT_ROUNDOFF and reference.shape == a.shape:
        errors = reference_errors(a, b, np.asarray(reference, np.float64), host_dtype)
    return OutputCheck(index, name, host_dtype, tol, max_abs, max_rel,
                       int(np.count_nonzero(~close)), a.size, nonfinite=nonfinite,
                       reference=errors)


def nonfinite_mismatches(a: np.ndarray, b: np.ndarray) -> int:
    """Elements where exactly one of `a`, `b` is NaN, or where an infinity differs (inf vs a
    finite value, +inf vs -inf). NaN on both sides, or the same infinity, agree."""
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    inf_either = (np.isinf(a) | np.isinf(b)) & ~nan_a & ~nan_b
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero((nan_a != nan_b) | (inf_either & (a != b))))


def check_outputs(out_dir: Path, manifest, inputs: dict[str, np.ndarray],
                  sim_outputs: list[np.ndarray],
                  reference: Path | None = None) -> list[OutputCheck]:
    """Compare every simulated output (and mutated buffer, after the user outputs, as
    `simulate` returns them) with eager PyTorch on the same inputs (rule 1), and a floating
    output rule 1 rejects also with the upcast eager reference (rule 2, module docstring).
    `reference`: the `.pt2` `check_reference_program` returned; found (and hashed) once here
    otherwise, not once per eager run."""
    host = {n: t.host_dtype for n, t in manifest.tensors.items()}
    mutated = manifest.mutated_buffers
    reference = reference or check_reference_program(out_dir, list(manifest.inputs))
    call = (out_dir, list(manifest.inputs), host, inputs, tuple(fqn for fqn, _ in mutated),
            reference)
    results = eager_outputs(*call)
    eager = _aligned(results, manifest)
    names = list(manifest.outputs) + [name for _, name in mutated]
    checks = _compare_all(names, host, sim_outputs, eager, len(results) - len(mutated))
    # rule 2 only where rule 1 rejected an output it could pass: the upcast run holds every
    # weight in fp32 (fp64), twice the program's bytes, which a passing program never needs
    for dtype in sorted({c.reference_dtype for c in checks if _wants_reference(c)}):
        checks = _with_reference(checks, dtype, call, manifest, sim_outputs, eager)
    for k, (fqn, _) in enumerate(mutated):
        checks[len(manifest.outputs) + k] = replace(checks[len(manifest.outputs) + k], key=fqn)
    return checks


def _wants_reference(c: OutputCheck) -> bool:
    """Rule 1 rejected `c` on finite elements only, and rule 2 applies to its dtype."""
    return (not c.ok and c.problem is None and not c.nonfinite
            and c.reference_dtype is not None)


def _with_reference(checks: list[OutputCheck], dtype: str, call: tuple, manifest,
                    sim_outputs: list[np.ndarray], eager: list) -> list[OutputCheck]:
    """`checks` with every output that wants a `dtype` reference judged by rule 2 against
    the program run upcast to `dtype`; when that run is impossible (an op without a kernel
    for `dtype`, a cast the graph spells out meeting an upcast weight), rule 1's verdict
    stands and `no_reference` says why."""
    wanting = [i for i, c in enumerate(checks)
               if _wants_reference(c) and c.reference_dtype == dtype]
    try:
        upcast = _aligned(eager_outputs(*call, upcast=dtype), manifest)
    except (InternalError, InputFileError) as e:
        why = f"with weights and inputs upcast to {SHORT[dtype]}, " + \
            str(e).removeprefix("--check: ")
        return [replace(c, no_reference=why) if i in wanting else c
                for i, c in enumerate(checks)]
    checks = list(checks)
    for i in wanting:
        c = checks[i]
        if i < len(upcast) and upcast[i] is not None:
            checks[i] = compare(c.index, c.name, c.dtype, sim_outputs[i], eager[i], upcast[i])
    return checks


def _aligned(results: list, manifest) -> list:
    """Eager's results laid out as the simulated outputs are (user outputs, then mutated
    buffers): None for user outputs eager does not return."""
    n_user = len(results) - len(manifest.mutated_buffers)
    return results[:n_user] + [None] * (len(manifest.outputs) - n_user) + results[n_user:]


def _compare_all(names: list[str], host: dict[str, str], sim_outputs: list[np.ndarray],
                 expected: list, n_user: int) -> list[OutputCheck]:
    """`compare` (rule 1) for every output; `n_user`: the user outputs eager returned."""
    checks = []
    for i, name in enumerate(names):
        if expected[i] is None:
            checks.append(OutputCheck(i, name, host[name], 0.0, np.nan, np.nan, 0, 0,
                                      f"eager returns only {n_user} outputs"))
            continue
        checks.append(compare(i, name, host[name], sim_outputs[i], expected[i]))
    return checks


def format_checks(checks: list[OutputCheck]) -> str:
    """The --check table; `nan/inf` counts the elements where NaN/Inf differ from eager. For
    a floating output rule 1 rejected, the `vs ref` columns give spyrec's and eager's rms /
    max abs errors against the upcast eager reference (rule 2: fp32 for fp16/bf16, fp64 for
    fp32), and the result says which rule decided, against which reference."""
    lines = [f"{'output':<10} {'tensor':<16} {'dtype':<9} {'max abs err':>12} "
             f"{'max rel err':>12} {'tolerance':>9} {'mismatches':>12} {'nan/inf':>7}  "
             f"{'vs ref: spyrec rms/max':>27} {'eager rms/max':>19}  result"]
    for c in checks:
        label = c.key or f"output_{c.index}"
        lines.append(f"{label:<10} {c.name:<16.16} {c.dtype:<9} {c.max_abs:>12.4g} "
                     f"{c.max_rel:>12.4g} {c.tolerance:>9.0e} {c.mismatches:>5}/{c.total:<6} "
                     f"{c.nonfinite:>7}  {_reference_columns(c)}  {_verdict(c)}")
    return "\n".join(lines)


def _reference_columns(c: OutputCheck) -> str:
    r = c.reference
    if r is None:
        return f"{'-':>27} {'-':>19}"
    return f"{r.rms:>13.4g} / {r.max_abs:<11.4g} {r.eager_rms:>9.4g} / {r.eager_max_abs:<7.4g}"


def _verdict(c: OutputCheck) -> str:
    if c.problem:
        return f"MISMATCH: {c.problem}"
    if c.nonfinite:
        return f"MISMATCH: {c.nonfinite} NaN/Inf differ from eager"
    if c.mismatches == 0:
        return "ok"
    ref = SHORT.get(c.reference_dtype or "", "upcast")
    if c.reference is None:
        return "MISMATCH" + (f" (no {ref} reference: {c.no_reference})" if c.no_reference
                             else "")
    bounds = f"rms <= {K_RMS:g}x, max <= {K_MAX:g}x eager's error vs {ref}"
    if c.reference.ok:
        return f"ok by reference rule ({bounds})"
    return f"MISMATCH: worse than eager vs {ref} (allowed {bounds})"


def describe_failure(c: OutputCheck) -> str:
    """One failed row for the CheckMismatch message: its key, tensor and what went wrong,
    with both errors against the upcast reference when there is one."""
    label = c.key or f"output_{c.index}"
    if c.problem:
        return f"{label} ({c.name}) {c.problem}"
    what = f"{c.mismatches}/{c.total} elements, max abs err {c.max_abs:.4g}"
    if c.nonfinite:
        what += f", {c.nonfinite} NaN/Inf differ"
    r, ref = c.reference, SHORT.get(c.reference_dtype or "", "upcast")
    if r is None and c.no_reference:
        what += f"; no {ref} reference ({c.no_reference})"
    if r is not None and not c.nonfinite:
        what += (f"; vs {ref} reference spyrec rms {r.rms:.4g} max {r.max_abs:.4g}, eager rms "
                 f"{r.eager_rms:.4g} max {r.eager_max_abs:.4g} (allowed rms {r.allowed_rms:.4g} "
                 f"max {r.allowed_max_abs:.4g})")
    return f"{label} ({c.name}) {what}"
