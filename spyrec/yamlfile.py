"""Reading the YAML files users hand spyrec (pipeline, tiling, layouts): one ConfigError per
problem, naming the option and the file, never a PyYAML traceback; `safe_load` only, so no
Python tag in a config can run code. A leaf: the compiler, the pipeline and the tiling config
reader share it without importing each other."""

from __future__ import annotations

from pathlib import Path

import yaml

from spyrec.errors import ConfigError


def read_yaml_file(path: Path, kind: str, option: str):
    """The YAML document in `path` (safe_load: no Python tags), or one ConfigError that names
    the option and says what is wrong with the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{option} {path}: no such {kind} file") from None
    except IsADirectoryError:
        raise ConfigError(f"{option} {path}: is a directory; give a {kind} YAML file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{option} {path}: not UTF-8 text (byte {e.start}); give a {kind} "
                          f"YAML file") from None
    except OSError as e:
        raise ConfigError(f"{option} {path}: cannot read the {kind} file ({e.strerror})") \
            from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{option} {path}: not valid YAML: {yaml_problem(e)}") from None


def yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error in one line: the problem and where (its own text spans several lines)."""
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if not problem:
        return " ".join(str(e).split())
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{problem}{where}"
