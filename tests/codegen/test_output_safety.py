"""`-o OUT` never loses a user's file: spyrec replaces only an empty directory or its own output.

Every refusal is exit 2 with one message naming the path, and leaves the file system exactly as
it was; every success leaves no temporary behind.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import spyrec.codegen.writer as writer
from spyrec.errors import InputFileError, OutputDirError
from spyrec.outdir import check_output_dir, remove_stale_temporaries
from tests.programs import Lambda, compile_pt2, export


@pytest.fixture(scope="module")
def pt2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("model")
    return export(tmp, Lambda(lambda m, x: x * 2 + 1), (torch.randn(4, 8),))


def _spyrec(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    return subprocess.run([sys.executable, "-m", "spyrec", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env)


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry below `root` with its bytes (None for a directory or a link)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink()
                                       else None) for p in sorted(root.rglob("*"))}


def _assert_refused(result, *words):
    assert result.returncode == 2, result.stderr
    # progress lines ("spyrec compile: load") appear once a step passes a second, which a
    # loaded machine can take: they are not the message
    lines = [line for line in result.stderr.strip().splitlines()
             if not line.startswith("spyrec compile: ")]
    assert len(lines) == 1 and lines[0].startswith("spyrec: -o "), result.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_models_own_directory_is_never_wiped(pt2, tmp_path):
    home = tmp_path / "project"
    home.mkdir()
    (home / "m.pt2").write_bytes(pt2.read_bytes())
    (home / "data.npz").write_bytes(b"user data")
    (home / "notes.txt").write_text("mine")
    before = _tree(tmp_path)
    _assert_refused(_spyrec("compile", home / "m.pt2", "-o", home), str(home),
                    "not a spyrec output directory", "data.npz")
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("which", ["other", "source"])
def test_a_file_is_never_an_output(pt2, tmp_path, which):
    src = tmp_path / "m.pt2"
    src.write_bytes(pt2.read_bytes())
    target = src if which == "source" else tmp_path / "results.json"
    if which == "other":
        target.write_text("{}")
    before = _tree(tmp_path)
    _assert_refused(_spyrec("compile", src, "-o", target), "is a file")
    assert _tree(tmp_path) == before


def test_a_spyrec_output_with_a_foreign_file_is_kept(pt2, tmp_path):
    out = compile_pt2(pt2, tmp_path / "out")
    (out / "my-notes.txt").write_text("keep me")
    before = _tree(tmp_path)
    with pytest.raises(OutputDirError, match="also holds my-notes.txt"):
        compile_pt2(pt2, out)
    assert _tree(tmp_path) == before


def test_an_empty_directory_and_an_earlier_output_are_replaced(pt2, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    compile_pt2(pt2, out)
    (out / "outputs.npz").write_bytes(b"from spyrec run")  # spyrec's own: replaced
    compile_pt2(pt2, out)
    assert not (out / "outputs.npz").exists() and (out / "manifest.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_the_current_directory_is_refused(pt2, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    _assert_refused(_spyrec("compile", pt2, "-o", ".", cwd=work), "current directory")
    _assert_refused(_spyrec("compile", pt2, "-o", "..", cwd=work), "contains it")
    assert list(work.iterdir()) == []


def test_a_parent_that_is_a_file(pt2, tmp_path):
    (tmp_path / "f").write_text("x")
    _assert_refused(_spyrec("compile", pt2, "-o", tmp_path / "f" / "out"), "is a file")
    assert (tmp_path / "f").read_text() == "x"


def test_an_unwritable_location_is_one_message(pt2):
    # /sys refuses mkdir even for root, which ignores file modes
    _assert_refused(_spyrec("compile", pt2, "-o", "/sys/spyrec-test-out"),
                    "cannot create the output directory")


@pytest.mark.parametrize("where", ["same filesystem", "other filesystem"])
def test_a_symlinked_output_is_followed_without_debris(pt2, tmp_path, where):
    base = Path("/dev/shm") if where == "other filesystem" else tmp_path
    if not base.is_dir():
        pytest.skip("no /dev/shm")
    real_parent = base / f"spyrec-test-{os.getpid()}-{tmp_path.name}"
    real_parent.mkdir()
    try:
        (real_parent / "real").mkdir()
        links = tmp_path / "links"
        links.mkdir()
        link = links / "link"
        link.symlink_to(real_parent / "real")
        for _ in range(2):  # the second compile replaces an earlier output through the link
            r = _spyrec("compile", pt2, "-o", link)
            assert r.returncode == 0, r.stderr
        assert link.is_symlink() and (link / "manifest.json").is_file()
        assert sorted(p.name for p in real_parent.iterdir()) == ["real"]
        assert sorted(p.name for p in links.iterdir()) == ["link"]
    finally:
        import shutil
        shutil.rmtree(real_parent)


def test_an_interrupt_in_the_middle_of_the_write_keeps_the_previous_output(pt2, tmp_path,
                                                                           monkeypatch):
    out = compile_pt2(pt2, tmp_path / "out")
    before = _tree(tmp_path)

    def interrupted(path, content):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "_write_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        compile_pt2(pt2, out)
    assert _tree(tmp_path) == before


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _leftover(parent: Path, name: str, files=("manifest.json", "sdsc_0.json")) -> Path:
    d = parent / name
    d.mkdir()
    for f in files:
        (d / f).write_text("partial")
    return d


def test_temporaries_of_killed_compiles_are_removed(pt2, tmp_path):
    dead = _dead_pid()
    stale = [_leftover(tmp_path, f".out.spyrec-tmp-{dead}-0"),
             _leftover(tmp_path, f".out.tmp-{dead}")]  # the name older spyrec versions used
    alive = _leftover(tmp_path, f".out.spyrec-tmp-{os.getppid()}-0")  # a compile still running
    foreign = _leftover(tmp_path, f".out.spyrec-tmp-{dead}-1", files=("thesis.tex",))
    other = _leftover(tmp_path, f".other.spyrec-tmp-{dead}-0")  # another OUT's: not ours to judge
    compile_pt2(pt2, tmp_path / "out")
    assert not any(s.exists() for s in stale)
    assert alive.exists() and foreign.exists() and other.exists()


def test_an_output_moved_aside_by_a_killed_compile_is_restored(tmp_path):
    dead = _dead_pid()
    old = _leftover(tmp_path, f".out.spyrec-old-{dead}-0")
    assert remove_stale_temporaries(tmp_path / "out") == [old.name]
    assert (tmp_path / "out" / "manifest.json").read_text() == "partial"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_check_output_dir_returns_the_real_directory(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert check_output_dir(tmp_path / "link") == (tmp_path / "real").resolve()
    assert check_output_dir(tmp_path / "new" / "deeper") == (tmp_path / "new" / "deeper").resolve()


# --- failures inside the write: the old directory survives, no temporary is left ------------
# Each case makes one step of `write_atomically` fail: the k-th file written, the copy of the
# source, the finalize step that writes the report, and the swap that puts the new directory in
# place. Both with an earlier output in OUT (which must come back byte for byte) and without one
# (OUT must not exist afterwards).

def _fail_at_file(k):
    def patch(monkeypatch):
        real, calls = writer._write_file, []

        def failing(path, content):
            calls.append(path.name)
            if len(calls) == k:
                raise OSError(28, "No space left on device", str(path))
            return real(path, content)
        monkeypatch.setattr(writer, "_write_file", failing)
        return calls
    return patch


def _fail_copying_the_source(monkeypatch):
    def failing(src, dst, *a, **k):
        raise OSError(5, "Input/output error", str(dst))
    monkeypatch.setattr(writer.shutil, "copyfile", failing)


def _fail_renaming_the_new_directory_in(monkeypatch):
    """Without renameat2's exchange: the earlier output is moved aside, then the rename of the
    new one fails (the earlier output must be moved back)."""
    import spyrec.outdir as outdir

    real = os.rename

    def failing(src, dst):
        if ".spyrec-tmp-" in str(src):
            raise OSError(16, "Device or resource busy", str(dst))
        real(src, dst)
    monkeypatch.setattr(outdir, "_exchange", lambda a, b: False)
    monkeypatch.setattr(outdir.os, "rename", failing)


# sdsc_0 (x * 2 and + 1, one fused SuperDSC), opspecs, bundle; manifest; report.json, .txt
# (no weights)
FILES_WRITTEN = 6


FAILURES = {"first file": _fail_at_file(1), "third file": _fail_at_file(3),
            "the manifest": _fail_at_file(FILES_WRITTEN - 2),
            "last file (report.txt)": _fail_at_file(FILES_WRITTEN),
            "source copy": _fail_copying_the_source,
            "rename into place": _fail_renaming_the_new_directory_in}


def test_the_failure_cases_cover_every_file(pt2, tmp_path, monkeypatch):
    calls = _fail_at_file(0)(monkeypatch)
    compile_pt2(pt2, tmp_path / "out", self_contained=True)
    # the manifest waits for every other file's record; the reports carry its build id
    assert len(calls) == FILES_WRITTEN and \
        calls[-3:] == ["manifest.json", "report.json", "report.txt"], calls


@pytest.mark.parametrize("earlier", [True, False], ids=["over an earlier output", "fresh OUT"])
@pytest.mark.parametrize("where", sorted(FAILURES))
def test_a_failure_inside_the_write_leaves_the_file_system_as_it_was(pt2, tmp_path,
                                                                     monkeypatch, where,
                                                                     earlier):
    out = tmp_path / "out"
    if earlier:
        compile_pt2(pt2, out, self_contained=True)
    before = _tree(tmp_path)
    FAILURES[where](monkeypatch)
    with pytest.raises(OutputDirError, match="nothing was changed"):
        compile_pt2(pt2, out, self_contained=True)   # the source copy is a step too
    assert _tree(tmp_path) == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_source_that_cannot_be_hashed_is_named_and_nothing_is_written(pt2, tmp_path,
                                                                         monkeypatch):
    """The hash runs beside the passes and manifest.json is written last (it waits for it):
    a read error there names the source, not the output directory, and leaves nothing."""
    def unreadable(path):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(writer, "sha256_of", unreadable)
    out = tmp_path / "out"
    with pytest.raises(InputFileError, match=r"cannot read it to record its SHA-256 in "
                                             r"manifest.json \(Permission denied\)"):
        compile_pt2(pt2, out)
    assert list(tmp_path.iterdir()) == []


# --- a directory's own files are its build's; a compile never deletes what it reads ----------

def test_a_user_file_named_like_spyrecs_own_blocks_the_replacement(pt2, tmp_path):
    """Own files are those the build record lists, not every name matching `sdsc_*.json`."""
    out = compile_pt2(pt2, tmp_path / "out")
    (out / "sdsc_notes.json").write_text('{"mine": true}')
    before = _tree(tmp_path)
    _assert_refused(_spyrec("compile", pt2, "-o", out), "sdsc_notes.json",
                    "its build did not write")
    assert _tree(tmp_path) == before


def test_run_outputs_in_the_directory_are_its_own(pt2, tmp_path):
    """`spyrec run`'s outputs.npz (and a temporary of a killed run) do not block a recompile."""
    out = compile_pt2(pt2, tmp_path / "out")
    (out / "outputs.npz").write_bytes(b"run outputs")
    (out / ".outputs.npz.tmp-99999").write_bytes(b"partial")
    compile_pt2(pt2, out)
    assert not (out / "outputs.npz").exists()


