"""The shape of the code as tests, read from the source with `ast` (nothing is imported): size
budgets a newcomer can read within (STYLE §14), and docstrings that name only what exists.

- **Size**: no module under spyrec/ has more than `MAX_MODULE_LINES` lines, and no function
  or method more than `MAX_FUNCTION_LINES`, counted from its `def` line to its last line
  (decorators left out, its docstring and nested functions counted in). A module past the
  budget splits by concept; a function past it becomes named steps.
- **Names in docstrings exist**: every backticked `module.py` or `path/module.py` in a
  docstring (any string statement: module, class, function and attribute docstrings) or a
  comment under spyrec/ names a file of the tree: a bare name a module of the referring file's
  package or a package above it, a path one relative to the repository root, to spyrec/ or to
  one of those packages. `path/module.py NAME` in one pair of backticks also needs NAME to
  be defined or imported by that module, and a backticked `spyrec.pkg.module[.NAME]` the
  same. A `file.py:LINE` is a source location in an example of what users see, not a module
  of ours, and is skipped.

Each rule lists the violations the tree still has in its `KNOWN_...` set, one line each (the
same ratchet as `tests/test_architecture.py`): a new violation fails, and so does a listed one
that is gone (delete its line), so the lists only shrink.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

import spyrec

PACKAGE = Path(spyrec.__file__).resolve().parent
ROOT = PACKAGE.parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

# Today's exceptions. Fix one, then delete its line.
KNOWN_LONG_MODULES: set[str] = set()        # "path/module.py" relative to spyrec/
KNOWN_LONG_FUNCTIONS: set[str] = set()      # "path/module.py::name" (the def's own name)
KNOWN_STALE_REFERENCES: set[str] = set()   # "path/module.py: the backticked text"


# --- sizes -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Function:
    key: str        # "path/module.py::name", the ratchet's key
    where: str      # "path/module.py:LINE Class.name", for the message
    lines: int


def _modules(package: Path) -> list[Path]:
    return sorted(package.rglob("*.py"))


def _rel(path: Path, package: Path) -> str:
    return path.relative_to(package).as_posix()


def module_lines(package: Path) -> dict[str, int]:
    """"path/module.py" -> its line count, for every module of `package`."""
    return {_rel(p, package): len(p.read_text(encoding="utf-8").splitlines())
            for p in _modules(package)}


def functions(package: Path) -> list[Function]:
    """Every function and method of `package`, nested ones included, with its length."""
    found = []

    def walk(node: ast.AST, rel: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    found.append(Function(f"{rel}::{child.name}",
                                          f"{rel}:{child.lineno} {qualname}",
                                          child.end_lineno - child.lineno + 1))
                walk(child, rel, qualname + ".")
            else:
                walk(child, rel, prefix)

    for path in _modules(package):
        walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), _rel(path, package), "")
    return found


def long_modules(package: Path) -> dict[str, str]:
    """Ratchet key -> what to say, for every module over the budget."""
    return {rel: f"{rel}: {n} lines" for rel, n in module_lines(package).items()
            if n > MAX_MODULE_LINES}


def long_functions(package: Path) -> dict[str, str]:
    """Ratchet key -> what to say, for every function over the budget."""
    out: dict[str, str] = {}
    for f in functions(package):
        if f.lines > MAX_FUNCTION_LINES:
            out[f.key] = "; ".join(filter(None, [out.get(f.key), f"{f.where}: {f.lines} lines"]))
    return out


# --- names in docstrings and comments ---------------------------------------------------------

SPAN = re.compile(r"`([^`\n]+)`")
MODULE_FILE = re.compile(r"(?<![\w/.])((?:[\w.]+/)*\w+\.py)\b")
NAME_AFTER = re.compile(r"\s+([A-Za-z_]\w*)\s*(?:[.(]|$)")
SOURCE_LOCATION = re.compile(r":\w")           # `file.py:LINE in forward`


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string statement (docstrings) and every comment of `source`."""
    out = [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source))
           if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
           and isinstance(node.value.value, str)]
    out += [(tok.start[0], tok.string)
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT]
    return sorted(out)


