"""Helpers for tests that go through torch.export: export a module, compile it in-process."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from spyrec.compiler import CompileOptions, compile_program


def export(tmp: Path, module: torch.nn.Module, inputs: tuple, name: str = "model",
           **export_kwargs) -> Path:
    """`torch.export.export(module, inputs, **export_kwargs)` saved to `tmp/<name>.pt2`."""
    path = Path(tmp) / f"{name}.pt2"
    torch.export.save(torch.export.export(module.eval(), inputs, **export_kwargs), str(path))
    return path


def compile_pt2(pt2: Path, out: Path | None = None, **options) -> Path:
    """Compile in-process, verifying the IR after every pass (ir/verify.py) unless told not."""
    out = out or pt2.with_suffix("")
    opts = CompileOptions(**{"verbose": -1, "verify_each": True, **options})
    report = compile_program(pt2, out, opts)
    check_own_form(out, report)
    return out


# The own-form sdsc files still written (docs/formats.md) after superdsc_legalize: an access
# whose lane is a constant other than 0 (`x[..., 2]`, and the per-element pieces of a diagonal
# view), for which neither a lane shift nor a var rewrite exists yet. Two vars in one stick, a
# var cut inside its stick, nesting and uneven splits are legalized: never own form again.
_OPEN_OWN_FORM = ("not a digit of one iteration variable",)
_CONSTANT_LANE = re.compile(r"lane coordinate \d+ is not")


def check_own_form(out: Path, report: dict) -> None:
    """Every test compile (the differential corpus, the models, the samples) proves that
    gathers, scatters, lane shifts and the legalized views are SuperDSC: an own-form file may
    only be one of the open cases above, which superdsc_legalize tried and listed as left."""
    left = {row["reason"] for row in (report.get("superdsc_legalize") or {}).get("left", [])}
    for name, reason in report["sdsc"]["own_form_files"].items():
        assert any(k in reason for k in _OPEN_OWN_FORM) or _CONSTANT_LANE.match(reason), \
            (out, name, reason)
        assert reason in left, (out, name, reason, left)
        ((_, body),) = json.loads((Path(out) / name).read_text()).items()
        access = body["spyrecAccess_"]
        assert "scatter" not in access["op_info"]["constants"], (out, name, reason)
        for arg in access["args"]:
            assert not any("IndirectAccess" in c for c in arg["device_coordinates"]), \
                (out, name, reason)


def compile_samples(tmp: Path, names) -> dict[str, Path]:
    """Export and compile each named sample (samples/models.py) into `tmp`: name -> OUT."""
    from samples.models import SAMPLES

    built = {}
    for name in names:
        module, inputs = SAMPLES[name]()
        built[name] = compile_pt2(export(tmp, module, inputs, name), Path(tmp) / name)
    return built


def load_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


class Lambda(torch.nn.Module):
    """Wrap a function as a module, for one-line test programs."""

    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        for k, v in params.items():
            self.register_parameter(k, torch.nn.Parameter(v, requires_grad=False))

    def forward(self, *args):
        return self.fn(self, *args)
