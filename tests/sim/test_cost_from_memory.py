"""`spyrec compile` estimates the cost from the documents it has just built (issue 11 §2): no
re-read, no schema pass, no MLIR parser (spyrec/driver.py, sim/program.py
`program_from_documents`). That must be the program `spyrec run` reads from the written files
(schemas, xDSL), and the numbers those of the written directory."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from samples.models import SAMPLES
from spyrec.codegen.writer import printed
from spyrec.compiler import CompileOptions, compile_program
from spyrec.driver import estimate_cost
from spyrec.sim.directory import read_output_dir
from spyrec.sim.program import program_from_documents
from spyrec.sim.runner import cost_for_directory
from tests.passes.test_constant_layouts import constant_restickifies
from tests.programs import export

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "tiling"
TILED = ["seed_add_mul", "softmax_rows", "decoder_mlp_tokens"]   # loops, symbols, LX


def _compile_keeping_the_documents(pt2: Path, out: Path, **options):
    """Compile as spyrec compile does, keeping what codegen handed the cost estimate."""
    kept = []

    def keep(output, tmp):
        kept.append(output)
        return estimate_cost(output, tmp)
    compile_program(pt2, out, CompileOptions(verbose=-1, **options), keep)
    return kept[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """name -> (OUT, the documents codegen built for it): every sample and the tiled ones."""
    from samples.tiling import TILING_SAMPLES

    tmp = tmp_path_factory.mktemp("cost")
    made = {}
    for name in sorted(SAMPLES):
        module, inputs = SAMPLES[name]()
        pt2 = export(tmp, module, inputs, name)
        made[name] = (tmp / name, _compile_keeping_the_documents(pt2, tmp / name))
    for name in TILED:
        module, inputs = TILING_SAMPLES[name]()
        pt2 = export(tmp, module, inputs, f"tiled_{name}")
        made[f"tiled_{name}"] = (tmp / f"tiled_{name}", _compile_keeping_the_documents(
            pt2, tmp / f"tiled_{name}", tiling=CONFIGS / f"{name}.yaml"))
    return made


NAMES = sorted(SAMPLES) + [f"tiled_{name}" for name in TILED]


@pytest.mark.parametrize("name", NAMES)
def test_compile_cost_is_the_cost_of_the_written_directory(built, name):
    out, _ = built[name]
    written = json.loads((out / "report.json").read_text())["cost"]
    from_disk = json.loads(json.dumps(cost_for_directory(out)))
    assert written["totals"]["time_us"] > 0 and written["ops"]
    assert written == from_disk


@pytest.mark.parametrize("name", NAMES)
def test_the_program_of_the_documents_is_the_program_of_the_files(built, name):
    """Every spec and every execution (operands, symbol ids, loop trips, the statement's
    line and column in bundle.mlir) as the files give them."""
    out, output = built[name]
    from_documents = program_from_documents(out, output.manifest, output.sdsc,
                                            output.executions)
    from_files = read_output_dir(out)
    assert from_documents == from_files
    if name.startswith("tiled_"):
        assert any(ex.loop and ex.symbol_ids for _, ex in from_files.trace)


def _same_json(a, b) -> bool:
    """Equal with equal types all the way down (a tuple is not a list, 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("name", ["decoder_fp32", "attention_fp32", "decoder_step",
                                  "tiled_decoder_mlp_tokens"])
def test_the_documents_are_what_their_texts_parse_to(built, tmp_path, name):
    """The estimate reads each document, not its text: that is only the same program if the
    document is plain JSON (no tuples, no int keys), as parsing the text gives."""
    if name == "decoder_step":          # gathers, KV-cache scatters, LX
        from samples.decoder_step import make

        module, inputs = make()
        output = _compile_keeping_the_documents(export(tmp_path, module, inputs, name),
                                                tmp_path / name)
    else:
        output = built[name][1]
    documents = {"manifest.json": output.manifest, **output.sdsc}
    assert len(documents) >= 3
    for file, document in documents.items():
        text = printed(output.files[file])      # manifest.json: written last, hash filled in
        assert _same_json(document, json.loads(text)), file


def test_the_estimate_imports_neither_jsonschema_nor_xdsl(built):
    """The point of estimating from documents: compile pays for no file reader."""
    out, _ = built["tiled_softmax_rows"]
    code = ("import sys; from pathlib import Path\n"
            "from spyrec.compiler import CompileOptions, compile_program\n"
            "from spyrec.driver import estimate_cost\n"
            f"compile_program(Path({str(out.parent / 'tiled_softmax_rows.pt2')!r}), "
            f"Path({str(out.parent / 'again')!r}), CompileOptions(verbose=-1, "
            f"tiling=Path({str(CONFIGS / 'softmax_rows.yaml')!r})), estimate_cost)\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('jsonschema', 'xdsl'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    assert loaded == []


@pytest.mark.parametrize("name", NAMES)
def test_no_constant_is_restickified_on_the_device(built, name):
    """DESIGN §3: a constant's layout is chosen at compile time, every layout it is read in."""
    out, _ = built[name]
    assert constant_restickifies(out) == []


@pytest.mark.parametrize("name", NAMES)
def test_ops_sharing_a_cost_key_get_their_own_rows_equal_to_op_cost(built, name):
    """`estimate` costs each distinct `cost_key` once: every row is still what `op_cost` of
    that op alone gives (own name, file, executions; own per-core dicts), and in the decoder
    the two layers' ops do share keys (the memo is used, not just harmless)."""
    from spyrec.sim.cost import cost_key, estimate, op_cost

    out, _ = built[name]
    program = read_output_dir(out)
    cost = cost_for_directory(out)
    specs = sorted(program.ops.values(), key=lambda s: s.index)
    assert [r["file"] for r in cost["ops"]] == [s.file for s in specs]
    for row, spec in zip(cost["ops"], specs):
        alone = op_cost(spec, row["executions"])
        if spec.fused:      # a fused file's member: its share of the group's time, no more
            assert row["fused"] == spec.fused and row["time_us"] <= alone["time_us"] + 1e-6
            row = {k: v for k, v in row.items() if k != "fused"} | {"time_us": alone["time_us"]}
        assert row == alone, spec.file
        assert row["per_core"] is not alone["per_core"]
    rows = estimate(program.ops, {"main": {s.file: 1 for s in specs}})["ops"]
    assert len({id(c) for r in rows for c in r["per_core"]}) == \
        sum(len(r["per_core"]) for r in rows)
    if name == "decoder_fp32":
        keys = {cost_key(s) for s in specs}
        assert len(keys) < len(specs)