@functools.cache
def defined_names(path: Path) -> frozenset[str]:
    """What `path` defines or imports, at any depth (a method, a local constant), and what
    its `__all__` lists (a lazy `__getattr__` export)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names.update(e.value for e in getattr(node.value, "elts", ())
                         if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return frozenset(names)


def _resolve(ref: str, referrer: Path, package: Path, root: Path) -> Path | None:
    """The file a backticked `ref` (`x.py` or `a/b/x.py`) names, seen from `referrer`."""
    packages = [p for p in referrer.parents if p == package or package in p.parents]
    places = packages if "/" not in ref else [root, package, *packages]
    return next((p / ref for p in places if (p / ref).is_file()), None)


def _dotted_problem(span: str, root: Path) -> str | None:
    """Why `spyrec.pkg.module[.NAME]` names nothing, or None."""
    parts = span.split(".")
    for k in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:k])
        module = next((f for f in (base.with_suffix(".py"), base / "__init__.py")
                       if f.is_file()), None)
        if module is not None:
            rest = parts[k:]
            if rest and rest[0] not in defined_names(module):
                return f"{_rel(module, root)} defines no {rest[0]}"
            return None
    return "no such module"


def stale_references(package: Path, root: Path) -> dict[str, str]:
    """Ratchet key ("path/module.py: the backticked text") -> what is wrong, where."""
    dotted = re.compile(rf"{package.name}(?:\.\w+)+")
    out: dict[str, str] = {}
    for path in _modules(package):
        rel = _rel(path, package)
        for line, text in prose(path.read_text(encoding="utf-8")):
            for span in SPAN.findall(text):
                problem = None
                if dotted.fullmatch(span):
                    problem = _dotted_problem(span, root)
                for m in MODULE_FILE.finditer(span):
                    rest = span[m.end():]
                    if problem or SOURCE_LOCATION.match(rest):
                        continue
                    target = _resolve(m.group(1), path, package, root)
                    name = NAME_AFTER.match(rest)
                    if target is None:
                        problem = f"no file {m.group(1)}"
                    elif name and name.group(1) not in defined_names(target):
                        problem = f"{m.group(1)} defines no {name.group(1)}"
                if problem:
                    out[f"{rel}: {span}"] = f"{rel}:{line} `{span}`: {problem}"
    return out


# --- the rules --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    text: str
    found: object       # (package, root) -> {ratchet key: message}
    known: set[str]


RULES = {
    "long_modules": Rule(f"no module over {MAX_MODULE_LINES} lines (split it by concept)",
                         lambda package, root: long_modules(package), KNOWN_LONG_MODULES),
    "long_functions": Rule(f"no function over {MAX_FUNCTION_LINES} lines (extract named steps)",
                           lambda package, root: long_functions(package), KNOWN_LONG_FUNCTIONS),
    "stale_references": Rule("every module (and name) a docstring or comment names in "
                             "backticks exists", stale_references, KNOWN_STALE_REFERENCES),
}


@pytest.mark.parametrize("name", sorted(RULES))
def test_code_shape_rule(name):
    rule = RULES[name]
    found = rule.found(PACKAGE, ROOT)
    new = [f"  {found[key]}" for key in sorted(set(found) - rule.known)]
    gone = [f"  {key}" for key in sorted(rule.known - set(found))]
    assert not new, f"rule broken: {rule.text}\n" + "\n".join(new)
    assert not gone, f"no longer broken ({rule.text}): delete it from the list " \
                     f"KNOWN_{name.upper()}\n" + "\n".join(gone)


def test_the_scan_sees_the_whole_package():
    """The walk reaches subpackages and methods (a rule that reads nothing holds trivially)."""
    keys = {f.key for f in functions(PACKAGE)}
    assert len(module_lines(PACKAGE)) > 150
    assert {"passes/flash_attention/rewrite.py::run", "ir/verify.py::verify",
            "sim/access.py::read", "frontend/fold.py::_fold"} <= keys


def _toy(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "toy"
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def _function(name: str, lines: int, indent: str = "") -> str:
    """A def of exactly `lines` lines."""
    return f"{indent}def {name}():\n" + f"{indent}    x = 1\n" * (lines - 2) + \
        f"{indent}    return x\n"


def test_the_size_rules_see_what_they_forbid(tmp_path):
    package = _toy(tmp_path, {
        "__init__.py": "",
        "long.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
        "fits.py": "x = 1\n" * MAX_MODULE_LINES,
        "sub/code.py": _function("at_budget", MAX_FUNCTION_LINES) + "\n\nclass C:\n"
        + _function("over_budget", MAX_FUNCTION_LINES + 1, "    "),
    })
    assert set(long_modules(package)) == {"long.py"}
    assert long_functions(package) == {
        "sub/code.py::over_budget": f"sub/code.py:{MAX_FUNCTION_LINES + 4} C.over_budget: "
                                    f"{MAX_FUNCTION_LINES + 1} lines"}


def test_the_reference_rule_sees_what_it_forbids(tmp_path):
    package = _toy(tmp_path, {
        "__init__.py": "__all__ = ['lazy']\n",
        "ir/__init__.py": "",
        "ir/verify.py": "def check():\n    pass\n",
        "sim/__init__.py": "",
        "sim/access.py": '"""Reads `verify.py`, `ir/verify.py check` and `ir/verify.py gone`."""\n'
                         "# `ir/verify.py`, `nowhere.py`, `toy.ir.verify.check`, `toy.lazy`,\n"
                         "# `toy.ir.verify.gone`, `toy.nothing`, `user.py:12 in forward`\n"
                         "X = 1\n\"\"\"An attribute docstring naming `ir/missing.py`.\"\"\"\n",
    })
    assert stale_references(package, tmp_path) == {
        "sim/access.py: verify.py": "sim/access.py:1 `verify.py`: no file verify.py",
        "sim/access.py: ir/verify.py gone":
            "sim/access.py:1 `ir/verify.py gone`: ir/verify.py defines no gone",
        "sim/access.py: nowhere.py": "sim/access.py:2 `nowhere.py`: no file nowhere.py",
        "sim/access.py: toy.ir.verify.gone":
            "sim/access.py:3 `toy.ir.verify.gone`: toy/ir/verify.py defines no gone",
        "sim/access.py: toy.nothing":
            "sim/access.py:3 `toy.nothing`: toy/__init__.py defines no nothing",
        "sim/access.py: ir/missing.py": "sim/access.py:5 `ir/missing.py`: no file ir/missing.py",
    }
