"""Files from an attacker or a careless user: nothing hangs, nothing is inflated or allocated
before its size is judged, nothing but a regular file is ever replaced (issue 56).

In-process and cheap (tests/cli/test_bad_inputs.py walks the real command line through the
same kinds of file): every refusal is an exit-2 error class with one line naming the file.
A test that data was *not read* gives the data a wrong checksum: reading it would fail
with the zip's CRC message instead of the one the test expects.
"""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import struct
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spyrec.errors import ConfigError, InputFileError
from spyrec.sim.inputs import check_output_path, header_check, read_npz, write_npz
from spyrec.sim.safetensors import read_safetensors, safetensors_bytes
from spyrec.sim.specs import TensorSpec
from spyrec.userfiles import open_regular, output_target, write_replacing
from spyrec.yamlfile import MAX_YAML_NODES, read_yaml_file
from tests.programs import Lambda, export

X = np.arange(64 * 64, dtype=np.float16).reshape(64, 64)


def _spec(name="x", shape=(64, 64), dtype="float16", symbolic_dims=()) -> TensorSpec:
    """A program input as the manifest describes it (the header check reads name, host
    shape and dtype, and symbolic dims; no layout)."""
    return TensorSpec(name, "input", tuple(shape), dtype, None, 0, 0, None,
                      symbolic_dims=symbolic_dims)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _header(shape, descr="<f2") -> bytes:
    text = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)}).encode()
    pad = 63 - (10 + len(text)) % 64
    return b"\x93NUMPY\x01\x00" + (len(text) + pad + 1).to_bytes(2, "little") + text + \
        b" " * pad + b"\n"


