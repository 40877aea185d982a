"""Loading an output directory: schemas first, then the structural facts, one message each.

Files are a compiled directory's (`x + y` over [4, 100] fp16); the structure of a hand-written
op is checked where the builder reads its access form (tests/sim/access_form.py)."""

import json
import shutil

import pytest
import torch

from spyrec.errors import InputFileError
from spyrec.indexing import parse_expr
from spyrec.sim.directory import read_output_dir
from spyrec.sim.files import validate
from tests.programs import Lambda, compile_pt2, export
from tests.sealing import seal
from tests.sim.builder import rowmajor2d


def add_program(out):
    out.input("x", [4, 100])
    out.input("y", [4, 100])
    out.output("z", [4, 100])
    out.op("add", {"c0": 4, "c1": 100},
           [("x", rowmajor2d()), ("y", rowmajor2d()), ("z", rowmajor2d())], split={"c0": 2})
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("add")
    example = tuple(torch.zeros(4, 100, dtype=torch.float16) for _ in range(2))
    return compile_pt2(export(tmp, Lambda(lambda m, x, y: x + y), example, "add"))


@pytest.fixture
def directory(compiled, tmp_path):
    """A copy of the compiled `add` directory, to change."""
    return shutil.copytree(compiled, tmp_path / "out")


def edit(path, fn):
    """Change a JSON file of a directory, sealed into the build as if compile wrote it (the
    build check is tested on its own)."""
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data, indent=1))
    seal(path.parent)


def test_loads_specs_and_parses_coordinates_once(out):
    program = add_program(out).program()
    spec = program.ops["sdsc_0.json"]
    assert spec.vars == ("c0", "c1") and spec.extents == (4, 100)
    assert spec.args[0].coordinates == tuple(parse_expr(c) for c in rowmajor2d())
    assert spec.output.name == "z" and not spec.output.is_input
    assert [c.ranges for c in spec.cores] == [{"c0": (0, 2), "c1": (0, 100)},
                                              {"c0": (2, 4), "c1": (0, 100)}]
    assert program.manifest.tensors["x"].layout.device_size == (2, 4, 64)
    assert [(k, e.file) for k, e in program.trace] == [("main", "sdsc_0.json")]


def test_fixtures_and_compiled_files_satisfy_the_schemas(out, directory):
    validate(add_program(out).manifest(), "manifest", "manifest.json")
    validate(json.loads((directory / "manifest.json").read_text()), "manifest", "manifest.json")
    validate(json.loads((directory / "sdsc_0.json").read_text()), "sdsc", "sdsc_0.json")


@pytest.mark.parametrize("file, change, message", [
    ("manifest.json", lambda d: d["tensors"][0].pop("stride_map"),
     r"manifest.json: at \$.tensors\[0\]: 'stride_map' is a required property"),
    ("manifest.json", lambda d: d.update(format="spyrec-manifest/2"),
     r"manifest.json: format spyrec-manifest/2, written by another spyrec version; this one "
     r"reads spyrec-manifest/4"),
    ("manifest.json", lambda d: d.update(format="spyrec-manifesto"),
     r"manifest.json: at \$.format: 'spyrec-manifest/4' was expected"),
    ("sdsc_0.json", lambda d: d["0_add"].update(numCoresUsed_="4"),
     r"sdsc_0.json: at \$\['0_add'\].numCoresUsed_: '4' is not of type 'integer'"),
    ("sdsc_0.json",
     lambda d: d["0_add"]["dscs_"][0]["add"]["scheduleTree_"][0].update(component_="dram"),
     r"sdsc_0.json: at \$\['0_add'\].dscs_\[0\].add.scheduleTree_\[0\].component_"),
    ("sdsc_0.json", lambda d: d["0_add"].update(extra=1),
     r"sdsc_0.json: at \$\['0_add'\]: Additional properties are not allowed "
     r"\('extra' was unexpected\)"),
])
@pytest.mark.tampers_manifest
def test_schema_violations_name_file_and_json_path(directory, file, change, message):
    edit(directory / file, change)
    with pytest.raises(InputFileError, match=message):
        read_output_dir(directory)


@pytest.mark.parametrize("file, change, message", [
    ("sdsc_0.json", lambda d: d.update({"3_add": d.pop("0_add")}),
     r"the top key '3_add' is op 3, but the file is named sdsc_0.json"),
    ("manifest.json", lambda d: d["tensors"][0].update(device_bytes=100),
     r"device_bytes 100 but the layout \[2, 4, 64\] needs 1024"),
    ("manifest.json", lambda d: d["tensors"][0].update(device_dtype="fp32", device_size=[4, 4, 32]),
     r"host dtype float16 is stored as fp16 on the device, not fp32"),
    ("manifest.json", lambda d: d["inputs"].append("w"), r"no tensor named 'w'"),
    ("manifest.json", lambda d: d["kernels"][0].update(ops=[]),
     r"executes sdsc_0.json, which kernel 'main' of manifest.json does not list"),
])
def test_structural_errors(directory, file, change, message):
    edit(directory / file, change)
    with pytest.raises(InputFileError, match=message):
        read_output_dir(directory)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["args"][0].update(device_coordinates=["floor(c1/64", "c0", "0"]),
     r"sdsc_0.json: at \$.args\[0\].device_coordinates\[0\]"),
    (lambda d: d["args"][0].update(device_coordinates=["c7", "c0", "0"]),
     r"'c7' is not an iteration variable \(c0, c1\)"),
    (lambda d: d["args"][0].update(device_coordinates=["c0", "c1"]),
     r"2 coordinates for 3 device dims"),
    (lambda d: d["args"][1].update(arg_index=0),
     r"at \$.args\[1\].arg_index: 0, but arg_index is the position 1"),
    (lambda d: d["args"][2].update(is_input=True),
     r"args are the inputs followed by exactly one output"),
    (lambda d: d["args"][0].update(device_size=[2, 4, 32]),
     r"must be 64 for fp16"),
])
def test_access_form_structural_errors(out, change, message):
    change(add_program(out).ops[0])
    with pytest.raises(InputFileError, match=message):
        out.program()


def test_bad_json_names_line_and_column(directory):
    (directory / "sdsc_0.json").write_text('{\n "0_add": {\n "debug_handle_": 0,,\n}}')
    seal(directory)
    with pytest.raises(InputFileError, match=r"sdsc_0.json:3:21: not valid JSON"):
        read_output_dir(directory)


def test_not_a_directory(tmp_path):
    with pytest.raises(InputFileError, match="nope: no such directory"):
        read_output_dir(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputFileError, match="file is not a directory"):
        read_output_dir(tmp_path / "file")
