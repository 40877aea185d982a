"""bundle.mlir: parse + verify with xDSL, flatten loops into the execution list."""

import pytest

from spyrec.errors import InputFileError
from spyrec.sim.bundle import execute, parse_bundle, read_bundle

LOOPS = """\
#map_0 = affine_map<(d0, d1)[s0] -> (s0 + 65536*d0 + 2097152*d1)>
#map_1 = affine_map<(d0)[s0] -> (s0 + 128*d0)>
module {
  func.func @sdsc_bundle() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %loop_bound_0 = arith.constant 2 : index
    %loop_bound_1 = arith.constant 4 : index
    %sym_1 = arith.constant 4096 : index
    %off = arith.constant 256 : index
    %sym_2 = arith.addi %sym_1, %off : index
    scf.for %i_0 = %c0 to %loop_bound_0 step %c1 {
      scf.for %i_1 = %c0 to %loop_bound_1 step %c1 {
        %addr_0 = affine.apply #map_0(%i_0, %i_1)[%sym_1]
        %addr_1 = affine.apply #map_1(%i_1)[%sym_2]
        sdscbundle.sdsc_execute (%addr_0, %addr_1) {sdsc_filename = "sdsc_0.json"}
      }
    }
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_1.json"}
    func.return
  }
}
"""


def trace(text: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(e.file, e.operands) for e in execute(parse_bundle(text))]


def test_flat_bundle_runs_in_text_order():
    text = """module {
  func.func @sdsc_bundle() {
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}
    sdscbundle.sdsc_execute () {sdsc_filename="sdsc_1.json"}
    return
  }
}
"""
    assert trace(text) == [("sdsc_0.json", ()), ("sdsc_1.json", ())]


def test_nested_loops_affine_apply_and_addi():
    expected = [("sdsc_0.json", (4096 + 65536 * d0 + 2097152 * d1, 4352 + 128 * d1))
                for d0 in range(2) for d1 in range(4)]
    assert trace(LOOPS) == expected + [("sdsc_1.json", ())]


def test_execute_records_its_location(tmp_path):
    path = tmp_path / "bundle.mlir"
    path.write_text(LOOPS)
    first = read_bundle(path)[0]
    assert first.location == f"{path}:16:9"


@pytest.mark.parametrize("old, new, where, message", [
    ("arith.constant 2 : index", "arith.constnt 2 : index", "bundle.mlir:7:35",
     "arith.constnt is not registered"),
    ('"sdsc_1.json"', '"sdsc_1.txt"', "bundle.mlir:19:5",
     "sdsc_filename must end with '.json', got 'sdsc_1.txt'"),
    ("[%sym_2]", "[%sym_9]", "bundle.mlir:15:9", "use of undefined value %sym_9"),
    ('{sdsc_filename = "sdsc_1.json"}', "{sdsc_filename = 3}", "bundle.mlir:19:5", "string"),
    ("    %off = arith.constant 256 : index\n    %sym_2 = arith.addi %sym_1, %off : index\n",
     "    %sym_2 = arith.addi %sym_1, %off : index\n    %off = arith.constant 256 : index\n",
     "bundle.mlir:10:5", "operand %off is used before its definition"),
])
def test_malformed_bundles_name_line_and_column(old, new, where, message):
    assert old in LOOPS
    with pytest.raises(InputFileError) as e:
        trace(LOOPS.replace(old, new, 1))
    assert where in str(e.value) and message in str(e.value)


def test_registered_but_unexecutable_op_is_a_clear_error():
    text = LOOPS.replace("%sym_2 = arith.addi %sym_1, %off", "%sym_2 = arith.muli %sym_1, %off")
    with pytest.raises(InputFileError, match=r"bundle.mlir:11:5: arith.muli: cannot execute "
                                             r"this op \(executable: affine.apply, "
                                             r"affine.min, arith.addi"):
        trace(text)


def test_a_function_argument_that_is_no_symbolic_length_is_rejected():
    """Arguments are the manifest's symbolic lengths, bound by name (the reference's form,
    addresses passed at run time, is not spyrec's)."""
    text = """module {
  func.func @sdsc_bundle(%a: index) {
    sdscbundle.sdsc_execute (%a) {sdsc_filename = "sdsc_0.json"}
    func.return
  }
}
"""
    with pytest.raises(InputFileError, match=r"bundle.mlir:2:3: func.func: the bundle function "
                                             r"takes argument %a \(index\), which is not an "
                                             r"index named after a symbolic length of "
                                             r"manifest.json \$.symbols \(declared: none\)"):
        trace(text)


def test_a_symbolic_length_sets_a_trip_count():
    """`%s` binds the length; `arith.divui` by the tile gives the trips."""
    text = """module {
  func.func @sdsc_bundle(%s: index {spyre.granularity = 64 : i64, spyre.min_value = 128 : i64, spyre.max_value = 256 : i64}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %n = arith.divui %s, %c64 : index
    scf.for %i = %c0 to %n step %c1 {
      sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}
    }
    func.return
  }
}
"""
    assert [ex.loop for ex in execute(parse_bundle(text), {"s": 192})] == [
        (("i_0", 0),), (("i_0", 1),), (("i_0", 2),)]


def test_truncated_file():
    with pytest.raises(InputFileError, match="bundle.mlir does not parse:\nbundle.mlir:1:9"):
        trace("module {")


def test_missing_file(tmp_path):
    with pytest.raises(InputFileError, match=r"bundle.mlir: missing"):
        read_bundle(tmp_path / "bundle.mlir")
