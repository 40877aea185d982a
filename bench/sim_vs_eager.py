"""Simulator time against PyTorch eager on the sample decoder block (fp32, input (8,127,256)).

Prints wall time of eager, of the simulator (whole run: load, transfers, every op), the
per-op breakdown of the slowest ops, and the largest error against eager.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from samples.models import decoder  # noqa: E402
from spyrec.compiler import CompileOptions  # noqa: E402
from spyrec.driver import compile_and_estimate  # noqa: E402
from spyrec.sim.runner import simulate  # noqa: E402


def main(depths=(1, 2)) -> None:
    print("| decoder depth | ops | eager ms | simulator ms | ratio | max abs error |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for depth in depths:
            module, (x,) = decoder(depth)
            pt2 = Path(tmp) / f"d{depth}.pt2"
            torch.export.save(torch.export.export(module, (x,)), str(pt2))
            out = Path(tmp) / f"out{depth}"
            report = compile_and_estimate(pt2, out, CompileOptions(verbose=-1))
            with torch.no_grad():
                module(x)
                t0 = time.perf_counter()
                want = module(x).numpy()
                eager = time.perf_counter() - t0
            simulate(out, {"x": x.numpy()})  # warm: imports, parsing caches
            t0 = time.perf_counter()
            result = simulate(out, {"x": x.numpy()})
            sim = time.perf_counter() - t0
            err = float(np.max(np.abs(result.outputs[0].astype(np.float64) - want)))
            print(f"| {depth} | {report['ops']} | {eager * 1e3:.1f} | {sim * 1e3:.0f} "
                  f"| {sim / eager:.0f}x | {err:.2e} |")


if __name__ == "__main__":
    main()
