"""The output directory's safety rules: spyrec replaces only what it recognisably wrote.

`-o OUT` may name a missing path, an empty directory, or a directory spyrec wrote earlier (its
`manifest.json` says `spyrec-manifest/...` and every entry is a file of that build: one its
build record lists, or `outputs.npz`, what `spyrec run` writes there). Anything else — a
regular file (the source `.pt2` included), the current directory, a directory holding a file
the build did not write (even one named like spyrec's own, `sdsc_notes.json`) — is refused with
one message before any work starts, and checked again just before the replacement, so a file
that appears during a long compile is safe too. A file the compile reads (the `.pt2`, a
config) that lies inside OUT is refused too (`check_inputs_outside`): replacing OUT would
delete it.

A symlinked `OUT` is *followed*: the real directory it points at is replaced, the link stays,
and the temporary directory is made beside the real directory (same filesystem, so the final
rename never crosses devices). The new directory is built in a hidden sibling
`.OUT.spyrec-tmp-<pid>-<n>` and swapped in with one atomic exchange (Linux `renameat2`), or two
renames where that is unavailable. A process killed mid-write leaves that sibling behind; the
next compile into the same `OUT` removes it (its pid is gone, or it is a day old), and restores
a previous output that was moved aside but not yet replaced. A directory that cannot be
removed as it is (a user made it read-only) is made writable first; what still cannot be
removed is returned to the caller, which names it (`replace_directory`).

Stdlib only: `spyrec compile` checks `-o` before importing anything heavy.
"""

from __future__ import annotations

import ctypes
import fnmatch
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from spyrec.errors import OutputDirError

MANIFEST_FORMAT_PREFIX = "spyrec-manifest/"
RUN_OUTPUTS = "outputs.npz"        # `spyrec run`'s outputs when -o does not name a file
PROGRAM_COPY = "program.pt2"       # the source's copy, with compile --self-contained
# Every name spyrec writes into an output directory (RUN_OUTPUTS is `spyrec run`'s default):
# what a temporary of a killed compile may hold, and the own files of a directory whose
# manifest is older than the build record (format 3 and before; its sdsc files are the ones
# its kernels list). constants.npz / constants.safetensors: the weights of format 1.
OWN_FILES = ("manifest.json", "opspecs.json", "bundle.mlir", "weights.bin", "constants.npz",
             "constants.safetensors", "program.pt2", "report.json", "report.txt", "tiling.yaml",
             RUN_OUTPUTS, "sdsc_*.json")
_RUN_TEMPORARY = re.compile(r"^\." + re.escape(RUN_OUTPUTS) + r"\.tmp-\d+$")
STALE_AFTER_SECONDS = 24 * 3600
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?:spyrec-)?(?P<kind>tmp|old)-(?P<pid>\d+)(?:-\d+)?$")
_MAX_MANIFEST_BYTES = 64 << 20
_counter = iter(range(1 << 62))


def check_output_dir(out: str | Path) -> Path:
    """The real path `out` names, if spyrec may (re)place a directory there; else refuse."""
    out = Path(out)
    target = out.resolve()
    if target.exists() and not target.is_dir():
        raise OutputDirError(f"-o {out}: is a file{_via(out, target)}; -o names the output "
                             f"directory. Choose a directory path (it is created if missing).")
    cwd = Path.cwd().resolve()
    if target == cwd or target in cwd.parents:
        which = "" if target == cwd else " or contains it"
        raise OutputDirError(f"-o {out}: is the current directory{which}; "
                             f"spyrec replaces its output directory as a whole. Choose a new "
                             f"directory, e.g. -o out/.")
    _check_ancestors(out, target)
    if target.is_dir():
        _check_replaceable(out, target)
    return target


