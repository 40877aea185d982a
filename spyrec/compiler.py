"""`spyrec compile`: .pt2 -> Graph -> passes -> output directory.

Progress and `--dump-after` text go to stderr; nothing is printed on stdout.

The report's cost section is the simulator's cost model applied to what was built, but the
compiler imports nothing of the simulator (tests/test_architecture.py): `compile_program` takes the
estimate as a function (`CostEstimate`) and spyrec/driver.py, above both, passes the
simulator's. The compiler times the estimate and writes its section with the report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from spyrec.beside import Beside
from spyrec.costmodel import CostParams
from spyrec.errors import ConfigError, InputFileError
from spyrec.hostmem import no_automatic_collections
from spyrec.outdir import PROGRAM_COPY, check_inputs_outside, check_output_dir
from spyrec.passes.pipeline import (
    Instrument, IRPrinter, Verifier, build_pipeline, check_dump_dir, cost_overrides, cost_params,
    describe, read_pipeline_file, run_passes,
)
from spyrec.passes.registry import CompileContext
from spyrec.yamlfile import read_yaml_file

if TYPE_CHECKING:
    from spyrec.codegen.writer import BuiltOutput


@dataclass
class CompileOptions:
    pipeline: Path | None = None
    tiling: Path | None = None
    layouts: Path | None = None
    sets: list[str] = field(default_factory=list)
    dump_after: str | None = None
    timings: bool = False
    verbose: int = 0
    frontend: str = "auto"
    print_ir_after_all: Path | None = None   # one NN_<pass>.ir file per step
    print_ir_before: str | None = None
    verify_each: bool = False                # ir.verify after lowering and every pass
    progress: Callable[[str], None] | None = None   # told each phase as it starts (cli.py)
    self_contained: bool = False             # copy the .pt2 into OUT as program.pt2


def _phase(opts: CompileOptions, name: str) -> float:
    """Tell the progress display (if any) that phase `name` starts; its start time."""
    if opts.progress is not None:
        opts.progress(name)
    return time.perf_counter()


def _log(opts: CompileOptions, message: str) -> None:
    if opts.verbose >= 0:
        print(message, file=sys.stderr)


LAYOUTS_FORM = "{inputs: {NAME: {stick_dim: D}}}"


def read_layouts(path: Path | None) -> dict:
    """The `--layouts` file, its shape checked (names and dims are checked against the
    program after lowering, the only time they are known)."""
    if path is None:
        return {}
    data = read_yaml_file(Path(path), "layouts", "--layouts")
    if data is None:
        return {}
    if not isinstance(data, dict) or set(data) - {"inputs"}:
        raise ConfigError(f"--layouts {path}: a layouts file is {LAYOUTS_FORM}")
    inputs = data.get("inputs") or {}
    if not isinstance(inputs, dict):
        raise ConfigError(f"--layouts {path}: inputs must map input names to "
                          f"{{stick_dim: D}}, got {inputs!r}; a layouts file is {LAYOUTS_FORM}")
    for name, spec in inputs.items():
        if not isinstance(spec, dict) or set(spec) != {"stick_dim"}:
            raise ConfigError(f"--layouts {path}: inputs.{name} must be {{stick_dim: D}}, got "
                              f"{spec!r}")
        dim = spec["stick_dim"]
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise ConfigError(f"--layouts {path}: inputs.{name}.stick_dim must be an integer "
                              f"dim index, got {dim!r}")
    return {"inputs": dict(inputs)}


def check_layout_names(layouts: dict, graph, path: Path | None) -> None:
    """Every pinned name is a program input: a typo must not silently pin nothing."""
    unknown = [n for n in layouts.get("inputs", {}) if n not in graph.inputs]
    if unknown:
        verb = "is not a program input" if len(unknown) == 1 else "are not program inputs"
        raise ConfigError(f"--layouts {path}: {', '.join(repr(n) for n in unknown)} {verb}; "
                          f"inputs: {', '.join(graph.inputs)}")


def check_model_path(source: Path) -> None:
    """The model is a regular file spyrec can open (`userfiles.check_regular`: a FIFO or a
    device is refused, never opened for a blocking read); what is inside is the loader's
    business."""
    from spyrec.pt2archive import PT2_FILE
    from spyrec.userfiles import check_regular

    check_regular(source, PT2_FILE, error=InputFileError)


@dataclass(frozen=True)
class Plan:
    """Every option, validated: what compile_program needs before it loads the model."""

    pipeline: list
    pipeline_path: str
    layouts: dict
    cost: CostParams        # the cost model's parameters, with --set cost.NAME=VALUE


def plan(source: Path, out_dir: Path, opts: CompileOptions) -> Plan:
    """Check every option and config file without importing torch (DESIGN §1: a bad option is
    reported at once, not after seconds of model loading)."""
    from spyrec.frontend.load import FRONTENDS

    if opts.frontend not in FRONTENDS:
        raise ConfigError(f"--frontend {opts.frontend!r}: choose one of {', '.join(FRONTENDS)}")
    # -o first: an OUT that may not be replaced is refused before any input is read, and an
    # input inside one that may is refused before it is read
    target = check_output_dir(out_dir)
    check_inputs_outside(target, {"the model": source, "--pipeline": opts.pipeline,
                                  "--tiling": opts.tiling, "--layouts": opts.layouts},
                         carried=target / PROGRAM_COPY if opts.self_contained else None)
    entries, pipeline_path = read_pipeline_file(opts.pipeline)
    pipeline = _with_tiling(build_pipeline(entries, opts.sets, where=pipeline_path),
                            opts.tiling)
    cost = cost_params(opts.sets)
    _check_dump_name(opts, pipeline)
    if opts.print_ir_after_all is not None:
        check_dump_dir(opts.print_ir_after_all, out_dir)
    layouts = read_layouts(opts.layouts)
    check_model_path(source)
    return Plan(pipeline, pipeline_path, layouts, cost)


def _with_tiling(pipeline: list, tiling: Path | None) -> list:
    """`--tiling FILE` is the coarse_tiling pass's `config` option (DESIGN §6); the file is
    read and shape-checked now, before the model is loaded. `--tiling auto` is its
    `mode: auto` (the pass chooses groups and counts)."""
    if tiling is None:
        return pipeline
    if not any(p.name == "coarse_tiling" for p in pipeline):
        raise ConfigError(f"--tiling {tiling}: the pipeline has no coarse_tiling pass; add "
                          f"`- {{pass: coarse_tiling}}` after matmul_padding")
    if str(tiling) == "auto":   # the pass chooses; OUT/tiling.yaml records its choice
        return [dataclasses.replace(p, mode="auto", config="") if p.name == "coarse_tiling"
                else p for p in pipeline]
    from spyrec.passes.coarse_tiling.spec import read_tiling_file

    try:
        read_tiling_file(Path(tiling))
    except ConfigError as e:
        text = str(e)
        raise ConfigError(text if text.startswith("--tiling") else f"--tiling {text}") from None
    return [dataclasses.replace(p, config=str(tiling)) if p.name == "coarse_tiling" else p
            for p in pipeline]


class CostEstimate(Protocol):
    """The cost of a built output directory: report.json's `cost` section, its table for
    report.txt and the cost curve (`cost_curve`: the estimate at each length of a program
    with symbolic lengths; empty without). `out_dir` is where the files are being written,
    for messages."""

    def __call__(self, output: BuiltOutput, out_dir: Path) -> tuple[dict, str, list[dict]]:
        ...


def compile_program(source: Path, out_dir: Path, opts: CompileOptions,
                    estimate_cost: CostEstimate) -> dict:
    """Compile `source` into `out_dir`; returns the report, its cost section from
    `estimate_cost` (report.schema.json requires one; spyrec/driver.py `compile_and_estimate`
    passes the simulator's)."""
    with no_automatic_collections(), _short_gil_slices():
        return _compile(source, out_dir, opts, estimate_cost)


@contextlib.contextmanager
def _short_gil_slices(seconds: float = 0.0005):
    """Run with the interpreter switching threads every `seconds` instead of every 5 ms:
    compile's background threads (the source's SHA-256, weights.bin's conversion and writes)
    spend their time in numpy and the kernel without the GIL, but take it back between
    blocks, and beside the passes' pure-Python main thread each take waited up to a whole
    switch interval. Llama-3.2-1B d16: the hash took 10 s instead of 2, and the process used
    ~1.3 of 2 cores; with 0.5 ms, ~1.8 (3 paired runs: wall 0.97x, user time unchanged).
    The caller's interval comes back afterwards."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


COLLECT_AFTER_GROWTH = 1 << 30      # bytes of resident set between two collections


class _CollectWhenGrown(Instrument):
    """After each pass, a full collection if the process's resident set (`rss`: bytes, or
    None where it cannot be read) is `COLLECT_AFTER_GROWTH` over what it was at the last
    one: the bound on what `no_automatic_collections` can leave uncollected."""

    def __init__(self, rss: Callable[[], int | None] | None = None):
        self.rss = rss or resident_bytes
        self.mark = self.rss()
        self.collections = 0

    def after(self, step, name, graph, facts) -> None:
        now = self.rss()
        if now is None or self.mark is None or now - self.mark < COLLECT_AFTER_GROWTH:
            return
        gc.collect()
        self.collections += 1
        self.mark = self.rss()


def resident_bytes() -> int | None:
    """This process's resident set in bytes (Linux `/proc/self/statm`), else None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _compile(source: Path, out_dir: Path, opts: CompileOptions,
             estimate_cost: CostEstimate) -> dict:
    """`compile_program` itself."""
    checked = plan(source, out_dir, opts)
    pipeline, pipeline_path = checked.pipeline, checked.pipeline_path
    # The heavy imports (torch, sympy, xDSL) only once every option is known to be good.
    from spyrec.codegen import build_outputs, write_atomically
    from spyrec.codegen.writer import Sha256Job
    from spyrec.frontend import load_program, lower_program
    from spyrec.frontend.limits import check_limits

    source_sha256 = Sha256Job(source)           # on a second thread, for the manifest

    timings: list[dict] = []
    t0 = _phase(opts, "load")
    program = load_program(source, opts.frontend, allow_symbols=True)
    timings.append({"name": "load", "wall_ms": _ms(t0)})
    if program.fallback_reason:
        _log(opts, f"spyrec: note: using the torch front end: {program.fallback_reason}")
    t0 = _phase(opts, "lower")
    graph = lower_program(program)
    if program.symbols:
        _attach_symbols(graph, program, source, opts)
    check_limits(graph)
    check_layout_names(checked.layouts, graph, opts.layouts)
    timings.append({"name": "lower", "wall_ms": _ms(t0)})
    from spyrec.plan.trials import Planning

    ctx = CompileContext(layouts_config=checked.layouts,
                         planning=Planning.of(pipeline, checked.cost))
    # weights.bin is written during the later passes; stopped and removed on any failure
    with _EarlyWeights(_constants_steps(pipeline), check_output_dir(out_dir)) as early:
        instruments = _instruments(opts, timings) + [early, _CollectWhenGrown()]
        for ins in instruments:
            ins.after(0, "lower", graph, frozenset())
        run_passes(graph, pipeline, ctx, instruments, timings)
        t0 = _phase(opts, "codegen")
        report = _report(graph, ctx, timings)
        report["frontend"] = {"requested": opts.frontend, "used": program.frontend,
                              "fallback_reason": program.fallback_reason or None}
        report["constant_folding"] = {"folded": program.constants_folded}
        configs = {"pipeline": pipeline_path, "tiling": str(opts.tiling) if opts.tiling else None,
                   "layouts": str(opts.layouts) if opts.layouts else None}
        output = build_outputs(graph, source, describe(pipeline), configs, ctx.report,
                               check=opts.verify_each, self_contained=opts.self_contained,
                               source_sha256=source_sha256,
                               cost_params=cost_overrides(checked.cost))
        timings.append({"name": "codegen", "wall_ms": _ms(t0)})
        t_cost = time.perf_counter()
        with Beside(lambda: estimate_cost(output, out_dir),
                    fork=len(graph.ops) >= ESTIMATE_BESIDE_MIN_OPS) as estimate:
            # the sdsc files' text is printed here (and written), while a child estimates
            report["sdsc"] = sdsc_summary(output.files)

            def finalize(tmp: Path) -> dict[str, Callable[[str], str]]:
                report["cost"], cost_table, curve = estimate.result()
                if curve:
                    report["cost_curve"] = curve
                timings.append({"name": "cost_estimate", "wall_ms": _ms(t_cost)})

                def report_json(build: str) -> str:
                    report["build"] = build
                    return _json(report)

                def report_txt(build: str) -> str:
                    report["build"] = build
                    return report_text(report) + "\n" + cost_table
                return {"report.json": report_json, "report.txt": report_txt}

            left = write_atomically(out_dir, output.files, source, finalize,
                                    self_contained=opts.self_contained, weights_job=early.job)
        for problem in left:
            _log(opts, f"spyrec: note: could not remove the temporary {problem}; remove it "
                       f"by hand")
        if opts.timings:
            for row in timings:
                _log(opts, f"{row['name']:>20}: {row['wall_ms']:9.1f} ms")
        return report


