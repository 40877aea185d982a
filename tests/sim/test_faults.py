"""Programs that must not run: every fault names the op, the sdsc file, the arg and the value."""

import numpy as np
import pytest

from spyrec.errors import InputFileError, SimulatorFault
from spyrec.sim.verify import op_problems
from tests.sim.builder import elementwise, rowmajor2d

X = np.ones((4, 100), dtype=np.float16)


def edit_op(out, fn):
    """Change the program's op 0 (its access form, tests/sim/access_form.py) before it loads."""
    fn(out.ops[0])


def test_coordinate_outside_its_device_dim(out):
    out.input("x", [4, 100])
    out.output("y", [4, 100])
    out.op("neg", {"c0": 4, "c1": 100}, [("x", ["floor(c1/64)", "c0 + 1", "Mod(c1, 64)"]),
                                         ("y", rowmajor2d())])
    with pytest.raises(SimulatorFault, match=(
            r"sdsc_0.json \(neg 'neg_0', model.py:10 in forward\): arg 'x' device dim 1 "
            r"coordinate c0 \+ 1 = 4 is outside 0..3 of device_size \[2, 4, 64\] at c0=3")):
        out.run({"x": X})


def test_arg_outside_every_tensor(out):
    elementwise(out, "neg", {"x": "float16"}, "float16")
    def move(d):
        d["args"][0]["allocation"] = {"hbm": 768}
        for core in d["cores"]:
            core["arg_start_bytes"][0] += 768
    edit_op(out, move)
    with pytest.raises(SimulatorFault, match=r"arg 'x': bytes \[768, 1792\) of its layout "
                                             r"\[2, 4, 64\] are not inside one tensor"):
        out.run({"x": X})


def test_misaligned_arg_base(out):
    elementwise(out, "neg", {"x": "float16"}, "float16")

    def move(d):
        d["args"][0]["allocation"] = {"hbm": 2}
        for core in d["cores"]:
            core["arg_start_bytes"][0] += 2
    edit_op(out, move)
    with pytest.raises(SimulatorFault, match=r"arg 'x': allocation.hbm 2 is not 128-byte "
                                             r"aligned"):
        out.run({"x": X})


def test_overlapping_allocations_in_the_manifest(out):
    elementwise(out, "neg", {"x": "float16"}, "float16")
    out.tensors["out"].update(hbm_address=512)
    with pytest.raises(SimulatorFault, match=r"tensors 'x' \[0, 1024\) and 'out' \[512, 1536\) "
                                             r"overlap in HBM while both are live"):
        out.run({"x": X})


def test_misaligned_tensor(out):
    elementwise(out, "neg", {"x": "float16"}, "float16")
    out.tensors["out"].update(hbm_address=1088)
    with pytest.raises(SimulatorFault, match="tensor 'out': HBM address 1088 is not 128-byte"):
        out.run({"x": X})


@pytest.mark.parametrize("coords", [
    ["floor(c1/64)", "Mod(c0, 2)", "Mod(c1, 64)"],            # disproved per var
    ["floor((c0 + c1)/64)", "0", "Mod(c0 + c1, 64)"],          # mixes vars: exact count
])
def test_output_written_twice_within_an_op(out, coords):
    out.input("x", [4, 100])
    out.output("y", [4, 100])
    out.op("neg", {"c0": 4, "c1": 100}, [("x", rowmajor2d()), ("y", coords)])
    with pytest.raises(SimulatorFault, match=r"output 'y' writes device element \d+ more than "
                                             r"once \(first at c0=\d, c1=\d+\)"):
        out.run({"x": X})


def test_one_to_one_proofs(out):
    from spyrec.sim.access import one_to_one
    from spyrec.sim.binding import Binding
    from spyrec.sim.chunking import Chunk
    out.input("x", [4, 100])
    out.output("y", [4, 100])
    out.op("neg", {"c0": 4, "c1": 100}, [("x", rowmajor2d()), ("y", rowmajor2d())])
    spec = out.program().ops["sdsc_0.json"]
    chunk = Chunk(("c0", "c1"), (0, 0), (4, 100))
    from dataclasses import replace
    from spyrec.indexing import parse_expr

    def verdict(coords):
        arg = replace(spec.output, coordinates=tuple(parse_expr(c) for c in coords))
        return one_to_one(spec, Binding(arg, 0, (0, 0, 0)), chunk)

    assert verdict(rowmajor2d()) is True
    assert verdict(["floor(c1/64)", "Mod(c0, 2)", "Mod(c1, 64)"]) is False
    assert verdict(["floor(c1/64)", "0", "Mod(c1, 64)"]) is False
    assert verdict(["floor((c0 + c1)/64)", "0", "Mod(c0 + c1, 64)"]) is None


