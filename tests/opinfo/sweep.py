"""`make opinfo`: every sample of every op in `samples.OPS`, fp32 and fp16.

Prints one summary line `opinfo: N passed, N failed, N refused, N unexportable` and a table of
the failures (and, with --refused, of the refusals grouped by reason). `--max-samples K` keeps
the first K samples of each (op, dtype), for a quicker look.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter

from tests.opinfo.samples import DTYPES, OPS, op_id, run_sample, samples


def describe(sample) -> str:
    """Shapes of the sample's tensors and its other arguments, short."""
    import torch
    from torch.utils import _pytree as pytree

    def show(x):
        if isinstance(x, torch.Tensor):
            return f"{list(x.shape)}"
        return repr(x)
    args = pytree.tree_map(show, (sample.input, sample.args, sample.kwargs))
    return str(args)[:90]


def refusal_cause(detail: str) -> str:
    """The line of a refusal that names the cause (the op list's first entry), without the
    temporary directory, so equal causes group together."""
    lines = detail.splitlines()
    line = lines[1] if len(lines) > 1 else lines[0]
    return re.sub(r"/\S*/model\.pt2", "model.pt2", line.strip())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", type=int, default=None)
    parser.add_argument("--ops", nargs="*", default=None, help="only these op ids")
    parser.add_argument("--refused", action="store_true", help="also list the refusals")
    args = parser.parse_args(argv)
    counts: Counter = Counter()
    failures, refusals = [], Counter()
    start = time.time()
    ops = [op_id(*o) for o in OPS]
    for op in args.ops or ops:
        for dtype in DTYPES:
            todo = samples(op, dtype)[:args.max_samples]
            for i, sample in enumerate(todo):
                verdict = run_sample(op, dtype, i)
                counts[verdict.outcome] += 1
                if verdict.outcome == "failed":
                    failures.append((op, dtype, i, describe(sample), verdict.detail))
                elif verdict.outcome == "refused":
                    refusals[(op, refusal_cause(verdict.detail))] += 1
            print(f"{op:<32} {dtype:<8} {len(todo):>3} samples  "
                  f"[{time.time() - start:6.0f} s]", file=sys.stderr, flush=True)
    print(f"opinfo: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['refused']} refused, {counts['unexportable']} unexportable "
          f"({time.time() - start:.0f} s)")
    if failures:
        print(f"\n{'op':<28} {'dtype':<8} {'#':>3}  {'sample':<50} problem")
        for op, dtype, i, desc, detail in failures:
            print(f"{op:<28} {dtype:<8} {i:>3}  {desc:<50.50} {detail[:160]}")
    if args.refused and refusals:
        print(f"\n{'op':<28} {'count':>5}  reason")
        for (op, reason), n in sorted(refusals.items()):
            print(f"{op:<28} {n:>5}  {reason[:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
