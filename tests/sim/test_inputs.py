"""Input files: one error listing every problem and the expected signature."""

import numpy as np
import pytest

from spyrec.errors import InputFileError
from spyrec.sim import simulate
from spyrec.sim.inputs import read_inputs, read_npz
from spyrec.sim.runner import load_program
from tests.sim.builder import OutDir, rowmajor2d

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
    return load_program(out.write()).manifest


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
        simulate(out.path, {k: v for k, v in good().items() if k != "x"})


def test_unreadable_files(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        read_npz(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(InputFileError, match="not a readable .npz file"):
        read_npz(tmp_path / "bad.npz")


def test_constants_come_from_constants_npz(out, rng):
    w = rng.standard_normal((4, 100)).astype(np.float32)
    out.input("x", [4, 100], "float32")
    out.constant("w", w, "float32")
    out.output("y", [4, 100], "float32")
    out.op("mul", {"c0": 4, "c1": 100},
           [("x", rowmajor2d(32)), ("w", rowmajor2d(32)), ("y", rowmajor2d(32))])
    path = out.write()
    x = rng.standard_normal((4, 100)).astype(np.float32)
    assert np.array_equal(simulate(path, {"x": x}).outputs[0], x * w)
    np.savez(path / "constants.npz", v=w)
    with pytest.raises(InputFileError, match=r"constants.npz does not match the program:\n"
                                             r"  - missing 'w'\n  - unexpected key 'v'"):
        simulate(path, {"x": x})