def _attach_symbols(graph, program, source: Path, opts: CompileOptions) -> None:
    """A program with symbolic lengths (issue 30): the graph (its instance at every symbol's
    maximum) records them and the input and output dims that have them, once the program
    lowered one granule shorter proves it depends on them only through those dims
    (`check_instances`)."""
    from spyrec.frontend import load_program, lower_program
    from spyrec.passes.coarse_tiling.symbolic import (
        check_instances, constant_dims, shorter_binding,
    )

    graph.symbols = dict(program.symbols)
    users = [spec.name for spec in program.outputs if spec.kind == "user_output"]
    buffers = dict(zip(users, graph.outputs)) | {name: name for name in graph.inputs}
    graph.symbolic_dims = {buffers[name]: dict(dims)
                           for name, dims in program.symbolic_dims.items() if name in buffers}
    alt = lower_program(load_program(source, opts.frontend, bind=shorter_binding(graph),
                                     allow_symbols=True))
    graph.symbolic_dims |= constant_dims(graph, alt)
    check_instances(graph, alt)


def sdsc_summary(files: dict) -> dict:
    """How many sdsc files (all SuperDSC) and their bytes, for the report (a `JsonDoc`'s
    text is printed here, once)."""
    from spyrec.codegen.writer import printed

    texts = [printed(content) for name, content in files.items() if name.startswith("sdsc_")]
    sizes = [len(t.encode()) if isinstance(t, str) else len(t) for t in texts]
    return {"files": len(sizes), "bytes": sum(sizes)}


