"""Read a pipeline YAML (`configs/pipeline.yaml` by default) into configured pass objects.

The YAML file and `--set PASS.OPTION=VALUE` go through the same validation against each pass's
dataclass fields: an unknown pass, option or a value of the wrong type is a `ConfigError` that
lists the valid names. `--set cost.NAME=VALUE` sets a parameter of the cost model
(`spyrec/costmodel.py`) for every planning decision and the report's estimate alike
(`cost_params`), checked the same way. Then `check_order` proves, from the passes' contracts (registry.py), that
every pass finds what it reads. All of it runs before the model is loaded.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from spyrec.costmodel import ADDED_TIME_PARAMS, DEFAULT_PARAMS, FRACTION_PARAMS, CostParams
from spyrec.device import CORES
from spyrec.errors import ConfigError
from spyrec.passes.registry import CODEGEN_REQUIRES, FACTS, PASSES, Pass, get_pass, providers
from spyrec.userfiles import output_target, write_replacing
from spyrec.yamlfile import PROBLEM, load_yaml, read_yaml_file

# Package data: spyrec/configs is a symlink to the repository's configs/ (the one copy users
# edit) that the wheel ships as files, so an installed spyrec finds it as a checkout does.
DEFAULT_PIPELINE = resources.files("spyrec") / "configs" / "pipeline.yaml"


def _near(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


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
    configured: list[tuple[type[Pass], dict]] = []
    for i, entry in enumerate(entries):
        entry = dict(entry)
        name = entry.pop("pass", None)
        if not isinstance(name, str) or name not in PASSES:
            raise ConfigError(f"{where}: entry {i + 1}: unknown pass {name!r}"
                              f"{_near(str(name), PASSES)}; "
                              f"valid passes: {', '.join(sorted(PASSES))}")
        configured.append((get_pass(name), entry))
    set_by: dict[tuple[str, str], str] = {}   # (pass, option) -> the --set that gave it
    for text in overrides:
        if text.startswith(COST_PREFIX):     # the cost model's, not a pass's (`cost_params`)
            continue
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


COST_PREFIX = "cost."


def cost_params(overrides: list[str] = ()) -> CostParams:
    """The cost model's parameters with every `--set cost.NAME=VALUE` of `overrides` applied:
    what every planning decision and the report's estimate use (DESIGN §1). Checked like a
    pass option: an unknown name lists the parameters, a value must be a number of the
    parameter's type, positive (or zero where the default is zero), `cores` at most the
    device's."""
    fields = {f.name: f for f in dataclasses.fields(CostParams)}
    values: dict[str, int | float] = {}
    for text in overrides:
        if not text.startswith(COST_PREFIX):
            continue
        key, sep, raw = text.partition("=")
        name = key[len(COST_PREFIX):]
        if not sep or name not in fields:
            raise ConfigError(f"--set {text!r}: the cost model has no parameter {name!r}"
                              f"{_near(name, fields)}; parameters: {', '.join(fields)}")
        values[name] = _cost_value(text, name, _set_value(text, raw),
                                   getattr(DEFAULT_PARAMS, name))
    return dataclasses.replace(DEFAULT_PARAMS, **values)


def _cost_value(text: str, name: str, value, default: int | float) -> int | float:
    expected = int if isinstance(default, int) else float
    if isinstance(value, str):      # YAML 1.1 reads 9e9 (no dot, no sign) as a word
        try:
            value = float(value) if expected is float else value
        except ValueError:
            pass
    if not _type_ok(value, expected) or not math.isfinite(value):
        raise ConfigError(f"--set {text!r}: cost.{name} must be a finite "
                          f"{expected.__name__}, got {value!r}")
    if name in FRACTION_PARAMS:
        if not 0 <= value <= 1:
            raise ConfigError(f"--set {text!r}: cost.{name} must be between 0 and 1, got "
                              f"{value!r}")
        return expected(value)
    free = name in ADDED_TIME_PARAMS          # zero: that time costs nothing
    if value < 0 or (value == 0 and not free) or (name == "cores" and value > CORES):
        bound = f"between 1 and {CORES}" if name == "cores" else \
            "at least 0" if free else "above 0"
        raise ConfigError(f"--set {text!r}: cost.{name} must be {bound}, got {value!r}")
    return expected(value)


