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
from functools import lru_cache
from pathlib import Path

from spyrec.errors import InputFileError
from spyrec.sim.schemacheck import Unsupported, compile_schema

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
# What a spyrec output directory's reader tells the user to do about a file that fails.
RECOMPILE = "the file is not as spyrec compile wrote it: re-run spyrec compile"


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
    cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputFileError(f"cannot read {path}: {e.strerror}{hint}") from None


def parse_json(text: str, path: Path) -> object:
    """`text` parsed; InputFileError at the line and column where it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None


# Digests of texts that already passed their schema: even the compiled check costs ~0.5 ms per
# sdsc file, and tests and benchmarks load the same directory many times in one process.
_VALID: set[tuple[str, bytes]] = set()


def read_json(path: Path, schema_name: str) -> dict:
    """A JSON file of a spyrec output directory, parsed and checked against its schema."""
    text = read_text(path)
    data = parse_json(text, path)
    key = (schema_name, hashlib.blake2b(text.encode("utf-8"), digest_size=20).digest())
    if key not in _VALID:
        validate(data, schema_name, str(path))
        _VALID.add(key)
    return data