# From this many ops on, compile's cost estimate runs in a forked child (`spyrec.beside`)
# while the parent prints and writes the files: each is ~1 ms per op of Python, and in a
# program of few weights the other core is idle by then (beside a weights.bin still being
# written the three share the cores: Llama-3.2-1B d16 gains little). Below it, a fork
# (~10 ms) would cost more than it saves.
ESTIMATE_BESIDE_MIN_OPS = 128


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 3)


def _json(obj) -> str:
    from spyrec.codegen.writer import dump_json
    return dump_json(obj)


def _check_dump_name(opts: CompileOptions, pipeline) -> None:
    names = list(dict.fromkeys(p.name for p in pipeline))
    if opts.dump_after not in (None, "all", "lower") and opts.dump_after not in names:
        raise ConfigError(f"--dump-after {opts.dump_after!r}: not a pass of this pipeline; "
                          f"choose one of: all, lower, {', '.join(names)}")
    if opts.print_ir_before is not None and opts.print_ir_before not in names:
        raise ConfigError(f"--print-ir-before {opts.print_ir_before!r}: not a pass of this "
                          f"pipeline; choose one of: {', '.join(names)}")


def _constants_steps(pipeline: list) -> tuple[int, ...]:
    """The steps after which what weights.bin holds may have changed: the passes whose
    contract writes `constants`, in order ((0,), the lowering, if none does)."""
    return tuple(step for step, p in enumerate(pipeline, start=1)
                 if "constants" in p.contract.writes) or (0,)


