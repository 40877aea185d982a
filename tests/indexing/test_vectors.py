"""Every simplification vector of reference/E-indexing-issues.md (appendix V, S, I).

Each vector is checked three ways: the result has the expected form, it equals the input at
every point of the domain (exhaustive for small domains, sampled otherwise, evaluated with
Python's own `//` and `%`), and simplifying again changes nothing.
"""

import pytest
import sympy

from spyrec.indexing import evaluate, parse_expr, simplify
from tests.indexing.brute import points, py_eval
from tests.indexing.vectors import I, S, V

CASES = [
    pytest.param(rng, inp, exp, kind, id=f"{vid}.{k}")
    for vid, _src, rng, inputs, expected, kind in V + S + I
    for k, (inp, exp) in enumerate(zip(inputs, expected))
]


def same_form(got, expected_text: str) -> bool:
    """Structural equality in our canonical form (term order and spelling do not matter)."""
    return got == parse_expr(expected_text)


@pytest.mark.parametrize("rng, inp, exp, kind", CASES)
def test_expected_form(rng, inp, exp, kind):
    got = simplify(parse_expr(inp), rng)
    assert same_form(got, exp), f"{inp}\n  got      {got}\n  expected {exp}"


@pytest.mark.parametrize("rng, inp, exp, kind", CASES)
def test_sound_over_domain(rng, inp, exp, kind):
    got = simplify(parse_expr(inp), rng)
    for env in points(rng):
        assert evaluate(got, env) == py_eval(inp, env), (inp, str(got), env)


@pytest.mark.parametrize("rng, inp, exp, kind", CASES)
def test_idempotent(rng, inp, exp, kind):
    once = simplify(parse_expr(inp), rng)
    assert simplify(once, rng) == once


def test_vector_count():
    """The appendix holds 49 XLA, 12 Spyre-style and 23 Inductor results; 4 diagonal-view
    cases (S09, S10) are ours."""
    assert len(CASES) == 49 + 12 + 23 + 4


def test_sympy_in_sympy_out_brief_example():
    """`floor((64*a + b)/64)` with 0 <= b < 64 is `a`: plain sympy cannot do this."""
    a, b = sympy.symbols("a b", integer=True, nonnegative=True)
    expr = sympy.floor((64 * a + b) / 64)
    assert expr == a + sympy.floor(b / 64)  # sympy's own form, for the record
    assert simplify(expr, {a: (0, 1023), b: (0, 63)}) == a
    assert simplify(sympy.Mod(64 * a + b, 64), {a: (0, 1023), b: (0, 63)}) == b


def test_sympy_result_keeps_the_callers_symbols():
    c = sympy.Symbol("c")  # no assumptions: still treated as an integer symbol
    t = sympy.Symbol("t", integer=True)
    out = simplify(sympy.floor((1024 * t + c) / 64), {"t": (0, 3), c: (0, 1023)})
    assert out == 16 * t + sympy.floor(c / 64)
    assert out.free_symbols == {c, t}
    assert int(out.subs({t: 3, c: 1000})) == (1024 * 3 + 1000) // 64


def test_result_evaluates_to_plain_integers_after_substitution():
    d0, d1 = sympy.symbols("d0 d1", integer=True)
    expr = sympy.Mod(sympy.floor((2 * d1 + sympy.floor(d0 / 64)) / 3), 5) + 7 * d0
    out = simplify(expr, {d0: (0, 127), d1: (0, 3071)})
    for v0, v1 in [(0, 0), (127, 3071), (65, 17)]:
        assert int(out.subs({d0: v0, d1: v1})) == ((2 * v1 + v0 // 64) // 3) % 5 + 7 * v0


def test_seven_level_reshape_chain_is_identity():
    """x -> (x//a)*a + x%a composed 7 times is x; sympy.simplify needs > 60 s and fails."""
    d0, d1 = sympy.symbols("d0 d1", integer=True)
    expr = 128 * d0 + d1
    for a in (2, 4, 8, 16, 32, 64, 128):
        expr = sympy.floor(expr / a) * a + sympy.Mod(expr, a)
    assert simplify(expr, {d0: (0, 1023), d1: (0, 127)}) == 128 * d0 + d1
