"""What the SuperDSC format costs: compile and run time and file sizes against a baseline commit.

Issue 15's budget: writing (and simulating from) real SuperDSC files must not make `spyrec
compile` or `spyrec run` of the 2-layer decoder more than 10% slower than the last commit
with spyrec's own format. The baseline is checked out into a temporary git worktree and both
trees compile the same `.pt2` and run the same inputs with the same interpreter, in
alternating fresh processes (imports count, as for a user); each figure is the median of
`--repeat` runs. Passes that came after the baseline for other reasons (issue 10's cost-based
work division and LX planning) also cost time, so a third column runs today's tree with them
set to what the baseline did (greedy split, no LX): that is the format's own cost. Usage: `python bench/format_cost.py [--baseline 9fe66f0^] [--repeat 5]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

EXPORT = """
import sys, numpy as np, torch
sys.path.insert(0, {root!r})
from samples.models import decoder
m, inputs = decoder({depth})
torch.export.save(torch.export.export(m.eval(), inputs), {pt2!r})
np.savez({npz!r}, x=inputs[0].numpy())
"""


# The format's own code, timed in-process in either tree: writing each sdsc file's document
# (SuperDSC now, spyrec's own form in the baseline) and reading it back into the simulator's
# OpSpec (compile does this for report.json's cost; run does it before simulating). Whole-
# process times also carry everything else that changed since the baseline (new passes, the
# real-model front end, a larger CLI); this isolates what the format adds.
FORMAT_CODE = """
import functools, importlib.util, json, shutil, statistics, sys, time
from pathlib import Path
import spyrec.codegen.writer as writer
from spyrec.compiler import CompileOptions
if importlib.util.find_spec("spyrec.driver"):   # compile with its cost estimate, and its reader
    import spyrec.sim.program as reader
    from spyrec.driver import compile_and_estimate as compile_program
else:
    import spyrec.sim.loader as reader
    from spyrec.compiler import compile_program
spent = {{"emit": 0.0, "read": 0.0}}
def timed(mod, name, key):
    f = getattr(mod, name)
    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t
    setattr(mod, name, g)
timed(writer, "superdsc_document" if hasattr(writer, "superdsc_document") else "sdsc_document",
      "emit")
timed(reader, "read_op" if hasattr(reader, "read_op") else "load_op", "read")
rows = []
for i in range({repeat} + 1):
    out = Path({out!r}); shutil.rmtree(out, ignore_errors=True)
    spent.update(emit=0.0, read=0.0)
    t = time.perf_counter()
    compile_program(Path({pt2!r}), out, CompileOptions(sets={sets!r}))
    rows.append((time.perf_counter() - t, spent["emit"], spent["read"]))
print(json.dumps([statistics.median(c) for c in zip(*rows[1:])]))
"""

# what the baseline's pipeline did where a later issue changed it: greedy core split, no LX,
# no split of fused outputs, no staged inputs
FORMAT_ONLY = ("--set", "work_division.strategy=greedy", "--set", "scratchpad_planning.enabled=false",
               "--set", "split_outputs.enabled=false", "--set", "stage_inputs.enabled=false")


def timed(tree: Path, *args: str) -> float:
    # bytecode is cached as it is for a user (a shell with PYTHONDONTWRITEBYTECODE would
    # recompile every module on every start, which measures the source size, not spyrec)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t0 = time.perf_counter()
    r = subprocess.run([PY, "-m", "spyrec", *args], capture_output=True, text=True, cwd=tree,
                       env={**env, "PYTHONPATH": str(tree)})
    if r.returncode != 0:
        raise SystemExit(f"failed in {tree}: spyrec {' '.join(args[:3])}…\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0


def format_code(tree: Path, tmp: Path, pt2: Path, sets: tuple, repeat: int) -> list[float]:
    """[compile, emit, read] seconds, medians of in-process compiles in `tree`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = FORMAT_CODE.format(repeat=repeat, out=str(tmp / f"fc-{tree.name}"), pt2=str(pt2),
                              sets=[x for x in sets if x != "--set"])
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=tree,
                       env={**env, "PYTHONPATH": str(tree)})
    if r.returncode != 0:
        raise SystemExit(f"failed in {tree}: format code timing\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.splitlines()[-1])


def sdsc_bytes(out: Path) -> int:
    return sum(f.stat().st_size for f in out.glob("sdsc_*.json"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="9fe66f0^",
                    help="commit before SuperDSC (default: the parent of 9fe66f0)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--depth", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        base = tmp / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base),
                        args.baseline], check=True, capture_output=True)
        try:
            pt2, npz = tmp / "decoder.pt2", tmp / "x.npz"
            subprocess.run([PY, "-c", EXPORT.format(root=str(ROOT), depth=args.depth,
                                                    pt2=str(pt2), npz=str(npz))],
                           check=True, capture_output=True)
            trees = {"baseline": (base, ()), "now": (ROOT, ()), "format only": (ROOT, FORMAT_ONLY)}
            rows = {f"{t} {k}": [] for t in trees for k in ("compile", "run")}
            for _ in range(args.repeat + 1):
                for name, (tree, sets) in trees.items():
                    out = tmp / f"out-{name}"
                    rows[f"{name} compile"].append(
                        timed(tree, "compile", str(pt2), "-o", str(out), "-q", *sets))
                    rows[f"{name} run"].append(
                        timed(tree, "run", str(out), "--inputs", str(npz), "-q",
                              "-o", str(tmp / f"y-{name}.npz")))
            code = {name: format_code(tree, tmp, pt2, sets, args.repeat)
                    for name, (tree, sets) in trees.items() if name != "now"}
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(base)], capture_output=True)
        # the first round writes the bytecode caches: not timed
        med = {k: statistics.median(v[1:]) for k, v in rows.items()}
        print(f"decoder depth {args.depth}, median of {args.repeat}, baseline {args.baseline}")
        print("| | baseline | now | now / baseline | format only | format only / baseline |")
        print("|---|---|---|---|---|---|")
        for k in ("compile", "run"):
            b, n, f = (med[f"{t} {k}"] for t in trees)
            print(f"| {k} s | {b:.3f} | {n:.3f} | {n / b:.2f} | {f:.3f} | {f / b:.2f} |")
        b, n, f = (sdsc_bytes(tmp / f"out-{t}") for t in trees)
        print(f"| sdsc bytes | {b} | {n} | {n / b:.2f} | {f} | {f / b:.2f} |")
        (bc, be, br), (fc, fe, fr) = code["baseline"], code["format only"]
        print(f"\nthe format's own code, in-process compile (median of {args.repeat}): "
              f"write {be * 1e3:.1f} -> {fe * 1e3:.1f} ms, read back for the cost "
              f"{br * 1e3:.1f} -> {fr * 1e3:.1f} ms; +{(fe + fr - be - br) * 1e3:.1f} ms = "
              f"{(fe + fr - be - br) / bc:+.1%} of the baseline's warm in-process compile "
              f"({bc * 1e3:.0f} ms; format-only pipeline {fc * 1e3:.0f} ms), "
              f"{(fe + fr - be - br) / med['baseline compile']:+.1%} of its "
              f"{med['baseline compile']:.3f} s compile as a user runs it")


if __name__ == "__main__":
    main()