class _EarlyWeights(Instrument):
    """Starts writing weights.bin (`codegen/weights_job.py`) once the first step that may
    change the constants has run and been verified (this instrument comes after the
    verifier), and plans it again after each later such step. Not when the output's parent
    directory does not exist yet: a compile that fails later must not leave directories it
    created."""

    def __init__(self, steps: tuple[int, ...], target: Path):
        self.steps, self.target = steps, target
        self.job = None

    def after(self, step, name, graph, facts) -> None:
        if step not in self.steps:
            return
        if self.job is not None:
            self.job.replan(graph)
        elif step == self.steps[0] and self.target.parent.is_dir():
            from spyrec.codegen.weights_job import WeightsJob

            self.job = WeightsJob(graph, self.target)

    def __enter__(self) -> "_EarlyWeights":
        return self

    def __exit__(self, *exc) -> None:
        if self.job is not None:    # a no-op once the file was taken
            self.job.discard()


@dataclass
class _VerboseLog(Instrument):
    """`-v`: one line per pass as it finishes, with its wall time."""

    opts: CompileOptions
    timings: list[dict]

    def after(self, step, name, graph, facts) -> None:
        if step > 0:
            _log(self.opts, f"spyrec: {name}: {self.timings[-1]['wall_ms']:.1f} ms")


