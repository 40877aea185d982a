"""Symbolic lengths (issue 30): one compile for every sequence length against one compile per
length (the bucket approach), and what the one program costs at each length against the
program compiled for that length alone.

Programs: HF Llama and Granite prefill at tiny width, 2 layers (tests/models/hf.py), input_ids
exported with `64 * torch.export.Dim("s", max=32)`: torch records 128..2,048 tokens by 64.

Per model:
- sym_compile_s: `spyrec compile` of the dynamic export, a fresh process (wall; the median of
  3 runs);
- static_compile_s: the sum of the walls of compiling one static export per length (`--lengths`,
  default all 31), each a fresh process; ratio = static_compile_s / sym_compile_s (the issue's
  target: at least 20);
- per length: est_sym_us (the symbolic program's report.json `cost_curve` at that length),
  est_static_us (the static program's `cost.totals.time_us`) and overhead = est_sym / est_static
  (target: at most 1.1 at every length); the worst overhead is the model's row.
Exports run in a child process (torch); they are not timed.

`--decode SLOTS:FILLED` (e.g. 32768:4096) measures instead what a decode step's symbolic key
length saves: HF Llama (tiny width, 2 layers) over a static cache of SLOTS slots, compiled
once; its key loop runs only over the filled part (the cache position read at run time,
rounded up to the tile). `spyrec run --check --report` at cache position FILLED - 1 and at
SLOTS - 1 (every slot) gives each run's estimated time and HBM traffic, the attention ops'
share of them, and its comparison with eager, which attends over every slot with a mask;
saving = the full cache's estimate over the filled part's.

Usage: `python bench/symbolic.py [--models llama,granite] [--lengths 128,192,...]
[--keep DIR] [--json FILE] [--set PASS.OPTION=VALUE ...] [--decode SLOTS:FILLED]`
(`--set`: for the symbolic compile).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402

PY = sys.executable
GRANULE, MAX_GRANULES = 64, 32
LENGTHS = list(range(2 * GRANULE, GRANULE * MAX_GRANULES + 1, GRANULE))
COMPILE_RATIO_TARGET, OVERHEAD_TARGET = 20.0, 1.1
SYM_RUNS = 3


def build(model: str):
    """(module, vocabulary size) of `model` at tiny width, 2 layers, fp32."""
    from tests.models import hf

    return hf.long_prefill(model, LENGTHS[-1]), hf.VOCAB


def export_all(model: str, lengths: list[int], work: str) -> None:
    """WORK/<model>_dyn.pt2 (dynamic) and WORK/<model>_<n>.pt2 for each length."""
    import torch

    module, vocab = build(model)
    ids = torch.randint(0, vocab, (1, lengths[-1]), generator=torch.Generator().manual_seed(0))
    s = torch.export.Dim("s", max=MAX_GRANULES)
    with torch.no_grad():
        ep = torch.export.export(module.eval(), (ids,),
                                 dynamic_shapes={"input_ids": {1: GRANULE * s}})
        torch.export.save(ep, f"{work}/{model}_dyn.pt2")
        for n in lengths:
            torch.export.save(torch.export.export(module.eval(), (ids[:, :n],)),
                              f"{work}/{model}_{n}.pt2")


def compiled(pt2: Path, out: Path, sets: tuple[str, ...] = ()) -> float:
    """Wall s of `spyrec compile PT2 -o OUT [--set S ...]` in a fresh process."""
    extra = [a for s in sets for a in ("--set", s)]
    wall, _ = scale.measured([PY, "-m", "spyrec", "compile", str(pt2), "-o", str(out), "-q",
                              *extra], f"spyrec compile of {pt2.name}", 8.0, timeout_s=900)
    return wall


def bench_model(work: Path, model: str, lengths: list[int], sets: tuple[str, ...] = ()
                ) -> tuple[dict, list[dict]]:
    script = (f"import sys; sys.path.insert(0, {str(BENCH)!r}); sys.path.insert(0, "
              f"{str(ROOT)!r}); import symbolic; symbolic.export_all({model!r}, {lengths!r}, "
              f"{str(work)!r})")
    scale.measured([PY, "-c", script], f"export of {model}", 8.0, timeout_s=1800)
    # the one compile's wall is a median of SYM_RUNS (the statics' sum averages 31 runs' noise
    # by itself; a single run of the one compile swung +-10% here)
    sym_s = statistics.median(compiled(work / f"{model}_dyn.pt2", work / f"{model}_dyn", sets)
                              for _ in range(SYM_RUNS))
    curve = {next(iter(p["lengths"].values())): p["time_us"] for p in json.loads(
        (work / f"{model}_dyn" / "report.json").read_text())["cost_curve"]}
    rows, static_s = [], 0.0
    for n in lengths:
        static_s += compiled(work / f"{model}_{n}.pt2", work / f"{model}_{n}")
        est = json.loads((work / f"{model}_{n}" / "report.json").read_text())
        static_us = est["cost"]["totals"]["time_us"]
        rows.append({"model": model, "tokens": n, "est_sym_us": curve[n],
                     "est_static_us": static_us, "overhead": curve[n] / static_us})
    worst = max(rows, key=lambda r: r["overhead"])
    summary = {"model": model, "lengths": len(lengths), "sym_compile_s": sym_s,
               "static_compile_s": static_s, "ratio": static_s / sym_s,
               "worst_overhead": worst["overhead"], "at_tokens": worst["tokens"]}
    summary["status"] = "met" if summary["ratio"] >= COMPILE_RATIO_TARGET and \
        summary["worst_overhead"] <= OVERHEAD_TARGET else "not met"
    return summary, rows


def export_decode(slots: int, work: str) -> None:
    """WORK/decode_<slots>.pt2: Llama's static-cache decode step over `slots` slots."""
    import torch

    from tests.models import hf

    step, inputs = hf.decode("llama", slots=slots)
    with torch.no_grad():
        ep = torch.export.export(step, inputs, strict=True)     # as transformers exports it
        torch.export.save(ep, f"{work}/decode_{slots}.pt2")


