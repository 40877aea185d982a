"""Reading the YAML files users hand spyrec (pipeline, tiling, layouts) and `--set` values:
one ConfigError per problem, naming the option and the file, never a PyYAML traceback;
`safe_load` only, so no Python tag in a config can run code. A leaf: the compiler, the
pipeline and the tiling config reader share it without importing each other.

A config is small, so what is not is refused before it costs anything: the file must be a
regular file (`userfiles.open_regular`: a FIFO would block the read) of at most
MAX_YAML_BYTES; its nesting may not exhaust the parser's recursion; a key may not appear twice
in one mapping (PyYAML would keep the last silently); and its value, with every alias expanded,
may hold at most MAX_YAML_NODES nodes — YAML aliases share one object, so eight lines of
anchors describe 9**9 entries, which any later walk (a message printing the value) would
expand.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from spyrec.errors import ConfigError
from spyrec.userfiles import read_regular

MAX_YAML_BYTES = 16 << 20
MAX_YAML_NODES = 100_000
PROBLEM = "<problem>"     # where load_yaml's message says what is wrong


def read_yaml_file(path: Path, kind: str, option: str):
    """The YAML document in `path` (safe_load: no Python tags), or one ConfigError that names
    the option and says what is wrong with the file."""
    data = read_regular(path, f"a {kind} YAML file", MAX_YAML_BYTES, option,
                        missing=f"no such {kind} file", error=ConfigError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{option} {path}: not UTF-8 text (byte {e.start}); give a {kind} "
                          f"YAML file") from None
    return load_yaml(text, f"{option} {path}: not valid YAML: {PROBLEM}")


def load_yaml(text: str, message: str):
    """`text` parsed (safe_load, no duplicate keys) and bounded; a problem is one ConfigError,
    `message` with `PROBLEM` replaced by what is wrong."""
    def refuse(problem: str) -> ConfigError:
        return ConfigError(message.replace(PROBLEM, problem))

    try:
        value = yaml.load(text, Loader=_StrictLoader)   # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise refuse(yaml_problem(e)) from None
    except RecursionError:
        raise refuse("nested too deeply for a configuration") from None
    if _nodes_beyond(value, MAX_YAML_NODES):
        raise refuse(f"more than {MAX_YAML_NODES} values once its aliases (*name) are "
                     f"expanded; a configuration is far smaller")
    return value


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        """The mapping's own keys checked (a `<<: *base` merge may be overridden: that is
        what it is for), then SafeLoader's construction."""
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:        # an unhashable key: the base class says so
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _nodes_beyond(value, limit: int) -> bool:
    """Whether `value` holds more than `limit` nodes, counting a shared (aliased) object at
    each place it appears; stops counting at the limit (a recursive alias is infinite)."""
    stack, count = [value], 0
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)
    return False


def yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error in one line: the problem and where (its own text spans several lines)."""
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if not problem:
        return " ".join(str(e).split())
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{problem}{where}"
