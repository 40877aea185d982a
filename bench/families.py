"""Model families end to end, whole processes: which front end, how long, how much traffic.

For every tiny model family the tests build in code — tests/models/more_families.py, the
vision and MoE models (tests/models/vision_models.py, moe_models.py, each only when present)
and tests/models/hf.py — the model is exported once in this process, then

- `spyrec compile model.pt2 -o OUT` runs in a fresh process (wall time: imports count, and the
  torch fallback's torch import and decompositions count, as they do for a user);
- `spyrec run OUT --inputs model.npz` runs in a fresh process (wall time);

and the table shows the front end used (report.json `frontend.used`; `torch` means the
fallback, 5-10 s more per compile), compile s, run s, device ops (report.json `ops`), HBM traffic
(cost totals hbm_read_bytes + hbm_write_bytes) against the compulsory traffic (every input and
weight read once, every output written once: manifest `device_bytes`; a constant's compile-time
copy in a second layout counts once, as `hardware_plans.compulsory_bytes` counts it) and their
ratio, then the estimate (`cost.totals.time_us`) against the roofline (max(compulsory bytes /
card bandwidth, flops / PT peak) + one bundle launch: `hardware_plans.roofline_us`) and their
ratio. A compile that fails shows its exit code and the first line of its message.

Sources: tests/models/more_families.py, vision_models.py, moe_models.py, hf.py and
new_families.py (issue 61: state-space hybrids, speech and vision towers, encoder-decoders;
`granite4_hybrid_real` is Granite 4 hybrid at the real geometry of ibm-granite's
granite-4.0-h-tiny (hidden 1536, 4 layers of its 40: 3 Mamba-2 + 1 attention, 64 experts of
512, top 6), random weights, 128 tokens, bf16: compiled and estimated only unless `--check`).

    python bench/families.py [--only 'bloom*,gptj'] [--no-fp16] [--check]

`--check` runs `spyrec run --check` instead (its time then includes eager's run).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from hardware_plans import compulsory_bytes, roofline_us  # noqa: E402

# (label, module): each module has FAMILIES = {name: builder}; builder() -> (module, inputs)
SOURCES = (("more", "tests.models.more_families"), ("vision", "tests.models.vision_models"),
           ("moe", "tests.models.moe_models"), ("hf", "tests.models.hf"),
           ("new", "tests.models.new_families"), ("real", "bench.granite4_real"))


def collect() -> list[tuple[str, str, object, dict]]:
    """(source, name, builder, export kwargs) of every family whose module imports (export
    kwargs carry `_run: False` for a module that is compiled only, `RUN = False`)."""
    rows = []
    for label, module_name in SOURCES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            print(f"({module_name} not available: {e})", file=sys.stderr)
            continue
        kwargs = getattr(module, "export_kwargs", lambda name: {})
        runs = {} if getattr(module, "RUN", True) else {"_run": False}
        for name, builder in getattr(module, "FAMILIES", {}).items():
            rows.append((label, name, builder, {**kwargs(name), **runs}))
    return rows


def export(tmp: Path, key: str, builder, kwargs: dict) -> tuple[Path, Path]:
    """`key`.pt2 and `key`.npz (inputs under the program's user-input names)."""
    kwargs = {k: v for k, v in kwargs.items() if not k.startswith("_")}
    module, inputs = builder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(module.eval(), tuple(inputs), **kwargs)
    pt2, npz = tmp / f"{key}.pt2", tmp / f"{key}.npz"
    torch.export.save(ep, str(pt2))
    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    np.savez(npz, **{n: _host(t) for n, t in zip(names, inputs)})
    return pt2, npz


def _host(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 \
        else t.numpy()


def timed(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "spyrec", *args], capture_output=True,
                          text=True, cwd=ROOT)
    return time.perf_counter() - start, done


def measure(tmp: Path, key: str, builder, kwargs: dict, check: bool) -> dict:
    pt2, npz = export(tmp, key, builder, kwargs)
    out = tmp / f"{key}_out"
    compile_s, done = timed(["compile", str(pt2), "-o", str(out), "-q"])
    if done.returncode:
        return {"error": f"compile exit {done.returncode}: "
                         f"{(done.stderr.strip().splitlines() or [''])[0][:90]}"}
    if kwargs.get("_run", True) or check:
        run_s, ran = timed(["run", str(out), "--inputs", str(npz), "-q"]
                           + (["--check"] if check else []))
    else:  # compiled and estimated only (the real geometry: minutes in the simulator)
        run_s, ran = float("nan"), subprocess.CompletedProcess([], 0)
    report = json.loads((out / "report.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    totals = report["cost"]["totals"]
    compulsory = compulsory_bytes(manifest, report)
    return {"frontend": report["frontend"]["used"], "compile": compile_s, "run": run_s,
            "run_rc": ran.returncode, "ops": report["ops"],
            "hbm": totals["hbm_read_bytes"] + totals["hbm_write_bytes"],
            "compulsory": compulsory, "est_us": totals["time_us"],
            "roof_us": roofline_us(compulsory, totals["flops"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="*", help="comma-separated name globs")
    parser.add_argument("--no-fp16", action="store_true", help="skip the *_fp16 variants")
    parser.add_argument("--check", action="store_true", help="run with --check")
    args = parser.parse_args()
    globs = args.only.split(",")
    rows = [r for r in collect() if any(fnmatch.fnmatch(r[1], g) for g in globs)
            and not (args.no_fp16 and r[1].endswith("_fp16"))]
    print("| source | family | front end | compile s | run s | ops | HBM MB | compulsory MB "
          "| traffic / compulsory | est us | roofline us | est / roofline |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, builder, kwargs in rows:
            key = f"{label}_{name}"
            try:
                r = measure(Path(tmp), key, builder, kwargs, args.check)
            except Exception as e:  # an export failure is a row, not the end of the table
                r = {"error": f"export: {type(e).__name__}: {str(e).splitlines()[0][:80]}"}
            if "error" in r:
                print(f"| {label} | {name} | {r['error']} | | | | | | | | | |", flush=True)
                continue
            run = f"{r['run']:.2f}" + ("" if r["run_rc"] == 0 else f" (exit {r['run_rc']})")
            print(f"| {label} | {name} | {r['frontend']} | {r['compile']:.2f} | {run} "
                  f"| {r['ops']} | {r['hbm'] / 1e6:.2f} | {r['compulsory'] / 1e6:.2f} "
                  f"| {r['hbm'] / r['compulsory']:.2f} | {r['est_us']:.1f} "
                  f"| {r['roof_us']:.1f} | {r['est_us'] / r['roof_us']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