def bench_decode(work: Path, slots: int, filled: int) -> list[dict]:
    """One row per cache position run (FILLED - 1 and SLOTS - 1) of the one compiled decode
    step: keys attended, estimated us and HBM bytes, eager check."""
    import numpy as np

    script = (f"import sys; sys.path.insert(0, {str(BENCH)!r}); sys.path.insert(0, "
              f"{str(ROOT)!r}); import symbolic; symbolic.export_decode({slots}, "
              f"{str(work)!r})")
    scale.measured([PY, "-c", script], "export of the decode step", 8.0, timeout_s=1800)
    out = work / f"decode_{slots}"
    compiled(work / f"decode_{slots}.pt2", out)
    rows = []
    for position in (filled - 1, slots - 1):
        npz = work / f"decode_{position}.npz"
        np.savez(npz, input_ids=np.array([[7]], dtype=np.int64),
                 cache_position=np.array([position], dtype=np.int64))
        done = subprocess.run([PY, "-m", "spyrec", "run", str(out), "--inputs", str(npz),
                               "--check", "--report", "--json", "-q"], capture_output=True,
                              text=True,
                              timeout=1800)
        if done.returncode not in (0, 1):       # 1: the check found a difference (a row)
            raise SystemExit(f"spyrec run at cache position {position}: exit "
                             f"{done.returncode}\n{done.stderr}")
        doc = json.loads(done.stdout)
        totals = doc["cost"]["totals"]
        attention = [o for o in doc["cost"]["ops"] if "scaled_dot_product_attention" in o["name"]]
        rows.append({"slots": slots, "keys": position + 1, "est_us": totals["time_us"],
                     "hbm_bytes": totals["hbm_read_bytes"] + totals["hbm_write_bytes"],
                     "attention_us": sum(o["time_us"] * o["executions"] for o in attention),
                     "attention_hbm_bytes": sum((o["hbm_read_bytes"] + o["hbm_write_bytes"]) *
                                                o["executions"] for o in attention),
                     "check": "equal" if all(c["ok"] for c in doc["check"]) else "DIFFERS"})
    return rows