def replace_directory(target: Path, build: Callable[[Path], None],
                      recheck: Callable[[Path], Path] | None = None) -> list[str]:
    """Build a new directory with `build(tmp)` and put it at `target`, all or nothing; the
    temporaries that could not be removed, each with the reason (a note for the user).

    `target` is what `check_output_dir` returned (or `recheck`, which checks it again just
    before the swap: a directory of several programs has its own rule). On any failure the
    temporary directory is removed and an earlier `target` is left as it was."""
    failed: list[str] = []
    remove_stale_temporaries(target, failed)
    tmp = new_temporary(target)
    try:
        build(tmp)
        if target.is_dir():
            (recheck or check_output_dir)(target)  # still ours? (a long compile leaves time)
            failed += _swap_in(tmp, target)
        else:
            os.rename(tmp, target)
    except OSError as e:
        remove_tree(tmp)
        raise OutputDirError(f"-o {target}: could not write the output directory "
                             f"({_reason(e)}); nothing was changed.") from None
    except BaseException:
        remove_tree(tmp)
        raise
    return failed


def new_temporary(target: Path) -> Path:
    """A new empty directory beside `target` named as this process's temporary for it (so
    `remove_stale_temporaries` finds it if the process dies); the caller removes it."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.spyrec-tmp-{os.getpid()}-{next(_counter)}"
        tmp.mkdir()
    except OSError as e:
        raise OutputDirError(f"-o {target}: cannot create the output directory "
                             f"({_reason(e)}). Choose a writable location.") from None
    return tmp


def remove_stale_temporaries(target: Path, failed: list[str] | None = None) -> list[str]:
    """Remove this `target`'s temporaries left by dead processes; names of what was removed
    (what could not be, with the reason, goes to `failed`).

    A moved-aside earlier output (`old`) whose replacement never arrived is put back first."""
    parent, removed = target.parent, []
    try:
        entries = sorted(parent.iterdir()) if parent.is_dir() else []
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.match(entry.name)
        if not m or m["name"] != target.name or not _is_stale(entry, int(m["pid"])):
            continue
        if entry.is_symlink() or not entry.is_dir() or not _only_own_files(entry):
            continue  # not recognisably ours: leave it alone
        if m["kind"] == "old" and not target.exists():
            os.rename(entry, target)
        else:
            problem = remove_tree(entry)
            if problem:
                if failed is not None:
                    failed.append(problem)
                continue
        removed.append(entry.name)
    return removed


def remove_tree(path: Path) -> str | None:
    """Remove directory `path` and everything in it; None when it is gone, else what is
    left and why. A directory without write permission (its files cannot be unlinked) is
    given it first: the tree is spyrec's own temporary, made read-only by someone else."""
    def writable_then_again(function, name, _excinfo):
        parent = os.path.dirname(name)
        for directory in (parent, name):
            try:
                if os.path.isdir(directory) and not os.path.islink(directory):
                    os.chmod(directory, os.stat(directory).st_mode | 0o700)
            except OSError:
                pass
        function(name)

    handler = {"onexc" if sys.version_info >= (3, 12) else "onerror": writable_then_again}
    try:
        shutil.rmtree(path, **handler)
    except OSError as e:
        return f"{path} ({_reason(e)})"
    return None


