"""spyrec/costmodel.py is the one statement of each op's cost class and of each formula: the
simulator's kernel table takes its classes from there, and both estimates call its formulas."""

import math

import pytest

from spyrec.costmodel import (
    COST_CLASSES, DEFAULT_PARAMS, MATMUL, MOVE, TRANSCENDENTAL, VECTOR, compute_seconds,
    card_seconds, core_bandwidth, cost_class, matmul_m_vars, memory_seconds, ring_us,
)
from spyrec.sim.kernels import KERNELS


def test_every_kernel_has_the_cost_class_the_cost_model_says():
    assert {op: k.cost_class for op, k in KERNELS.items()} == \
        {op: cost_class(op) for op in KERNELS}
    assert set(COST_CLASSES) <= set(KERNELS), "cost classes of ops no kernel runs"
    assert set(COST_CLASSES.values()) == {MATMUL, MOVE, TRANSCENDENTAL}
    assert {k.cost_class for k in KERNELS.values()} == {MATMUL, MOVE, TRANSCENDENTAL, VECTOR}


def test_formulas_by_hand():
    p = DEFAULT_PARAMS
    assert compute_seconds(MOVE, 10**6, 1) == 0.0
    assert compute_seconds(VECTOR, 64, 1) == pytest.approx(1e-9)
    assert compute_seconds(TRANSCENDENTAL, 64, 1) == pytest.approx(4e-9)
    # 8 rows: one pass, efficiency sqrt(1/8); 64 rows and more: full efficiency
    assert compute_seconds(MATMUL, 1536, 8) == pytest.approx(1e-9 * math.sqrt(8))
    assert compute_seconds(MATMUL, 1536, 64) == pytest.approx(1e-9)
    assert memory_seconds(204.8e9 / 32, 32) == pytest.approx(1.0)
    assert memory_seconds(128, 0) == memory_seconds(128, 1)
    # one core alone moves at its own 36 GB/s, not the card's 204.8; from 6 cores on
    # (204.8 / 36 = 5.7) the card's share is the tighter limit
    assert memory_seconds(36e9, 1) == pytest.approx(1.0)
    assert [core_bandwidth(n) / 1e9 for n in (1, 5, 6, 8, 32)] == \
        pytest.approx([36, 36, 204.8 / 6, 25.6, 6.4])
    assert card_seconds(204.8e9) == pytest.approx(1.0)
    assert ring_us(4, 1000) == pytest.approx(3 * 1000 * 1.4e-4)
    assert [p.read_share(r) for r in (1, 8, 16)] == [1.0, 1 / 8, 1 / 8]
    assert matmul_m_vars({"b", "m", "k"}, {"b", "k", "n"}, ("k",)) == {"m"}