@pytest.mark.parametrize("option", ["model", "--tiling", "--pipeline", "--layouts"])
def test_a_file_the_compile_reads_inside_out_is_refused_and_kept(pt2, tmp_path, option):
    """An edited OUT/tiling.yaml given back, or OUT/program.pt2 compiled again: replacing OUT
    would delete the input; refused before any work, nothing changed."""
    out = compile_pt2(pt2, tmp_path / "out", self_contained=True)
    inside = out / "outputs.npz"                       # a name the directory may hold
    inside.write_text("{}" if option != "model" else "")
    args = [pt2, "-o", out, option, inside] if option != "model" else \
        [out / "program.pt2", "-o", out]
    before = _tree(tmp_path)
    result = _spyrec("compile", *args)
    assert result.returncode == 2, result.stderr
    assert "lies inside the output directory" in result.stderr and "Copy it out" in \
        result.stderr, result.stderr
    assert _tree(tmp_path) == before


def test_a_self_contained_recompile_of_its_own_copy_keeps_it(pt2, tmp_path):
    """--self-contained writes the copy again before the swap, so OUT/program.pt2 as the
    model loses nothing: the same bytes are there afterwards."""
    out = compile_pt2(pt2, tmp_path / "out", self_contained=True)
    before = (out / "program.pt2").read_bytes()
    compile_pt2(out / "program.pt2", out, self_contained=True)
    assert (out / "program.pt2").read_bytes() == before == pt2.read_bytes()


def test_a_read_only_old_output_is_removed_after_the_swap(pt2, tmp_path):
    """A user made the previous output read-only: its files cannot be unlinked until the
    directory is writable again (for a non-root user); the replaced directory is removed
    anyway, and nothing is left beside OUT."""
    out = compile_pt2(pt2, tmp_path / "out")
    os.chmod(out, 0o555)
    try:
        compile_pt2(pt2, out)
    finally:
        os.chmod(out, 0o755)
    assert [p.name for p in tmp_path.iterdir()] == ["out", pt2.name] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_temporary_that_cannot_be_removed_is_named(pt2, tmp_path, monkeypatch, capsys):
    """Temporaries are removed or reported: a removal that fails (an immutable file, a
    busy mount) is a note naming the directory, not a silent leftover."""
    import spyrec.outdir as outdir

    out = compile_pt2(pt2, tmp_path / "out")

    def stuck(path, **kw):
        raise OSError(1, "Operation not permitted", str(path))
    monkeypatch.setattr(outdir.shutil, "rmtree", stuck)
    compile_pt2(pt2, out, verbose=0)
    note = capsys.readouterr().err
    assert "could not remove the temporary" in note and ".out.spyrec-tmp-" in note and \
        "Operation not permitted" in note, note