def _instruments(opts: CompileOptions, timings: list[dict]) -> list[Instrument]:
    """Dumps first, so a graph that fails verification is on disk for the report."""
    out: list[Instrument] = [IRPrinter(sys.stderr, opts.dump_after, opts.print_ir_before,
                                       opts.print_ir_after_all)]
    if opts.verbose > 0:
        out.append(_VerboseLog(opts, timings))
    if opts.verify_each:
        out.append(Verifier())
    return out


def _report(graph, ctx: CompileContext, timings: list[dict]) -> dict:
    restick = ctx.report.get("restickify", {"count": 0, "elements": 0, "list": []})
    return {
        "format": "spyrec-report/1",
        "build": None,      # the build's id (spyrec/build_record.py), once manifest.json has it
        "passes": timings,
        "restickify": restick,
        "layout_search": ctx.report.get("layout_search"),
        "matmul_padding": ctx.report.get("matmul_padding",
                                         {"count": 0, "elements": 0, "list": []}),
        "split_padding": ctx.report.get("split_padding"),
        "gather_coordinates": ctx.report.get("gather_coordinates"),
        "split_outputs": ctx.report.get("split_outputs"),
        "superdsc_legalize": ctx.report.get("superdsc_legalize"),
        "stage_inputs": ctx.report.get("stage_inputs"),
        "scratchpad": ctx.report.get("scratchpad"),
        "tiling": ctx.report.get("tiling"),
        "attention": ctx.report.get("attention"),
        "work_division": ctx.report.get("work_division"),
        "layouts": {b.name: b.layout.to_json() for b in graph.buffers.values()},
        "ops": len(graph.ops),
        "hbm_bytes": ctx.report.get("hbm_bytes", 0),
        "memory_planning": ctx.report.get("memory_planning"),
    } | {key: ctx.report[key] for key in ("symbols", "length_shares") if key in ctx.report}


def _split_padding_text(padding: dict | None) -> list[str]:
    """The matmuls whose N was padded so that more cores split it (split_padding)."""
    if not padding or not padding["count"]:
        return []
    lines = ["", f"matmul N padding: {padding['count']} matmuls"]
    lines += [f"  {row['op']}: N {row['n']} -> {row['n_padded']} ({row['weight']} -> "
              f"{row['padded']}): {row['time_us']:.3f} us split {row['split']}, against "
              f"{row['unpadded_time_us']:.3f} us split {row['unpadded_split']} unpadded"
              for row in padding["list"]]
    return lines


def _work_division_text(plan: dict | None) -> list[str]:
    """Core splits chosen by estimated time: the ops whose split differs from the greedy one
    (every op's row is in report.json)."""
    if not plan:
        return []
    lines = ["", f"work division: {plan['changed']} of {len(plan['ops'])} ops split by cost, "
                 f"not greedily; estimated {plan['time_us']:.3f} us vs {plan['greedy_time_us']:.3f} "
                 f"us greedy (one execution of each op)"]
    lines += [f"  {r['op']:<24} {r['split']} {r['time_us']:.3f} us, greedy {r['greedy_split']} "
              f"{r['greedy_time_us']:.3f} us" for r in plan["ops"] if r["split"] != r["greedy_split"]]
    return lines


def _length_shares_text(rows: list | None) -> list[str]:
    """length_shares: each symbol's minimum share per busy core, by length."""
    lines = []
    for row in rows or ():
        steps = ", ".join(f"{m} up to {upto}" for upto, m in row["min_shares"]) or "none"
        lines += ["", f"length shares: each busy core of an op sized by {row['symbol']} runs "
                      f"at least {steps} values of the length (by the cost model at each "
                      f"length)"]
    return lines


def _staged_text(rows: list | None) -> list[str]:
    """stage_inputs: inputs and constants read from HBM once for several reads."""
    if not rows:
        return []
    lines = ["", f"staged inputs: {len(rows)} read from HBM once (once per tile in a loop) into "
                 f"LX copies"]
    lines += [f"  {r['input']} -> {r['buffer']}: {r['reads']} reads"
              f"{' each trip (a per-tile copy in the loop)' if r.get('per_tile') else ''}, "
              f"{r['bytes_per_core']} bytes/core, cores "
              f"[{', '.join(f'{v}:{k}' for v, k in r['split'].items())}]" for r in rows]
    return lines


