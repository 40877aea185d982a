""".safetensors: round trips, agreement with the reference package, and crafted files.

Every crafted file must give one InputFileError line that names the file, never another
exception and never an allocation larger than the file.
"""

import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spyrec.errors import InputFileError
from spyrec.sim.inputs import read_arrays, read_inputs, write_npz
from spyrec.bf16 import bf16_bits_to_float32
from spyrec.sim.safetensors import read_safetensors, safetensors_bytes
from tests.sim.builder import OutDir, rowmajor2d

TAG = "__dtype__."


def sample_arrays() -> dict:
    return {"h": np.arange(6, dtype=np.float16).reshape(2, 3) - 2.5,
            "b": np.array([0x3F80, 0xC000, 0x7FC0], np.uint16), f"{TAG}b": np.array("bfloat16"),
            "f": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 2, 2),
            "i": np.array([-(2**40), 0, 2**40 + 7], np.int64),
            "m": np.array([[True, False]]), "s": np.float32(3.5).reshape(())}


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype == np.asarray(v).dtype and got[k].shape == np.asarray(v).shape, k
        np.testing.assert_array_equal(got[k], v)


def test_round_trip_every_host_dtype(tmp_path):
    path = tmp_path / "a.safetensors"
    write_npz(path, sample_arrays())
    got = read_arrays(path)
    assert_same(got, sample_arrays())
    assert str(got[f"{TAG}b"][()]) == "bfloat16"
    assert bf16_bits_to_float32(got["b"]).tolist()[:2] == [1.0, -2.0]


def test_layout_of_what_we_write():
    """8-byte length, JSON header padded to 8 bytes, then the tensors in order."""
    data = safetensors_bytes({"b": np.array([1, 2], np.uint16), f"{TAG}b": np.array("bfloat16"),
                              "i": np.array([5], np.int64)})
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0
    header = json.loads(data[8:8 + n])
    assert header == {"b": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
                      "i": {"dtype": "I64", "shape": [1], "data_offsets": [4, 12]}}
    assert data[8 + n:] == b"\x01\x00\x02\x00" + b"\x05" + b"\x00" * 7


DTYPES = [np.float16, np.float32, np.int64, np.int32, np.int8, np.bool_, "bf16"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(DTYPES),
                          st.lists(st.integers(0, 5), min_size=0, max_size=3)),
                min_size=0, max_size=5), st.integers(0, 2**32 - 1))
def test_random_round_trips(tmp_path_factory, specs, seed):
    rng = np.random.default_rng(seed)
    arrays = {}
    for i, (dtype, shape) in enumerate(specs):
        bits = rng.integers(0, 2**16, size=shape, dtype=np.uint16)
        if dtype == "bf16":
            arrays[f"t{i}"], arrays[f"{TAG}t{i}"] = bits, np.array("bfloat16")
        else:
            arrays[f"t{i}"] = rng.integers(-100, 100, size=shape).astype(dtype)
    path = tmp_path_factory.mktemp("rt") / "r.safetensors"
    write_npz(path, arrays)
    assert_same(read_safetensors(path), arrays)


def test_agrees_with_the_safetensors_package(tmp_path):
    st_torch = pytest.importorskip("safetensors.torch")
    import torch

    ours = tmp_path / "ours.safetensors"
    write_npz(ours, sample_arrays())
    loaded = st_torch.load_file(str(ours))
    assert loaded["b"].dtype == torch.bfloat16
    assert loaded["b"].view(torch.int16).numpy().view(np.uint16).tolist() == [0x3F80, 0xC000,
                                                                               0x7FC0]
    assert loaded["b"][:2].tolist() == [1.0, -2.0] and loaded["h"].dtype == torch.float16
    assert loaded["i"].tolist() == [-(2**40), 0, 2**40 + 7]
    theirs = tmp_path / "theirs.safetensors"
    st_torch.save_file({"w": torch.tensor([[1.5, -2.0]], dtype=torch.bfloat16),
                        "k": torch.arange(3)}, str(theirs), metadata={"format": "pt"})
    got = read_safetensors(theirs)
    assert got["w"].tolist() == [[0x3FC0, 0xC000]] and str(got[f"{TAG}w"][()]) == "bfloat16"
    assert got["k"].dtype == np.int64 and got["k"].tolist() == [0, 1, 2]


