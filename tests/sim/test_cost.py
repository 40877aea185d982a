"""Cost model on tiny cases with hand-computed stick counts and times."""

import json
import math

import pytest

from spyrec.costmodel import DEFAULT_PARAMS
from spyrec.sim.cost import format_table
from spyrec.sim.files import validate
from tests.sim.builder import elementwise, flat_bundle, rowmajor2d


def test_add_4x100_two_cores(out):
    """Each core: 2 rows x 2 sticks (64 + 36 lanes) per tensor = 4 sticks = 512 B."""
    cost = elementwise(out, "add", {"a": "float16", "b": "float16"}, "float16",
                       split={"c0": 2}).cost()
    (op,) = cost["ops"]
    for core in op["per_core"]:
        assert core["points"] == 200
        assert core["hbm_read_bytes"] == 2 * 512 and core["hbm_write_bytes"] == 512
        assert core["useful_bytes"] == 3 * 200 * 2
        assert core["compute_us"] == pytest.approx(200 / 64e9 * 1e6)
        # two cores: each at its own 36 GB/s, below its 102.4 GB/s share of the card
        assert core["memory_us"] == pytest.approx(1536 / DEFAULT_PARAMS.core_bytes_per_s * 1e6,
                                                   abs=1e-6)
    assert op["hbm_read_bytes"] == 2048 and op["hbm_write_bytes"] == 1024
    assert op["cores_used"] == 2 and op["bound"] == "memory" and op["flops"] == 400
    assert op["time_us"] == pytest.approx(1536 / 36e9 * 1e6, abs=1e-6)
    assert op["stick_efficiency"] == pytest.approx(2400 / 3072)
    assert cost["totals"]["time_us"] == pytest.approx(1536 / 36e9 * 1e6 +
                                                      DEFAULT_PARAMS.bundle_overhead_us, abs=1e-6)


def test_sparse_reduction_output_costs_whole_sticks(out):
    out.input("x", [64, 100])
    out.output("y", [64], device_size=[1, 64, 64], stride_map=[-1, 1, -1])
    out.op("sum", {"c0": 64, "r0": 100},
           [("x", ["floor(r0/64)", "c0", "Mod(r0, 64)"]), ("y", ["0", "c0", "0"])],
           reduced=["r0"], split={"c0": 4})
    (op,) = out.cost()["ops"]
    for core in op["per_core"]:                    # 16 rows each
        assert core["hbm_read_bytes"] == 16 * 2 * 128
        assert core["hbm_write_bytes"] == 16 * 128  # 16 sticks for 16 useful values
        assert core["useful_bytes"] == 16 * 100 * 2 + 16 * 2


def test_transcendental_ops_cost_four_times(out, tmp_path):
    exp = elementwise(out, "exp", {"x": "float16"}, "float16").cost()
    from tests.sim.builder import OutDir
    neg = elementwise(OutDir(tmp_path / "neg"), "neg", {"x": "float16"}, "float16").cost()
    assert exp["ops"][0]["compute_us"] == pytest.approx(4 * neg["ops"][0]["compute_us"])


def test_matmul_uses_the_pt_rate_and_row_efficiency(out):
    out.input("x", [32, 100])
    out.input("y", [100, 80])
    out.output("z", [32, 80])
    out.op("batchmatmul", {"c0": 32, "c1": 80, "r0": 100},
           [("x", ["floor(r0/64)", "c0", "Mod(r0, 64)"]),
            ("y", ["floor(c1/64)", "r0", "Mod(c1, 64)"]),
            ("z", ["floor(c1/64)", "c0", "Mod(c1, 64)"])], reduced=["r0"], split={"c0": 4})
    (op,) = out.cost()["ops"]
    core = op["per_core"][0]                        # 8 rows: one 8-row pass, eff sqrt(1/8)
    macs_per_s = DEFAULT_PARAMS.pt_peak_flops_per_card / 32 / 2
    assert core["compute_us"] == pytest.approx(8 * 80 * 100 / (macs_per_s * math.sqrt(1 / 8))
                                               * 1e6, rel=1e-5)
    # x: 8 rows x 2 K-sticks of its own; y: 100 x 2 sticks every one of the 4 cores reads
    # (a cohort of 4 <= 8: one fetch, a quarter each)
    assert core["sticks_read"] == 8 * 2 + 100 * 2
    assert core["hbm_read_bytes"] == (8 * 2 + 100 * 2 // 4) * 128
    assert op["flops"] == 2 * 32 * 80 * 100


def test_gather_assumes_distinct_rows(out):
    out.input("idx", [10], "int64")
    out.input("w", [1000, 128])
    out.output("e", [10, 128])
    out.op("identity", {"c0": 10, "c1": 128},
           [("idx", ["floor(c0/32)", "Mod(c0, 32)"]),
            ("w", ["floor(c1/64)", "IndirectAccess('idx')", "Mod(c1, 64)"]),
            ("e", rowmajor2d())])
    (op,) = out.cost()["ops"]
    assert op["hbm_read_bytes"] == 128 + 10 * 2 * 128     # 1 index stick, 10 rows x 2 sticks
    assert op["compute_us"] == 0 and op["class"] == "move"


def test_cost_fits_the_report_schema_and_prints(out):
    cost = elementwise(out, "add", {"a": "float16", "b": "float16"}, "float16").cost()
    report = {"format": "spyrec-report/1", "build": "0" * 64,
              "passes": [{"name": "stick_layout", "wall_ms": 1.0}],
              "restickify": {"count": 0, "elements": 0, "list": []},
              "layouts": {"a": {"device_size": [2, 4, 64], "stride_map": [64, 100, 1],
                                "device_dtype": "fp16"}},
              "ops": 1, "cost": json.loads(json.dumps(cost))}
    validate(report, "report", "report.json")
    table = format_table(cost)
    assert "sdsc_0.json" in table and "memory" in table and "total: 1 op executions" in table


def test_totals_per_bundle(out):
    """Two kernels: each bundle's totals carry its own overhead; the sum is the grand total."""
    elementwise(out, "add", {"a": "float16", "b": "float16"}, "float16")
    out.kernels.append({"name": "second", "bundle": "bundle2.mlir", "ops": ["sdsc_0.json"]})
    execute = '    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}\n'
    out.bundles["bundle2.mlir"] = flat_bundle(1).replace(execute, execute * 2)
    cost = out.cost()
    first, second = cost["totals"]["per_bundle"]
    op_time = cost["ops"][0]["time_us"]
    assert (first["name"], first["executions"]) == ("main", 1)
    assert (second["name"], second["executions"]) == ("second", 2)
    assert second["time_us"] == pytest.approx(2 * op_time + DEFAULT_PARAMS.bundle_overhead_us)
    assert cost["ops"][0]["executions"] == 3
    assert cost["totals"]["time_us"] == pytest.approx(first["time_us"] + second["time_us"])
    assert cost["totals"]["hbm_read_bytes"] == 3 * cost["ops"][0]["hbm_read_bytes"]
    assert "  bundle second: 2 op executions" in format_table(cost)