def _zip(path: Path, members: dict[str, bytes], method=zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _central(data: bytes, name: str) -> int:
    """Where member `name`'s central directory entry starts in zip `data`."""
    at = data.find(b"PK\x01\x02")
    while data[at + 46:at + 46 + struct.unpack("<H", data[at + 28:at + 30])[0]] != name.encode():
        at = data.find(b"PK\x01\x02", at + 4)
    return at


def _patch(path: Path, name: str, local: int, central: int, value: bytes) -> Path:
    """`value` written at offset `local` of `name`'s local header and `central` of its
    central directory entry (zip's two copies of each field)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        header = zf.getinfo(name).header_offset
    for at in (header + local, _central(data, name) + central):
        data[at:at + len(value)] = value
    path.write_bytes(bytes(data))
    return path


def _bad_crc(path: Path, member: str) -> Path:
    """`path` with `member`'s checksum wrong: any read of its data to the end fails with
    "Bad CRC-32"."""
    with zipfile.ZipFile(path) as zf:
        crc = zf.getinfo(member).CRC
    return _patch(path, member, 14, 16, struct.pack("<I", crc ^ 0xFFFFFFFF))


def _read_inputs(path: Path, *specs: TensorSpec) -> dict:
    specs = specs or (_spec(),)
    return read_npz(path, header_check(list(specs), str(path)))


# --- .npz: judged from headers before any data is read -----------------------------------------

def test_the_crc_trick_works(tmp_path):
    """The premise of the tests below: reading a member with a wrong checksum fails."""
    path = _bad_crc(_zip(tmp_path / "in.npz", {"x.npy": _npy(X)}), "x.npy")
    with pytest.raises(InputFileError, match="Bad CRC-32 for file 'x.npy'"):
        _read_inputs(path)


def test_a_wrong_shape_is_refused_from_its_header_before_its_data_is_read(tmp_path):
    path = _bad_crc(_zip(tmp_path / "in.npz", {"x.npy": _npy(np.zeros((32, 64), np.float16))}),
                    "x.npy")
    with pytest.raises(InputFileError, match=r"'x': shape \[32, 64\], expected \[64, 64\]"):
        _read_inputs(path)


def test_a_member_the_program_does_not_take_is_never_read(tmp_path):
    path = _bad_crc(_zip(tmp_path / "in.npz", {"x.npy": _npy(X), "junk.npy": _npy(X)}),
                    "junk.npy")
    with pytest.raises(InputFileError) as e:
        _read_inputs(path)
    assert "unexpected key 'junk'" in str(e.value) and "CRC" not in str(e.value)


def test_a_deflate_bomb_of_the_wrong_shape_is_not_inflated(tmp_path):
    """64 MiB of zeros deflated to 64 KiB, declared [2**15, 2**10] float16: refused from its
    header (before the fix, `spyrec run` inflated such a 2 GiB one: 2.1 GB RSS, 19 s)."""
    path = tmp_path / "in.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, \
            zf.open("x.npy", "w") as w:
        w.write(_header((2**15, 2**10)))
        for _ in range(4):
            w.write(bytes(1 << 24))
    path = _bad_crc(path, "x.npy")
    with pytest.raises(InputFileError, match=r"'x': shape \[32768, 1024\], expected"):
        _read_inputs(path)


@pytest.mark.parametrize("shape, words", [
    ((-4,), "bad header: shape [-4]"),
    ((10**12,), "header says [1000000000000] float16 (2000000000000 bytes)"),
    ((8,), "header says [8] float16 (16 bytes) but the member holds 64 bytes"),  # trailing
])
def test_headers_must_describe_exactly_the_member(tmp_path, shape, words):
    path = _zip(tmp_path / "in.npz", {"x.npy": _header(shape) + bytes(64)})
    with pytest.raises(InputFileError) as e:
        read_npz(path)
    assert words in str(e.value)


def test_a_symbolic_length_past_its_maximum_is_refused_from_the_header(tmp_path):
    spec = _spec(shape=(1, 256), symbolic_dims=((1, "s0"),))
    path = _bad_crc(_zip(tmp_path / "in.npz", {"x.npy": _npy(np.zeros((1, 4096), np.float16))}),
                    "x.npy")
    with pytest.raises(InputFileError, match="dim 1 is 4096, longer than s0's largest length "
                                             "256"):
        _read_inputs(path, spec)


@pytest.mark.parametrize("local, central, value, words", [
    (6, 8, b"\x01", "is encrypted"),                     # was exit 70 (RuntimeError)
    (8, 10, b"\x63", "compression method 99"),           # was exit 70 (NotImplementedError)
])
def test_members_zipfile_cannot_read_are_refused(tmp_path, local, central, value, words):
    path = _patch(_zip(tmp_path / "in.npz", {"x.npy": _npy(X)}), "x.npy", local, central, value)
    with pytest.raises(InputFileError, match=words):
        read_npz(path)


def test_a_member_claiming_more_than_the_file_holds(tmp_path):
    path = _patch(_zip(tmp_path / "in.npz", {"x.npy": _npy(X)}), "x.npy", 18, 20,
                  struct.pack("<II", 1 << 30, 1 << 30))     # compressed, uncompressed sizes
    with pytest.raises(InputFileError, match="claims 1073741824 bytes from offset 0, past the "
                                             "end of the"):
        read_npz(path)


def test_two_members_of_one_name_are_refused(tmp_path):
    path = tmp_path / "in.npz"
    with pytest.warns(UserWarning), zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x.npy", _npy(X))
        zf.writestr("x.npy", _npy(X + 1))
    with pytest.raises(InputFileError, match="a second array named 'x'"):
        read_npz(path)


def test_a_large_dtype_tag_is_described_not_read(tmp_path):
    path = _bad_crc(_zip(tmp_path / "in.npz", {"x.npy": _npy(X),
                                               "__dtype__.x.npy": _npy(np.zeros(10**5))}),
                    "__dtype__.x.npy")
    with pytest.raises(InputFileError, match=r"dtype tag '<float64 array of shape \[100000\]>'"):
        _read_inputs(path)


def test_good_inputs_still_read_stored_and_compressed(tmp_path):
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        path = _zip(tmp_path / f"in{method}.npz", {"x.npy": _npy(X)}, method)
        np.testing.assert_array_equal(_read_inputs(path)["x"], X)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_mutated_npz_files_read_or_fail_cleanly(tmp_path_factory, seed):
    """Random byte changes and cuts of a good file: arrays or one InputFileError, never
    another exception (before the fix: RuntimeError, NotImplementedError, EOFError)."""
    rng = np.random.default_rng(seed)
    with io.BytesIO() as buffer:
        np.savez_compressed(buffer, x=X)
        data = bytearray(buffer.getvalue())
    for _ in range(rng.integers(1, 4)):
        data[rng.integers(0, len(data))] = rng.integers(0, 256)
    if rng.random() < 0.2:
        data = data[:rng.integers(0, len(data))]
    path = tmp_path_factory.mktemp("fuzz") / "m.npz"
    path.write_bytes(bytes(data))
    try:
        got = _read_inputs(path)
    except InputFileError as e:
        assert str(e).startswith(f"{path}")
    else:
        assert got["x"].shape == (64, 64)


# --- .safetensors --------------------------------------------------------------------------------

def test_safetensors_tensors_are_judged_before_their_data_is_read(tmp_path, monkeypatch):
    import spyrec.sim.safetensors as module

    path = tmp_path / "in.safetensors"
    path.write_bytes(safetensors_bytes({"x": np.zeros((32, 64), np.float16), "y": X}))
    monkeypatch.setattr(module, "_array", lambda *a: pytest.fail("data was read"))
    with pytest.raises(InputFileError) as e:
        read_safetensors(path, header_check([_spec()], str(path)))
    assert "'x': shape [32, 64], expected [64, 64]" in str(e.value)
    assert "unexpected key 'y'" in str(e.value)


def test_a_deeply_nested_safetensors_header_is_refused(tmp_path):
    """Was exit 70 (RecursionError from the JSON parser)."""
    path = tmp_path / "in.safetensors"
    path.write_bytes(struct.pack("<Q", 100_000) + b"[" * 100_000)
    with pytest.raises(InputFileError, match="the header nests too deeply"):
        read_safetensors(path)


# --- regular files only, opened without blocking -------------------------------------------------

def _special(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.npz"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    return path


KINDS = {"fifo": "is a FIFO (named pipe)", "socket": "is a socket",
         "directory": "is a directory", "dangling": "(a symbolic link to"}


def _no_hang(call):
    """`call()` in a thread that must end within 10 s (a blocking FIFO open never would)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except Exception as e:  # noqa: BLE001 - handed to the test
            outcome["error"] = e
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the read blocked"
    return outcome


@pytest.mark.parametrize("kind", KINDS)
def test_every_reader_refuses_what_is_not_a_regular_file(tmp_path, kind):
    path = _special(tmp_path, kind)
    readers = [(read_npz, InputFileError), (read_safetensors, InputFileError),
               (lambda p: read_yaml_file(p, "tiling", "--tiling"), ConfigError),
               (lambda p: open_regular(p, "a .pt2 file"), InputFileError)]
    for reader, error in readers:
        outcome = _no_hang(lambda: reader(path))
        assert isinstance(outcome.get("error"), error), outcome
        assert KINDS[kind] in str(outcome["error"]) and str(path) in str(outcome["error"])


def test_a_device_node_is_refused_without_being_opened(tmp_path):
    path = tmp_path / "null.npz"
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))     # a private /dev/null
    with pytest.raises(InputFileError, match="is a character device, not a regular file"):
        read_npz(path)


