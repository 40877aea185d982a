"""`--check` runs only a source program the manifest vouches for (issue 56 item 3): a
self-contained copy OUT/program.pt2 only when the manifest names it (`source.copy`) and its
SHA-256 is the recorded one; a program.pt2 the manifest does not name is never run; the
recorded path and `--model PATH` are checked by hash too. Otherwise exit 2 before simulating,
naming the file, both hashes and what to do; each file is hashed once per run.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import spyrec.sim.reference_program as reference_program
from tests.programs import Lambda, cli, compile_pt2, counting_calls, export, load_json

X = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))


def _program(tmp: Path, name: str, scale: float) -> Path:
    return export(tmp, Lambda(lambda m, x: x * scale + 1), (X,), name)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The source, its self-contained compile, another program (x * 3 + 1 where the source
    is x * 2 + 1) and the inputs."""
    tmp = tmp_path_factory.mktemp("source")
    source = _program(tmp, "model", 2.0)
    np.savez(tmp / "in.npz", args_0=X.numpy())
    return {"source": source, "other": _program(tmp, "other", 3.0), "npz": tmp / "in.npz",
            "contained": compile_pt2(source, tmp / "contained", self_contained=True)}


def _copy(built, which: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(built[which], tmp_path / which))


def _run(capsys, built, out: Path, *extra) -> tuple[int, str, str]:
    return cli(capsys, "run", out, "--inputs", built["npz"], "-o", out.parent / "y.npz",
               "--check", *extra)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_matching_copy_is_run_and_hashed_once(built, tmp_path, capsys):
    out = _copy(built, "contained", tmp_path)
    with counting_calls(reference_program, "_sha256") as hashed:
        code, text, err = _run(capsys, built, out)
    assert code == 0, err
    assert hashed[0] == 1                  # once per run, not once per eager run
    assert f"running {out / 'program.pt2'} in PyTorch eager" in err
    assert text.splitlines()[1].endswith("ok")


def test_a_tampered_copy_is_refused_naming_both_hashes(built, tmp_path, capsys):
    out = _copy(built, "contained", tmp_path)
    shutil.copy(built["other"], out / "program.pt2")
    recorded = load_json(out / "manifest.json")["source"]["sha256"]
    code, text, err = _run(capsys, built, out, "-q")
    assert code == 2 and text == "" and err.count("\n") == 1, err
    assert f"{out / 'program.pt2'}: not the program" in err
    assert _sha(built["other"])[:16] in err and recorded[:16] in err
    assert "--model PATH" in err and "re-run spyrec compile" in err
    assert not (tmp_path / "y.npz").exists()           # refused before simulating
    code, _, err = _run(capsys, built, out, "-q", "--model", built["source"])
    assert code == 0, err                              # --model vouched for by its hash


def test_a_missing_copy_is_refused(built, tmp_path, capsys):
    out = _copy(built, "contained", tmp_path)
    (out / "program.pt2").unlink()
    code, _, err = _run(capsys, built, out, "-q")
    assert code == 2 and "program.pt2: missing, though" in err and "--model PATH" in err


def _plain(built, tmp_path: Path) -> tuple[Path, Path]:
    """(source, OUT): a private copy of the source compiled without --self-contained."""
    source = tmp_path / "model.pt2"
    shutil.copy(built["source"], source)
    return source.resolve(), compile_pt2(source, tmp_path / "out")


def test_a_stray_copy_is_never_run(built, tmp_path, capsys):
    """A program.pt2 (of another program) in a directory not compiled --self-contained:
    the recorded source runs, and passes; once the source is gone, the refusal mentions the
    stray file rather than running it."""
    source, out = _plain(built, tmp_path)
    shutil.copy(built["other"], out / "program.pt2")
    code, text, err = _run(capsys, built, out)
    assert code == 0, err
    assert f"running {source} in PyTorch eager" in err
    source.unlink()
    code, _, err = _run(capsys, built, out, "-q")
    assert code == 2 and f"{source}: the source program" in err and "is gone" in err
    assert f"{out / 'program.pt2'} is not used" in err and "not compiled --self-contained" in err


def test_a_moved_source_is_refused_then_found_by_model(built, tmp_path, capsys):
    """The recorded source moved away: exit 2 naming it and its hash; --model to where it
    went passes (same hash)."""
    source, out = _plain(built, tmp_path)
    moved = tmp_path / "moved.pt2"
    shutil.move(source, moved)
    recorded = load_json(out / "manifest.json")["source"]["sha256"]
    code, _, err = _run(capsys, built, out, "-q")
    assert code == 2 and f"{source}: the source program" in err, err
    assert recorded[:16] in err and "--model PATH" in err and "--self-contained" in err
    code, _, err = _run(capsys, built, out, "-q", "--model", moved)
    assert code == 0, err


def test_a_changed_source_is_refused_naming_both_hashes(built, tmp_path, capsys):
    source, out = _plain(built, tmp_path)
    recorded = load_json(out / "manifest.json")["source"]["sha256"]
    shutil.copy(built["other"], source)
    code, _, err = _run(capsys, built, out, "-q")
    assert code == 2 and f"{source}: changed since" in err, err
    assert _sha(built["other"])[:16] in err and recorded[:16] in err


def test_model_with_another_hash_is_refused(built, tmp_path, capsys):
    out = _copy(built, "contained", tmp_path)
    with counting_calls(reference_program, "_sha256") as hashed:
        code, text, err = _run(capsys, built, out, "-q", "--model", built["other"])
    assert code == 2 and text == "", err
    assert hashed[0] == 1                  # the given file only: the copy is not consulted
    assert f"--model {built['other']}: not the program" in err
    assert _sha(built["other"])[:16] in err
    assert load_json(out / "manifest.json")["source"]["sha256"][:16] in err
