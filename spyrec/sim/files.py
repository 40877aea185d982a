"""The files of a directory the simulator reads, as text and as JSON checked against its schema.

Both directory readers start here: spyrec's own output (`loader.py`) and a reference bundle
(`foreign.py`). Every JSON file goes through its schema in `spyrec/schemas/` (a compiled check,
jsonschema for the message when it fails), so a format is defined in one place and a bad file
gives one message naming the file and the JSON path (`sdsc_3.json: at $.args[1].device_size:
...`). What a schema cannot say (lengths that must agree, addresses inside tensors) is checked
where the documents become specs (`program.py`). Documents the compiler hands over in memory
never pass through here: they are not files (`program.program_from_documents`).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import weakref
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping

from spyrec.errors import InputFileError, OutputDirError
from spyrec.sim.schemacheck import Unsupported, compile_schema

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
# What a spyrec output directory's reader tells the user to do about a file that fails.
RECOMPILE = "the file is not as spyrec compile wrote it: re-run spyrec compile"
OWN_FILE_HINT = "; spyrec compile writes a regular file there: re-run spyrec compile"


@lru_cache(maxsize=None)
def _registry():
    """Every schema by its $id, so one schema can refer to another (opspecs -> sdsc args)."""
    from referencing import Registry, Resource

    resources = []
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


@lru_cache(maxsize=None)
def validator(schema_name: str):
    """The jsonschema validator of one schema file (`manifest`, `sdsc`, `opspecs`, `report`),
    built once. jsonschema is imported here, not at the top: valid files never need it, and
    the compiler's cost estimate reads no file at all."""
    import jsonschema

    path = SCHEMA_DIR / f"{schema_name}.schema.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=_registry())


@lru_cache(maxsize=None)
def fast_check(schema_name: str):
    """The compiled yes/no check of one schema (schemacheck.py), or None where it does not
    cover the schema's keywords."""
    try:
        return compile_schema(SCHEMA_DIR, schema_name)
    except Unsupported:
        return None


def validate(data: object, schema_name: str, label: str, todo: str = RECOMPILE) -> None:
    """InputFileError naming `label`, the JSON path of the most relevant violation and what
    to do about it (`todo`).

    The compiled check answers for valid files (~10x faster than jsonschema, which is
    imported only when it says no); jsonschema stays the judge and writes the message."""
    check = fast_check(schema_name)
    if check is not None and check(data):
        return
    import jsonschema

    error = jsonschema.exceptions.best_match(validator(schema_name).iter_errors(data))
    if error is not None:
        raise InputFileError(f"{label}: at {error.json_path}: {_shorten(error.message)} "
                             f"(schema {schema_name}.schema.json); {todo}")


def _shorten(message: str, limit: int = 200) -> str:
    """jsonschema quotes the whole offending value (a list of 3,200 core splits): keep the
    message one readable line by cutting the middle."""
    message = " ".join(message.split())
    if len(message) <= limit:
        return message
    return f"{message[:limit // 2]} … {message[-limit // 2:]}"


def read_text(path: Path, hint: str = "") -> str:
    """A file's text; InputFileError naming it (and `hint`, what should be there) when it
    cannot be read or is not a regular file (a FIFO would block the read for ever)."""
    return _decode(_read_regular(path, lambda flags: os.open(path, flags)), path)


