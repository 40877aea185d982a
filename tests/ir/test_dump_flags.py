"""The MLIR-style IR flags of `spyrec compile` (DESIGN §1, issue 12 §2): `--list-passes`,
`--print-ir-after-all DIR`, `--print-ir-before PASS`, `--dump-after`, `--verify-each` — their
output parses, bad names list the valid ones, and a graph broken by a pass is exit 70."""

import re
import subprocess
import sys

import pytest
import torch

from spyrec.cli import main
from spyrec.ir.parser import parse
from spyrec.ir.printer import format_graph
from tests.cli_lines import error_line
from tests.programs import Lambda, export

STEPS = ["00_lower.ir", "01_gather_coordinates.ir", "02_split_outputs.ir",
         "03_dequant_matmul.ir", "04_stick_layout.ir",
         "05_matmul_padding.ir", "06_flash_attention.ir", "07_symbolic_lengths.ir",
         "08_coarse_tiling.ir", "09_split_padding.ir",
         "10_work_division.ir", "11_superdsc_legalize.ir", "12_stage_inputs.ir",
         "13_length_shares.ir", "14_scratchpad_planning.ir", "15_fusion.ir",
         "16_memory_planning.ir"]


@pytest.fixture(scope="module")
def pt2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flags")
    return export(tmp, Lambda(lambda m, x, y: (x @ y).relu()),
                  (torch.randn(8, 40), torch.randn(40, 16)))


def run(*args) -> int:
    try:
        main([str(a) for a in args])
    except SystemExit as e:
        return e.code or 0
    return 0


def test_list_passes_needs_no_model_and_lists_every_pass(capsys):
    assert run("compile", "--list-passes") == 0
    out = capsys.readouterr().out
    assert out.startswith("gather_coordinates — everything indirect: index checks")
    assert "\nstick_layout — choose a DeviceLayout for every buffer" in out
    assert "\nwork_division — split every op's iteration space across the cores.\n" \
           "    cores: int = 32\n" in out


def test_print_ir_after_all_writes_one_parsable_file_per_step(pt2, tmp_path, capsys):
    dumps = tmp_path / "dumps"
    assert run("compile", pt2, "-o", tmp_path / "out", "--print-ir-after-all", dumps, "-q") == 0
    assert sorted(p.name for p in dumps.iterdir()) == STEPS
    texts = [(dumps / name).read_text() for name in STEPS]
    assert texts[0].startswith("// IR after lower (step 0)\n")
    graphs = [parse(t) for t in texts]
    assert [format_graph(g) for g in graphs] == [t.split("\n", 1)[1] for t in texts]
    # K = 40 is not a whole fp32 stick: matmul_padding adds the padded copy of y (args_1)
    assert "args_1__kpad" not in texts[4]
    assert "buffer args_1__kpad: intermediate float32[64, 16]" in texts[5]
    assert " cores [" in texts[10] and " cores [" not in texts[9]
    # each buffer in HBM (memory_planning) or in LX (scratchpad_planning), never both
    assert all((b.hbm_address is None) != (b.lx_address is None)
               for b in graphs[16].buffers.values())
    assert capsys.readouterr().err == ""


def test_a_second_dump_replaces_the_first_and_foreign_files_are_refused(pt2, tmp_path,
                                                                        capsys):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "07_old_pass.ir").write_text("stale")
    assert run("compile", pt2, "-o", tmp_path / "out", "--print-ir-after-all", dumps, "-q") == 0
    assert sorted(p.name for p in dumps.iterdir()) == STEPS
    (dumps / "notes.txt").write_text("mine")
    assert run("compile", pt2, "-o", tmp_path / "out", "--print-ir-after-all", dumps) == 2
    assert capsys.readouterr().err == (
        f"spyrec: --print-ir-after-all {dumps}: holds 'notes.txt', not an IR dump; give a new "
        f"or empty directory (spyrec replaces only its own NN_<pass>.ir files)\n")
    assert (dumps / "notes.txt").read_text() == "mine"
    assert run("compile", pt2, "-o", tmp_path / "out", "--print-ir-after-all",
               tmp_path / "out" / "ir") == 2
    assert "is inside the output directory" in capsys.readouterr().err


def test_print_ir_before_and_dump_after_go_to_stderr(pt2, tmp_path, capsys):
    assert run("compile", pt2, "-o", tmp_path / "out", "--print-ir-before", "work_division",
               "--dump-after", "work_division", "-q") == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    before, after = captured.err.split("// ----- IR after work_division -----\n")
    assert before.startswith("// ----- IR before work_division -----\n")
    assert " cores [" not in before and " cores [" in after
    assert parse(before) is not None and parse(after) is not None


@pytest.mark.parametrize("flag", ["--print-ir-before", "--dump-after"])
def test_unknown_pass_names_list_the_valid_ones(flag, pt2, tmp_path, capsys):
    assert run("compile", pt2, "-o", tmp_path / "out", flag, "work_divison") == 2
    valid = ("gather_coordinates, split_outputs, dequant_matmul, stick_layout, matmul_padding, "
             "flash_attention, "
             "symbolic_lengths, coarse_tiling, split_padding, work_division, superdsc_legalize, stage_inputs, length_shares, "
             "scratchpad_planning, fusion, "
             "memory_planning")
    valid = f"all, lower, {valid}" if flag == "--dump-after" else valid
    assert capsys.readouterr().err == (f"spyrec: {flag} 'work_divison': not a pass of this "
                                       f"pipeline; choose one of: {valid}\n")


def test_verify_each_reports_the_pass_that_broke_the_graph(pt2, tmp_path, capsys,
                                                          monkeypatch):
    from spyrec.plan import core_splits

    monkeypatch.setattr(core_splits, "_split",
                        lambda graph, op, *state: ({v: 3 if i == 0 else 1
                                                    for i, (v, _) in enumerate(op.ranges)},
                                                   None))
    assert run("compile", pt2, "-o", tmp_path / "out", "--verify-each",
               "--set", "work_division.chain_moves=false") == 70
    err = error_line(capsys.readouterr().err)
    # the fill of the padded K's 24 padding rows divides by 3; the copy of K = 40 rows is
    # the first op it breaks (chain moves off: they would re-split some ops validly)
    assert re.fullmatch(r"spyrec: the IR is not valid after work_division: op 'args_1__kpad.1' "
                        r"\([^)]*\): cores \[r0:3, c1:1\]: 3 slices do not divide r0<40 \(and "
                        r"2 more problems\); this is a spyrec bug, please report it with the "
                        r"command and input", err), err
    assert not (tmp_path / "out").exists()


def test_pass_text_tests_import_no_torch():
    """The IR-text pass tests run without torch: import them in a fresh process."""
    probe = ("import sys\n"
             "import tests.passes.test_work_division, tests.passes.test_memory_planning\n"
             "import tests.passes.test_matmul_padding, tests.passes.test_stick_layout_text\n"
             "import tests.ir.test_verify\n"
             "print('torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=300, check=True)
    assert r.stdout == "False\n"
