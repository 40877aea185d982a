"""Every bad input is one message and a DESIGN §1 exit code, never a traceback.

One table walks the real command line (`python -m spyrec` in a subprocess) through bad options,
bad files and tampered output directories. For every row: the exit code, exactly one non-empty
stderr line that starts with `spyrec:` (click's usage format for click's own errors) and says
what the row is about, no `Traceback`, nothing on stdout, and no file left behind that the row
did not set up (no half-written output, no `.*.tmp-*` sibling).

The fixtures are built once: mlp_fp16 exported and compiled in-process, plus two programs the
device cannot hold (a rank-7 tensor, outputs larger than device memory together) and a TorchScript file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from samples.export import export_sample
from spyrec.compiler import CompileOptions
from spyrec.driver import compile_and_estimate
from tests.programs import record_source
from tests.sealing import seal

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Fixtures:
    pt2: Path          # mlp_fp16.pt2
    npz: Path          # its inputs
    out: Path          # its compiled output directory (copied by rows that change it)
    rank7: Path
    huge: Path
    torchscript: Path


class Rank7(torch.nn.Module):
    def forward(self, x):
        return x + 1


class Huge(torch.nn.Module):
    """15 fp16 outputs of [2**16, 2**10, 64] (8 GiB each, 120 GiB): more than the device's
    112 GiB. Each alone fits a core's 256 MiB span once split 32 ways; a single larger tensor
    would be refused for its span first (work division), before memory planning sums."""

    def forward(self, x):
        return tuple(x.expand(2**16, 2**10, 64) + i for i in range(15))


def _save(module, args, path: Path) -> Path:
    torch.export.save(torch.export.export(module, args), str(path))
    return path


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Fixtures:
    tmp = tmp_path_factory.mktemp("bad_inputs")
    pt2, npz = export_sample("mlp_fp16", tmp)
    out = tmp / "mlp_out"
    compile_and_estimate(pt2, out, CompileOptions(verbose=-1, self_contained=True))
    torchscript = tmp / "scripted.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # torch.jit is deprecated: fine
        torch.jit.save(torch.jit.script(Rank7()), str(torchscript))
    return Fixtures(pt2, npz, out,
                    _save(Rank7(), (torch.zeros(1, 1, 1, 1, 1, 2, 64, dtype=torch.float16),),
                          tmp / "rank7.pt2"),
                    _save(Huge(), (torch.zeros(64, dtype=torch.float16),), tmp / "huge.pt2"),
                    torchscript)


# --- how rows set up their files (each gets its own empty directory `d`) ----------------------

def write(d: Path, name: str, content: str | bytes) -> Path:
    path = d / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def out_copy(fx: Fixtures, d: Path) -> Path:
    """A private copy of the compiled directory, so a row may tamper with it."""
    return Path(shutil.copytree(fx.out, d / "out"))


def tampered_manifest(fx: Fixtures, d: Path, change: Callable[[dict], dict]) -> Path:
    out = out_copy(fx, d)
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(change(manifest)))
    return out


def with_loop(fx: Fixtures, d: Path, upper: int, step: int) -> Path:
    """The bundle with an (empty) scf.for of the given bound and step before the executes."""
    out = out_copy(fx, d)
    bundle = out / "bundle.mlir"
    loop = (f"    %lo = arith.constant 0 : index\n    %hi = arith.constant {upper} : index\n"
            f"    %st = arith.constant {step} : index\n"
            f"    scf.for %i = %lo to %hi step %st {{\n    }}\n")
    text = bundle.read_text().replace("func.func @sdsc_bundle() {\n",
                                      "func.func @sdsc_bundle() {\n" + loop)
    bundle.write_text(text)
    seal(out)           # as if compile wrote the loop: the run reads as far as its bound
    return out


def npz_member(d: Path, name: str, data: bytes) -> Path:
    path = d / name
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x.npy", data)
    return path


def corrupt_header(fx: Fixtures, d: Path) -> Path:
    with zipfile.ZipFile(fx.npz) as zf:
        good = zf.read(zf.namelist()[0])
    return npz_member(d, "in.npz", good[:10] + b"{'descr': <f2, (((" + good[28:])


def object_array(d: Path) -> Path:
    path = d / "in.npz"
    np.savez(path, x=np.array([{"a": 1}], dtype=object))   # numpy pickles object arrays
    return path


def compile_args(fx: Fixtures, d: Path, *extra: str, model: Path | None = None) -> list:
    return ["compile", model or fx.pt2, "-o", d / "new_out", *extra]


def run_args(out: Path, npz: Path, *extra) -> list:
    return ["run", out, "--inputs", npz, *extra]


PIPELINE_WRONG_ORDER = ("- {pass: work_division}\n- {pass: stick_layout}\n"
                        "- {pass: memory_planning}\n")
PIPELINE_NO_ADDRESSES = "- {pass: stick_layout}\n- {pass: work_division}\n"

# (id, argv builder, exit code, words stderr must contain)
ROWS: list[tuple[str, Callable[[Fixtures, Path], list], int, tuple[str, ...]]] = [
    # compile: the model path
    ("missing-pt2", lambda fx, d: compile_args(fx, d, model=d / "none.pt2"), 2,
     ("none.pt2", "no such file")),
    ("directory-as-pt2", lambda fx, d: compile_args(fx, d, model=d), 2, ("directory",)),
    ("garbage-pt2", lambda fx, d: compile_args(fx, d, model=write(d, "g.pt2", "garbage")), 2,
     ("g.pt2",)),
    # compile: the pipeline
    ("unknown-pass", lambda fx, d: compile_args(
        fx, d, "--pipeline", write(d, "p.yaml", "- {pass: stick_layuot}\n")), 2,
     ("unknown pass 'stick_layuot'", "stick_layout")),
    ("unknown-option", lambda fx, d: compile_args(fx, d, "--set", "work_division.core=4"), 2,
     ("no option 'core'", "cores")),
    ("wrong-option-type", lambda fx, d: compile_args(fx, d, "--set", "work_division.cores=many"),
     2, ("work_division.cores must be int",)),
    ("pipeline-is-directory", lambda fx, d: compile_args(fx, d, "--pipeline", d), 2,
     ("--pipeline", "is a directory")),
    ("pipeline-not-utf8", lambda fx, d: compile_args(
        fx, d, "--pipeline", write(d, "p.yaml", b"- {pass: \xff\xfe}\n")), 2,
     ("--pipeline", "not UTF-8")),
    ("pipeline-empty", lambda fx, d: compile_args(fx, d, "--pipeline", write(d, "p.yaml", "")),
     2, ("--pipeline", "empty")),
    ("pipeline-wrong-order", lambda fx, d: compile_args(
        fx, d, "--pipeline", write(d, "p.yaml", PIPELINE_WRONG_ORDER)), 2,
     ("work_division", "needs a device layout", "put stick_layout before it")),
    ("pipeline-without-addresses", lambda fx, d: compile_args(
        fx, d, "--pipeline", write(d, "p.yaml", PIPELINE_NO_ADDRESSES)), 2,
     ("memory_planning",)),
    ("pipeline-python-tag", lambda fx, d: compile_args(
        fx, d, "--pipeline", write(d, "p.yaml", "- !!python/object/apply:os.getcwd []\n")), 2,
     ("--pipeline", "not valid YAML")),
    # compile: --set
    ("set-invalid-yaml", lambda fx, d: compile_args(fx, d, "--set", "work_division.cores=[8"),
     2, ("--set", "not valid YAML")),
    ("set-python-tag", lambda fx, d: compile_args(
        fx, d, "--set", "stick_layout.optimizer=!!python/object/apply:os.system ['true']"), 2,
     ("--set", "not valid YAML")),
    ("set-without-value", lambda fx, d: compile_args(fx, d, "--set", "work_division.cores"), 2,
     ("PASS.OPTION=VALUE",)),
    ("set-out-of-range", lambda fx, d: compile_args(fx, d, "--set", "stick_layout.beam_width=0"),
     2, ("beam_width",)),
    # compile: --layouts
    ("layouts-number", lambda fx, d: compile_args(
        fx, d, "--layouts", write(d, "l.yaml", "{inputs: {x: 3}}")), 2,
     ("--layouts", "inputs.x must be {stick_dim: D}")),
    ("layouts-list", lambda fx, d: compile_args(
        fx, d, "--layouts", write(d, "l.yaml", "{inputs: [1]}")), 2,
     ("--layouts", "inputs must map")),
    ("layouts-stick-dim-not-int", lambda fx, d: compile_args(
        fx, d, "--layouts", write(d, "l.yaml", "{inputs: {x: {stick_dim: last}}}")), 2,
     ("inputs.x.stick_dim must be an integer",)),
    ("layouts-unknown-input", lambda fx, d: compile_args(
        fx, d, "--layouts", write(d, "l.yaml", "{inputs: {nope: {stick_dim: 0}}}")), 2,
     ("'nope' is not a program input; inputs: x",)),
    ("layouts-is-directory", lambda fx, d: compile_args(fx, d, "--layouts", d), 2,
     ("--layouts", "is a directory")),
    # compile: other options
    ("dump-after-unknown", lambda fx, d: compile_args(fx, d, "--dump-after", "nope"), 2,
     ("--dump-after 'nope'", "stick_layout")),
    ("tiling", lambda fx, d: compile_args(fx, d, "--tiling", write(d, "t.yaml", "{}")), 2,
     ("--tiling",)),
    ("unknown-click-option", lambda fx, d: compile_args(fx, d, "--frobnicate"), 2,
     ("No such option",)),
    ("click-missing-output", lambda fx, d: ["compile", fx.pt2], 2, ("Missing option",)),
    ("click-wrong-type", lambda fx, d: run_args(fx.out, d), 2, ("--inputs", "directory")),
    # compile: programs the device cannot run
    ("rank-7-tensor", lambda fx, d: compile_args(fx, d, model=fx.rank7), 3,
     ("rank above 6", "rank 7")),
    ("more-than-device-memory", lambda fx, d: compile_args(fx, d, model=fx.huge), 3,
     ("device memory", "112.0 GiB")),
    # run: the inputs file
    ("npz-corrupt-header", lambda fx, d: run_args(fx.out, corrupt_header(fx, d)), 2,
     ("in.npz", "x.npy", "header")),
    ("npz-not-a-zip", lambda fx, d: run_args(fx.out, write(d, "in.npz", "not a zip")), 2,
     ("in.npz", "not a zip")),
    ("npz-object-array", lambda fx, d: run_args(fx.out, object_array(d)), 2,
     ("in.npz", "pickle")),
    ("npz-missing", lambda fx, d: run_args(fx.out, d / "none.npz"), 2,
     ("none.npz", "no such file")),
    # run: where the outputs go
    ("output-dir-missing", lambda fx, d: run_args(fx.out, fx.npz, "-o", d / "no" / "o.npz"), 2,
     ("-o", "does not exist")),
    ("output-is-the-manifest", lambda fx, d: run_args(fx.out, fx.npz, "-o",
                                                      fx.out / "manifest.json"), 2,
     ("manifest.json", "does not replace it")),
    ("output-is-the-weights", lambda fx, d: run_args(fx.out, fx.npz, "-o",
                                                     fx.out / "weights.bin"), 2,
     ("weights.bin", "does not replace it")),
    ("output-is-the-model", lambda fx, d: run_args(fx.out, fx.npz, "-o", fx.pt2), 2,
     ("mlp_fp16.pt2", "does not replace it")),
    ("output-is-the-inputs", lambda fx, d: run_args(fx.out, fx.npz, "-o", fx.npz), 2,
     ("is the --inputs file",)),
    ("trace-is-the-report", lambda fx, d: ["inspect", fx.out, "--trace",
                                           fx.out / "report.json"], 2,
     ("report.json", "compiled directory")),
    # run / inspect: a tampered output directory
    ("manifest-huge-hbm", lambda fx, d: run_args(
        tampered_manifest(fx, d, lambda m: {**m, "hbm_bytes": 10**15}), fx.npz), 2,
     ("hbm_bytes", "1000000000000000")),
    ("manifest-empty-run", lambda fx, d: run_args(tampered_manifest(fx, d, lambda m: {}),
                                                  fx.npz), 2, ("manifest.json",)),
    ("manifest-empty-inspect", lambda fx, d: ["inspect", tampered_manifest(fx, d, lambda m: {})],
     2, ("manifest.json",)),
    ("loop-step-0", lambda fx, d: run_args(with_loop(fx, d, 4, 0), fx.npz), 2,
     ("bundle.mlir", "step 0")),
    ("loop-10**12-iterations", lambda fx, d: run_args(with_loop(fx, d, 10**12, 1), fx.npz), 2,
     ("bundle.mlir", "1000000000000 iterations")),
    ("check-program-missing", lambda fx, d: run_args(_without_program(fx, d, "gone.pt2"),
                                                     fx.npz, "--check"), 2,
     ("gone.pt2", "is gone", "--model PATH", "--self-contained")),
    ("check-source-changed", lambda fx, d: run_args(
        _without_program(fx, d, "changed.pt2", b"other bytes"), fx.npz, "--check"), 2,
     ("changed.pt2", "changed since", "sha256", "--model PATH")),
    ("check-model-other-program", lambda fx, d: run_args(
        fx.out, fx.npz, "--check", "--model", _file(d, "m.pt2", _other_program())), 2,
     ("--model", "m.pt2", "not the program", "mlp_fp16.pt2")),
    ("check-model-missing", lambda fx, d: run_args(fx.out, fx.npz, "--check", "--model",
                                                   d / "none.pt2"), 2,
     ("--model", "none.pt2", "no such file")),
    ("model-without-check", lambda fx, d: run_args(fx.out, fx.npz, "--model", fx.pt2), 2,
     ("--model", "--check")),
    ("weights-truncated", lambda fx, d: run_args(_broken(fx, d, "weights.bin", 100), fx.npz), 2,
     ("weights.bin", "100 bytes", "truncated")),
    ("weights-missing", lambda fx, d: run_args(_broken(fx, d, "weights.bin", None), fx.npz), 2,
     ("weights.bin", "missing")),
    ("weights-offset-past-end", lambda fx, d: run_args(
        tampered_manifest(fx, d, _weights_offset(4096 * 10**6)), fx.npz), 2,
     ("manifest.json", "weights.tensors[0]", "past the end of weights.bin")),
    ("check-program-text", lambda fx, d: run_args(_program(fx, d, b"text"), fx.npz, "--check"),
     2, ("program.pt2", "re-run spyrec compile")),
    ("check-program-torchscript", lambda fx, d: run_args(
        _program(fx, d, fx.torchscript.read_bytes()), fx.npz, "--check"), 2,
     ("program.pt2", "TorchScript")),
    ("check-program-other-arity", lambda fx, d: run_args(_program(fx, d, _other_program()),
                                                         fx.npz, "--check"), 2,
     ("program.pt2", "takes 2 inputs", "lists 1 [x]")),
    # inspect: a broken directory is refused by every view, naming the file
    ("inspect-sdsc-missing", lambda fx, d: ["inspect", _broken(fx, d, "sdsc_1.json", None)], 2,
     ("sdsc_1.json", "no such file")),
    ("inspect-tensor-sdsc-missing", lambda fx, d: ["inspect", _broken(fx, d, "sdsc_0.json",
                                                                      None), "x"], 2,
     ("sdsc_0.json", "no such file")),
    ("inspect-json-sdsc-truncated", lambda fx, d: ["inspect", _broken(fx, d, "sdsc_1.json", 40),
                                                   "--json"], 2,
     ("sdsc_1.json", "not valid JSON")),
    ("inspect-svg-sdsc-not-json", lambda fx, d: ["inspect", _broken(fx, d, "sdsc_0.json", b"x"),
                                                 "x", "--svg", d / "x.svg"], 2,
     ("sdsc_0.json", "not valid JSON")),
    ("inspect-svg-trace-sdsc-truncated", lambda fx, d: [    # refused before the svg is drawn
        "inspect", _broken(fx, d, "sdsc_1.json", 0), "x", "--svg", d / "x.svg", "--trace",
        d / "t.json"], 2, ("sdsc_1.json", "not valid JSON")),
    ("inspect-tensor-json-sdsc-schema", lambda fx, d: [
        "inspect", _broken(fx, d, "sdsc_0.json", b"[]"), "x", "--json"], 2,
     ("sdsc_0.json",)),
    ("inspect-bundle-missing", lambda fx, d: ["inspect", _broken(fx, d, "bundle.mlir", None)],
     2, ("bundle.mlir", "no such file")),
    ("inspect-regular-file", lambda fx, d: ["inspect", fx.npz], 2, ("not a directory",)),
    ("inspect-missing-directory", lambda fx, d: ["inspect", d / "none"], 2,
     ("no such directory",)),
    ("run-missing-directory", lambda fx, d: run_args(d / "none", fx.npz), 2,
     ("none", "directory")),
    # issue 56: found by trying the CLI as an attacker; the comment says what it was before
    ("npz-encrypted-member", lambda fx, d: run_args(fx.out, _encrypted(fx, d)), 2,  # was 70
     ("in.npz", "x.npy", "is encrypted")),
    ("safetensors-deep-header", lambda fx, d: run_args(fx.out, write(  # was 70
        d, "in.safetensors", (20000).to_bytes(8, "little") + b"[" * 20000)), 2,
     ("in.safetensors", "nests too deeply")),
    ("npz-is-a-fifo", lambda fx, d: run_args(fx.out, _fifo(d, "in.npz")), 2,
     ("in.npz", "is a FIFO", "expected an .npz file")),
    ("pt2-negative-input-size", lambda fx, d: compile_args(fx, d, model=_pt2(  # was 70
        fx, d, lambda m: _tensor_value(m, "x")["sizes"].__setitem__(0, {"as_int": -64}))), 2,
     ("p.pt2", "tensor 'x' has sizes [-64, 256]", "negative")),
    ("pt2-weight-not-the-graphs-shape", lambda fx, d: compile_args(fx, d, model=_pt2(  # was 70
        fx, d, weights=lambda c: c["config"]["fc1.weight"]["tensor_meta"]["sizes"]
        .__setitem__(0, {"as_int": 0}))), 2,
     ("p.pt2", "parameter 'fc1.weight' is stored as float16[0, 256]", "'p_fc1_weight'")),
    ("pt2-input-not-in-signature", lambda fx, d: compile_args(fx, d, model=_pt2(  # was 70
        fx, d, lambda m: m["graph_module"]["signature"].__setitem__("input_specs", []))), 2,
     ("p.pt2", "are not its signature's []")),
    ("pt2-graph-nested-deep", lambda fx, d: compile_args(fx, d, model=_pt2(  # was 70
        fx, d, lambda m: "[" * 100_000)), 2, ("p.pt2", "nested deeper than any graph")),
    ("pt2-member-claims-past-the-end", lambda fx, d: compile_args(  # was 130 ("interrupted")
        fx, d, model=_claiming(fx, d, "models/model.json", 1 << 30)), 2,
     ("p.pt2", "claims 1073741824 bytes", "past the end")),
    ("pt2-weight-claims-past-the-end", lambda fx, d: compile_args(  # was 70 (mmap)
        fx, d, model=_claiming(fx, d, "weights/weight_0", (1 << 32) - 16)), 2,
     ("p.pt2", "weight_0", "past the end")),
    ("pipeline-is-a-fifo", lambda fx, d: compile_args(  # was a hang
        fx, d, "--pipeline", _fifo(d, "p.yaml")), 2, ("--pipeline", "is a FIFO")),
    ("tiling-is-a-fifo", lambda fx, d: compile_args(  # was a hang
        fx, d, "--tiling", _fifo(d, "t.yaml")), 2, ("--tiling", "is a FIFO")),
    ("layouts-is-a-fifo", lambda fx, d: compile_args(  # was a hang
        fx, d, "--layouts", _fifo(d, "l.yaml")), 2, ("--layouts", "is a FIFO")),
    ("pipeline-nested-deep", lambda fx, d: compile_args(  # was 70
        fx, d, "--pipeline", write(d, "p.yaml", "[" * 5000)), 2,
     ("--pipeline", "nested too deeply")),
    ("set-nested-deep", lambda fx, d: compile_args(  # was 70
        fx, d, "--set", "stick_layout.optimizer=" + "[" * 5000), 2,
     ("--set", "nested too deeply")),
    ("pipeline-alias-bomb", lambda fx, d: compile_args(  # was a hang (and 2.8 GB)
        fx, d, "--pipeline", write(d, "p.yaml", ALIAS_BOMB)), 2,
     ("--pipeline", "more than 100000 values")),
    ("output-is-a-fifo", lambda fx, d: run_args(  # was replaced by a regular file
        fx.out, fx.npz, "-o", _fifo(d, "o.npz")), 2, ("-o", "is a FIFO", "never replaces")),
    ("output-is-a-dangling-link", lambda fx, d: run_args(
        fx.out, fx.npz, "-o", _link(d, "o.npz", "gone.npz")), 2,
     ("-o", "symbolic link to gone.npz", "does not exist")),
    ("svg-is-a-fifo", lambda fx, d: [  # was replaced by a regular file
        "inspect", fx.out, "x", "--svg", _fifo(d, "x.svg")], 2, ("--svg", "is a FIFO")),
    ("trace-is-a-fifo-svg-not-drawn", lambda fx, d: [  # the svg was written first
        "inspect", fx.out, "x", "--svg", d / "x.svg", "--trace", _fifo(d, "t.json")], 2,
     ("--trace", "is a FIFO")),
    ("ir-dump-holds-a-fifo", lambda fx, d: compile_args(
        fx, d, "--print-ir-after-all", _fifo(d / "ir", "00_lower.ir").parent), 2,
     ("--print-ir-after-all", "00_lower.ir", "is a FIFO")),
]

ALIAS_BOMB = "- pass: stick_layout\n  beam_width:\n    - &a0 [x, x, x, x, x, x, x, x, x]\n" + \
    "".join(f"    - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))


def _fifo(d: Path, name: str) -> Path:
    (d / name).parent.mkdir(exist_ok=True)
    os.mkfifo(d / name)
    return d / name


def _link(d: Path, name: str, target: str) -> Path:
    (d / name).symlink_to(target)
    return d / name


def _encrypted(fx: Fixtures, d: Path) -> Path:
    """The inputs with the member's "encrypted" flag set in both of zip's headers."""
    data = bytearray(fx.npz.read_bytes())
    data[6] |= 1
    data[data.find(b"PK\x01\x02") + 8] |= 1
    return write(d, "in.npz", bytes(data))


def _tensor_value(model: dict, name: str) -> dict:
    return model["graph_module"]["graph"]["tensor_values"][name]


def _pt2(fx: Fixtures, d: Path, model=None, weights=None) -> Path:
    """mlp_fp16.pt2 with its graph JSON (`model`) or weights config (`weights`) edited in
    place; `model` may instead return the new JSON text."""
    path = d / "p.pt2"
    with zipfile.ZipFile(fx.pt2) as zin, zipfile.ZipFile(path, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            edit = model if name.endswith("models/model.json") else \
                weights if name.endswith("model_weights_config.json") else None
            if edit is not None:
                doc = json.loads(data)
                data = edit(doc) or json.dumps(doc)
            zout.writestr(name, data)
    return path


def _claiming(fx: Fixtures, d: Path, suffix: str, size: int) -> Path:
    """mlp_fp16.pt2 whose stored member `suffix` claims `size` bytes in both zip headers."""
    data = bytearray(fx.pt2.read_bytes())
    with zipfile.ZipFile(fx.pt2) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    central = data.find(b"PK\x01\x02")
    while not data[central + 46:].startswith(info.filename.encode()):
        central = data.find(b"PK\x01\x02", central + 4)
    for at in (info.header_offset + 18, central + 20):
        data[at:at + 8] = size.to_bytes(4, "little") * 2
    return write(d, "p.pt2", bytes(data))


def _program(fx: Fixtures, d: Path, content: bytes) -> Path:
    """A copy whose manifest vouches for a program.pt2 holding `content` (record_source)."""
    out = out_copy(fx, d)
    record_source(out, content)
    return out


def _broken(fx: Fixtures, d: Path, name: str, keep: int | bytes | None) -> Path:
    """A copy with OUT/name removed (None), cut to its first `keep` bytes, or replaced."""
    out = out_copy(fx, d)
    path = out / name
    if keep is None:
        path.unlink()
    else:
        path.write_bytes(keep if isinstance(keep, bytes) else path.read_bytes()[:keep])
        if name != "weights.bin":   # (its size is the damage: a stamp would change it)
            seal(out)       # damaged, but of the build: what the reader says of the damage
    return out


def _other_program() -> bytes:
    """A .pt2 taking two inputs (mlp_fp16 takes one)."""
    import io

    buffer = io.BytesIO()
    torch.export.save(torch.export.export(
        Lambda2(), (torch.zeros(4, 64, dtype=torch.float16),) * 2), buffer)
    return buffer.getvalue()


class Lambda2(torch.nn.Module):
    def forward(self, a, b):
        return a + b


def _without_program(fx: Fixtures, d: Path, source: str, content: bytes | None = None) -> Path:
    """A copy without program.pt2 whose manifest records `d/source` (with `content`, or
    missing) as the source .pt2."""
    out = out_copy(fx, d)
    (out / "program.pt2").unlink()
    if content is not None:
        (d / source).write_bytes(content)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["source"].update(path=str(d / source), copy=None)
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def _file(d: Path, name: str, content: bytes) -> Path:
    (d / name).write_bytes(content)
    return d / name


def _weights_offset(offset: int):
    def change(m: dict) -> dict:
        m["weights"]["tensors"][0]["offset"] = offset
        return m
    return change


def spyrec(args: list, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("SPYREC_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "spyrec", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def files_under(*dirs: Path) -> set[Path]:
    return {p for d in dirs for p in d.rglob("*")}


@dataclass(frozen=True)
class Outcome:
    result: subprocess.CompletedProcess
    new_files: set[Path]         # in the row's own directory, beyond what its setup made


@pytest.fixture(scope="module")
def outcomes(fx, tmp_path_factory) -> dict[str, Outcome]:
    """Every row run once, two at a time: the rows are independent subprocesses that mostly
    wait on imports, and one after another they would take twice as long."""
    from concurrent.futures import ThreadPoolExecutor

    def run(row) -> Outcome:
        name, build, _, _ = row
        d = tmp_path_factory.mktemp(f"row-{name}")
        args = build(fx, d)
        before = files_under(d)
        result = spyrec(args, d)
        return Outcome(result, files_under(d) - before)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip([r[0] for r in ROWS], pool.map(run, ROWS)))


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_and_an_exit_code(row, outcomes):
    name, _, code, words = row
    result, new_files = outcomes[name].result, outcomes[name].new_files
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == code, result.stderr
    assert result.stdout == ""
    # progress lines ("spyrec compile: load") appear when a step takes over a second, which a
    # loaded machine can make happen; they are not part of the error
    lines = [line for line in result.stderr.splitlines()
             if line.strip() and not re.match(r"spyrec (compile|run): ", line)]
    if lines and lines[0].startswith(("Usage:", "Try ")):   # click's usage format
        assert lines[-1].startswith("Error: "), result.stderr
    else:
        assert len(lines) == 1 and lines[0].startswith("spyrec: "), result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    assert not new_files, sorted(map(str, new_files))   # no output, no `.*.tmp-*` sibling


def test_no_row_touched_the_shared_output_directory(fx, outcomes):
    """Rows that read fx.out directly must not have left outputs.npz or temp files in it."""
    assert sorted(p.name for p in fx.out.iterdir()) == sorted(EXPECTED_OUT_FILES)


# mlp_fp16: two fused SuperDSCs (each linear layer's matmul and its epilogue)
EXPECTED_OUT_FILES = ["bundle.mlir", "manifest.json", "opspecs.json", "program.pt2",
                      "report.json", "report.txt", "sdsc_0.json", "sdsc_1.json", "weights.bin"]


def test_run_output_is_written_under_exactly_the_name_given(fx, tmp_path):
    result = spyrec(run_args(fx.out, fx.npz, "-o", tmp_path / "results", "-q"), tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    with np.load(tmp_path / "results") as saved:
        assert saved.files == ["output_0"]


def test_run_replaces_an_earlier_outputs_file_and_leaves_the_directory_whole(fx, tmp_path):
    """An existing .npz named by -o is replaced (a second run's outputs), and the rows that
    named the compiled directory's own files, the model or the inputs left them as they were
    (refused before any work: their rows above say exit 2)."""
    before = {p: p.read_bytes() for p in (fx.out / "manifest.json", fx.out / "weights.bin",
                                          fx.out / "report.json", fx.pt2, fx.npz)}
    target = tmp_path / "results.npz"
    target.write_bytes(b"an earlier run's outputs")
    result = spyrec(run_args(fx.out, fx.npz, "-o", target, "-q"), tmp_path)
    assert result.returncode == 0, result.stderr
    with np.load(target) as saved:
        assert saved.files == ["output_0"]
    assert {p: p.read_bytes() for p in before} == before


# --- a bug in spyrec: exit 70, one line; the traceback only when asked for ----------------------

def _crash(exc: BaseException):
    def compile_and_estimate(*_args, **_kwargs):
        raise exc
    return compile_and_estimate


def _main_exit(argv: list[str]) -> int:
    from spyrec.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code


@pytest.mark.parametrize("verbose", [False, True])
def test_internal_error_is_exit_70_and_one_line(monkeypatch, capsys, tmp_path, verbose):
    import spyrec.driver

    monkeypatch.delenv("SPYREC_DEBUG", raising=False)
    monkeypatch.setattr(spyrec.driver, "compile_and_estimate", _crash(RuntimeError("two\nlines")))
    argv = ["compile", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "o")]
    assert _main_exit(argv + (["-v"] if verbose else [])) == 70
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines[-1] == ("spyrec: internal error: RuntimeError: two lines — please report this "
                         "with the command and input (run with -v for the traceback)")
    assert ("Traceback" in captured.err) == verbose
    assert verbose or len(lines) == 1
    assert captured.out == ""


def test_spyrec_debug_shows_the_traceback(monkeypatch, capsys, tmp_path):
    import spyrec.driver

    monkeypatch.setenv("SPYREC_DEBUG", "1")
    monkeypatch.setattr(spyrec.driver, "compile_and_estimate", _crash(ValueError("bug")))
    assert _main_exit(["compile", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "o")]) == 70
    assert "Traceback" in capsys.readouterr().err


def test_interrupt_is_exit_130_and_one_line(monkeypatch, capsys, tmp_path):
    import spyrec.driver

    monkeypatch.setattr(spyrec.driver, "compile_and_estimate", _crash(KeyboardInterrupt()))
    assert _main_exit(["compile", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "o")]) == 130
    assert capsys.readouterr().err.strip() == "spyrec: interrupted"  # click adds a newline


def test_a_bad_option_fails_before_torch_is_imported(tmp_path):
    """DESIGN §1: options are checked before anything heavy is imported."""
    code = ("import sys\nfrom spyrec.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    print(e.code, 'torch' in sys.modules, 'spyrec.sim.runner' in sys.modules)\n")
    for args in (["compile", "none.pt2", "-o", "o"],
                 ["compile", "none.pt2", "-o", "o", "--set", "work_division.cores=x"],
                 ["compile", "none.pt2", "-o", "o", "--layouts", "."],
                 ["run", "none", "--inputs", "."]):
        result = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path,
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert result.stdout.split() == ["2", "False", "False"], (args, result.stderr)


def _npy(header: dict, data: bytes = b"\0" * 64) -> bytes:
    text = repr(header).encode()
    pad = 63 - (10 + len(text)) % 64
    return b"\x93NUMPY\x01\x00" + (len(text) + pad + 1).to_bytes(2, "little") + text + \
        b" " * pad + b"\n" + data


@pytest.mark.parametrize("shape, words", [
    ((-4,), "bad header: shape [-4]"),
    ((10**12,), "header says [1000000000000] float16 (2000000000000 bytes)"),
    ((64,), "header says [64] float16 (128 bytes) but the member holds 64 bytes"),
])
def test_npz_headers_are_checked_before_numpy_reads_them(tmp_path, shape, words):
    """In-process, so the cases are cheap: numpy would allocate 2 TB for the second."""
    from spyrec.errors import InputFileError
    from spyrec.sim.inputs import read_npz

    path = npz_member(tmp_path, "in.npz", _npy({"descr": "<f2", "fortran_order": False,
                                                 "shape": shape}))
    with pytest.raises(InputFileError, match=re.escape(words)):
        read_npz(path)
