"""Compile time of the sample decoder at depth 1, 2, 4, 8 (fp32, input (8, 127, 256)).

Prints wall time per phase: torch's load + decomposition, then spyrec's own work (lowering,
each pass, codegen), the whole compile (with writing files and the cost estimate), and the
layout pass's share of it. Targets: spyrec's own passes under 1 s for 2 layers, growing
linearly; the layout pass under 20% of compile time at depth 8.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from samples.models import decoder  # noqa: E402
from spyrec.compiler import CompileOptions  # noqa: E402

try:       # with its cost estimate, as spyrec compile (before spyrec/driver.py: built in)
    from spyrec.driver import compile_and_estimate as compile_program  # noqa: E402
except ImportError:
    from spyrec.compiler import compile_program  # noqa: E402


def line_counts() -> str:
    rows = []
    for pkg in sorted((ROOT / "spyrec").iterdir()):
        if pkg.is_dir() and not pkg.name.startswith("__"):
            n = sum(len(p.read_text().splitlines()) for p in pkg.rglob("*.py"))
            rows.append(f"{pkg.name} {n}")
    return ", ".join(rows)


def main(depths=(1, 2, 4, 8)) -> None:
    print("| depth | ops | load s | lower ms | stick_layout ms | work_division ms "
          "| memory_planning ms | codegen ms | cost estimate ms | spyrec own s | total wall s "
          "| layout share |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for depth in depths:
            module, inputs = decoder(depth)
            pt2 = Path(tmp) / f"decoder{depth}.pt2"
            torch.export.save(torch.export.export(module, inputs), str(pt2))
            t0 = time.perf_counter()
            report = compile_program(pt2, Path(tmp) / f"out{depth}", CompileOptions(verbose=-1))
            wall = time.perf_counter() - t0
            ms = {p["name"]: p["wall_ms"] for p in report["passes"]}
            own = sum(v for k, v in ms.items() if k != "load") / 1e3
            print(f"| {depth} | {report['ops']} | {ms['load'] / 1e3:.2f} "
                  f"| {ms['lower']:.0f} | {ms['stick_layout']:.0f} | {ms['work_division']:.0f} "
                  f"| {ms['memory_planning']:.1f} | {ms['codegen']:.0f} "
                  f"| {ms['cost_estimate']:.0f} | {own:.2f} "
                  f"| {wall:.2f} | {ms['stick_layout'] / 1e3 / wall:.1%} |")
    print(f"\nlines of code per package: {line_counts()}")


if __name__ == "__main__":
    main()
