"""A fast yes/no check of a JSON document against one of spyrec's schemas.

jsonschema walks every keyword of every value through generic machinery: ~10-25 ms per
sdsc_<n>.json, which made schema validation the largest part of `spyrec run` (1.8 s of a 2-layer
decoder's 70 files). This module compiles a schema once into nested closures that answer only
"valid or not" (~50x faster). jsonschema stays the authority: `files.validate` asks it for the
message whenever this check says no, and accepts the file if jsonschema finds nothing.

So the one property that matters is that `compile_schema(s)(doc)` is never True for a document
jsonschema rejects. Every keyword is implemented as strictly as or more strictly than draft
2020-12 (an integer must be an `int`, where jsonschema also takes 2.0); a keyword this module
does not know raises `Unsupported` at compile time and the caller keeps using jsonschema alone.
tests/sim/test_schemacheck.py compares both on thousands of mutated real files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

Check = Callable[[object], bool]

# Keywords that never constrain a value.
_ANNOTATIONS = {"$schema", "$id", "$defs", "$comment", "title", "description", "examples",
                "default"}
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "null": (type(None),), "integer": (int,), "number": (int, float)}
_NUMBER = (int, float)


class Unsupported(Exception):
    """The schema uses something this module does not implement: validate with jsonschema."""


class _Compiler:
    """Compiles the schemas of one directory; `$ref`s between files and recursive `$ref`s are
    resolved lazily, so a recursive definition (opspecs `body`) compiles once."""

    def __init__(self, schema_dir: Path):
        self.schema_dir = schema_dir
        self.documents: dict[str, dict] = {}
        self.refs: dict[tuple[str, str], Check] = {}

    def document(self, filename: str) -> dict:
        if filename not in self.documents:
            path = self.schema_dir / filename
            if not filename.endswith(".schema.json") or not path.is_file():
                raise Unsupported(f"$ref to {filename!r}")
            doc = json.loads(path.read_text(encoding="utf-8"))
            if doc.get("$id", filename).rsplit("/", 1)[-1] != filename:
                raise Unsupported(f"{filename}: $id {doc['$id']!r} is not its file name")
            self.documents[filename] = doc
        return self.documents[filename]

    def ref(self, filename: str, ref: str) -> Check:
        """A `$ref` within this file (`#/$defs/x`) or to a sibling schema, by the last segment
        of its URI (every $id is https://spyrec/schemas/<file>, checked in `document`)."""
        target, _, pointer = ref.partition("#")
        filename = target.rsplit("/", 1)[-1] if target else filename
        key = (filename, pointer)
        if key not in self.refs:
            cell: list[Check] = []
            self.refs[key] = lambda x: cell[0](x)
            node = self.document(filename)
            for part in [p for p in pointer.split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(node, dict) or part not in node:
                    raise Unsupported(f"$ref {ref!r}")
                node = node[part]
            cell.append(self.compile(node, filename))
        return self.refs[key]

    def compile(self, schema, filename: str) -> Check:
        if schema is True:
            return lambda x: True
        if schema is False:
            return lambda x: False
        if not isinstance(schema, dict):
            raise Unsupported(f"schema {schema!r}")
        checks: list[Check] = []
        for key, value in schema.items():
            if key in _ANNOTATIONS or key in ("properties", "additionalProperties", "items",
                                              "prefixItems"):
                continue
            build = _KEYWORDS.get(key)
            if build is None:
                raise Unsupported(f"keyword {key!r}")
            checks.append(build(self, value, filename))
        if any(k in schema for k in ("properties", "additionalProperties")):
            checks.append(self._properties(schema, filename))
        if any(k in schema for k in ("items", "prefixItems")):
            checks.append(self._items(schema, filename))
        return _all(checks)

    def _properties(self, schema: dict, filename: str) -> Check:
        named = {k: self.compile(v, filename) for k, v in schema.get("properties", {}).items()}
        extra = schema.get("additionalProperties", True)
        other = None if extra is True else self.compile(extra, filename)

        def check(x) -> bool:
            if type(x) is not dict:
                return True
            for k, v in x.items():
                sub = named.get(k, other)
                if sub is not None and not sub(v):
                    return False
            return True
        return check

    def _items(self, schema: dict, filename: str) -> Check:
        prefix = [self.compile(s, filename) for s in schema.get("prefixItems", [])]
        rest = self.compile(schema["items"], filename) if "items" in schema else None

        def check(x) -> bool:
            if type(x) is not list:
                return True
            for sub, v in zip(prefix, x):
                if not sub(v):
                    return False
            if rest is not None:
                for v in x[len(prefix):]:
                    if not rest(v):
                        return False
            return True
        return check


def _all(checks: list[Check]) -> Check:
    # spelled out for the common sizes: a generator per value is most of the check's time
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        a, b = checks
        return lambda x: a(x) and b(x)
    if len(checks) == 3:
        a, b, c = checks
        return lambda x: a(x) and b(x) and c(x)

    def every(x) -> bool:
        for check in checks:
            if not check(x):
                return False
        return True
    return every


def _type(_, value, __) -> Check:
    names = [value] if isinstance(value, str) else list(value)
    if any(n not in _TYPES for n in names):
        raise Unsupported(f"type {value!r}")
    allowed = frozenset(t for n in names for t in _TYPES[n])
    return lambda x: type(x) in allowed        # exact types: a bool is not an integer


def _scalar(value) -> object:
    if type(value) not in (str, int, float, bool, type(None)):
        raise Unsupported(f"const/enum value {value!r}")
    return value


def _const(_, value, __) -> Check:
    value = _scalar(value)
    return lambda x: type(x) is type(value) and x == value


def _enum(_, values, __) -> Check:
    allowed = {(type(v), v) for v in map(_scalar, values)}
    return lambda x: (type(x), x) in allowed if type(x) in (str, int, float, bool,
                                                             type(None)) else False


def _bound(test: Callable[[float, float], bool]):
    def build(_, value, __) -> Check:
        if type(value) not in _NUMBER:
            raise Unsupported(f"bound {value!r}")
        return lambda x: type(x) not in _NUMBER or test(x, value)
    return build


def _size(kind: type, test: Callable[[int, int], bool]):
    def build(_, value, __) -> Check:
        return lambda x: type(x) is not kind or test(len(x), value)
    return build


def _pattern(_, value, __) -> Check:
    search = re.compile(value).search             # jsonschema uses re.search too
    return lambda x: type(x) is not str or search(x) is not None


def _required(_, names, __) -> Check:
    names = frozenset(names)
    return lambda x: type(x) is not dict or names <= x.keys()


def _property_names(compiler, schema, filename) -> Check:
    sub = compiler.compile(schema, filename)

    def check(x) -> bool:
        if type(x) is dict:
            for k in x:
                if not sub(k):
                    return False
        return True
    return check


def _one_of(compiler, schemas, filename) -> Check:
    subs = [compiler.compile(s, filename) for s in schemas]
    return lambda x: sum(1 for s in subs if s(x)) == 1


def _ref(compiler, ref, filename) -> Check:
    return compiler.ref(filename, ref)


_KEYWORDS = {
    "type": _type, "const": _const, "enum": _enum,
    "minimum": _bound(lambda x, m: x >= m), "maximum": _bound(lambda x, m: x <= m),
    "minLength": _size(str, lambda n, m: n >= m), "maxLength": _size(str, lambda n, m: n <= m),
    "minItems": _size(list, lambda n, m: n >= m), "maxItems": _size(list, lambda n, m: n <= m),
    "minProperties": _size(dict, lambda n, m: n >= m),
    "maxProperties": _size(dict, lambda n, m: n <= m),
    "pattern": _pattern, "required": _required, "propertyNames": _property_names,
    "oneOf": _one_of, "$ref": _ref,
}


def compile_schema(schema_dir: Path, schema_name: str) -> Check:
    """The fast check of `schema_dir/<schema_name>.schema.json`; Unsupported if it uses a
    keyword this module does not implement."""
    filename = f"{schema_name}.schema.json"
    compiler = _Compiler(schema_dir)
    return compiler.compile(compiler.document(filename), filename)