def is_own_file(name: str) -> bool:
    """Whether `name` is one spyrec writes (the patterns of OWN_FILES)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in OWN_FILES)


def check_inputs_outside(target: Path, inputs: dict[str, Path | None],
                         carried: Path | None = None) -> None:
    """Refuse a file this compile reads (`inputs`: option -> path) that lies inside the
    output directory `target` it replaces: the replacement would delete it. `carried` is one
    the new build keeps a copy of at the same path (--self-contained's OUT/program.pt2)."""
    for option, path in inputs.items():
        if path is None or str(path) == "auto":
            continue
        real = Path(path).resolve()
        if target not in real.parents or real == carried:
            continue
        raise OutputDirError(
            f"{option} {path}: lies inside the output directory {target}, which this compile "
            f"replaces as a whole (the file would be deleted). Copy it out first, e.g. "
            f"cp {path} {Path(path).name}, and give the copy.")


def _check_replaceable(out: Path, target: Path) -> None:
    entries = sorted(target.iterdir())
    if not entries:
        return
    own = _own_names(target)
    if own is None:
        names = ", ".join(e.name for e in entries[:4]) + (", ..." if len(entries) > 4 else "")
        raise OutputDirError(
            f"-o {out}: the directory{_via(out, target)} exists and is not a spyrec output "
            f"directory (it holds {names}); spyrec replaces only an empty directory or one it "
            f"wrote. Choose a new directory, e.g. -o {out / 'spyrec-out'}.")
    foreign = [e.name for e in entries if e.is_symlink() or not e.is_file()
               or not (e.name in own or _RUN_TEMPORARY.match(e.name))]
    if foreign:
        raise OutputDirError(
            f"-o {out}: this spyrec output directory also holds {', '.join(foreign[:4])}"
            f"{', ...' if len(foreign) > 4 else ''}, which its build did not write; replacing "
            f"the directory would delete them. Move them out, or choose another -o.")


def _own_names(directory: Path) -> set[str] | None:
    """The names of the files spyrec wrote in `directory` (the build record's, the manifest
    itself and `spyrec run`'s outputs; for a manifest older than the record, spyrec's fixed
    names and the sdsc files its kernels list), or None when it holds no spyrec manifest."""
    manifest = directory / "manifest.json"
    try:
        if manifest.is_symlink() or not manifest.is_file() or \
                manifest.stat().st_size > _MAX_MANIFEST_BYTES:
            return None
        doc = json.loads(manifest.read_bytes())
        fmt = doc.get("format")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(fmt, str) or not fmt.startswith(MANIFEST_FORMAT_PREFIX):
        return None
    fixed = {"manifest.json", RUN_OUTPUTS}
    build = doc.get("build")
    if isinstance(build, dict) and isinstance(build.get("files"), dict):
        return fixed | set(build["files"])
    listed = {op for kernel in doc.get("kernels") or () if isinstance(kernel, dict)
              for op in kernel.get("ops") or () if isinstance(op, str)}
    return fixed | {n for n in OWN_FILES if "*" not in n} | listed


def _check_ancestors(out: Path, target: Path) -> None:
    """The nearest existing ancestor must be a directory (a file there makes mkdir fail)."""
    for ancestor in target.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise OutputDirError(f"-o {out}: {ancestor} is a file, not a directory; "
                                     f"choose an output path under a directory.")
            return


def _swap_in(tmp: Path, target: Path) -> list[str]:
    """Exchange `tmp` and `target` atomically, then delete what is now the old output; what
    could not be deleted (`remove_tree`)."""
    if _exchange(tmp, target):
        return [problem] if (problem := remove_tree(tmp)) else []
    old = target.parent / f".{target.name}.spyrec-old-{os.getpid()}-{next(_counter)}"
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    return [problem] if (problem := remove_tree(old)) else []


def _exchange(a: Path, b: Path) -> bool:
    """renameat2(RENAME_EXCHANGE): False where the C library or filesystem lacks it."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(err, os.strerror(err), str(b))


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _is_stale(entry: Path, pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        if time.time() - entry.lstat().st_mtime > STALE_AFTER_SECONDS:
            return True
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: the pid is alive, owned by someone else
        return False
    return False


def _only_own_files(directory: Path) -> bool:
    try:
        return all(e.is_file() and not e.is_symlink() and is_own_file(e.name)
                   for e in directory.iterdir())
    except OSError:
        return False


def _via(out: Path, target: Path) -> str:
    return f" (the link points to {target})" if out.is_symlink() else ""


def _reason(e: OSError) -> str:
    where = f": {e.filename}" if e.filename else ""
    return f"{e.strerror or e}{where}"
