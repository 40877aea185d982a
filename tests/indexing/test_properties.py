"""Randomized soundness: random floor/mod/affine expressions over small ranges, simplified and
compared with brute force at every point of the domain. Also: the text form round-trips."""

import itertools

import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyrec.indexing import (
    IndirectAccess, Lin, from_sympy, Ranges, Var, bounds, const, evaluate, floordiv, maximum, minimum, mod, parse_expr,
    simplify, value_range, var,
)

NAMES = ("x", "y", "z")
DIVISORS = st.sampled_from([2, 3, 4, 6, 7, 8, 16, 32, 64, -3])


def _leaf():
    return st.sampled_from(NAMES).map(var) | st.integers(-70, 70).map(const)


def _extend(children):
    binary = st.tuples(children, children)
    return st.one_of(
        binary.map(lambda ab: ab[0] + ab[1]),
        binary.map(lambda ab: ab[0] - ab[1]),
        st.tuples(children, st.integers(-9, 9).filter(bool)).map(lambda ak: ak[0].scale(ak[1])),
        st.tuples(children, DIVISORS).map(lambda ad: floordiv(ad[0], ad[1])),
        st.tuples(children, DIVISORS).map(lambda ad: mod(ad[0], ad[1])),
        binary.map(lambda ab: minimum(*ab)),
        binary.map(lambda ab: maximum(*ab)),
    )


EXPRS = st.recursive(_leaf(), _extend, max_leaves=10)


@st.composite
def domains(draw):
    ranges = {}
    for name in NAMES:
        lo = draw(st.integers(-8, 40))
        ranges[name] = (lo, lo + draw(st.integers(0, 24)))
    return ranges


def _all_points(ranges):
    names = sorted(ranges)
    for values in itertools.product(*(range(lo, hi + 1) for lo, hi in
                                      (ranges[n] for n in names))):
        yield dict(zip(names, values))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRS, domains())
def test_simplify_is_sound_and_bounds_hold(expr, ranges):
    out = simplify(expr, ranges)
    lo, hi = value_range(expr, ranges)
    r = Ranges({Var(n): iv for n, iv in ranges.items()})
    b_lo, b_hi = bounds(out, r)
    for env in _all_points(ranges):
        want = evaluate(expr, env)
        assert evaluate(out, env) == want, (str(expr), str(out), env)
        assert lo <= want <= hi and b_lo <= want <= b_hi


@settings(max_examples=200, deadline=None)
@given(EXPRS, domains())
def test_simplify_is_idempotent(expr, ranges):
    once = simplify(expr, ranges)
    assert simplify(once, ranges) == once


@settings(max_examples=300, deadline=None)
@given(EXPRS)
def test_text_form_round_trips(expr):
    assert parse_expr(str(expr)) == expr


@settings(max_examples=150, deadline=None)
@given(EXPRS, domains())
def test_printed_form_is_read_back_by_plain_sympify(expr, ranges):
    """DESIGN §4: every expression string we write is read by `sympy.sympify`."""
    text = str(simplify(expr, ranges))
    back = from_sympy(sympy.sympify(text, locals={"IndirectAccess": IndirectAccess}))
    for env in itertools.islice(_all_points(ranges), 200):
        assert evaluate(back, env) == evaluate(expr, env), (text, env)


def test_known_forms_print_like_the_reference():
    assert str(floordiv(var("c1"), 64)) == "floor(c1/64)"
    assert str(mod(var("c1"), 64)) == "Mod(c1, 64)"
    assert str(floordiv(var("c1") + 32, 64)) == "floor((c1 + 32)/64)"
    assert str(var("c0") - floordiv(var("s0"), -7).scale(3) + 2) == "c0 - 3*floor(s0/(-7)) + 2"
    assert isinstance(parse_expr("c0 // 4 + c1 % 3"), Lin)
    gathered = parse_expr("256*IndirectAccess('idx') + c1")
    assert str(gathered) == "c1 + 256*IndirectAccess('idx')"
    assert from_sympy(sympy.sympify(str(gathered), locals={"IndirectAccess": IndirectAccess})) \
        == gathered
