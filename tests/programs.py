"""Helpers for tests that go through torch.export: export a module, compile it in-process."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

from spyrec.compiler import CompileOptions
from spyrec.driver import compile_and_estimate


def export(tmp: Path, module: torch.nn.Module, inputs: tuple, name: str = "model",
           **export_kwargs) -> Path:
    """`torch.export.export(module, inputs, **export_kwargs)` saved to `tmp/<name>.pt2`."""
    path = Path(tmp) / f"{name}.pt2"
    torch.export.save(torch.export.export(module.eval(), inputs, **export_kwargs), str(path))
    return path


def compile_pt2(pt2: Path, out: Path | None = None, **options) -> Path:
    """Compile in-process, verifying the IR after every pass (ir/verify.py) unless told not,
    and the written report.json and manifest.json against their schemas."""
    out = out or pt2.with_suffix("")
    compile_and_estimate(pt2, out, CompileOptions(**{"verbose": -1, "verify_each": True} | options))
    validate_outputs(out)
    return out


def validate_outputs(out: Path) -> None:
    """OUT's report.json and manifest.json fit their schemas (InputFileError naming the file
    and the JSON path otherwise). tests/conftest.py does this for every directory a test leaves
    behind; here the compile that wrote a bad file fails at once."""
    from spyrec.sim.files import validate

    for name in ("report", "manifest"):
        path = Path(out) / f"{name}.json"
        validate(load_json(path), name, str(path))


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


def cli(capsys, *args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `spyrec ARGS` run in-process."""
    from spyrec.cli import main

    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@contextlib.contextmanager
def counting_calls(owner, name: str):
    """Count the calls of `owner.name` (a module's function) while the block runs, the real
    function still answering; yields a one-item list holding the count. Memo tests compare
    it with the calls the same work makes without the memo."""
    real = getattr(owner, name)
    count = [0]

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)
    setattr(owner, name, counted)
    try:
        yield count
    finally:
        setattr(owner, name, real)


def record_source(out: Path, pt2: Path | bytes) -> Path:
    """Make `pt2` (a file or its bytes) the program `out` says it was compiled from: copied
    to out/program.pt2 and recorded in manifest.json as the self-contained copy, with its
    SHA-256. `--check` then runs it in eager against what spyrec compiled from another
    program: how a test stages a miscompile (or a broken archive) that `--check` must catch,
    now that it runs only a copy the manifest vouches for."""
    import hashlib

    copy = Path(out) / "program.pt2"
    copy.write_bytes(pt2 if isinstance(pt2, bytes) else Path(pt2).read_bytes())
    manifest = load_json(Path(out) / "manifest.json")
    manifest["source"].update(copy="program.pt2",
                              sha256=hashlib.sha256(copy.read_bytes()).hexdigest())
    (Path(out) / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return copy


def op_documents(out: Path) -> list[dict]:
    """The one-op SuperDSC document of every op of OUT in execution order: a file's, or each
    member's of a fused file (docs/formats.md, Fused SuperDSCs)."""
    docs = []
    for n in range(len(list(Path(out).glob("sdsc_*.json")))):
        doc = load_json(Path(out) / f"sdsc_{n}.json")
        (key, wrapper), = doc.items()
        docs += wrapper["fusedDscs_"] if key.endswith("_fused") else [doc]
    return docs
