"""Constraint/domain vectors (appendix C): exact expected domains, and set equality by brute force."""

import itertools

import pytest

from spyrec.indexing import evaluate, make_ranges, parse_expr, simplify_domain
from tests.indexing.brute import py_eval
from tests.indexing.vectors import C

CASES = [pytest.param(*case[2:], id=case[0]) for case in C]


def _domain_points(var_ranges, constraints):
    """Points of the box satisfying every (evaluate(env), lo, hi) constraint."""
    names = sorted(var_ranges)
    boxes = [range(var_ranges[n][0], var_ranges[n][1] + 1) for n in names]
    for values in itertools.product(*boxes):
        env = dict(zip(names, values))
        if all(lo <= value_of(env) <= hi for value_of, lo, hi in constraints):
            yield values


def _python(text):
    return lambda env: py_eval(text, env)


def _ours(e):
    return lambda env: evaluate(e, env)


@pytest.mark.parametrize("variables, constraints, exp_vars, exp_cons", CASES)
def test_expected_domain(variables, constraints, exp_vars, exp_cons):
    got = simplify_domain(variables, [(parse_expr(e), lo, hi) for e, lo, hi in constraints])
    if exp_cons == "EMPTY":
        assert got.empty and str(got) == "KNOWN EMPTY"
        return
    assert not got.empty
    assert dict(got.ranges.items()) == dict(make_ranges(exp_vars).items())
    assert set(got.constraints) == {(parse_expr(e), lo, hi) for e, lo, hi in exp_cons}


@pytest.mark.parametrize("variables, constraints, exp_vars, exp_cons", CASES)
def test_same_point_set(variables, constraints, exp_vars, exp_cons):
    got = simplify_domain(variables, [(parse_expr(e), lo, hi) for e, lo, hi in constraints])
    before = set(_domain_points(variables, [(_python(e), lo, hi) for e, lo, hi in constraints]))
    if got.empty:
        assert before == set()
        return
    after_ranges = {a.name: iv for a, iv in got.ranges.items()}
    after = set(_domain_points(after_ranges, [(_ours(e), lo, hi) for e, lo, hi in got.constraints]))
    assert after == before


def test_negative_divisor_uses_floor_semantics():
    """XLA's own test expects [15, 35]; under floor division 14 // -3 == -5, 35 // -3 == -12."""
    got = simplify_domain({"s0": (-99, 99)}, [(parse_expr("floor(s0/(-3))"), -11, -5)])
    assert dict(got.ranges.items()) == dict(make_ranges({"s0": (13, 33)}).items())
    assert 14 // -3 == -5 and 35 // -3 == -12 and 13 // -3 == -5 and 33 // -3 == -11
