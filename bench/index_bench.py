"""Index-algebra benchmark: time per `simplify` over the reference vector set, the 7-level
nested reshape chain, and device-coordinate queries. Prints tables; asserts nothing.

Targets (issue 2): median <= 1 ms per expression (the reference pays ~0.8 ms per coordinate
query), the 7-level chain in under 50 ms. "cold" clears every memo first; "warm" repeats a
query already answered (what a pass pays for the second identical question).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import sympy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spyrec.indexing import (  # noqa: E402
    clear_caches, device_coordinates, make_ranges, parse_expr, simplify, var,
)
from spyrec.layout import default_layout  # noqa: E402
from tests.indexing.vectors import I, S, V  # noqa: E402


def _time(fn, repeat: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def bench_vectors() -> None:
    cold, warm, matched, total = [], [], 0, 0
    for _vid, _src, rng, inputs, expected, _kind in V + S + I:
        ranges = make_ranges(rng)
        for inp, exp in zip(inputs, expected):
            expr = parse_expr(inp)
            clear_caches()
            expr = parse_expr(inp)
            cold.append(_time(lambda: simplify(expr, ranges)))
            warm.append(_time(lambda: simplify(expr, ranges), repeat=20))
            total += 1
            matched += simplify(expr, ranges) == parse_expr(exp)
    print(f"vectors simplified to the expected form: {matched}/{total}")
    print("| simplify over the vector set | median us | p90 us | max us |")
    print("|---|---|---|---|")
    for name, xs in (("cold (memo cleared)", cold), ("warm (memoized)", warm)):
        xs = sorted(x * 1e6 for x in xs)
        print(f"| {name} | {statistics.median(xs):.0f} | {xs[int(0.9 * len(xs))]:.0f} "
              f"| {xs[-1]:.0f} |")


def bench_reshape_chain() -> None:
    print("\n| nested reshape chain (sympy in, sympy out) | cold ms |")
    print("|---|---|")
    d0, d1 = sympy.symbols("d0 d1", integer=True)
    ranges = {d0: (0, 1023), d1: (0, 127)}
    for depth in (1, 3, 5, 7, 10):
        expr = 128 * d0 + d1
        for a in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)[:depth]:
            expr = sympy.floor(expr / a) * a + sympy.Mod(expr, a)
        clear_caches()
        t = _time(lambda: simplify(expr, ranges))
        assert simplify(expr, ranges) == 128 * d0 + d1
        print(f"| {depth} levels | {t * 1e3:.1f} |")


def bench_coordinates() -> None:
    layout = default_layout([8, 127, 256], "float16")
    ranges = {"c0": (0, 7), "c1": (0, 126), "c2": (0, 255)}
    index = var("c0").scale(127 * 256) + var("c1").scale(256) + var("c2")
    args = ([8, 127, 256], [127 * 256, 256, 1], 0, layout.device_size, layout.stride_map)
    clear_caches()
    cold = _time(lambda: device_coordinates(*args, ranges, index))
    warm = _time(lambda: device_coordinates(*args, ranges, index), repeat=200)
    print("\n| device_coordinates, fp16 [8,127,256] | us |")
    print("|---|---|")
    print(f"| cold | {cold * 1e6:.0f} |\n| warm | {warm * 1e6:.1f} |")


if __name__ == "__main__":
    bench_vectors()
    bench_reshape_chain()
    bench_coordinates()
