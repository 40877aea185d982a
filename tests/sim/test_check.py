"""--check comparison rule: |sim - eager| <= tol + tol*|eager|, NaN only matches NaN."""

import numpy as np

from spyrec.sim.check import compare, format_checks
from spyrec.bf16 import float32_to_bf16_bits


def test_allclose_rule_per_dtype():
    eager = np.array([1.0, 100.0, 0.0, 1e-6])
    sim = np.array([1.0 + 1.9e-4, 100.0199, 2.0**-14, 0.0], dtype=np.float32)
    c = compare(0, "y", "float32", sim, eager)   # allowed: 2e-4, 0.0101, 1e-4, 1e-4
    assert c.tolerance == 1e-4 and c.mismatches == 1 and c.total == 4 and not c.ok
    assert abs(c.max_abs - 0.0199) < 1e-5
    c16 = compare(0, "y", "float16", sim.astype(np.float16), eager)
    assert c16.tolerance == 1e-2 and c16.ok


def test_nan_and_inf_semantics():
    eager = np.array([np.nan, np.inf, 1.0, -np.inf])
    assert compare(0, "y", "float32", np.array([np.nan, np.inf, 1.0, -np.inf], np.float32),
                   eager).ok
    leak = compare(0, "y", "float32", np.array([np.nan, np.inf, np.nan, np.inf], np.float32),
                   eager)
    assert leak.mismatches == 2 and not leak.ok


def test_integers_bools_and_shapes():
    assert compare(0, "i", "int64", np.array([1, 2, 3]), np.array([1, 2, 3])).ok
    c = compare(0, "i", "int64", np.array([1, 2, 4]), np.array([1, 2, 3]))
    assert c.mismatches == 1 and c.tolerance == 0.0
    assert not compare(0, "b", "bool", np.array([True]), np.array([False])).ok
    shape = compare(0, "y", "float32", np.zeros((2, 3), np.float32), np.zeros((3, 2)))
    assert not shape.ok and shape.problem == "shape [2, 3], eager gives [3, 2]"
    assert "MISMATCH: shape [2, 3]" in format_checks([shape])


def test_bf16_outputs_compare_as_values():
    values = np.array([1.0, -2.5, 3.140625], dtype=np.float32)
    assert compare(0, "y", "bfloat16", float32_to_bf16_bits(values), values.astype(np.float64)).ok
