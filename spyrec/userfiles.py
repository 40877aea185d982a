"""A user's file: a regular file, opened without hanging, size-checked; and an output file
written without clobbering anything that is not a regular file.

Reading. Every path a user gives where spyrec expects a file (the `.pt2`, `--inputs`,
`--pipeline`, `--tiling`, `--layouts`, `--model`) goes through `open_regular`: the path is
`stat`ed first, so a device node is never opened (opening some has side effects), then opened
with O_NONBLOCK (a FIFO swapped in after the `stat` cannot block the open) and `fstat`ed: only
a regular file is read. Anything else is one error (exit 2) naming the path, what it is (a
directory, a FIFO, a character device, a socket) and what was expected. `read_regular` adds a
size limit checked before a byte is read.

Writing (`run -o`, `inspect --svg`, `inspect --trace`, `compile --print-ir-after-all`'s
files). An output path that exists and is not a regular file is refused: a FIFO, a device
node (as root, replacing `/dev/null` would turn it into a regular file for the whole machine),
a socket, a directory. A symbolic link is followed when it names an existing regular file:
that file is replaced and the link stays, as `spyrec compile -o` treats a symlinked output
directory (`outdir.py`). A dangling link, or one naming anything else, is refused (as GNU
`cp` refuses to write through a dangling link); where links make no sense (`links=False`: the
IR dump directory) every link is refused. The check runs before any work (`output_target`)
and again right before the write, which goes to a temporary sibling (created with O_EXCL, so
no link planted under its name is followed) renamed over the target: a failure leaves the old
file intact and no temporary behind. The new file keeps an old one's permission bits.

Stdlib only: `spyrec compile` checks its options before importing anything heavy.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO

from spyrec.errors import InputFileError

REGULAR = "a regular file"


def kind_of(mode: int) -> str:
    """What a file of `mode` is, in words."""
    kinds = ((stat.S_ISREG, REGULAR), (stat.S_ISDIR, "a directory"),
             (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISLNK, "a symbolic link"))
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def _label(path: Path, option: str) -> str:
    return f"{option} {path}" if option else str(path)


def open_regular(path: str | Path, expected: str, option: str = "",
                 missing: str = "no such file", error: type = InputFileError) -> BinaryIO:
    """`path` opened for reading (binary), if it is a regular file; else one `error` saying
    what it is and that `expected` was (e.g. "a .pt2 file from torch.export.save")."""
    path = Path(path)
    label = _label(path, option)
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise error(_not_regular(label, mode, expected))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise error(f"{label}: {missing}" + _dangling(path)) from None
    except NotADirectoryError:
        raise error(f"{label}: {missing} (a part of the path is not a directory)") from None
    except OSError as e:
        raise error(f"{label}: cannot open ({e.strerror}); expected {expected}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):      # swapped after the stat
        os.close(fd)
        raise error(_not_regular(label, mode, expected))
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "rb")


def check_regular(path: str | Path, expected: str, option: str = "",
                  missing: str = "no such file", error: type = InputFileError) -> None:
    """`open_regular`'s checks alone (the file is opened and closed at once)."""
    open_regular(path, expected, option, missing, error).close()


def read_regular(path: str | Path, expected: str, limit: int, option: str = "",
                 missing: str = "no such file", error: type = InputFileError) -> bytes:
    """The bytes of regular file `path`, refused unread when it holds more than `limit`."""
    with open_regular(path, expected, option, missing, error) as f:
        size = os.fstat(f.fileno()).st_size
        # (read what fstat says, and a byte more to see growth: read(n) allocates n bytes
        # up front, so read(limit + 1) made every small config cost `limit` of memory)
        data = f.read(size + 1) if size <= limit else b""
        if size > limit or len(data) > limit:
            raise error(f"{_label(Path(path), option)}: {max(size, len(data))} bytes, more "
                        f"than {expected} can be ({limit} bytes at most)")
        return data


def _not_regular(label: str, mode: int, expected: str) -> str:
    return f"{label}: is {kind_of(mode)}, not a regular file; expected {expected}"


def _dangling(path: Path) -> str:
    """' (a symbolic link to X, which does not exist)' for a dangling link, else ''."""
    try:
        return f" (a symbolic link to {os.readlink(path)}, which does not exist)"
    except OSError:
        return ""


