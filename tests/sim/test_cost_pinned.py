"""The cost model's estimated time pinned on realistic hand-computed cases (issue 10 §5): a
memory-bound add, a compute-bound matmul and a K-split matmul paying the partial-sum ring, at
the sizes and splits the compiler produces. Every figure below is worked out from the
parameters in spyrec/costmodel.py (204.8 GB/s shared by the active cores, 1.536 TMAC/s per core
at full PT efficiency, one fp16 stick of vector work per cycle at 1 GHz, 1.4e-4 us per
partial-sum element and ring hop); a change of a parameter or formula fails here with the
numbers."""

import numpy as np
import pytest

from spyrec.costmodel import DEFAULT_PARAMS
from tests.sim.builder import elementwise


def _matmul(out, m: int, k: int, n: int, split: dict[str, int]) -> None:
    """z [m, n] = x [m, k] @ y [k, n], fp16 default layouts (x sticked on K, y and z on N)."""
    out.input("x", [m, k])
    out.input("y", [k, n])
    out.output("z", [m, n])
    out.op("batchmatmul", {"c0": m, "c1": n, "r0": k},
           [("x", ["floor(r0/64)", "c0", "Mod(r0, 64)"]),
            ("y", ["floor(c1/64)", "r0", "Mod(c1, 64)"]),
            ("z", ["floor(c1/64)", "c0", "Mod(c1, 64)"])], reduced=["r0"], split=split)


def test_memory_bound_add_fp16_1024x4096_on_32_cores(out):
    # Each core: 32 rows x 64 sticks of a, b and out = 6144 sticks = 786,432 B; the 32 cores
    # share 204.8 GB/s: 786432 * 32 / 204.8e9 s = 122.88 us. Compute: 32 * 4096 points / 64
    # lanes / 1 GHz = 2.048 us. Memory-bound: 122.88 us, i.e. exactly the compulsory
    # 3 * 8 MiB at the full bandwidth.
    cost = elementwise(out, "add", {"a": "float16", "b": "float16"}, "float16",
                       shape=(1024, 4096), split={"c0": 32}).cost()
    (op,) = cost["ops"]
    core = op["per_core"][0]
    assert core["hbm_read_bytes"] == 2 * 32 * 64 * 128 and core["hbm_write_bytes"] == 32 * 64 * 128
    assert core["compute_us"] == 2.048 and core["memory_us"] == 122.88
    assert op["bound"] == "memory" and op["time_us"] == 122.88
    assert cost["totals"]["time_us"] == pytest.approx(122.88 + DEFAULT_PARAMS.bundle_overhead_us)


def test_compute_bound_matmul_fp16_8192x4096x8192_m4_n8(out):
    # M 8192 split 4 (2048 rows per core: 256 passes of 8, full efficiency), N 8192 = 128
    # sticks split 8 (1024 columns per core), K 4096 whole.
    # compute: 2048 * 1024 * 4096 MACs / 1.536e12 MAC/s = 5592.405333 us.
    # memory per core: x 2048 rows x 64 K-sticks (the 8 N-cores of a row block read it alike:
    # a cohort of 8, 1/8 each) + y 4096 K-rows x 16 N-sticks (the 4 M-cores: 1/4 each) + z
    # 2048 x 16 = 16,384 + 16,384 + 32,768 = 65,536 sticks = 8,388,608 B; x 32 cores / 204.8e9
    # = 1310.72 us (229,376 sticks touched). Compute-bound.
    _matmul(out, 8192, 4096, 8192, split={"c0": 4, "c1": 8})
    (op,) = out.cost()["ops"]
    core = op["per_core"][0]
    assert core["hbm_read_bytes"] + core["hbm_write_bytes"] == 65536 * 128
    assert core["sticks_read"] + core["hbm_write_bytes"] // 128 == 229376
    assert core["memory_us"] == 1310.72
    assert core["compute_us"] == 5592.405333
    assert op["bound"] == "compute" and op["time_us"] == 5592.405333
    assert op["flops"] == 2 * 8192 * 8192 * 4096


def test_k_split_matmul_fp16_64x65536x64_m8_k4_pays_the_ring(out, rng):
    # z = x @ y with x [64, 65536], y [65536, 64], z [64, 64] (one N stick): M split 8 (8 rows
    # per core: one PT pass, efficiency sqrt(1/8)), K split 4 (16384 K per core: partial sums).
    # compute: 8 * 64 * 16384 MACs / (1.536e12 * sqrt(1/8)) = 15.447 us.
    # memory per core: x 8 rows x 256 K-sticks = 2048 (its own), y 16384 K-rows x 1 stick (the
    # 8 M-cores of a K slice read it alike: 1/8 each, 2048), z 8 partial rows x 1 stick written:
    # 4104 sticks = 525,312 B; x 32 cores / 204.8e9 = 82.08 us. Memory-bound.
    # ring: (4 - 1) hops x 64 x 64 output elements x 1.4e-4 us = 1.72032 us, added.
    x = (rng.standard_normal((64, 65536)) / 64).astype(np.float16)
    y = rng.standard_normal((65536, 64)).astype(np.float16)
    _matmul(out, 64, 65536, 64, split={"c0": 8, "r0": 4})
    (op,) = out.cost()["ops"]
    core = op["per_core"][0]
    assert core["sticks_read"] == 2048 + 16384 and core["hbm_write_bytes"] == 8 * 128
    assert core["hbm_read_bytes"] == (2048 + 2048) * 128
    assert core["compute_us"] == pytest.approx(15.447, abs=1e-3) and core["memory_us"] == 82.08
    assert op["ring_us"] == 1.72032 and op["cores_used"] == 32
    assert op["time_us"] == pytest.approx(82.08 + 1.72032)
    (z,) = out.run({"x": x, "y": y}).outputs      # and the partials add up
    np.testing.assert_allclose(z.astype(np.float64), x.astype(np.float64) @ y.astype(np.float64),
                               rtol=2e-2, atol=2e-2)
