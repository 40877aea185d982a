"""`spyrec compile`: .pt2 -> Graph -> passes -> output directory.

Progress and `--dump-after` text go to stderr; nothing is printed on stdout.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from spyrec.errors import ConfigError
from spyrec.ir.printer import format_graph
from spyrec.passes.pipeline import build_pipeline, describe, read_pipeline_file
from spyrec.passes.registry import CompileContext


@dataclass
class CompileOptions:
    pipeline: Path | None = None
    tiling: Path | None = None
    layouts: Path | None = None
    sets: list[str] = field(default_factory=list)
    dump_after: str | None = None
    timings: bool = False
    verbose: int = 0


def _log(opts: CompileOptions, message: str) -> None:
    if opts.verbose >= 0:
        print(message, file=sys.stderr)


def read_layouts(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such layouts file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict) or set(data) - {"inputs"}:
        raise ConfigError(f"{path}: a layouts file is {{inputs: {{NAME: {{stick_dim: D}}}}}}")
    return data


def compile_program(source: Path, out_dir: Path, opts: CompileOptions) -> dict:
    """Compile `source` into `out_dir`; returns the report."""
    from spyrec.codegen import build_outputs, write_atomically
    from spyrec.frontend import load_program, lower_program
    from spyrec.outdir import check_output_dir

    check_output_dir(out_dir)  # refuse an -o spyrec may not replace before any work
    entries, pipeline_path = read_pipeline_file(opts.pipeline)
    pipeline = build_pipeline(entries, opts.sets, where=pipeline_path)
    layouts = read_layouts(opts.layouts)
    if opts.tiling is not None:
        raise ConfigError("--tiling: coarse tiling is not implemented yet; compile without it")
    timings: list[dict] = []
    t0 = time.perf_counter()
    ep = load_program(source)
    timings.append({"name": "load_and_decompose", "wall_ms": _ms(t0)})
    t0 = time.perf_counter()
    graph = lower_program(ep)
    timings.append({"name": "lower", "wall_ms": _ms(t0)})
    _dump(opts, "lower", graph)
    _check_dump_name(opts, pipeline)
    ctx = CompileContext(layouts_config=layouts)
    for p in pipeline:
        t0 = time.perf_counter()
        p.run(graph, ctx)
        timings.append({"name": p.name, "wall_ms": _ms(t0)})
        if opts.verbose > 0:
            _log(opts, f"spyrec: {p.name}: {timings[-1]['wall_ms']:.1f} ms")
        _dump(opts, p.name, graph)
    t0 = time.perf_counter()
    report = _report(graph, ctx, timings)
    configs = {"pipeline": pipeline_path, "tiling": None,
               "layouts": str(opts.layouts) if opts.layouts else None}
    files = build_outputs(graph, source, describe(pipeline), configs, ctx.report)
    timings.append({"name": "codegen", "wall_ms": _ms(t0)})

    def finalize(tmp: Path) -> dict[str, str]:
        from spyrec.sim.cost import format_table
        from spyrec.sim.runner import cost_for_directory

        t_cost = time.perf_counter()
        report["cost"] = cost_for_directory(tmp)
        timings.append({"name": "cost_estimate", "wall_ms": _ms(t_cost)})
        return {"report.json": _json(report),
                "report.txt": report_text(report) + "\n" + format_table(report["cost"])}

    write_atomically(out_dir, files, source, finalize)
    if opts.timings:
        for row in timings:
            _log(opts, f"{row['name']:>20}: {row['wall_ms']:9.1f} ms")
    return report


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 3)


def _json(obj) -> str:
    from spyrec.codegen.writer import dump_json
    return dump_json(obj)


def _check_dump_name(opts: CompileOptions, pipeline) -> None:
    names = ["lower"] + [p.name for p in pipeline]
    if opts.dump_after not in (None, "all") and opts.dump_after not in names:
        raise ConfigError(f"--dump-after {opts.dump_after!r}: not a pass of this pipeline; "
                          f"choose one of: all, {', '.join(names)}")


def _dump(opts: CompileOptions, name: str, graph) -> None:
    if opts.dump_after in ("all", name):
        print(f"// ----- IR after {name} -----\n{format_graph(graph)}", file=sys.stderr)


def _report(graph, ctx: CompileContext, timings: list[dict]) -> dict:
    restick = ctx.report.get("restickify", {"count": 0, "elements": 0, "list": []})
    return {
        "format": "spyrec-report/1",
        "passes": timings,
        "restickify": restick,
        "layout_search": ctx.report.get("layout_search"),
        "matmul_padding": ctx.report.get("matmul_padding",
                                         {"count": 0, "elements": 0, "list": []}),
        "layouts": {b.name: b.layout.to_json() for b in graph.buffers.values()},
        "ops": len(graph.ops),
        "hbm_bytes": ctx.report.get("hbm_bytes", 0),
    }


def report_text(report: dict) -> str:
    lines = ["spyrec compile report", "", "passes:"]
    lines += [f"  {p['name']:<20} {p['wall_ms']:>10.1f} ms" for p in report["passes"]]
    r = report["restickify"]
    lines += ["", f"restickify: {r['count']} copies inserted, {r['elements']} device elements "
                  f"moved"]
    for row in r["list"]:
        lines.append(f"  {'' if row['inserted'] else '(program copy) '}"
                     f"{row['tensor']} -> {row['copy']}: stick dim {row['from_stick_dim']} -> "
                     f"{row['to_stick_dim']} ({row['from_stick_var']} -> {row['to_stick_var']}), "
                     f"{row['elements']} elements, for {', '.join(row['consumers']) or '-'}")
    pad = report["matmul_padding"]
    lines += ["", f"matmul K padding: {pad['count']} operands, {pad['elements']} device elements"]
    lines += [f"  {row['tensor']} -> {row['padded']}: K {row['k']} -> {row['k_padded']} for "
              f"{row['op']}" for row in pad["list"]]
    lines += ["", f"ops: {report['ops']}", f"device memory: {report['hbm_bytes']} bytes", "",
              "layouts:"]
    for name, lay in report["layouts"].items():
        lines.append(f"  {name:<24} {lay['device_size']} / {lay['stride_map']} "
                     f"{lay['device_dtype']}")
    return "\n".join(lines) + "\n"
