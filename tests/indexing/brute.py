"""Brute-force evaluation helpers: ground truth that shares no code with the simplifier."""

from __future__ import annotations

import itertools
import random

EXHAUSTIVE_LIMIT = 60_000
SAMPLES = 4_000


def points(ranges: dict[str, tuple[int, int]], seed: int = 0):
    """Every point of the box when it is small, else its corners plus a seeded random sample."""
    names = sorted(ranges)
    sizes = [ranges[n][1] - ranges[n][0] + 1 for n in names]
    total = 1
    for s in sizes:
        total *= s
    if total <= EXHAUSTIVE_LIMIT:
        for values in itertools.product(*(range(ranges[n][0], ranges[n][1] + 1) for n in names)):
            yield dict(zip(names, values))
        return
    for corner in itertools.product(*((ranges[n][0], ranges[n][1]) for n in names)):
        yield dict(zip(names, corner))
    rng = random.Random(seed)
    for _ in range(SAMPLES):
        yield {n: rng.randint(*ranges[n]) for n in names}


def py_eval(text: str, env: dict[str, int]) -> int:
    """Evaluate a Python-syntax index expression (`//`, `%`, Min, Max) with plain ints."""
    return eval(text, {"__builtins__": {}, "Min": min, "Max": max}, dict(env))
