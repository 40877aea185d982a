"""Read a pipeline YAML (`configs/pipeline.yaml` by default) into configured pass objects.

The YAML file and `--set PASS.OPTION=VALUE` go through the same validation against each pass's
dataclass fields: an unknown pass, option or a value of the wrong type is a `ConfigError` that
lists the valid names.
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path

import yaml

from spyrec.errors import ConfigError
from spyrec.passes.registry import Pass, load_all

DEFAULT_PIPELINE = Path(__file__).resolve().parents[2] / "configs" / "pipeline.yaml"


def _near(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def read_pipeline_file(path: Path | None) -> tuple[list[dict], str]:
    path = Path(path) if path else DEFAULT_PIPELINE
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such pipeline file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ConfigError(f"{path}: a pipeline is a YAML list of {{pass: NAME, OPTION: VALUE}} "
                          f"entries")
    return data, str(path)


def build_pipeline(entries: list[dict], overrides: list[str] = (),
                   where: str = "pipeline") -> list[Pass]:
    passes = load_all()
    configured: list[tuple[type[Pass], dict]] = []
    for i, entry in enumerate(entries):
        entry = dict(entry)
        name = entry.pop("pass", None)
        if name not in passes:
            raise ConfigError(f"{where}: entry {i + 1}: unknown pass {name!r}{_near(str(name), passes)}; "
                              f"valid passes: {', '.join(sorted(passes))}")
        configured.append((passes[name], entry))
    for text in overrides:
        key, sep, raw = text.partition("=")
        pass_name, dot, option = key.partition(".")
        if not sep or not dot:
            raise ConfigError(f"--set {text!r}: expected PASS.OPTION=VALUE")
        matches = [opts for cls, opts in configured if cls.name == pass_name]
        if not matches:
            raise ConfigError(f"--set {text!r}: pass {pass_name!r} is not in the pipeline"
                              f"{_near(pass_name, [c.name for c, _ in configured])}; passes: "
                              f"{', '.join(c.name for c, _ in configured)}")
        for opts in matches:
            opts[option] = yaml.safe_load(raw)
    return [_instantiate(cls, opts, where) for cls, opts in configured]


def _instantiate(cls: type[Pass], options: dict, where: str) -> Pass:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in options.items():
        if key not in fields:
            raise ConfigError(f"{where}: pass {cls.name} has no option {key!r}{_near(key, fields)}; "
                              f"options: {', '.join(fields) or 'none'}")
        expected = fields[key].type if isinstance(fields[key].type, type) else \
            {"int": int, "str": str, "bool": bool, "float": float}.get(str(fields[key].type))
        if expected is not None and not _type_ok(value, expected):
            raise ConfigError(f"{where}: {cls.name}.{key} must be {expected.__name__}, got "
                              f"{value!r}")
    return cls(**options)


def _type_ok(value, expected: type) -> bool:
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def describe(pipeline: list[Pass]) -> list[dict]:
    """The resolved pipeline, as written to the manifest."""
    return [{"pass": p.name, "options": dataclasses.asdict(p)} for p in pipeline]