# --- outputs: never over anything but a regular file ---------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "socket", "dangling"])
def test_outputs_never_replace_what_is_not_a_regular_file(tmp_path, kind):
    path = _special(tmp_path, kind)
    before = os.lstat(path)
    for call in (lambda: check_output_path(path, "-o"),
                 lambda: write_npz(path, {"output_0": X})):
        with pytest.raises(InputFileError) as e:
            call()
        assert str(e.value).startswith(f"-o {path}: ") and "\n" not in str(e.value)
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]   # no temporary left


def test_a_device_output_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    path = tmp_path / "null.svg"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    with pytest.raises(InputFileError, match="--svg .*null.svg: is a character device"):
        write_replacing(path, b"<svg/>", "--svg", "the picture")
    assert stat.S_ISCHR(os.lstat(path).st_mode)


def test_a_link_to_a_regular_file_replaces_the_file_and_keeps_the_link(tmp_path):
    target, link = tmp_path / "real.npz", tmp_path / "link.npz"
    target.write_bytes(b"old")
    target.chmod(0o640)
    link.symlink_to(target.name)
    assert write_replacing(link, b"new", "-o", "the outputs") == target
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_bytes() == b"new" and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_link_to_a_fifo_is_refused(tmp_path):
    fifo = _special(tmp_path, "fifo")
    link = tmp_path / "link.npz"
    link.symlink_to(fifo)
    with pytest.raises(InputFileError, match="a symbolic link to a FIFO"):
        output_target(link, "-o")
    with pytest.raises(InputFileError, match="does not write through links here"):
        output_target(link, "--print-ir-after-all", links=False)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "out.npz"
    path.write_bytes(b"earlier outputs")

    def full(*_):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(InputFileError, match=r"cannot write the outputs \(No space left"):
        write_replacing(path, b"new", "-o", "the outputs")
    assert path.read_bytes() == b"earlier outputs"
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]