DECODE = [("slots", "{:>6}"), ("keys", "{:>6}"), ("est_us", "{:>9.1f}"),
          ("hbm_bytes", "{:>12}"), ("attention_us", "{:>12.1f}"),
          ("attention_hbm_bytes", "{:>19}"), ("check", "{:<}")]
SUMMARY = [("model", "{:<8}"), ("lengths", "{:>7}"), ("sym_compile_s", "{:>13.2f}"),
           ("static_compile_s", "{:>16.1f}"), ("ratio", "{:>7.1f}"),
           ("worst_overhead", "{:>14.3f}"), ("at_tokens", "{:>9}"), ("status", "{:<}")]
PER_LENGTH = [("model", "{:<8}"), ("tokens", "{:>6}"), ("est_sym_us", "{:>11.1f}"),
              ("est_static_us", "{:>13.1f}"), ("overhead", "{:>8.3f}")]


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama,granite")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)),
                    help="static lengths compiled (multiples of 64 in 128..2048)")
    ap.add_argument("--keep", type=Path, default=None, help="work in this directory, kept")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="pipeline option for the symbolic compile (repeatable), e.g. "
                         "symbolic_lengths.mode=tiled")
    ap.add_argument("--decode", default=None, metavar="SLOTS:FILLED",
                    help="measure a decode step's symbolic key length instead, e.g. 32768:4096")
    args = ap.parse_args(argv)
    if args.decode:
        if args.sets or args.models != ap.get_default("models") or \
                args.lengths != ap.get_default("lengths"):
            ap.error("--decode measures Llama's decode step alone: --models, --lengths and "
                     "--set do not apply to it")
        return _decode_main(ap, args)
    lengths = sorted(int(n) for n in args.lengths.split(",") if n)
    bad = [n for n in lengths if n not in LENGTHS]
    if bad:
        ap.error(f"--lengths {bad}: each must be a multiple of {GRANULE} in "
                 f"{LENGTHS[0]}..{LENGTHS[-1]}")
    work = args.keep or Path(tempfile.mkdtemp(prefix="spyrec-sym-"))
    work.mkdir(parents=True, exist_ok=True)
    summaries, rows = [], []
    try:
        for model in args.models.split(","):
            summary, per_length = bench_model(work, model, lengths, tuple(args.sets))
            summaries.append(summary)
            rows += per_length
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(scale.table(rows, PER_LENGTH))
    print(f"targets: ratio >= {COMPILE_RATIO_TARGET:g} (sum of static compiles / the symbolic "
          f"compile), overhead <= {OVERHEAD_TARGET:g} at every length")
    print(scale.table(summaries, SUMMARY))
    if args.json:
        args.json.write_text(json.dumps({"summary": summaries, "rows": rows}, indent=1) + "\n")
    return summaries


def _decode_main(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[dict]:
    try:
        slots, filled = (int(x) for x in args.decode.split(":"))
    except ValueError:
        ap.error(f"--decode {args.decode!r}: SLOTS:FILLED, two integers (e.g. 32768:4096)")
    if not 0 < filled <= slots:
        ap.error(f"--decode {args.decode}: FILLED must be in 1..SLOTS")
    work = args.keep or Path(tempfile.mkdtemp(prefix="spyrec-decode-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        rows = bench_decode(work, slots, filled)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(scale.table(rows, DECODE))
    full, part = rows[1], rows[0]

    def ratio(key: str) -> str:
        return f"{full[key] / part[key]:.1f}x" if part[key] else "n/a"
    print(f"the key loop over the filled {filled} of {slots} slots, against every slot: "
          f"attention (ops named scaled_dot_product_attention*) {ratio('attention_us')} less "
          f"estimated time, {ratio('attention_hbm_bytes')} less HBM traffic; the whole step "
          f"{ratio('est_us')} and {ratio('hbm_bytes')}")
    if args.json:
        args.json.write_text(json.dumps({"decode": rows}, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
