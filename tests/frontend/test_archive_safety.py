"""No code from an input file ever runs: spyrec inspects the .pt2 first and never unpickles.

Each test crafts an archive whose pickle would create a marker file if anything unpickled it,
and checks that the marker never appears, whatever the command's outcome.
"""

import io
import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from spyrec.errors import InputFileError
from spyrec.frontend import load_program
from spyrec.pt2archive import open_archive, sanitized_copy
from tests.programs import Lambda, export


class _Payload:
    """Unpickling this opens (creates) `marker`: proof that code from the file ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _evil_pickle(marker) -> bytes:
    buf = io.BytesIO()
    torch.save(_Payload(marker), buf)  # torch's zip pickle format, as torch.export.save writes
    return buf.getvalue()


def _spyrec(*args):
    return subprocess.run([sys.executable, "-m", "spyrec", *map(str, args)], capture_output=True,
                          text=True)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("good")
    module = Lambda(lambda m, x: x @ m.w + 1, w=torch.randn(8, 4))
    return export(tmp, module, (torch.randn(2, 8),))


def _rewrite(src, dst, replace=None, add=None, drop=()):
    """Copy archive `src` to `dst`, replacing members by suffix, adding and dropping some."""
    replace, add = replace or {}, add or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            if any(name.endswith(d) for d in drop):
                continue
            data = next((v for k, v in replace.items() if name.endswith(k)), None)
            zout.writestr(name, zin.read(name) if data is None else data)
        for name, data in add.items():
            zout.writestr(name, data)
    return dst


def _root(pt2) -> str:
    return open_archive(pt2).root


def _weights_config(pt2) -> dict:
    with zipfile.ZipFile(pt2) as zf:
        return json.loads(zf.read(_root(pt2) + "data/weights/model_weights_config.json"))


def test_pickled_weight_is_refused_and_never_run(good, tmp_path):
    marker = tmp_path / "pwned"
    config = _weights_config(good)
    fqn, meta = next(iter(config["config"].items()))
    meta["use_pickle"] = True
    bad = _rewrite(good, tmp_path / "bad.pt2", replace={
        "model_weights_config.json": json.dumps(config),
        f"data/weights/{meta['path_name']}": _evil_pickle(marker)})
    r = _spyrec("compile", bad, "-o", tmp_path / "out")
    assert r.returncode == 2, r.stderr
    assert f"weight '{fqn}'" in r.stderr and meta["path_name"] in r.stderr
    assert "never unpickles" in r.stderr and "Traceback" not in r.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_pickled_sample_inputs_are_never_read(good, tmp_path):
    """torch.export.load falls back to weights_only=False for sample inputs: spyrec hands torch
    a copy without them, so a compile and a --check both succeed and nothing runs."""
    marker = tmp_path / "pwned"
    bad = _rewrite(good, tmp_path / "bad.pt2",
                   replace={"data/sample_inputs/model.pt": _evil_pickle(marker)})
    out = tmp_path / "out"
    r = _spyrec("compile", bad, "-o", out)
    assert r.returncode == 0, r.stderr
    np.savez(tmp_path / "in.npz", args_0=np.random.rand(2, 8).astype(np.float32))
    r = _spyrec("run", out, "--inputs", tmp_path / "in.npz", "--check")
    assert r.returncode == 0, r.stderr
    assert not marker.exists()


@pytest.mark.parametrize("prefix, what", [("opaque_obj_0", "opaque Python object"),
                                          ("custom_obj_0", "torchbind object")])
def test_pickled_constant_objects_are_refused(good, tmp_path, prefix, what):
    marker = tmp_path / "pwned"
    config = {"config": {"thing": {"path_name": prefix, "is_param": False, "use_pickle": False}}}
    bad = _rewrite(good, tmp_path / "bad.pt2", replace={
        "model_constants_config.json": json.dumps(config)},
        add={_root(good) + f"data/constants/{prefix}": _evil_pickle(marker)})
    with pytest.raises(InputFileError, match=f"constant 'thing' .*{what}"):
        load_program(bad)
    assert not marker.exists()


def test_legacy_pickled_state_file_is_refused(good, tmp_path):
    bad = _rewrite(good, tmp_path / "bad.pt2",
                   add={_root(good) + "data/weights/model.pt": _evil_pickle(tmp_path / "p")})
    with pytest.raises(InputFileError, match="legacy pickled weight file"):
        load_program(bad)


@pytest.mark.parametrize("name", ["../evil.txt", "/etc/evil", "model/../../evil",
                                  "C:/evil", "\\evil"])
def test_escaping_member_names_are_refused(good, tmp_path, name):
    bad = _rewrite(good, tmp_path / "bad.pt2", add={name: b"x"})
    with pytest.raises(InputFileError, match="absolute or '..' path"):
        load_program(bad)
    assert not (tmp_path.parent / "evil.txt").exists()


def test_missing_weight_member_is_named(good, tmp_path):
    meta = next(iter(_weights_config(good)["config"].values()))
    bad = _rewrite(good, tmp_path / "bad.pt2", drop=[f"data/weights/{meta['path_name']}"])
    r = _spyrec("compile", bad, "-o", tmp_path / "out")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "which is missing from the archive" in r.stderr and meta["path_name"] in r.stderr


def test_op_that_does_not_exist_names_the_node(good, tmp_path):
    root = _root(good)
    with zipfile.ZipFile(good) as zf:
        model = json.loads(zf.read(root + "models/model.json"))
    node = next(n for n in model["graph_module"]["graph"]["nodes"]
                if n["target"].startswith("torch.ops.aten."))
    node["target"] = "torch.ops.aten.no_such_op_xyz.default"
    bad = _rewrite(good, tmp_path / "bad.pt2", replace={"models/model.json": json.dumps(model)})
    r = _spyrec("compile", bad, "-o", tmp_path / "out")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"node {node['name']!r} calls torch.ops.aten.no_such_op_xyz.default" in r.stderr


def test_sanitized_copy_keeps_only_what_torch_needs(good):
    archive = open_archive(good)
    with zipfile.ZipFile(sanitized_copy(archive)) as zf:
        names = zf.namelist()
        samples = [n for n in names if "sample_inputs" in n]
        assert samples and all(zf.read(n) == b"" for n in samples)
    assert archive.model_member in names
    assert {n.rsplit("/", 1)[-1] for n in names} >= {"model_weights_config.json",
                                                      "model_constants_config.json", "weight_0"}


def test_an_oversized_json_member_is_refused_before_reading(good, monkeypatch):
    import spyrec.pt2archive as pt2archive

    monkeypatch.setattr(pt2archive, "MAX_JSON_MEMBER_BYTES", 100)
    with pytest.raises(InputFileError, match=r"models/model.json' claims \d+ bytes of JSON"):
        open_archive(good)


def test_a_corrupted_member_is_a_damaged_archive(good, tmp_path):
    data = bytearray(good.read_bytes())
    at = data.find(b'"graph_module"')
    data[at + 1: at + 6] = b"XXXXX"  # the CRC no longer matches
    bad = tmp_path / "crc.pt2"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputFileError, match="damaged .pt2 archive"):
        load_program(bad)