def crafted(header, data: bytes = b"", length: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


F16 = {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}
BAD_FILES = [
    (b"\x01\x02", "2 bytes, shorter than the 8-byte header length"),
    (crafted(b"{}", length=2**63), "header length 9223372036854775808 exceeds the file"),
    (crafted(b"{}", length=11), "header length 11 exceeds the file (10 bytes)"),
    (crafted(b"\xff\xfe"), "the header is not UTF-8 JSON"),
    (crafted(b"{not json"), "the header is not UTF-8 JSON"),
    (crafted([1, 2]), "the header is not a JSON object"),
    (crafted(b'{"a": 1, "a": 2}'), "the header names 'a' twice"),
    (crafted({"x": {"dtype": "F16", "shape": [2]}}, b"1234"),
     "tensor 'x' needs exactly dtype, shape and data_offsets"),
    (crafted({"x": {**F16, "dtype": "C64"}}, b"1234"), "tensor 'x' has dtype 'C64'; known:"),
    (crafted({"x": {**F16, "shape": [-2]}}, b"1234"), "tensor 'x' has shape [-2]"),
    (crafted({"x": {**F16, "shape": [True]}}, b"1234"), "tensor 'x' has shape [True]"),
    (crafted({"x": {**F16, "shape": "2"}}, b"1234"), "tensor 'x' has shape '2'"),
    (crafted({"x": {**F16, "data_offsets": [0, 2**62]}}, b"1234"),
     "tensor 'x' has data_offsets [0, 4611686018427387904] outside the 4 data bytes"),
    (crafted({"x": {**F16, "data_offsets": [3, 1]}}, b"1234"), "has data_offsets [3, 1]"),
    (crafted({"x": {**F16, "data_offsets": [0, 4.0]}}, b"1234"), "has data_offsets [0, 4.0]"),
    (crafted({"x": {**F16, "shape": [2**40, 2**40]}}, b"1234"),
     "tensor 'x' is F16[1099511627776, 1099511627776] (2417851639229258349412352 bytes) but "
     "data_offsets span 4"),
    (crafted({"x": F16, "y": {**F16, "data_offsets": [2, 6]}}, b"123456"),
     "tensor 'y' starts at byte 2, expected 4 (tensors must tile the data"),
    (crafted({"x": {**F16, "data_offsets": [2, 6]}}, b"123456"),
     "tensor 'x' starts at byte 2, expected 0"),
    (crafted({"x": F16}, b"123456"), "2 bytes after the last tensor"),
    (crafted({"__dtype__.x": F16}, b"1234"), "uses the reserved prefix"),
    (crafted({"__metadata__": {"a": 1}}), "__metadata__ must map names to strings"),
]


@pytest.mark.parametrize("content,message", BAD_FILES)
def test_crafted_files_give_one_clear_line(tmp_path, content, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(InputFileError) as e:
        read_safetensors(path)
    text = str(e.value)
    assert text.startswith(f"{path}: not a valid .safetensors file: ")
    assert message in text
    assert "\n" not in text and text.endswith("spyrec run -o NAME.safetensors")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_mutated_files_parse_or_fail_cleanly(tmp_path_factory, seed):
    """Random byte flips and truncations of a good file: a result or an InputFileError."""
    rng = np.random.default_rng(seed)
    data = bytearray(safetensors_bytes(sample_arrays()))
    for _ in range(rng.integers(1, 4)):
        data[rng.integers(0, len(data))] = rng.integers(0, 256)
    if rng.random() < 0.3:
        data = data[:rng.integers(0, len(data))]
    path = tmp_path_factory.mktemp("fuzz") / "m.safetensors"
    path.write_bytes(bytes(data))
    try:
        got = read_safetensors(path)
    except InputFileError as e:
        assert str(e).startswith(f"{path}: ")
    else:
        assert all(isinstance(v, np.ndarray) for v in got.values())


def test_missing_and_directory(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        read_safetensors(tmp_path / "none.safetensors")
    with pytest.raises(InputFileError, match="not a regular file"):
        read_safetensors(tmp_path)


def test_inputs_from_safetensors_are_checked_like_npz(tmp_path):
    out = OutDir(tmp_path / "out")
    out.input("x", [4, 100])
    out.input("b", [3], "bfloat16")
    out.output("y", [4, 100])
    out.op("neg", {"c0": 4, "c1": 100}, [("x", rowmajor2d()), ("y", rowmajor2d())])
    manifest = out.load().manifest
    path = tmp_path / "in.safetensors"
    write_npz(path, {"x": np.zeros((4, 100), np.float16), "b": np.zeros(3, np.uint16),
                     f"{TAG}b": np.array("bfloat16")})
    assert sorted(read_inputs(manifest, path)) == ["b", "x"]
    write_npz(path, {"x": np.zeros((4, 100), np.float32), "b": np.zeros(3, np.float16)})
    with pytest.raises(InputFileError) as e:
        read_inputs(manifest, path)
    assert "'x': dtype float32, expected float16" in str(e.value)
    assert "'b': got float16 without a dtype tag, expected bfloat16" in str(e.value)
