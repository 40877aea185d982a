"""spyrec against its peers, whole processes, side by side in one run (issue targets as ratios).

- compile: `spyrec compile decoder.pt2` vs a cold `torch.compile` (inductor, a fresh cache
  directory) of the same `.pt2`, first call included; target ratio <= 0.1 at depth 2, and spyrec
  at depth 8 <= 3x depth 2.
- run: `spyrec run OUT --inputs x.npz` vs eager running the same `.pt2` on the same npz in a
  fresh process; target ratio <= 0.5.

Each figure is the median of `--repeat` paired runs (default 3), measured as wall time of a
fresh process, so imports count as they do for a user. Usage: `python bench/vs_peers.py
[--repeat N] [--depths 2,8]`.
"""

from __future__ import annotations

import argparse
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
ep = torch.export.export(m, inputs)
torch.export.save(ep, {pt2!r})
np.savez({npz!r}, x=inputs[0].numpy())
"""

INDUCTOR = """
import numpy as np, torch
ep = torch.export.load({pt2!r})
x = torch.from_numpy(np.load({npz!r})["x"])
torch.compile(ep.module(), backend="inductor")(x)
"""

EAGER = """
import numpy as np, torch
ep = torch.export.load({pt2!r})
x = torch.from_numpy(np.load({npz!r})["x"])
with torch.no_grad():
    y = ep.module()(x)
np.savez({out!r}, output_0=y.numpy())
"""


def timed(cmd: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd[:4])}...\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0


def spyrec(*args: str) -> list[str]:
    return [PY, "-m", "spyrec", *args]


def measure(tmp: Path, depth: int, repeat: int) -> dict:
    pt2, npz = tmp / f"decoder{depth}.pt2", tmp / f"decoder{depth}.npz"
    subprocess.run([PY, "-c", EXPORT.format(root=str(ROOT), depth=depth, pt2=str(pt2),
                                            npz=str(npz))], check=True, capture_output=True)
    rows: dict[str, list[float]] = {"compile": [], "inductor": [], "run": [], "eager": []}
    out = tmp / f"out{depth}"
    for i in range(repeat):
        rows["compile"].append(timed(spyrec("compile", str(pt2), "-o", str(out), "-q")))
        cache = tmp / f"inductor-cache-{depth}-{i}"
        rows["inductor"].append(timed([PY, "-c", INDUCTOR.format(pt2=str(pt2), npz=str(npz))],
                                      env={"TORCHINDUCTOR_CACHE_DIR": str(cache)}))
        rows["run"].append(timed(spyrec("run", str(out), "--inputs", str(npz), "-o",
                                        str(tmp / "sim.npz"))))
        rows["eager"].append(timed([PY, "-c", EAGER.format(pt2=str(pt2), npz=str(npz),
                                                           out=str(tmp / "eager.npz"))]))
    return {k: statistics.median(v) for k, v in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--depths", default="2,8")
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    print("| depth | spyrec compile s | inductor cold s | ratio | spyrec run s | eager run s "
          "| ratio |")
    print("|---|---|---|---|---|---|---|")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for depth in depths:
            r = results[depth] = measure(Path(tmp), depth, args.repeat)
            print(f"| {depth} | {r['compile']:.2f} | {r['inductor']:.2f} "
                  f"| {r['compile'] / r['inductor']:.2f} | {r['run']:.2f} | {r['eager']:.2f} "
                  f"| {r['run'] / r['eager']:.2f} |", flush=True)
    if 2 in results and 8 in results:
        print(f"\nspyrec compile depth 8 / depth 2: "
              f"{results[8]['compile'] / results[2]['compile']:.2f} (target <= 3)")


if __name__ == "__main__":
    main()
