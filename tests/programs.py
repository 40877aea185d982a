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


# The own-form sdsc files still written (docs/formats.md): several vars in one stick, views
# whose coordinates are not digits of one var, overlapping levels, splits cutting a digit.
_OPEN_OWN_FORM = ("lane coordinate", "not a digit of one iteration variable",
                  "overlaps or is not nested", "unevenly", "another cuts it every")


def check_own_form(out: Path, report: dict) -> None:
    """Every test compile (the differential corpus, the models, the samples) proves that
    gathers, scatters and lane shifts are SuperDSC: an own-form file may only be one of the
    open cases above, and never reads or writes through an index or shifts its lanes."""
    for name, reason in report["sdsc"]["own_form_files"].items():
        assert any(k in reason for k in _OPEN_OWN_FORM), (out, name, reason)
        ((_, body),) = json.loads((Path(out) / name).read_text()).items()
        access = body["spyrecAccess_"]
        assert "scatter" not in access["op_info"]["constants"], (out, name, reason)
        for arg in access["args"]:
            assert not any("IndirectAccess" in c for c in arg["device_coordinates"]), \
                (out, name, reason)
        lane = re.match(r"lane coordinate (.*) is not", reason)
        assert not lane or not re.fullmatch(r"(Mod\()?[cr]\d+ \+ \d+(, \d+\))?",
                                            lane.group(1)), (out, name, reason)


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