def test_operand_missing_from_the_bundle(out):
    elementwise(out, "neg", {"x": "float16"}, "float16")
    edit_op(out, lambda d: d["args"][0].update(operand=1))
    with pytest.raises(SimulatorFault, match=r"arg 'x': takes its base from operand 1, but "
                                             r".*bundle.mlir:3:5 passes 0 operands"):
        out.run({"x": X})


def test_lx_arguments_need_superdsc(out):
    elementwise(out, "neg", {"x": "float16"}, "float16")
    edit_op(out, lambda d: d["args"][1].update(allocation={"lx": 0}))
    with pytest.raises(SimulatorFault, match="arg 'out': LX allocations are simulated from SuperDSC"):
        out.run({"x": X})


# --- static verification ------------------------------------------------------------------------


def problems(out, change=None, **kw):
    elementwise(out, **kw)
    if change:
        edit_op(out, change)
    return op_problems(out.program().ops["sdsc_0.json"])


def neg(**kw):
    return dict(op="neg", inputs={"x": "float16"}, out_dtype="float16", **kw)


def test_a_consistent_op_has_no_problems(out):
    assert problems(out, **neg(split={"c0": 2, "c1": 2})) == []


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(op="frobnicate"), "op 'frobnicate' is not in the op table (known: "),
    (lambda d: d.update(op="add"), "op 'add' takes 2 value input(s) with constants [], got 1"),
    (lambda d: d.update(op="pow"), "op 'pow' needs op_info.constants ['exponent']"),
    (lambda d: d.update(reduced=["c1"]), "reduced vars ['c1'] on an op with is_reduction false"),
    (lambda d: d["cores"][1]["ranges"].update(c0=[1, 4]),
     "the cores do not split the iteration space exactly: the point c0=1, c1=0 is run twice"),
    (lambda d: d["cores"][1]["ranges"].update(c0=[3, 4]),
     "the cores do not split the iteration space exactly: the point c0=2, c1=0 is run by no "
     "core"),
    (lambda d: d["cores"].pop(), "iteration_space asks for 2 core slices, cores lists 1"),
    (lambda d: d["cores"][1]["arg_start_bytes"].__setitem__(0, 0),
     "core 1: arg_start_bytes[0] ('x') is 0, but its coordinates at the core's first point "
     "give 256"),
])
def test_static_problems(out, change, message):
    found = problems(out, change, **neg())
    assert any(message in p for p in found), found


def test_verify_lists_every_problem_at_once(out):
    elementwise(out, **neg())
    edit_op(out, lambda d: (d.update(op="pow"), d["cores"].pop()))
    with pytest.raises(InputFileError) as e:
        out.load()
    assert "needs op_info.constants ['exponent']" in str(e.value)
    assert "cores lists 1" in str(e.value)


def test_null_start_bytes_only_for_gathered_args(out):
    found = problems(out, lambda d: d["cores"][0]["arg_start_bytes"].__setitem__(0, None),
                     **neg())
    assert found == ["core 0: arg_start_bytes[0] ('x') is null, but its address does not "
                     "depend on data: 0"]


def test_replica_dims_are_unaddressed_unreduced_and_split_over_all_values(out):
    """OpSpec.replica_vars (docs/formats.md, replicas), which the cost model counts once and
    the verifier lets an LX output skip: a dim no arg addresses, split one value per core.
    An output in HBM gets no such pass: its copies would write each element again."""
    from dataclasses import replace

    out.input("x", [4, 100])
    out.output("y", [4, 100])
    out.op("neg", {"c0": 4, "c1": 100}, [("x", rowmajor2d()), ("y", rowmajor2d())])
    spec = out.program().ops["sdsc_0.json"]
    space = dict(spec.iteration_space)
    assert spec.replica_vars == ()
    assert replace(spec, iteration_space={**space, "rep": (4, 4)}).replica_vars == ("rep",)
    assert replace(spec, iteration_space={**space, "rep": (4, 2)}).replica_vars == ()
    assert replace(spec, iteration_space={**space, "c0": (4, 4)}).replica_vars == ()
    copies = replace(spec, iteration_space={**space, "rep": (4, 4)})
    assert any("output var rep (range 4) does not index the output" in p
               for p in op_problems(copies))