def cost_overrides(params: CostParams) -> dict[str, int | float]:
    """The parameters that differ from the defaults (what the manifest records)."""
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(CostParams)
            if getattr(params, f.name) != getattr(DEFAULT_PARAMS, f.name)}


def _set_value(text: str, raw: str):
    """A `--set` value read as YAML (`8`, `true`, `beam`) as config files are (`yamlfile`):
    safe_load only, so `!!python/...` tags are refused like any other invalid YAML, and a
    value nested too deeply or too large once its aliases are expanded is refused too."""
    return load_yaml(raw, f"--set {text!r}: the value is not valid YAML ({PROBLEM}); give a "
                          f"plain number, true/false or a word (no !!tags)")


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


# Options that moved to a pass of their own (`--set` and pipeline files that still name the
# old place are told the new one rather than "no such option").
MOVED_OPTIONS = {
    ("coarse_tiling", "attention"): "flash_attention.mode",
    ("coarse_tiling", "query_tile"): "flash_attention.query_tile",
    ("coarse_tiling", "key_tile"): "flash_attention.key_tile",
    ("coarse_tiling", "head_tile"): "flash_attention.head_tile",
    ("coarse_tiling", "symbolic"): "symbolic_lengths.mode",
}


def _instantiate(cls: type[Pass], options: dict, where: str,
                 set_by: dict[tuple[str, str], str]) -> Pass:
    """The configured pass; a bad value is reported where it came from (the file or --set)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in options.items():
        origin = set_by.get((cls.name, key), where)
        if key not in fields:
            moved = MOVED_OPTIONS.get((cls.name, key))
            if moved:
                raise ConfigError(f"{origin}: {cls.name}.{key} is now {moved} (the pass of "
                                  f"its own since issue 58); set that instead")
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


# --- running a pipeline, with instruments around every pass (MLIR's PassInstrumentation) -----


class Instrument:
    """Called before and after every pass; `facts` are the registry facts that hold after it.
    Step 0 is the lowering (`after` only), steps 1.. the pipeline's passes in order."""

    def before(self, step: int, name: str, graph) -> None:
        pass

    def after(self, step: int, name: str, graph, facts: frozenset[str]) -> None:
        pass


def run_passes(graph, pipeline: list[Pass], ctx, instruments: list[Instrument] = (),
               timings: list[dict] | None = None) -> list[dict]:
    """Run the pipeline over `graph`; appends `{name, wall_ms}` per pass to `timings`."""
    timings = [] if timings is None else timings
    holds: set[str] = set()
    for step, p in enumerate(pipeline, start=1):
        for ins in instruments:
            ins.before(step, p.name, graph)
        t0 = time.perf_counter()
        before = dict(ctx.report)
        p.run(graph, ctx)
        _check_report_keys(p, before, ctx.report)
        timings.append({"name": p.name, "wall_ms": round((time.perf_counter() - t0) * 1e3, 3)})
        holds.difference_update(p.contract.invalidates)
        holds.update(p.contract.provides)
        for ins in instruments:
            ins.after(step, p.name, graph, frozenset(holds))
    return timings


def _check_report_keys(p: Pass, before: dict, after: dict) -> None:
    """A pass writes only the report keys it owns (`Pass.report_keys`): another pass's part,
    or a key no pass declares, is a spyrec bug (the report's assembly would drop it)."""
    changed = [k for k in after if k not in before or after[k] is not before[k]]
    stray = [k for k in changed if k not in p.report_keys]
    if stray:
        from spyrec.errors import InternalError

        raise InternalError(f"pass {p.name} wrote report key(s) {', '.join(stray)} it does "
                            f"not declare (its report_keys: {', '.join(p.report_keys) or 'none'})"
                            f"; this is a spyrec bug, please report it")


IR_DUMP_FILE = re.compile(r"\d\d+_[A-Za-z0-9_]+\.ir\Z")


