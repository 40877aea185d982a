"""`spyrec compile`'s options, all checked before the model is loaded (DESIGN §1: a bad option
or config file is reported at once, not after seconds of model loading): `plan` reads the
pipeline (with every `--set`, the cost model's included), the tiling and layouts files and the
paths, and refuses an output directory spyrec may not replace or an input inside it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from spyrec.costmodel import CostParams
from spyrec.errors import ConfigError, InputFileError
from spyrec.outdir import PROGRAM_COPY, check_inputs_outside, check_output_dir
from spyrec.passes.pipeline import (
    build_pipeline, check_dump_dir, cost_params, read_pipeline_file,
)
from spyrec.yamlfile import read_yaml_file


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

    def context(self):
        """The passes' context: the layouts file, and how this pipeline plans (its planning
        passes' options and the cost parameters, `plan/trials.py Planning`), which every
        trial and every pass that asks how a later pass will run reads."""
        from spyrec.passes.registry import CompileContext
        from spyrec.plan.trials import Planning

        return CompileContext(layouts_config=self.layouts,
                              planning=Planning.of(self.pipeline, self.cost))


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
    check_dump_name(opts, pipeline)
    if opts.print_ir_after_all is not None:
        check_dump_dir(opts.print_ir_after_all, out_dir)
    layouts = read_layouts(opts.layouts)
    check_model_path(source)
    return Plan(pipeline, pipeline_path, layouts, cost)


def _with_tiling(pipeline: list, tiling: Path | None) -> list:
    """`--tiling FILE` is the `config` option of the coarse_tiling pass (its groups and loops)
    and of flash_attention (its `attention` entries; DESIGN §6); the file is read and
    shape-checked now, before the model is loaded. `--tiling auto` is coarse_tiling's
    `mode: auto` (the pass chooses groups and counts)."""
    if tiling is None:
        return pipeline
    names = {p.name for p in pipeline}
    if str(tiling) == "auto":   # the pass chooses; OUT/tiling.yaml records its choice
        _needs_pass(names, "coarse_tiling", tiling, "after matmul_padding")
        return [dataclasses.replace(p, mode="auto", config="") if p.name == "coarse_tiling"
                else p for p in pipeline]
    from spyrec.plan.tiling.spec import check_shape
    from spyrec.tiling_file import read_tiling_file

    try:
        spec = check_shape(read_tiling_file(Path(tiling)), str(tiling))
    except ConfigError as e:
        text = str(e)
        raise ConfigError(text if text.startswith("--tiling") else f"--tiling {text}") from None
    if spec.groups or not spec.attention:
        _needs_pass(names, "coarse_tiling", tiling, "after matmul_padding")
    if spec.attention:
        _needs_pass(names, "flash_attention", tiling, "before coarse_tiling",
                    " for its attention entries")
    return [dataclasses.replace(p, config=str(tiling))
            if p.name in ("coarse_tiling", "flash_attention") else p for p in pipeline]


def _needs_pass(names: set[str], name: str, tiling, where: str, why: str = "") -> None:
    if name not in names:
        raise ConfigError(f"--tiling {tiling}: the pipeline has no {name} pass{why}; add "
                          f"`- {{pass: {name}}}` {where}")


def check_dump_name(opts: CompileOptions, pipeline) -> None:
    names = list(dict.fromkeys(p.name for p in pipeline))
    if opts.dump_after not in (None, "all", "lower") and opts.dump_after not in names:
        raise ConfigError(f"--dump-after {opts.dump_after!r}: not a pass of this pipeline; "
                          f"choose one of: all, lower, {', '.join(names)}")
    if opts.print_ir_before is not None and opts.print_ir_before not in names:
        raise ConfigError(f"--print-ir-before {opts.print_ir_before!r}: not a pass of this "
                          f"pipeline; choose one of: {', '.join(names)}")