def test_ir_dump_directory_with_a_fifo_or_link_is_refused(tmp_path):
    from spyrec.passes.pipeline import check_dump_dir

    for i, make in enumerate((os.mkfifo, lambda p: p.symlink_to(tmp_path))):
        folder = tmp_path / f"dumps{i}"
        folder.mkdir()
        make(folder / "03_stick_layout.ir")
        with pytest.raises(ConfigError, match=r"--print-ir-after-all .*03_stick_layout.ir: is "):
            check_dump_dir(folder, tmp_path / "out")


# --- YAML configs --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    ("[" * 5000 + "]" * 5000, "nested too deeply"),                     # was exit 70
    ("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
     f"more than {MAX_YAML_NODES} values once its aliases"),          # 9**9: was a hang
    ("a: &a [*a]\n", f"more than {MAX_YAML_NODES} values"),              # a recursive alias
    ("dims: {}\ndims: {x: [A]}\n", "key 'dims' appears twice in one mapping at line 2"),
])
def test_yaml_configs_are_bounded(tmp_path, text, words):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        read_yaml_file(path, "tiling", "--tiling")
    assert str(e.value).startswith(f"--tiling {path}: not valid YAML: ") and words in str(e.value)


def test_yaml_merge_keys_still_work(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("base: &b {pass: work_division, cores: 8}\nmine: {<<: *b, cores: 4}\n")
    assert read_yaml_file(path, "pipeline", "--pipeline")["mine"] == \
        {"pass": "work_division", "cores": 4}


def test_a_huge_yaml_file_is_refused_unread(tmp_path):
    path = tmp_path / "c.yaml"
    with open(path, "wb") as f:
        f.truncate(64 << 20)        # sparse: 64 MiB claimed, nothing written
    with pytest.raises(ConfigError, match="67108864 bytes, more than a layouts YAML file can be"):
        read_yaml_file(path, "layouts", "--layouts")


def test_a_set_value_nested_too_deeply(tmp_path):
    from spyrec.passes.pipeline import _set_value

    with pytest.raises(ConfigError, match=r"the value is not valid YAML \(nested too deeply"):
        _set_value("x", "[" * 5000)


# --- .pt2 archives: claims checked before inflating, tensors before lowering --------------------

@pytest.fixture(scope="module")
def pt2(tmp_path_factory) -> Path:
    module = Lambda(lambda m, x: x @ m.w + 1, w=torch.randn(64, 64, dtype=torch.float16))
    return export(tmp_path_factory.mktemp("pt2"), module,
                  (torch.randn(64, 64, dtype=torch.float16),))


def _edit(src: Path, dst: Path, model=None, weights=None, member=None, method=None) -> Path:
    """A copy with the graph JSON and/or weights config edited in place, a member's bytes
    replaced (`member`: (suffix, bytes)), members compressed with `method`."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if model and info.filename.endswith("models/model.json"):
                doc = json.loads(data)
                data = model(doc) or json.dumps(doc)
            if weights and info.filename.endswith("model_weights_config.json"):
                doc = json.loads(data)
                weights(doc)
                data = json.dumps(doc)
            if member and info.filename.endswith(member[0]):
                data = member[1]
            zout.writestr(info.filename, data, method or zipfile.ZIP_STORED)
    return dst


def _meta(doc: dict, name: str) -> dict:
    return doc["graph_module"]["graph"]["tensor_values"][name]


def _weight(doc: dict) -> dict:
    return next(iter(doc["config"].values()))["tensor_meta"]


def _load(path: Path, frontend: str = "fast"):
    from spyrec.frontend import load_program

    return load_program(path, frontend)


def _user_input(pt2: Path) -> str:
    with zipfile.ZipFile(pt2) as zf:
        model = json.loads(zf.read(next(n for n in zf.namelist()
                                        if n.endswith("models/model.json"))))
    spec = next(s for s in model["graph_module"]["signature"]["input_specs"] if "user_input" in s)
    return spec["user_input"]["arg"]["as_tensor"]["name"]


@pytest.mark.parametrize("edit, words", [
    (lambda m, x: _meta(m, x)["sizes"].__setitem__(0, {"as_int": -64}),     # was exit 70
     "sizes [-64, 64], strides [64, 1], storage offset 0: a negative size"),
    (lambda m, x: _meta(m, x)["strides"].__setitem__(0, {"as_int": -1}), "a negative size"),
    (lambda m, x: _meta(m, x).__setitem__("storage_offset", {"as_int": -5}),
     "storage offset -5: a negative"),
    (lambda m, x: _meta(m, x)["sizes"].__setitem__(0, {"as_int": 2**62}),
     "more elements than a 64-bit size can count"),
    (lambda m, x: _meta(m, x)["sizes"].__setitem__(0, {"as_int": 64.5}),     # was rounded
     "64.5 is not an integer"),
    (lambda m, x: _meta(m, x)["sizes"].__setitem__(0, {"as_int": True}), "True is not an integ"),
    (lambda m, x: m["graph_module"]["signature"].__setitem__("input_specs", []),  # was 70
     "are not its signature's []"),
    (lambda m, x: "[" * 100_000, "nested deeper than any graph"),          # was exit 70
])
def test_damaged_graph_json_is_one_error_naming_the_tensor(pt2, tmp_path, edit, words):
    x = _user_input(pt2)
    path = _edit(pt2, tmp_path / "bad.pt2", model=lambda m: edit(m, x))
    with pytest.raises(InputFileError) as e:
        _load(path)
    assert words in str(e.value) and str(path) in str(e.value)


@pytest.mark.parametrize("frontend", ["fast", "torch"])
def test_a_weight_stored_with_another_shape_than_the_graph_says(pt2, tmp_path, frontend):
    """Was exit 70 (an assertion in the lowering) with either front end."""
    path = _edit(pt2, tmp_path / "bad.pt2",
                 weights=lambda c: _weight(c)["sizes"].__setitem__(0, {"as_int": 0}))
    with pytest.raises(InputFileError, match=r"parameter 'w' is stored as float16\[0, 64\] but "
                                             r"the graph's input 'p_w' is float16\[64, 64\]"):
        _load(path, frontend)


@pytest.mark.parametrize("edit, words", [
    (lambda t: t["sizes"].__setitem__(0, {"as_int": -64}), "has sizes [{'as_int': -64}"),
    (lambda t: t["strides"].__setitem__(0, {"as_int": 2**62}), "overflows a 64-bit size"),
    (lambda t: t.__setitem__("storage_offset", {"as_int": 2**63}), "overflows a 64-bit size"),
    (lambda t: t["strides"].pop(), "has 2 sizes but 1 strides"),
    (lambda t: t.__setitem__("storage_offset", {"as_int": 1}), "does not fit its 4096-element"),
])
def test_weight_metadata_is_checked_when_the_archive_opens(pt2, tmp_path, edit, words):
    from spyrec.pt2archive import open_archive

    path = _edit(pt2, tmp_path / "bad.pt2", weights=lambda c: edit(_weight(c)))
    with pytest.raises(InputFileError) as e:
        open_archive(path)
    assert words in str(e.value) and "weight 'w'" in str(e.value)


def test_a_compressed_weight_claiming_more_than_its_tensor_uses(pt2, tmp_path):
    """A deflated member claiming 64 MiB of zeros for a 8 KiB weight: refused unread (before
    the fix, `spyrec compile` inflated a 2 GiB one: 4.2 GB RSS)."""
    from spyrec.pt2archive import open_archive

    path = _edit(pt2, tmp_path / "bad.pt2", member=("weights/weight_0", bytes(64 << 20)),
                 method=zipfile.ZIP_DEFLATED)
    with pytest.raises(InputFileError, match="is compressed and claims 67108864 bytes, but "
                                             "its tensors use 8192"):
        open_archive(path)


def test_a_padded_graph_json_is_not_inflated(pt2, tmp_path):
    from spyrec.pt2archive import open_archive

    def pad(model):
        return json.dumps(model) + " " * (64 << 20)
    path = _edit(pt2, tmp_path / "bad.pt2", model=pad, method=zipfile.ZIP_DEFLATED)
    with pytest.raises(InputFileError, match="more than JSON text compresses"):
        open_archive(path)


def test_a_member_claiming_past_the_end_of_the_file(pt2, tmp_path):
    """Was exit 130 ("interrupted"): zipfile's EOFError reached click, which took it for ^D."""
    from spyrec.pt2archive import open_archive

    path = tmp_path / "bad.pt2"
    path.write_bytes(pt2.read_bytes())
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith("models/model.json"))
    _patch(path, name, 18, 20, struct.pack("<II", 1 << 30, 1 << 30))
    with pytest.raises(InputFileError, match="models/model.json' claims 1073741824 bytes from "
                                             "offset"):
        open_archive(path)
