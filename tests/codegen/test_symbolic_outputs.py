"""The output directory of a program with symbolic lengths (issue 30; docs/formats.md): exactly
what the manifest, opspecs.json and bundle.mlir say about them, the report's cost curve, and
that a static program's files say nothing of them (tests/sim/symbolic.py makes the program:
the static compile and its symbolic copy differ only where a symbol is)."""

from __future__ import annotations

import json

import pytest

from spyrec.ir.symbols import SymLength
from spyrec.sim.files import validate
from tests.programs import load_json
from tests.sim.symbolic import build_symbolic_mlp


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return build_symbolic_mlp(tmp_path_factory.mktemp("symbolic"))


def test_the_manifest_lists_the_symbols_and_marks_the_symbolic_dims(mlp):
    symbolic, static = load_json(mlp.out / "manifest.json"), load_json(
        mlp.static / "manifest.json")
    assert symbolic["symbols"] == [{"name": "s81", "granularity": 64, "minimum": 128,
                                    "maximum": 256, "where": ""}]
    marked = {t["name"]: t["symbolic_dims"] for t in symbolic["tensors"] if "symbolic_dims" in t}
    assert marked == {"input": {"1": "s81"}, "relu": {"1": "s81"}}
    assert "symbols" not in static and not any("symbolic_dims" in t for t in static["tensors"])
    # nothing else changes: host shapes stay at the maximum, so do addresses and layouts
    for doc in (symbolic, static):
        doc.pop("symbols", None)
        doc.pop("source")
        doc.pop("build")        # the record of files that differ
        for t in doc["tensors"]:
            t.pop("symbolic_dims", None)
    assert symbolic == static
    validate(load_json(mlp.out / "manifest.json"), "manifest", "manifest.json")


def test_a_bound_loop_spec_names_its_symbol_and_tile(mlp):
    symbolic, static = load_json(mlp.out / "opspecs.json"), load_json(mlp.static / "opspecs.json")
    loops = [s["loop"] for s in symbolic["kernels"][0]["specs"] if "loop" in s]
    assert [(lp["count"], lp["count_symbol"]) for lp in loops] == [
        (4, {"symbol": "s81", "per_trip": 64})]
    del loops[0]["count_symbol"]
    assert symbolic == static
    validate(load_json(mlp.out / "opspecs.json"), "opspecs", "opspecs.json")


def test_the_bundle_takes_the_symbol_and_divides_it_by_the_tile(mlp):
    symbolic = (mlp.out / "bundle.mlir").read_text().splitlines()
    static = (mlp.static / "bundle.mlir").read_text().splitlines()
    assert "  func.func @sdsc_bundle() {" in static
    changed = [(a, b) for a, b in zip(static, symbolic) if a != b]
    assert len(symbolic) == len(static) + 1 and changed[:2] == [
        ("  func.func @sdsc_bundle() {",
         "  func.func @sdsc_bundle(%s81: index {spyre.granularity = 64 : i64, "
         "spyre.min_value = 128 : i64, spyre.max_value = 256 : i64}) {"),
        ("    %loop_bound_0 = arith.constant 4 : index", "    %c64 = arith.constant 64 : index")]
    assert symbolic[symbolic.index("    %c64 = arith.constant 64 : index") + 1] == \
        "    %loop_bound_0 = arith.divui %s81, %c64 : index"
    assert [ln for ln in symbolic if ln not in static] == [changed[0][1], changed[1][1],
                                                            symbolic[7]]
    assert (mlp.out / "sdsc_2.json").read_bytes() == (mlp.static / "sdsc_2.json").read_bytes()


def test_the_cost_curve_fits_the_report_schema_and_prints(mlp):
    """report.json `cost_curve` (every length of a short ladder) and its table in
    report.txt (`compile_report.report_text`)."""
    from spyrec.compile_report import report_text
    from spyrec.driver import cost_curve, estimate_cost

    report = load_json(mlp.static / "report.json")
    report["cost"], _, _ = estimate_cost(mlp.output, mlp.out)
    report["cost_curve"] = json.loads(json.dumps(cost_curve(mlp.output, report["cost"])))
    required = ("format", "build", "passes", "restickify", "layouts", "ops", "cost", "cost_curve")
    validate({k: report[k] for k in required}, "report", "report.json")
    text = report_text(report)
    rows = text[text.index("cost curve"):].splitlines()
    assert rows[1].split() == ["s81", "time", "us", "HBM", "KiB"]
    assert [int(r.split()[0]) for r in rows[2:]] == [128, 192, 256]
    kib = report["cost_curve"][0]["hbm_bytes"] / 1024
    assert rows[2].split()[2] == f"{kib:.1f}"
    assert "cost curve" not in report_text(load_json(mlp.static / "report.json"))


@pytest.mark.parametrize("ladder, points, first, second, last", [
    (SymLength("s", 64, 128, 2048), 31, 128, 192, 2048),        # 31 lengths: every one
    (SymLength("s", 64, 64, 4096), 33, 64, 192, 4096),          # 64 lengths: 33 of them
    (SymLength("s", 1, 1, 1), 1, 1, 1, 1),
])
def test_curve_lengths_are_every_length_or_33_evenly_spaced(ladder, points, first, second,
                                                            last):
    from spyrec.driver import curve_lengths

    lengths = [p["s"] for p in curve_lengths((ladder,))]
    assert len(lengths) == points == len(set(lengths))
    assert (lengths[0], lengths[min(1, points - 1)], lengths[-1]) == (first, second, last)
    assert all(ladder.admits(n) for n in lengths)


def test_two_symbols_move_together_along_their_ladders():
    from spyrec.driver import curve_lengths

    points = list(curve_lengths((SymLength("a", 64, 128, 256), SymLength("b", 1, 1, 5))))
    assert points == [{"a": 128, "b": 1}, {"a": 192, "b": 2}, {"a": 192, "b": 3},
                      {"a": 256, "b": 4}, {"a": 256, "b": 5}]