def check_dump_dir(path: Path, out_dir: Path) -> None:
    """`--print-ir-after-all DIR`: a directory spyrec may fill with `NN_<pass>.ir` files — new,
    empty, or holding only such files, each a regular file (an earlier dump, replaced; never a
    FIFO or a link) — and not inside `-o OUT`."""
    path = Path(path)
    option = f"--print-ir-after-all {path}"
    resolved, out = path.resolve(), Path(out_dir).resolve()
    if resolved == out or out in resolved.parents:
        raise ConfigError(f"{option}: is inside the output directory {out_dir}, which compile "
                          f"replaces; choose another directory")
    if not path.exists():
        return
    if not path.is_dir():
        raise ConfigError(f"{option}: exists and is not a directory; give a directory for the "
                          f"IR dumps")
    foreign = sorted(p.name for p in path.iterdir() if not IR_DUMP_FILE.match(p.name))
    if foreign:
        raise ConfigError(f"{option}: holds {foreign[0]!r}, not an IR dump; give a new or "
                          f"empty directory (spyrec replaces only its own NN_<pass>.ir files)")
    for old in sorted(path.iterdir()):      # a FIFO, a link, a directory: refused
        output_target(old, "--print-ir-after-all", links=False, error=ConfigError)


@dataclass
class IRPrinter(Instrument):
    """`--dump-after PASS|all` and `--print-ir-before PASS` to `stream`, and
    `--print-ir-after-all DIR` as one file per step, `NN_<pass>.ir` (step 00 is `lower`)."""

    stream: object
    dump_after: str | None = None
    print_before: str | None = None
    after_all_dir: Path | None = None

    def before(self, step, name, graph) -> None:
        if self.print_before == name:
            self._print(f"before {name}", graph)

    def after(self, step, name, graph, facts) -> None:
        if self.dump_after in ("all", name):
            self._print(f"after {name}", graph)
        if self.after_all_dir is not None:
            self._write(step, name, graph)

    def _print(self, when: str, graph) -> None:
        from spyrec.ir.printer import format_graph

        print(f"// ----- IR {when} -----\n{format_graph(graph)}", file=self.stream)

    def _write(self, step: int, name: str, graph) -> None:
        """One dump file, through a temporary sibling (`userfiles.write_replacing`); what
        `check_dump_dir` refused before the compile (a FIFO or a link among the old dumps)
        is refused again here, never replaced or removed."""
        from spyrec.ir.printer import format_graph

        folder = Path(self.after_all_dir)
        option = "--print-ir-after-all"
        if step == 0:
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.iterdir():
                if IR_DUMP_FILE.match(old.name):
                    output_target(old, option, links=False, error=ConfigError)
                    old.unlink()
        text = f"// IR after {name} (step {step})\n{format_graph(graph)}"
        write_replacing(folder / f"{step:02d}_{name}.ir", text.encode("utf-8"), option,
                        "an IR dump", links=False, error=ConfigError)


class Verifier(Instrument):
    """`--verify-each` (and the tests): `ir.verify.check` after the lowering and every pass;
    an invalid graph is an internal error naming the pass. Also holds each registered pass to
    its contract's `writes`: a field the pass changed without declaring it is an internal
    error too (ir/writes.py)."""

    def __init__(self) -> None:
        self._before = None

    def before(self, step, name, graph) -> None:
        from spyrec.ir.writes import snapshot

        self._before = snapshot(graph) if name in PASSES else None

    def after(self, step, name, graph, facts) -> None:
        from spyrec.ir.verify import check

        if self._before is not None:
            check_writes(name, PASSES[name].contract.writes, self._before, graph)
            self._before = None
        check(graph, name, facts)


def check_writes(name: str, declared: tuple[str, ...], before, graph) -> None:
    """InternalError if pass `name` changed an IR field (since snapshot `before`) that its
    registry contract does not list in `writes`."""
    from spyrec.errors import InternalError
    from spyrec.ir.writes import written_fields

    undeclared = {f: where for f, where in written_fields(before, graph).items()
                  if f not in declared}
    if undeclared:
        what, where = next(iter(sorted(undeclared.items())))
        raise InternalError(f"pass {name} wrote {what} ({where}), which its registry "
                            f"contract does not declare (writes: {', '.join(declared) or 'none'}"
                            f"); this is a spyrec bug, please report it with the command and "
                            f"input")