def parse_json(text: str, path: Path) -> object:
    """`text` parsed; InputFileError at the line and column where it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    except RecursionError:
        raise InputFileError(f"{path}: nested too deeply for JSON spyrec reads; "
                             f"{RECOMPILE}") from None


# (schema, SHA-256) of texts that already passed their schema: even the compiled check costs
# ~0.5 ms per sdsc file, and tests and benchmarks load the same directory many times in one
# process.
_VALID: set[tuple[str, bytes]] = set()


def sdsc_schema(doc: object) -> str:
    """The schema of an sdsc file: `fused-sdsc` for a fused SuperDSC (its one key ends in
    `_fused`, docs/formats.md), else `sdsc`; chosen by the key so that a one-op file's
    violations are named against the one-op schema alone."""
    if isinstance(doc, dict) and len(doc) == 1 and next(iter(doc)).endswith("_fused"):
        return "fused-sdsc"
    return "sdsc"


def read_json(path: Path, schema_name: str) -> dict:
    """A JSON file, parsed and checked against its schema."""
    data = _read_regular(path, lambda flags: os.open(path, flags))
    return _checked_json(data, hashlib.sha256(data).digest(), path, schema_name)


def _checked_json(data: bytes, digest: bytes, path: Path, schema_name: str) -> dict:
    doc = parse_json(_decode(data, path), path)
    schema_name = sdsc_schema(doc) if schema_name == "sdsc" else schema_name
    key = (schema_name, digest)
    if key not in _VALID:
        validate(doc, schema_name, str(path))
        _VALID.add(key)
    return doc


_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _read_regular(path: Path, opener: Callable[[int], int], hint: str = "") -> bytes:
    """The bytes of the regular file `opener(flags)` opens (`path` for messages). Opened
    without blocking, so a FIFO or a device answers at once and is refused."""
    try:
        fd = opener(_OPEN_FLAGS)
    except FileNotFoundError:
        raise InputFileError(f"{path}: missing{hint}") from None
    except OSError as e:
        raise InputFileError(f"cannot read {path}: {e.strerror}{hint}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputFileError(f"{path}: not a regular file{hint}")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    except OSError as e:
        raise InputFileError(f"cannot read {path}: {e.strerror}{hint}") from None
    finally:
        os.close(fd)


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputFileError(f"{path}: not UTF-8 text (byte {e.start}); {RECOMPILE}") from None


class DirectoryReplaced(InputFileError):
    """The directory was replaced while it was read: its files are gone, the path names
    another (a run starts over on it: `run_directory`)."""


class OutputFiles:
    """An output directory opened once (DESIGN §2, "one build"): every file a command reads
    is opened relative to the directory it opened, so a compile that swaps a new directory in
    meanwhile is never half-read (this one's files are read, or are gone, never the new
    build's), and checked against the build record the manifest holds (`expect`). Regular
    files only, opened without blocking (a FIFO in the directory is refused, not waited on).

        files = OutputFiles(out)                 # InputFileError if OUT is no directory
        files.read_text("manifest.json")
        files.expect(manifest["build"])          # later reads are checked against it
        files.read_json("sdsc_0.json", "sdsc")   # exit 2 if the file is another build's
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self.fd = os.open(self.path, flags)
        except FileNotFoundError:
            raise InputFileError(f"{self.path}: no such directory; give the output directory "
                                 f"of spyrec compile") from None
        except NotADirectoryError:
            raise InputFileError(f"{self.path} is not a directory; give the output directory "
                                 f"of spyrec compile (the one holding manifest.json)") from None
        except OSError as e:
            raise InputFileError(f"cannot open {self.path}: {e.strerror}") from None
        self._closer = weakref.finalize(self, os.close, self.fd)
        self.build_id: str | None = None
        self._records: Mapping[str, dict] = {}
        self._texts: dict[str, str] = {}

    def label(self, name: str) -> Path:
        """How messages name file `name` of the directory."""
        return self.path / name

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd)
        except OSError:
            return False
        return True

    def open(self, name: str, hint: str = "") -> int:
        """A descriptor of regular file `name`, opened (without blocking) in this directory;
        the caller closes it."""
        try:
            fd = self._opener(name)(_OPEN_FLAGS)
        except FileNotFoundError:
            raise InputFileError(f"{self.label(name)}: missing{hint}") from None
        except OSError as e:
            raise InputFileError(f"cannot read {self.label(name)}: {e.strerror}{hint}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InputFileError(f"{self.label(name)}: not a regular file{hint}")
        return fd

    def expect(self, build: dict | None) -> None:
        """Check every later read against the build record `build` (manifest `build`)."""
        self.build_id = build["id"] if build else None
        self._records = build["files"] if build else {}

    def read_bytes(self, name: str, hint: str = OWN_FILE_HINT) -> bytes:
        data = _read_regular(self.label(name), self._opener(name), hint)
        self._check(name, data, hashlib.sha256(data))
        return data

    def _opener(self, name: str) -> Callable[[int], int]:
        """Opens `name` in this directory; a file gone because the directory was replaced
        (a compile into the same OUT swapped a new one in and deleted this one) says so."""
        def opener(flags: int) -> int:
            try:
                return os.open(name, flags, dir_fd=self.fd)
            except FileNotFoundError:
                if self.replaced():
                    raise DirectoryReplaced(self.replaced_message()) from None
                raise
        return opener

    def replaced_message(self) -> str:
        return (f"{self.path}: replaced (by a compile into the same directory?) while it was "
                f"being read; nothing of the new build was read and nothing was run: run "
                f"again")

    def read_text(self, name: str, hint: str = OWN_FILE_HINT) -> str:
        """The text of file `name`, read once per handle (a run at symbolic lengths reads
        the bundle again: the same text, not the file again)."""
        if name not in self._texts:
            self._texts[name] = _decode(self.read_bytes(name, hint), self.label(name))
        return self._texts[name]

    def read_json(self, name: str, schema_name: str) -> dict:
        data = _read_regular(self.label(name), self._opener(name), OWN_FILE_HINT)
        digest = hashlib.sha256(data)
        self._check(name, data, digest)
        return _checked_json(data, digest.digest(), self.label(name), schema_name)

    def _check(self, name: str, data: bytes, digest) -> None:
        record = self._records.get(name)
        if record is None or "sha256" not in record:
            if self._records and name not in self._records:
                raise InputFileError(
                    f"{self.label(name)}: manifest.json's build record does not list it "
                    f"(build {self.build_id[:12]}); the directory mixes files of different "
                    f"compiles: re-run spyrec compile")
            return
        if digest.hexdigest() != record["sha256"] or len(data) != record["bytes"]:
            raise InputFileError(
                f"{self.label(name)}: not the file build {self.build_id[:12]} wrote (SHA-256 "
                f"{digest.hexdigest()[:12]}..., manifest.json records "
                f"{record['sha256'][:12]}...): the directory mixes files of different "
                f"compiles, or the file was edited; re-run spyrec compile")

    def replaced(self) -> bool:
        """Whether the path no longer names the directory this handle opened (a compile
        replaced it, or it was moved or deleted)."""
        try:
            now, opened = os.stat(self.path), os.fstat(self.fd)
        except OSError:
            return True
        return (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino)

    def replace_file(self, name: str, data: bytes) -> None:
        """Put `data` in the directory as `name`, whole or not at all (a temporary beside it,
        then a rename); an entry `name` that is not a regular file is refused, not replaced."""
        try:
            info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise OutputDirError(f"{self.label(name)}: exists and is not a regular file; "
                                 f"spyrec replaces only its own files. Move it away, or give "
                                 f"-o PATH.")
        tmp = f".{name}.tmp-{os.getpid()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(tmp, flags, 0o644, dir_fd=self.fd)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            except BaseException:
                os.unlink(tmp, dir_fd=self.fd)
                raise
        except OSError as e:
            raise OutputDirError(f"{self.label(name)}: could not write it ({e.strerror}); "
                                 f"nothing was changed") from None

    def close(self) -> None:
        self._closer()
