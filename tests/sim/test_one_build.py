"""A directory is one build (DESIGN §2): `run` reads every file through one handle on the
directory, refuses files of another build, never writes into a directory recompiled under it,
and stops cleanly when weights.bin is changed under it; `verify` checks every byte."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from spyrec.build_record import STAMP_BYTES, build_id
from spyrec.errors import InputFileError, OutputDirError
from spyrec.sim.directory import load_output_dir
from spyrec.sim.files import OutputFiles
from spyrec.sim.integrity import verify_directory
from spyrec.sim.run_directory import run_directory, write_into_directory
from spyrec.sim.runner import simulate
from tests.programs import Lambda, compile_pt2, export


class Mlp(torch.nn.Module):
    def __init__(self, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.a = torch.nn.Parameter(torch.randn(64, 96, generator=g), requires_grad=False)
        self.b = torch.nn.Parameter(torch.randn(96, 32, generator=g), requires_grad=False)

    def forward(self, x):
        return torch.relu(x @ self.a) @ self.b


X = torch.randn(8, 64)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Two compiles of the same geometry with other weights (so every file but the weights
    and the manifest is alike in shape), and one of another program."""
    tmp = tmp_path_factory.mktemp("builds")
    one = compile_pt2(export(tmp, Mlp(0), (X,), "one"), tmp / "one")
    two = compile_pt2(export(tmp, Mlp(1), (X,), "two"), tmp / "two")
    # one-op files: two executes, a bundle unlike `one`'s (fused, both are one execute)
    other = compile_pt2(export(tmp, Lambda(lambda m, x: x * 3 - 1), (X,), "other"),
                        tmp / "other", sets=["fusion.enabled=false"])
    return {"one": one, "two": two, "other": other, "inputs": {"x": X.numpy()}}


@pytest.fixture
def one(builds, tmp_path):
    return Path(shutil.copytree(builds["one"], tmp_path / "one"))


def test_the_manifest_records_every_file_and_hashes_to_its_id(one):
    manifest = json.loads((one / "manifest.json").read_text())
    record = manifest["build"]
    assert record["id"] == build_id(manifest)
    present = {p.name for p in one.iterdir()} - {"manifest.json"}
    assert set(record["files"]) == present
    assert record["files"]["weights.bin"] == {"stamp": True}
    assert json.loads((one / "report.json").read_text())["build"] == record["id"]
    assert (one / "report.txt").read_text().splitlines()[1] == f"build {record['id']}"
    data = (one / "weights.bin").read_bytes()
    assert data[-STAMP_BYTES:] == f"spyrec-build {record['id']}\n".encode()


def test_the_same_compile_is_the_same_build(builds, tmp_path):
    again = compile_pt2(builds["one"].parent / "one.pt2", tmp_path / "again")
    ids = [json.loads((d / "manifest.json").read_text())["build"]["id"]
           for d in (builds["one"], again)]
    assert ids[0] == ids[1]
    assert (again / "weights.bin").read_bytes() == (builds["one"] / "weights.bin").read_bytes()


@pytest.mark.parametrize("name, message", [
    ("sdsc_0.json", r"sdsc_0.json: not the file build [0-9a-f]{12} wrote"),
    ("bundle.mlir", r"bundle.mlir: not the file build [0-9a-f]{12} wrote"),
    ("weights.bin", r"weights.bin: belongs to build [0-9a-f]{12}, manifest.json to build"),
])
def test_a_file_of_another_build_is_refused(builds, one, name, message):
    source = builds["two"] if name == "weights.bin" else builds["other"]
    shutil.copyfile(source / name, one / name)
    with pytest.raises(InputFileError, match=message + ".*mixes files of different compiles"):
        simulate(one, builds["inputs"])


def test_weights_of_the_same_size_from_another_build_are_refused(builds, one):
    """Only the size was compared before: the other build's weights are as long."""
    assert (builds["two"] / "weights.bin").stat().st_size == \
        (one / "weights.bin").stat().st_size
    shutil.copyfile(builds["two"] / "weights.bin", one / "weights.bin")
    with pytest.raises(InputFileError, match="belongs to build"):
        load_output_dir(one)


