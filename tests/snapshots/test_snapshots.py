"""Snapshots of the samples' bundle.mlir and normalized opspecs.json (DESIGN §9).

A difference fails and shows a unified diff; `make snapshots` rewrites the files after an
intended change (SPYREC_UPDATE_SNAPSHOTS=1).
"""

import difflib
import json
import os
from pathlib import Path

import pytest

from tests.programs import compile_samples

HERE = Path(__file__).resolve().parent
UPDATE = os.environ.get("SPYREC_UPDATE_SNAPSHOTS") == "1"
SNAPSHOT_SAMPLES = ["add_mul_fp16", "mlp_fp16", "attention_fp32", "layernorm_fp16",
                    "decoder_fp32"]
# tiled programs (samples/tiling.py with configs/tiling/<name>.yaml), snapshotted as tiled_<name>
TILED_SAMPLES = ["seed_add_mul", "softmax_rows", "decoder_mlp_tokens", "matmul_k"]
CONFIGS = HERE.parents[1] / "configs" / "tiling"


def normalized_opspecs(text: str) -> str:
    """opspecs.json without the per-core tables (derived data, very long)."""
    doc = json.loads(text)

    def strip(specs: list) -> None:
        for spec in specs:
            if "loop" in spec:
                strip(spec["loop"]["body"])
            spec.pop("cores", None)
    for kernel in doc["kernels"]:
        strip(kernel["specs"])
    return json.dumps(doc, indent=1) + "\n"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    built = compile_samples(tmp_path_factory.mktemp("snap"), SNAPSHOT_SAMPLES)
    from samples.tiling import TILING_SAMPLES
    from tests.programs import compile_pt2, export

    tmp = tmp_path_factory.mktemp("snap_tiled")
    for name in TILED_SAMPLES:
        module, inputs = TILING_SAMPLES[name]()
        built[f"tiled_{name}"] = compile_pt2(export(tmp, module, inputs, name),
                                             tmp / f"tiled_{name}",
                                             tiling=CONFIGS / f"{name}.yaml")
    built[SYMBOLIC] = _symbolic_decoder(tmp_path_factory.mktemp("snap_symbolic"))
    return built


def _symbolic_decoder(tmp: Path) -> Path:
    """The sample decoder block with its token dim exported as 64 * Dim("s", max=4): one
    program for 128..256 tokens, the bundle taking the length as its argument (issue 30)."""
    import torch

    from samples.models import Decoder, _init, _randn
    from tests.programs import compile_pt2, export

    s = torch.export.Dim("s", max=4)
    pt2 = export(tmp, _init(Decoder(depth=1)), (_randn(2, 256, 256),), SYMBOLIC,
                 dynamic_shapes={"x": {1: 64 * s}})
    return compile_pt2(pt2, tmp / SYMBOLIC)


SYMBOLIC = "symbolic_decoder_fp32"
ALL_SAMPLES = SNAPSHOT_SAMPLES + [f"tiled_{name}" for name in TILED_SAMPLES] + [SYMBOLIC]


@pytest.mark.parametrize("sample", ALL_SAMPLES)
@pytest.mark.parametrize("kind", ["bundle.mlir", "opspecs.json"])
def test_snapshot(outputs, sample, kind):
    text = (outputs[sample] / kind).read_text()
    if kind == "opspecs.json":
        text = normalized_opspecs(text)
    path = HERE / sample / kind
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no snapshot {path}; run `make snapshots`"
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"snapshot/{sample}/{kind}", f"now/{sample}/{kind}",
                                            n=2))
        pytest.fail(f"{sample}/{kind} differs from its snapshot (make snapshots to accept):\n"
                    f"{diff[:6000]}")


@pytest.mark.parametrize("sample", ALL_SAMPLES)
def test_bundle_parses_and_verifies_with_xdsl(outputs, sample):
    from spyrec.sim.bundle import read_bundle

    manifest = json.loads((outputs[sample] / "manifest.json").read_text())
    maxima = {s["name"]: s["maximum"] for s in manifest.get("symbols", [])}
    executes = read_bundle(outputs[sample] / "bundle.mlir", maxima)
    n_ops = len(manifest["kernels"][0]["ops"])
    files = [f"sdsc_{i}.json" for i in range(n_ops)]
    if sample.startswith("tiled_") or maxima:   # loop bodies execute once per iteration
        assert list(dict.fromkeys(e.file for e in executes)) == files
        assert len(executes) > n_ops
    else:
        assert [e.file for e in executes] == files
