"""Each pass owns its part of the report (issue 57): the report.json keys it declares and writes,
their schemas, its report.txt lines; the compiler assembles them knowing no pass by name."""

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from spyrec.compile_report import assemble_report, report_text
from spyrec.errors import InternalError
from spyrec.passes.pipeline import run_passes
from spyrec.passes.registry import REPORT_OMIT, CompileContext, Pass, load_all
from tests.programs import compile_pt2, export, load_json

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "spyrec/schemas/report.schema.json").read_text())
# report.json keys the compile as a whole writes (spyrec/compile_report.py, compiler.py)
COMPILE_KEYS = {"format", "build", "passes", "layouts", "ops", "frontend", "constant_folding",
                "sdsc", "cost", "cost_curve"}


def test_every_report_key_has_one_owner_and_a_schema():
    owners: dict[str, str] = {}
    for name, cls in load_all().items():
        for key in cls.report_keys:
            assert key not in owners, f"{key}: written by {owners[key]} and {name}"
            owners[key] = name
    assert set(owners) | COMPILE_KEYS == set(SCHEMA["properties"])
    assert not set(owners) & COMPILE_KEYS
    assert set(SCHEMA["required"]) <= COMPILE_KEYS     # a pass may not run


def test_a_pass_writing_a_key_it_does_not_own_is_a_spyrec_bug():
    @dataclass(frozen=True)
    class Stray(Pass):
        name = "stray"
        report_keys = {"mine": None}

        def run(self, graph, ctx):
            ctx.report["mine"] = 1
            ctx.report["work_division"] = {}

    with pytest.raises(InternalError, match=r"pass stray wrote report key\(s\) work_division "
                                            r"it does not declare \(its report_keys: mine\)"):
        run_passes(object(), [Stray()], CompileContext())


def test_the_report_follows_the_pipeline_and_each_pass_prints_its_part(tmp_path):
    """A default compile: every pass's keys (those left out by `REPORT_OMIT` aside) in
    pipeline order, each pass's lines in report.txt."""
    from samples.models import SAMPLES

    module, inputs = SAMPLES["decoder_fp32"]()
    out = compile_pt2(export(tmp_path, module, inputs, "decoder"), tmp_path / "out")
    report = load_json(out / "report.json")
    manifest = load_json(out / "manifest.json")
    passes = [p["pass"] for p in manifest["pipeline"]]
    classes = load_all()
    expected = [k for name in passes for k, d in classes[name].report_keys.items()
                if k in report or d is not REPORT_OMIT]
    keys = [k for k in report if k not in COMPILE_KEYS]
    assert keys == expected
    text = (out / "report.txt").read_text()
    for needle in ("restickify:", "matmul K padding:", "work division:", "device memory:",
                   "layouts:", f"ops: {report['ops']}", f"build {report['build']}"):
        assert needle in text, needle


def test_assembly_takes_each_passes_default_where_it_wrote_nothing():
    @dataclass(frozen=True)
    class Quiet(Pass):
        name = "quiet"
        report_keys = {"always": {"count": 0}, "sometimes": REPORT_OMIT}

    class Graph:
        buffers: dict = {}
        ops: list = []

    report = assemble_report(Graph(), [Quiet()], {}, [])
    assert report == {"format": "spyrec-report/1", "build": None, "passes": [],
                      "always": {"count": 0}, "layouts": {}, "ops": 0}
    assert report_text(report | {"build": "x"}, [Quiet()]).startswith(
        "spyrec compile report\nbuild x\n")


def test_the_compiler_driver_knows_no_pass():
    """compiler.py imports from passes/ only the pipeline and the registry, names no pass,
    and stays under 300 lines."""
    path = ROOT / "spyrec/compiler.py"
    tree = ast.parse(path.read_text())
    imported = {node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module}
    passes = {m for m in imported if m.startswith("spyrec.passes")}
    assert passes <= {"spyrec.passes.pipeline", "spyrec.passes.registry"}
    names = set(load_all())
    strings = {node.value for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert not strings & names, strings & names
    assert len(path.read_text().splitlines()) <= 300