@pytest.mark.parametrize("cut, message", [
    (1, "truncated or damaged"), (STAMP_BYTES, "truncated or damaged")])
def test_a_truncated_weights_file_is_refused(one, builds, cut, message):
    size = (one / "weights.bin").stat().st_size
    os.truncate(one / "weights.bin", size - cut)
    with pytest.raises(InputFileError, match=message):
        simulate(one, builds["inputs"])


def test_a_directory_replaced_while_it_is_read_is_never_mixed(builds, one):
    """The handle was opened on the old directory; a compile then swaps a new one in (and
    deletes the old one): reading on gives the old build's files or a clear refusal, never
    the new build's."""
    files = OutputFiles(one)
    files.read_text("manifest.json")
    compile_pt2(builds["two"].parent / "two.pt2", one)          # the recompile
    with pytest.raises(InputFileError, match="replaced"):
        load_output_dir(files)


def test_a_run_reads_a_directory_replaced_under_its_reading_again(builds, one, monkeypatch):
    """A watch loop recompiles OUT while a run reads it: the run starts over on the new
    build and runs it whole (the old one's files are gone, the new one's are all there)."""
    import spyrec.sim.directory as directory

    real, calls = directory.load_output_dir, []

    def recompiled_while_reading(files):
        calls.append(files)
        if len(calls) == 1:
            files.read_text("manifest.json")
            compile_pt2(builds["two"].parent / "two.pt2", one)
        return real(files)
    monkeypatch.setattr(directory, "load_output_dir", recompiled_while_reading)
    outcome = run_directory(one, builds["inputs"])
    assert len(calls) == 2
    np.testing.assert_allclose(outcome.result.outputs[0], Mlp(1)(X).numpy(), rtol=1e-4,
                               atol=1e-4)


def test_a_run_ending_after_a_recompile_writes_nothing_into_the_new_build(builds, one):
    outcome = run_directory(
        one, builds["inputs"],
        before_simulating=lambda: compile_pt2(builds["two"].parent / "two.pt2", one))
    eager = Mlp(0)(X).numpy()
    np.testing.assert_allclose(outcome.result.outputs[0], eager, rtol=1e-4, atol=1e-4)
    with pytest.raises(OutputDirError, match="was replaced .* while this run ran"):
        write_into_directory(outcome.files, "outputs.npz", {"output_0": eager})
    assert not (one / "outputs.npz").exists()


def test_outputs_go_into_the_directory_the_run_read(builds, one):
    outcome = run_directory(one, builds["inputs"])
    written = write_into_directory(outcome.files, "outputs.npz",
                                   {"output_0": outcome.result.outputs[0]})
    assert written == one / "outputs.npz"
    assert np.array_equal(np.load(written)["output_0"], outcome.result.outputs[0])


def test_an_edited_file_the_run_reads_is_refused_but_a_user_file_beside_it_is_not(builds, one):
    (one / "notes.txt").write_text("mine")
    simulate(one, builds["inputs"])                  # not the build's: not read, no matter
    text = (one / "bundle.mlir").read_text()
    (one / "bundle.mlir").write_text(text + "\n")
    with pytest.raises(InputFileError, match="or the file was edited"):
        simulate(one, builds["inputs"])


def test_a_fifo_in_the_directory_is_refused_not_waited_on(builds, one):
    (one / "sdsc_0.json").unlink()
    os.mkfifo(one / "sdsc_0.json")
    with pytest.raises(InputFileError, match="sdsc_0.json: not a regular file"):
        load_output_dir(one)


# --- weights.bin changed under a running simulation ---------------------------------------

