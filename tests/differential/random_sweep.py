"""`make random-sweep`: many seeded random programs (test_random_programs' vocabulary), each
exported, compiled, simulated and compared with eager; prints how many passed, were refused
(grouped by reason) or failed. Not part of `make test` (2,000 programs take a while).

    python -m tests.differential.random_sweep --count 2000 [--start 0]

A refusal of a program eager runs is a gap to close or explain; a failure (a mismatch, an
internal error) is a bug: its seed replays it with
`SPYREC_RANDOM_SEED=<seed> pytest tests/differential/test_random_programs.py -k fresh_seed`.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def classify(seed: int, workdir: Path) -> tuple[str, str]:
    """("passed" | "refused" | "failed" | "unexportable", detail) of the program of `seed`."""
    import torch

    from spyrec.errors import UnsupportedProgram
    from tests.differential.test_random_programs import (
        StepProgram, compare_conditioned, random_program,
    )

    shape, dtype, steps, data_seed = random_program(random.Random(seed))
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(data_seed)).to(dtype)
    try:
        torch.export.export(StepProgram(steps).eval(), (x,))
    except Exception as e:  # noqa: BLE001 - torch's export errors
        return "unexportable", f"{type(e).__name__}: {str(e)[:80]}"
    try:
        compare_conditioned(workdir, StepProgram(steps), x)
    except UnsupportedProgram as e:
        return "refused", _cause(str(e))
    except BaseException as e:  # noqa: BLE001 - every other outcome is a failure to report
        if isinstance(e, KeyboardInterrupt):
            raise
        return "failed", f"{type(e).__name__}: {str(e).splitlines()[0][:160]} {steps} {shape}"
    return "passed", ""


def _cause(message: str) -> str:
    """The refusal's reason with names and numbers blanked, so equal causes group together."""
    line = message.splitlines()[1] if "\n" in message else message
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'|\([^)]*\)", "…", line.strip()))[:140]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--start", type=int, default=0, help="first seed")
    args = parser.parse_args(argv)
    counts: Counter = Counter()
    reasons: Counter = Counter()
    failures: list[str] = []
    begin = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.start, args.start + args.count):
            work = Path(tmp) / str(seed)
            work.mkdir()
            outcome, detail = classify(seed, work)
            counts[outcome] += 1
            if outcome == "refused":
                reasons[detail] += 1
            elif outcome == "failed":
                failures.append(f"seed {seed}: {detail}")
                print(f"FAILED seed {seed}: {detail}", file=sys.stderr)
    print(f"random programs: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['refused']} refused, {counts['unexportable']} unexportable "
          f"({args.count} seeds from {args.start}, {time.time() - begin:.0f} s)")
    for reason, n in reasons.most_common():
        print(f"  refused x{n}: {reason}")
    for line in failures:
        print(f"  {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