def _scratchpad_text(plan: dict | None) -> list[str]:
    """The LX plan: only when some buffer is per-tile (a tiled program)."""
    if not plan or not plan["buffers"]:
        return []
    lines = ["", f"scratchpad (LX per core): peak {plan['peak_bytes_per_core']} of "
                 f"{plan['budget_bytes']} bytes"]
    for row in plan["buffers"]:
        where = f"LX @{row['lx_address']}" if row["placed"] else f"HBM ({row['reason']})"
        lines.append(f"  {row['buffer']:<24} {row['bytes_per_core']:>10} bytes/core  {where}")
    return lines


def report_text(report: dict) -> str:
    lines = ["spyrec compile report", f"build {report['build']}", "", "passes:"]
    lines += [f"  {p['name']:<20} {p['wall_ms']:>10.1f} ms" for p in report["passes"]]
    r = report["restickify"]
    lines += ["", f"restickify: {r['count']} copies inserted, {r['elements']} device elements "
                  f"moved"]
    for row in r["list"]:
        lines.append(f"  {'' if row['inserted'] else '(program copy) '}"
                     f"{row['tensor']} -> {row['copy']}: stick dim {row['from_stick_dim']} -> "
                     f"{row['to_stick_dim']} ({row['from_stick_var']} -> {row['to_stick_var']}), "
                     f"{row['elements']} elements, for {', '.join(row['consumers']) or '-'}")
    laid = r.get("constant_layouts", [])
    if laid:
        lines += [f"constants in a second layout (written at compile time, no device copy): "
                  f"{len(laid)}, {sum(row['bytes'] for row in laid)} bytes of weights"]
        lines += [f"  {row['tensor']} -> {row['constant']}: stick dim {row['from_stick_dim']} -> "
                  f"{row['to_stick_dim']}, {row['bytes']} bytes" for row in laid]
    pad = report["matmul_padding"]
    lines += ["", f"matmul K padding: {pad['count']} operands, {pad['elements']} device elements"]
    lines += [f"  {row['tensor']} -> {row['padded']}: K {row['k']} -> {row['k_padded']} for "
              f"{row['op']}" for row in pad["list"]]
    lines += _split_padding_text(report.get("split_padding"))
    gat = report.get("gather_coordinates")
    if gat:
        lines += ["", f"gathers: {gat['gathers']} ({gat['fused']} fused, {gat['unfused']} "
                      f"unfused), scatters: {gat['scatters']}, index checks: "
                      f"{gat['index_checks']}"]
    lines += _work_division_text(report.get("work_division"))
    lines += _staged_text(report.get("stage_inputs"))
    lines += _length_shares_text(report.get("length_shares"))
    lines += _scratchpad_text(report.get("scratchpad"))
    lines += ["", f"ops: {report['ops']}", f"device memory: {report['hbm_bytes']} bytes"]
    plan = report.get("memory_planning")
    if plan:
        lines.append(f"  fixed (inputs, constants, outputs) {plan['fixed_bytes']}, intermediates "
                     f"{plan['arena_bytes']} (peak live {plan['peak_live_bytes']}, "
                     f"{plan['without_reuse_bytes'] - plan['fixed_bytes']} without reuse); "
                     f"bound {plan['bound_bytes']}")
    lines += ["", "layouts:"]
    for name, lay in report["layouts"].items():
        lines.append(f"  {name:<24} {lay['device_size']} / {lay['stride_map']} "
                     f"{lay['device_dtype']}")
    curve = report.get("cost_curve")
    if curve:   # a program with symbolic lengths: its estimate at each (a sample of them)
        names = list(curve[0]["lengths"])
        lines += ["", "cost curve (estimated at each length; cost below: at the maximum):",
                  "  " + " ".join(f"{n:>8}" for n in names) + f" {'time us':>12} "
                  f"{'HBM KiB':>12}"]
        lines += ["  " + " ".join(f"{row['lengths'][n]:>8}" for n in names) +
                  f" {row['time_us']:>12.3f} {row['hbm_bytes'] / 1024:>12.1f}" for row in curve]
    return "\n".join(lines) + "\n"
