"""`spyrec compile` estimates the cost from the files it built in memory (issue 11 §2): no
re-read, no schema pass, no xDSL for its own flat bundle. The numbers must be those of the
written directory read back the untrusted way (schema, verify, xDSL)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from samples.models import SAMPLES
from spyrec.sim.loader import _flat_bundle, load_directory, load_files
from spyrec.sim.runner import cost_for_directory, cost_for_files
from tests.programs import compile_samples
from tests.sim.test_loops import tiled_add


def _texts(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_samples(tmp_path_factory.mktemp("cost"), SAMPLES)


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_compile_cost_is_the_cost_of_the_written_directory(compiled, sample):
    out = compiled[sample]
    written = json.loads((out / "report.json").read_text())["cost"]
    from_disk = json.loads(json.dumps(cost_for_directory(out)))
    assert written["totals"]["time_us"] > 0 and written["ops"]
    assert written == from_disk


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_in_memory_program_equals_the_loaded_directory(compiled, sample):
    out = compiled[sample]
    assert load_files(_texts(out), out) == load_directory(out)


def test_a_bundle_with_loops_goes_through_xdsl_and_counts_every_execution(out):
    path = tiled_add(out)
    texts = _texts(path)
    assert _flat_bundle(texts["bundle.mlir"].decode(), "bundle.mlir") is None
    cost = cost_for_files(texts, path)
    assert cost["ops"][0]["executions"] == 4
    assert cost == cost_for_directory(path)


def test_only_the_exact_flat_form_takes_the_fast_path():
    good = ('module {\n  func.func @sdsc_bundle() {\n'
            '    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}\n'
            '    func.return\n  }\n}\n')
    (ex,) = _flat_bundle(good, "b.mlir")
    assert (ex.file, ex.operands, ex.location) == ("sdsc_0.json", (), "b.mlir:3:5")
    for bad in (good.replace("    sdscbundle", "    // sdscbundle"),
                good.replace("() {sdsc", "(%a) {sdsc"),
                good.replace("@sdsc_bundle", "@other"),
                good.replace("func.return\n", "func.return\n    func.return\n")):
        assert _flat_bundle(bad, "b.mlir") is None, bad


def test_the_trusted_load_imports_neither_jsonschema_nor_xdsl(compiled):
    out = compiled["mlp_fp32"]
    code = ("import sys; from pathlib import Path; from spyrec.sim.runner import cost_for_files\n"
            f"out = Path({str(out)!r})\n"
            "cost_for_files({p.name: p.read_bytes() for p in out.iterdir()}, out)\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('jsonschema', 'xdsl', 'torch'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    assert loaded == []


def _same_json(a, b) -> bool:
    """Equal with equal types all the way down (a tuple is not a list, 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("sample", ["decoder_fp32", "attention_fp32", "decoder_step"])
def test_the_documents_compile_reads_back_are_what_their_text_parses_to(tmp_path, monkeypatch,
                                                                      sample):
    """compile's cost estimate reads each sdsc document from memory, not from its text: that
    is only the same program if the document is plain JSON (no tuples, no int keys)."""
    import spyrec.codegen.writer as writer

    printed = []
    dump = writer.dump_json

    def recording(obj):
        text = dump(obj)
        printed.append(text)
        return text
    monkeypatch.setattr(writer, "dump_json", recording)
    if sample == "decoder_step":          # gathers, KV-cache scatters, LX
        from samples.decoder_step import make
        from tests.programs import compile_pt2, export

        module, inputs = make()
        compile_pt2(export(tmp_path, module, inputs, sample), tmp_path / sample)
    else:
        compile_samples(tmp_path, [sample])
    assert len(printed) > 3
    for text in printed:
        assert _same_json(text.doc, json.loads(text)), text[:200]


def test_a_plain_text_is_parsed(tmp_path):
    """Texts without a document (bytes read from disk) still go through json.loads."""
    texts = {"x.json": '{"a": [1, 2]}\n'}
    from spyrec.sim.loader import _Files
    assert _Files(tmp_path, texts).json("x.json", "sdsc") == {"a": [1, 2]}
