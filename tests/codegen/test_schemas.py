"""Every JSON file the compiler writes validates against its schema in spyrec/schemas/."""

import json

import pytest
import torch

from spyrec.errors import InputFileError
from spyrec.sim.files import validate
from tests.codegen.test_output_dir import GatherAdd
from tests.programs import compile_pt2, export


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("schemas")
    pt2 = export(tmp, GatherAdd(), (torch.randn(6, 100), torch.tensor([3, 0, 49, 7, 7, 1])))
    return compile_pt2(pt2, tmp / "out")


@pytest.mark.parametrize("name, schema", [("manifest.json", "manifest"),
                                          ("opspecs.json", "opspecs"),
                                          ("report.json", "report")])
def test_top_level_files_validate(out_dir, name, schema):
    validate(json.loads((out_dir / name).read_text()), schema, name)


def test_every_per_op_file_validates(out_dir):
    from spyrec.sim.files import sdsc_schema

    files = sorted(out_dir.glob("sdsc_*.json"))
    assert len(files) >= 3
    schemas = []
    for f in files:     # a fused SuperDSC against its own schema (docs/formats.md)
        doc = json.loads(f.read_text())
        schemas.append(sdsc_schema(doc))
        validate(doc, schemas[-1], f.name)


def test_a_violation_names_the_file_and_the_json_path(out_dir):
    doc = json.loads((out_dir / "opspecs.json").read_text())
    doc["kernels"][0]["specs"][1]["args"][0]["device_size"] = [4, "x"]
    with pytest.raises(InputFileError, match=r"opspecs.json: at \$.kernels\[0\].specs\[1\]"
                                             r".args\[0\].device_size\[1\]"):
        validate(doc, "opspecs", "opspecs.json")


def test_report_carries_the_cost_estimate(out_dir):
    report = json.loads((out_dir / "report.json").read_text())
    totals = report["cost"]["totals"]
    assert totals["time_us"] > 0 and totals["hbm_read_bytes"] % 128 == 0
    assert "estimated" in (out_dir / "report.txt").read_text()
