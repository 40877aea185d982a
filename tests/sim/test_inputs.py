"""Input files: one error listing every problem and the expected signature."""

import json

import numpy as np
import pytest
import torch

from spyrec.errors import InputFileError
from spyrec.sim import simulate
from spyrec.sim.inputs import read_inputs, read_npz
from tests.programs import compile_pt2, export
from tests.sim.builder import OutDir, rowmajor2d
from tests.sealing import seal

SIGNATURE = ("expected (name: shape, dtype):\n"
             "  x: shape [4, 100], float16\n"
             "  idx: shape [10], int64\n"
             "  b: shape [3], uint16 bits tagged bfloat16")


def program(out: OutDir):
    out.input("x", [4, 100])
    out.input("idx", [10], "int64")
    out.input("b", [3], "bfloat16")
    out.output("y", [4, 100])
    out.op("neg", {"c0": 4, "c1": 100}, [("x", rowmajor2d()), ("y", rowmajor2d())])
    return out.load().manifest


def good():
    return {"x": np.zeros((4, 100), np.float16), "idx": np.arange(10),
            "b": np.zeros(3, np.uint16), "__dtype__.b": np.array("bfloat16")}


def test_a_good_file_loads(out, tmp_path):
    manifest = program(out)
    np.savez(tmp_path / "in.npz", **good())
    arrays = read_inputs(manifest, tmp_path / "in.npz")
    assert sorted(arrays) == ["b", "idx", "x"] and arrays["b"].dtype == np.uint16


def test_every_problem_is_listed_with_the_signature(out, tmp_path):
    manifest = program(out)
    arrays = good()
    del arrays["idx"]
    arrays["x"] = np.zeros((4, 10), np.float16)
    arrays["b"] = np.zeros(3, np.float32)
    arrays["extra"] = np.zeros(1)
    np.savez(tmp_path / "in.npz", **arrays)
    with pytest.raises(InputFileError) as e:
        read_inputs(manifest, tmp_path / "in.npz")
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'in.npz'} does not match the program:\n")
    for line in ["  - missing 'idx'", "  - unexpected key 'extra'",
                 "  - 'x': shape [4, 10], expected [4, 100]",
                 "  - 'b': got float32 tagged 'bfloat16', expected bfloat16 as uint16 bits"]:
        assert line in message
    assert message.endswith(SIGNATURE)


def test_wrong_dtype_and_missing_bf16_tag(out, tmp_path):
    manifest = program(out)
    arrays = good()
    arrays["idx"] = arrays["idx"].astype(np.int32)
    del arrays["__dtype__.b"]
    np.savez(tmp_path / "in.npz", **arrays)
    with pytest.raises(InputFileError) as e:
        read_inputs(manifest, tmp_path / "in.npz")
    assert "'idx': dtype int32, expected int64" in str(e.value)
    assert "'b': got uint16 without a dtype tag" in str(e.value)


def test_simulate_checks_a_callers_dict_too(out):
    program(out)
    with pytest.raises(InputFileError, match="the input dict does not match the program:\n"
                                             "  - missing 'x'"):
        out.run({k: v for k, v in good().items() if k != "x"})


def test_unreadable_files(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        read_npz(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(InputFileError, match="not a readable .npz file"):
        read_npz(tmp_path / "bad.npz")


class Scale(torch.nn.Module):
    def __init__(self, w: np.ndarray):
        super().__init__()
        self.w = torch.nn.Parameter(torch.from_numpy(w))

    def forward(self, x):
        return x * self.w


def test_constants_come_from_weights_bin(tmp_path, rng):
    """Constants are memory-mapped from weights.bin (device form: 4 x 100 fp32 in sticks of 32
    is 4 x 128 slots, 2048 bytes) at the manifest's offsets; a truncated file or an offset
    past its end is one exit-2 error naming the file, before anything runs."""
    w = rng.standard_normal((4, 100)).astype(np.float32)
    path = compile_pt2(export(tmp_path, Scale(w), (torch.zeros(4, 100),), "scale"))
    x = rng.standard_normal((4, 100)).astype(np.float32)
    assert np.array_equal(simulate(path, {"x": x}).outputs[0], x * w)
    blob = (path / "weights.bin").read_bytes()
    (path / "weights.bin").write_bytes(blob[:-8])
    with pytest.raises(InputFileError, match=r"weights.bin: 2118 bytes, manifest.json says "
                                             r"2048 .*plus the 78-byte build stamp.*truncated"):
        simulate(path, {"x": x})
    (path / "weights.bin").unlink()
    with pytest.raises(InputFileError, match=r"weights.bin: missing"):
        simulate(path, {"x": x})
    (path / "weights.bin").write_bytes(blob)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["weights"]["tensors"][0]["offset"] = 4096
    (path / "manifest.json").write_text(json.dumps(manifest))
    seal(path)
    with pytest.raises(InputFileError, match=r"ends at byte 6144, past the end of weights.bin"):
        simulate(path, {"x": x})
    manifest["weights"]["tensors"] = []
    (path / "manifest.json").write_text(json.dumps(manifest))
    seal(path)
    with pytest.raises(InputFileError, match=r"no values for the constant\(s\) p_w"):
        simulate(path, {"x": x})


def test_an_older_manifest_format_is_named(tmp_path):
    path = compile_pt2(export(tmp_path, Scale(np.ones((4, 100), np.float32)),
                              (torch.zeros(4, 100),), "scale"))
    text = (path / "manifest.json").read_text().replace("spyrec-manifest/4", "spyrec-manifest/1")
    (path / "manifest.json").write_text(text)
    seal(path)
    with pytest.raises(InputFileError, match=r"format spyrec-manifest/1, written by another "
                                             r"spyrec version; .* re-run spyrec compile"):
        simulate(path, {"x": np.zeros((4, 100), np.float32)})
