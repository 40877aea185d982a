"""Pictures and machine-readable output (issue 12 §5): inspect --svg/--trace/--json, run --json,
.safetensors through the CLI. Everything is checked by parsing what was written."""

import json
import xml.etree.ElementTree as ET

import jsonschema
import numpy as np
import pytest
import torch

from spyrec.sim.files import validator
from spyrec.bf16 import bf16_bits_to_float32
from spyrec.sim.safetensors import read_safetensors, safetensors_bytes
from spyrec.stick_svg import CELL, MARGIN
from tests.cli_lines import error_line
from tests.programs import Lambda, cli, compile_pt2, export


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    """fp16 x[3, 100] (device [2, 3, 64]: 28 padded lanes per row) and y[256, 512]
    (enough work for several cores), four ops."""
    tmp = tmp_path_factory.mktemp("machine")
    module = Lambda(lambda m, x, y: (x * 2 + 1, torch.relu(y) * 3))
    x, y = torch.randn(3, 100).half(), torch.randn(256, 512).half()
    np.savez(tmp / "in.npz", args_0=x.numpy(), args_1=y.numpy())
    return compile_pt2(export(tmp, module, (x, y)), tmp / "out"), tmp / "in.npz"


def cells(svg_text: str) -> dict[tuple[int, int], tuple[int, bool]]:
    """(row, col) -> (stick, padded) from the drawn rects."""
    grid = {}
    for rect in ET.fromstring(svg_text).iter("{http://www.w3.org/2000/svg}rect"):
        if rect.get("class") not in ("data", "padding"):
            continue
        row = (int(rect.get("y")) - MARGIN) // CELL
        first = (int(rect.get("x")) - MARGIN) // CELL
        for col in range(first, first + int(rect.get("width")) // CELL):
            assert (row, col) not in grid
            grid[row, col] = (int(rect.get("data-stick")), rect.get("class") == "padding")
    return grid


def test_svg_colours_each_stick_and_hatches_padding(out, tmp_path, capsys):
    code, stdout, err = cli(capsys, "inspect", out[0], "args_0", "--svg", tmp_path / "x.svg")
    assert code == 0 and stdout == "" and f"wrote {tmp_path / 'x.svg'}" in err
    text = (tmp_path / "x.svg").read_text()
    grid = cells(text)
    # default layout [3, 100] -> [2, 3, 64]: element (r, c) sits in stick (c // 64) * 3 + r
    assert len(grid) == 3 * 128
    for (r, c), (stick, padded) in grid.items():
        assert stick == (c // 64) * 3 + r and padded == (c >= 100), (r, c)
    assert len({s for s, _ in grid.values()}) == 6        # device_bytes 768 / 128
    assert text.count('class="hatch"') == 3               # one hatched run per row
    assert "hatched: padding" in text and "showing" not in text


def test_svg_of_other_layouts_and_tiles():
    from spyrec.stick_svg import HostTile, stick_grid, stick_layout_svg

    # stick dim 0: host [100, 3] -> device [2, 3, 64], stride_map [192, 1, 3]
    t = {"name": "w", "host_shape": [100, 3], "host_dtype": "float16", "device_size": [2, 3, 64],
         "stride_map": [192, 1, 3], "device_dtype": "fp16"}
    g = stick_grid(t, max_rows=128)
    r, c = np.meshgrid(np.arange(128), np.arange(3), indexing="ij")
    assert (g.full_rows, g.full_cols) == (128, 3)
    np.testing.assert_array_equal(g.stick, (r // 64) * 3 + c)
    np.testing.assert_array_equal(g.padded, r >= 100)
    # 3-D default fp32 [2, 3, 40] -> [3, 2, 2, 32] (DESIGN §3): stick b*4 + (c//32)*2 + a
    t3 = {"name": "z", "host_shape": [2, 3, 40], "host_dtype": "float32",
          "device_size": [3, 2, 2, 32], "stride_map": [40, 32, 120, 1], "device_dtype": "fp32"}
    g3 = stick_grid(t3)
    a, b, c3 = np.meshgrid(np.arange(2), np.arange(3), np.arange(64), indexing="ij")
    np.testing.assert_array_equal(g3.stick, (b * 4 + (c3 // 32) * 2 + a).reshape(6, 64))
    np.testing.assert_array_equal(g3.padded, (c3 >= 40).reshape(6, 64))
    # a big tensor is cut, with a note; tiles are outlined per row run
    big = {**t, "host_shape": [1000, 3], "device_size": [16, 3, 64],
           "stride_map": [192, 1, 3]}
    text = stick_layout_svg(big, tiles=(HostTile("i0", (0, 0), (2, 3)),))
    assert "showing rows 0-63 of 1024, columns 0-2 of 3" in text
    tiles = [e for e in ET.fromstring(text).iter("{http://www.w3.org/2000/svg}rect")
             if e.get("class") == "tile"]
    assert [(e.get("y"), e.get("width")) for e in tiles] == [(str(MARGIN), str(3 * CELL)),
                                                             (str(MARGIN + CELL), str(3 * CELL))]


def test_svg_needs_a_tensor(out, capsys):
    code, _, err = cli(capsys, "inspect", out[0], "--svg", "x.svg")
    assert code == 2 and "--svg draws one tensor: give TENSOR" in err


def test_trace_has_a_slice_per_op_execution_and_core(out, tmp_path, capsys):
    code, stdout, _ = cli(capsys, "inspect", out[0], "--trace", tmp_path / "t.json")
    assert code == 0 and stdout == ""
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    report = json.loads((out[0] / "report.json").read_text())["cost"]
    rows = {r["file"]: r for r in report["ops"]}
    slices = [e for e in events if e["ph"] == "X" and e["cat"] != "bundle"]
    assert len(rows) == 4 and max(r["cores_used"] for r in rows.values()) > 1
    assert len(slices) == sum(r["executions"] * r["cores_used"] for r in rows.values())
    for e in slices:
        assert e["dur"] == rows[e["args"]["file"]]["time_us"]
        assert 0 <= e["tid"] < 32
    per_file = {f: sorted(e["tid"] for e in slices if e["args"]["file"] == f) for f in rows}
    for f, r in rows.items():
        assert per_file[f] == sorted(c["core"] for c in r["per_core"] if c["points"])
    bundles = [e for e in events if e["ph"] == "X" and e["cat"] == "bundle"]
    assert [e["dur"] for e in bundles] == [report["params"]["bundle_overhead_us"]]
    end = max(e["ts"] + e["dur"] for e in slices)
    assert end == pytest.approx(report["totals"]["time_us"], abs=1e-6)
    lanes = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert lanes == {e["tid"] for e in slices + bundles}


def test_inspect_json(out, capsys):
    code, stdout, _ = cli(capsys, "inspect", out[0], "--json")
    doc = json.loads(stdout)
    validator("inspect").validate(doc)
    manifest = json.loads((out[0] / "manifest.json").read_text())
    report = json.loads((out[0] / "report.json").read_text())
    assert code == 0 and doc["ops"] == 4 and doc["inputs"] == ["args_0", "args_1"]
    assert [t["device_size"] for t in doc["tensors"]] == [t["device_size"]
                                                        for t in manifest["tensors"]]
    assert doc["cost_totals"]["time_us"] == report["cost"]["totals"]["time_us"]
    code, stdout, _ = cli(capsys, "inspect", out[0], "args_0", "--json")
    doc = json.loads(stdout)
    validator("inspect").validate(doc)
    assert doc["tensor"]["device_size"] == [2, 3, 64]
    assert [(a["op"], a["access"]) for a in doc["accesses"]] == [("mul", "read")]
    assert doc["accesses"][0]["iteration_space"] == {"c0": 3, "c1": 100}


def test_run_json_with_check_and_report(out, tmp_path, capsys):
    code, stdout, err = cli(capsys, "run", out[0], "--inputs", out[1], "-o",
                            tmp_path / "y.npz", "--check", "--report", "--json")
    assert code == 0
    doc = json.loads(stdout)                # stdout is exactly one JSON document
    validator("run").validate(doc)
    assert [(o["key"], o["shape"]) for o in doc["outputs"]] == [("output_0", [3, 100]),
                                                                ("output_1", [256, 512])]
    assert all(c["ok"] and c["mismatches"] == 0 for c in doc["check"])
    report = json.loads((out[0] / "report.json").read_text())["cost"]
    assert doc["cost"]["totals"] == report["totals"]
    code, stdout, _ = cli(capsys, "run", out[0], "--inputs", out[1], "-o",
                          tmp_path / "y.npz", "--json", "-q")
    doc = json.loads(stdout)
    assert doc["check"] is None and doc["cost"] is None
    with pytest.raises(jsonschema.ValidationError):
        validator("run").validate({**doc, "extra": 1})


def test_bf16_through_safetensors_files(tmp_path, capsys):
    module = Lambda(lambda m, a: a * 3 - 1)
    a = torch.randn(4, 80).to(torch.bfloat16)
    out = compile_pt2(export(tmp_path, module, (a,)), tmp_path / "out")
    bits = a.view(torch.int16).numpy().view(np.uint16)
    (tmp_path / "in.safetensors").write_bytes(safetensors_bytes(
        {"args_0": bits, "__dtype__.args_0": np.array("bfloat16")}))
    code, stdout, _ = cli(capsys, "run", out, "--inputs", tmp_path / "in.safetensors", "-o",
                          tmp_path / "y.safetensors", "--check", "-q")
    assert code == 0 and stdout.rstrip().endswith("ok")
    got = read_safetensors(tmp_path / "y.safetensors")
    assert str(got["__dtype__.output_0"]) == "bfloat16"
    np.testing.assert_allclose(bf16_bits_to_float32(got["output_0"]),
                               (a.float() * 3 - 1).numpy(), rtol=1e-2, atol=1e-2)
    np.savez(tmp_path / "in.npz", args_0=bits, **{"__dtype__.args_0": np.array("bfloat16")})
    cli(capsys, "run", out, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "y.npz", "-q")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npz")["output_0"], got["output_0"])
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    code, _, err = cli(capsys, "run", out, "--inputs", tmp_path / "bad.safetensors")
    assert code == 2 and "exceeds the file" in error_line(err)


def test_unwritable_picture_paths_are_one_line_errors(out, tmp_path, capsys):
    code, _, err = cli(capsys, "inspect", out[0], "--trace", tmp_path)
    assert code == 2 and f"--trace {tmp_path}: is a directory" in err and err.count("\n") == 1
    code, _, err = cli(capsys, "inspect", out[0], "args_0", "--svg", tmp_path / "no" / "x.svg")
    assert code == 2 and f"directory {tmp_path / 'no'} does not exist" in err
    code, _, err = cli(capsys, "inspect", out[0], "nope", "--svg", tmp_path / "x.svg")
    assert code == 2 and "no tensor named 'nope'" in err and not (tmp_path / "x.svg").exists()
