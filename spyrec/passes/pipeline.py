"""Read a pipeline YAML (`configs/pipeline.yaml` by default) into configured pass objects.

The YAML file and `--set PASS.OPTION=VALUE` go through the same validation against each pass's
dataclass fields: an unknown pass, option or a value of the wrong type is a `ConfigError` that
lists the valid names. Then `check_order` proves, from the passes' contracts (registry.py), that
every pass finds what it reads. All of it runs before the model is loaded.
"""

from __future__ import annotations

import dataclasses
import difflib
from importlib import resources
from pathlib import Path

import yaml

from spyrec.errors import ConfigError
from spyrec.passes.registry import CODEGEN_REQUIRES, FACTS, Pass, load_all, providers

# Package data: spyrec/configs is a symlink to the repository's configs/ (the one copy users
# edit) that the wheel ships as files, so an installed spyrec finds it as a checkout does.
DEFAULT_PIPELINE = resources.files("spyrec") / "configs" / "pipeline.yaml"


def _near(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


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


def read_pipeline_file(path: Path | None) -> tuple[list[dict], str]:
    """The entries of `path` (the packaged default when None) and the name errors use."""
    path = Path(path) if path else DEFAULT_PIPELINE
    data = read_yaml_file(path, "pipeline", "--pipeline")
    if data is None or data == []:
        raise ConfigError(f"--pipeline {path}: the pipeline is empty; list the passes to run, "
                          f"as in {DEFAULT_PIPELINE}")
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ConfigError(f"--pipeline {path}: a pipeline is a YAML list of "
                          f"{{pass: NAME, OPTION: VALUE}} entries")
    return data, str(path)


def build_pipeline(entries: list[dict], overrides: list[str] = (),
                   where: str = "pipeline") -> list[Pass]:
    passes = load_all()
    configured: list[tuple[type[Pass], dict]] = []
    for i, entry in enumerate(entries):
        entry = dict(entry)
        name = entry.pop("pass", None)
        if not isinstance(name, str) or name not in passes:
            raise ConfigError(f"{where}: entry {i + 1}: unknown pass {name!r}"
                              f"{_near(str(name), passes)}; "
                              f"valid passes: {', '.join(sorted(passes))}")
        configured.append((passes[name], entry))
    set_by: dict[tuple[str, str], str] = {}   # (pass, option) -> the --set that gave it
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
        value = _set_value(text, raw)
        for opts in matches:
            opts[option] = value
        set_by[(pass_name, option)] = f"--set {text!r}"
    pipeline = [_instantiate(cls, opts, where, set_by) for cls, opts in configured]
    check_order(pipeline, where)
    return pipeline


def _set_value(text: str, raw: str):
    """A `--set` value read as YAML (`8`, `true`, `beam`); safe_load only, so `!!python/...`
    tags are refused like any other invalid YAML."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({yaml_problem(e)}); "
                          f"give a plain number, true/false or a word (no !!tags)") from None


def check_order(pipeline: list[Pass], where: str = "pipeline") -> None:
    """Every pass finds the facts it reads, and code generation finds layouts and addresses:
    walk the pipeline with the set of facts that hold so far."""
    if not pipeline:
        raise ConfigError(f"{where}: the pipeline is empty; list the passes to run, as in "
                          f"{DEFAULT_PIPELINE}")
    holds: dict[str, str] = {}   # fact -> the pass that established it
    for i, p in enumerate(pipeline):
        for fact in p.contract.requires:
            if fact not in holds:
                raise ConfigError(f"{where}: pass {p.name} (entry {i + 1}) needs "
                                  f"{FACTS[fact]}{_lost(pipeline[:i], fact)}; put "
                                  f"{_either(providers(fact))} before it")
        for fact in p.contract.invalidates:
            holds.pop(fact, None)
        holds.update({fact: p.name for fact in p.contract.provides})
    for fact in CODEGEN_REQUIRES:
        if fact not in holds:
            raise ConfigError(f"{where}: code generation needs {FACTS[fact]} after the last "
                              f"pass{_lost(pipeline, fact)}; end the pipeline with "
                              f"{_either(providers(fact))}")


def _lost(before: list[Pass], fact: str) -> str:
    """Why a fact does not hold: never established, or destroyed by a later pass."""
    made = [i for i, p in enumerate(before) if fact in p.contract.provides]
    if not made:
        return ""
    breaker = next(p for p in before[made[-1] + 1:] if fact in p.contract.invalidates)
    return (f", but {breaker.name} runs after {before[made[-1]].name} and adds ops and "
            f"buffers without them")


def _either(names: list[str]) -> str:
    return " or ".join(names) if names else "a pass that provides it"


def _instantiate(cls: type[Pass], options: dict, where: str,
                 set_by: dict[tuple[str, str], str]) -> Pass:
    """The configured pass; a bad value is reported where it came from (the file or --set)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in options.items():
        origin = set_by.get((cls.name, key), where)
        if key not in fields:
            raise ConfigError(f"{origin}: pass {cls.name} has no option {key!r}"
                              f"{_near(str(key), fields)}; "
                              f"options: {', '.join(fields) or 'none'}")
        expected = fields[key].type if isinstance(fields[key].type, type) else \
            {"int": int, "str": str, "bool": bool, "float": float}.get(str(fields[key].type))
        if expected is not None and not _type_ok(value, expected):
            raise ConfigError(f"{origin}: {cls.name}.{key} must be {expected.__name__}, got "
                              f"{value!r}")
    configured = cls(**options)
    try:
        configured.check_options()
    except ConfigError as e:
        origins = sorted({o for (p, _), o in set_by.items() if p == cls.name}) or [where]
        raise ConfigError(f"{', '.join(origins)}: {e}") from None
    return configured


def _type_ok(value, expected: type) -> bool:
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def describe(pipeline: list[Pass]) -> list[dict]:
    """The resolved pipeline, as written to the manifest."""
    return [{"pass": p.name, "options": dataclasses.asdict(p)} for p in pipeline]