def test_weights_truncated_under_a_run_stop_it_cleanly(builds, one, monkeypatch):
    """Another process truncating weights.bin while the run maps it would kill the run with
    SIGBUS. The run holds a read lease: the truncation waits, the run is told, stops before
    its next op with exit 2's error, and lets the file go; then the truncation happens."""
    import spyrec.sim.runner as runner

    real, started = runner.run_op, []

    def first_op_then_truncate(spec, ex, hbm, lx):
        if not started:
            started.append(subprocess.Popen(
                [sys.executable, "-c", f"import os; os.truncate({str(one / 'weights.bin')!r}, "
                                       f"100)"]))
            deadline = time.monotonic() + 60
            while not program.weights_file.broken and time.monotonic() < deadline:
                time.sleep(0.01)            # the SIGIO handler runs between these
        real(spec, ex, hbm, lx)

    program = load_output_dir(one)
    if not _leases_work(one):
        pytest.skip("no file leases here (not Linux, or the file system has none)")
    monkeypatch.setattr(runner, "run_op", first_op_then_truncate)
    with pytest.raises(InputFileError, match="another process opened it for writing or "
                                             "truncated it while this run was reading it"):
        simulate(one, builds["inputs"], program=program)
    program.weights_file.close()
    del program
    assert started[0].wait(timeout=60) == 0
    assert (one / "weights.bin").stat().st_size == 100


def _leases_work(out: Path) -> bool:
    import fcntl

    from spyrec.sim.weights import F_SETLEASE

    fd = os.open(out / "weights.bin", os.O_RDONLY)
    try:
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


# --- verify ---------------------------------------------------------------------------------

def test_verify_passes_a_directory_as_compile_wrote_it(one):
    verdict = verify_directory(one)
    manifest = json.loads((one / "manifest.json").read_text())
    assert verdict.problems == [] and verdict.build == manifest["build"]["id"]
    assert verdict.tensors == sum("offset" in t for t in manifest["weights"]["tensors"]) == 2
    assert verdict.files == len(manifest["build"]["files"])


def _flip_weight_byte(out: Path) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["weights"]["tensors"][1]
    data = bytearray((out / "weights.bin").read_bytes())
    data[entry["offset"] + 5] ^= 1
    (out / "weights.bin").write_bytes(data)
    return entry["name"]


def _edit_manifest(out: Path) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["hbm_bytes"] += 128
    (out / "manifest.json").write_text(json.dumps(manifest))
    return "manifest.json: changed since compile wrote it"


@pytest.mark.parametrize("damage", ["weight byte", "sdsc file", "report", "manifest"])
def test_verify_names_every_damaged_file(builds, one, damage):
    if damage == "weight byte":
        expected = f"1 tensor(s) differ from what compile wrote: {_flip_weight_byte(one)}"
    elif damage == "sdsc file":
        shutil.copyfile(builds["other"] / "sdsc_0.json", one / "sdsc_0.json")
        expected = "sdsc_0.json: not as compile wrote it"
    elif damage == "report":
        shutil.copyfile(builds["two"] / "report.json", one / "report.json")
        expected = "report.json: does not carry build"
    else:
        expected = _edit_manifest(one)
    verdict = verify_directory(one)
    assert any(expected in p for p in verdict.problems), verdict.problems


def test_verify_cli_exit_codes_and_unlisted_files(one):
    (one / "notes.txt").write_text("mine")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    ok = subprocess.run([sys.executable, "-m", "spyrec", "verify", str(one), "--json"],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["unlisted"] == ["notes.txt"]
    _flip_weight_byte(one)
    bad = subprocess.run([sys.executable, "-m", "spyrec", "verify", str(one), "-q"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "1 problem(s)" in bad.stderr


def test_verify_and_run_name_an_older_manifest_format_before_its_build(one):
    manifest = json.loads((one / "manifest.json").read_text())
    manifest["format"] = "spyrec-manifest/3"
    (one / "manifest.json").write_text(json.dumps(manifest))
    for read in (verify_directory, load_output_dir):
        with pytest.raises(InputFileError, match=r"manifest.json: format spyrec-manifest/3, "
                                                 r"written by another spyrec version.*re-run"):
            read(one)


def test_a_missing_file_of_the_build_is_named_missing(one):
    (one / "bundle.mlir").unlink()
    with pytest.raises(InputFileError, match=r"bundle.mlir: missing"):
        load_output_dir(one)