# --- writing ------------------------------------------------------------------------------


def output_target(path: str | Path, option: str, links: bool = True,
                  error: type = InputFileError) -> Path:
    """The file a write to `path` replaces or creates: `path`, or the regular file its
    symbolic link names (with `links`). Refuses an existing path that is not a regular file,
    a dangling link, and a parent that is not a directory."""
    path = Path(path)
    label = _label(path, option)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _check_parent(path, label, error)
        return path
    except OSError as e:
        raise error(f"{label}: cannot use as an output file ({e.strerror}); choose another "
                    f"path") from None
    if stat.S_ISLNK(st.st_mode):
        return _link_target(path, label, links, error)
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{label}: is a directory; give the path of a file")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{label}: is {kind_of(st.st_mode)}, not a regular file; {option or 'spyrec'}"
                    f" writes a regular file and never replaces anything else: choose "
                    f"another path")
    return path


def _link_target(path: Path, label: str, links: bool, error: type) -> Path:
    target = os.readlink(path)
    if not links:
        raise error(f"{label}: is a symbolic link (to {target}); spyrec does not write through "
                    f"links here: remove it or choose another path")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        raise error(f"{label}: is a symbolic link to {target}, which does not exist; spyrec "
                    f"does not write through a dangling link: choose another path") from None
    if not stat.S_ISREG(mode):
        raise error(f"{label}: is a symbolic link to {kind_of(mode)} ({target}), not to a "
                    f"regular file; spyrec never replaces anything else: choose another path")
    return Path(os.path.realpath(path))


def _check_parent(path: Path, label: str, error: type) -> None:
    if not path.parent.is_dir():
        raise error(f"{label}: directory {path.parent} does not exist; create it first or "
                    f"choose another path")


def write_replacing(path: str | Path, data: bytes, option: str, what: str, links: bool = True,
                    error: type = InputFileError) -> Path:
    """Write `data` (`what`, for messages: "the outputs") to the file `path` names, checked
    again now (`output_target`), through a temporary sibling renamed over it. Returns the
    file written (a link's target)."""
    target = output_target(path, option, links, error)
    old_mode = _regular_mode(target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.randbelow(10**9)}")
    created = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        created = True
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if old_mode is not None:
            os.chmod(tmp, stat.S_IMODE(old_mode))
        if output_target(path, option, links, error) != target:
            raise error(f"{_label(Path(path), option)}: changed while spyrec wrote {what}; "
                        f"nothing was replaced: try again")
        os.replace(tmp, target)
    except OSError as e:
        raise error(f"{_label(Path(path), option)}: cannot write {what} ({e.strerror}); "
                    f"choose another path") from None
    finally:
        if created:
            tmp.unlink(missing_ok=True)
    return target


def _regular_mode(path: Path) -> int | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_mode if stat.S_ISREG(st.st_mode) else None


# more than any compressor produces (deflate about 1032:1): a member claiming it is a bomb
MAX_ZIP_RATIO = 1100


def zip_entry_problem(info, file_bytes: int, readable: tuple[int, ...],
                      methods: str) -> str | None:
    """What is wrong with a zip member's directory entry (`zipfile.ZipInfo`), judged before a
    byte of it is read: encrypted, a compression method not in `readable` (`methods` says
    which are), data claimed past the end of the `file_bytes`-byte file, a stored member of
    two sizes, or an inflated size no compressor produces (a bomb); None when it is sound.
    An .npz's members and a .pt2's alike."""
    import zipfile

    if info.flag_bits & 0x1:
        return "is encrypted; spyrec reads no passwords"
    if info.compress_type not in readable:
        return f"uses zip compression method {info.compress_type} ({methods})"
    if info.header_offset + 30 + info.compress_size > file_bytes:
        return (f"claims {info.compress_size} bytes from offset {info.header_offset}, past "
                f"the end of the {file_bytes}-byte file (truncated?)")
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        return f"is stored uncompressed but claims {info.file_size} bytes in {info.compress_size}"
    if info.file_size > MAX_ZIP_RATIO * max(info.compress_size, 1):
        return (f"claims {info.file_size} bytes inflated from {info.compress_size}, more than "
                f"any compressor produces (at most {MAX_ZIP_RATIO}:1)")
    return None
