"""A `.pt2` exported with `torch.export.Dim` is read at one binding of its symbols, the same by
both front ends; what spyrec cannot serve at every admissible length is one refusal naming
the symbol, the tensor and dim, and what to change in the export."""

import json
import re

import pytest
import torch
from torch.export import Dim

from spyrec.errors import ConfigError, UnsupportedProgram
from spyrec.frontend.from_torch import program_of
from spyrec.frontend.load import load_program
from spyrec.frontend.program import Ref, TensorMeta
from spyrec.frontend.pt2json import read_program
from spyrec.frontend.symbols import evaluate, multiple_of_symbol, readable
from spyrec.ir import SymLength
from spyrec.pt2archive import load_exported
from tests.frontend.archives import with_model_json
from tests.frontend.test_fast_reader import assert_same_program
from tests.programs import Lambda, cli, export

REEXPORT = ("re-export with static shapes: call torch.export.export(model, example_inputs) "
            "without dynamic_shapes (and without torch.export.Dim), then save it again")
SYMBOL = r"(s\d+)"  # torch numbers its symbols itself


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(128, 128)

    def forward(self, x):
        return self.lin(x).relu()


class HFLike(torch.nn.Module):
    """Reads `x.shape[1]` as Hugging Face attention does: sym_size nodes, a view and a reshape
    with symbolic sizes, positions from `torch.arange`."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(128, 128)

    def forward(self, x):
        b, n, _ = x.shape
        heads = self.lin(x).view(b, n, 4, 32).transpose(1, 2)
        positions = torch.arange(x.shape[1]).to(x.dtype)
        return heads.sum(-1) + positions, heads.reshape(b, 4, n * 32)


class SelfAttention(torch.nn.Module):
    """Scores of a symbolic length by itself: strides are squares of the symbol."""

    def forward(self, x):
        return torch.softmax(x @ x.transpose(1, 2), -1) @ x


class Masked(torch.nn.Module):
    def forward(self, x, mask):
        return x * mask.unsqueeze(-1)


def _multiple_of_64(tmp_path):
    """The issue's example: a length that is a multiple of 64, from 128 to 2048."""
    return export(tmp_path, Linear(), (torch.randn(1, 256, 128),),
                  dynamic_shapes={"x": {1: 64 * Dim("s", max=32)}})


def _plain_dim(tmp_path):
    return export(tmp_path, HFLike(), (torch.randn(1, 64, 128),),
                  dynamic_shapes={"x": {1: Dim("s", min=16, max=512)}})


def _attention(tmp_path):
    return export(tmp_path, SelfAttention(), (torch.randn(1, 256, 32),),
                  dynamic_shapes={"x": {1: 64 * Dim("s", max=32)}})


def _mean(tmp_path):
    """`x.shape[1]` as a divisor: a sym_size node, which torch need not decompose."""
    return export(tmp_path, Lambda(lambda m, x: x.sum(1) / x.shape[1]), (torch.randn(1, 256, 8),),
                  dynamic_shapes={"args": ({1: 64 * Dim("s", max=32)},)})


def _shared(tmp_path):
    """Two inputs with one symbol: torch records the guard that their lengths are equal."""
    s = Dim("s", max=32)
    return export(tmp_path, Masked(), (torch.randn(1, 256, 128), torch.randn(1, 256)),
                  dynamic_shapes={"x": {1: 64 * s}, "mask": {1: 64 * s}})


def _only_symbol(program) -> str:
    (name,) = program.symbols
    assert re.fullmatch(SYMBOL, name)
    return name


def test_a_multiple_of_64_is_one_symbol_read_at_its_maximum(tmp_path):
    program = read_program(_multiple_of_64(tmp_path))
    s = _only_symbol(program)
    assert program.symbols[s] == SymLength(s, 64, 128, 2048)
    assert program.symbols[s].where == f"input x dim 1 (64*{s})"  # not compared by ==
    assert program.symbols[s].value_of is None
    assert list(program.symbols[s].values())[:3] == [128, 192, 256]
    assert len(program.symbols[s].values()) == 31 and program.symbols[s].values()[-1] == 2048
    assert program.symbolic_dims == {"x": {1: s}, "relu": {1: s}}
    x = program.node("x").meta["val"]
    assert x == TensorMeta((1, 2048, 128), "float32", (2048 * 128, 128, 1))
    assert program.node("relu").meta["val"].shape == (1, 2048, 128)


def test_bind_instantiates_another_admissible_length(tmp_path):
    pt2 = _multiple_of_64(tmp_path)
    s = _only_symbol(read_program(pt2))
    for length in (1984, 128):
        program = read_program(pt2, bind={s: length})
        assert program.node("x").meta["val"] == TensorMeta((1, length, 128), "float32",
                                                           (length * 128, 128, 1))
        assert program.symbols[s].maximum == 2048  # the symbols do not depend on the binding


def test_sizes_read_from_the_input_are_ints_at_the_binding(tmp_path):
    pt2 = _plain_dim(tmp_path)
    s = _only_symbol(read_program(pt2))
    program = read_program(pt2, bind={s: 100})
    assert program.symbols[s] == SymLength(s, 1, 16, 512)
    assert program.symbols[s].where == f"input x dim 1 ({s})"
    assert program.symbolic_dims == {"x": {1: s}, "add": {2: s}, "reshape": {2: s}}
    calls = {n.target: n for n in program.nodes if n.op == "call_function"}
    assert "aten.sym_size.int" not in calls and "_operator.mul" not in calls
    assert calls["aten.arange.default"].args == (100,)
    assert calls["aten.view.default"].args == (Ref("linear"), [1, 100, 4, 32])
    assert calls["aten.reshape.default"].args == (Ref("transpose"), [1, 4, 3200])
    assert calls["aten.transpose.int"].meta["val"] == \
        TensorMeta((1, 4, 100, 32), "float32", (12800, 32, 128, 1))


def test_a_square_of_the_length_is_a_stride_at_the_binding(tmp_path):
    pt2 = _attention(tmp_path)
    s = _only_symbol(read_program(pt2))
    program = read_program(pt2, bind={s: 192})
    scores = next(n for n in program.nodes if n.target == "aten.softmax.int")
    assert scores.meta["val"] == TensorMeta((1, 192, 192), "float32", (192 * 192, 192, 1))
    assert program.symbolic_dims == {"x": {1: s}, "matmul_1": {1: s}}


def test_two_inputs_share_one_symbol(tmp_path):
    program = read_program(_shared(tmp_path))
    s = _only_symbol(program)
    assert program.symbols[s] == SymLength(s, 64, 128, 2048)
    assert program.symbols[s].where == f"input x dim 1 (64*{s})"
    assert program.symbolic_dims == {"x": {1: s}, "mask": {1: s}, "mul": {1: s}}
    assert program.node("mask").meta["val"].shape == (1, 2048)


@pytest.mark.parametrize("make", [_multiple_of_64, _plain_dim, _shared, _attention])
def test_both_front_ends_read_the_same_program(tmp_path, make):
    pt2 = make(tmp_path)
    s = _only_symbol(read_program(pt2))
    for bind in (None, {s: 128}):
        assert_same_program(read_program(pt2, bind=bind), program_of(load_exported(pt2), bind))


@pytest.mark.parametrize("make", [_multiple_of_64, _shared, _attention, _mean])
def test_both_front_ends_load_the_same_program(tmp_path, make):
    """Through `load_program` (folding included), where torch has nothing to decompose (the
    HF-like module's `arange` is decomposed by torch: the documented difference)."""
    pt2 = make(tmp_path)
    s = _only_symbol(read_program(pt2))
    for bind in (None, {s: 128}):
        fast, slow = (load_program(pt2, frontend, bind, allow_symbols=True)
                      for frontend in ("fast", "torch"))
        assert (fast.frontend, slow.frontend) == ("fast", "torch")
        assert "aten.sym_size.int" not in {n.target for n in slow.nodes}
        assert [(n.name, n.args, n.meta.get("val")) for n in fast.nodes] == \
            [(n.name, n.args, n.meta.get("val")) for n in slow.nodes]
        assert fast.symbols == slow.symbols and fast.symbolic_dims == slow.symbolic_dims


def _refused(tmp_path, fn, inputs, dims) -> tuple:
    """(the .pt2, the one refusal both front ends give, torch's first symbol name in it) for
    `fn` exported with `dynamic_shapes={"args": dims}`."""
    pt2 = export(tmp_path, Lambda(fn), inputs, dynamic_shapes={"args": dims})
    text = _refusal(pt2)
    return pt2, text, re.search(SYMBOL, text).group(1)


def _refusal(pt2) -> str:
    """The one message both front ends give."""
    with pytest.raises(UnsupportedProgram) as fast:
        read_program(pt2)
    with pytest.raises(UnsupportedProgram) as slow:
        program_of(load_exported(pt2), where=str(pt2))
    assert str(fast.value) == str(slow.value)
    return str(fast.value)


def test_a_symbol_without_an_upper_bound_is_refused(tmp_path):
    pt2, text, s = _refused(tmp_path, lambda m, x: x * 2, (torch.randn(1, 256, 8),),
                            ({1: Dim("s")},))
    assert text == (f"{pt2}: input args_0 dim 1 ({s}): symbol {s} has no upper bound; give its "
                    f"Dim a maximum in the export's dynamic_shapes: "
                    f"torch.export.Dim('…', max=…).")


TWO_INPUT_REFUSALS = {
    "not_a_multiple": (257, lambda s: 64 * s + 1, (
        "{pt2}: input args_1 dim 1 (64*{s} + 1): spyrec serves a dynamic dim whose length is a "
        "multiple of one symbol (Dim('s') or c*Dim('s')), not 64*{s} + 1; export this dim as "
        "such a Dim, or {reexport}.")),
    "two_coefficients": (128, lambda s: 32 * s, (
        "{pt2}: symbol {s} is input args_0 dim 1 (64*{s}) but input args_1 dim 1 (32*{s}): one "
        "symbol with two coefficients; give both dims the same torch.export.Dim expression.")),
}


@pytest.mark.parametrize("case", sorted(TWO_INPUT_REFUSALS))
def test_a_second_input_dim_that_is_not_the_first_ones_multiple_is_refused(tmp_path, case):
    length, second, message = TWO_INPUT_REFUSALS[case]
    symbol = Dim("s", max=32)
    pt2, text, s = _refused(tmp_path, lambda m, x, y: x.sum() + y.sum(),
                            (torch.randn(1, 256, 8), torch.randn(1, length, 8)),
                            ({1: 64 * symbol}, {1: second(symbol)}))
    assert text == message.format(pt2=pt2, s=s, reexport=REEXPORT)


def test_an_inner_size_that_is_not_a_multiple_of_the_symbol_is_refused(tmp_path):
    pt2, text, s = _refused(tmp_path, lambda m, x: x[:, 1:] * 2, (torch.randn(1, 256, 8),),
                            ({1: 64 * Dim("s", max=32)},))
    assert text == (f"{pt2}: tensor slice_1 dim 1 has size 64*{s} - 1: spyrec tiles only a "
                    f"multiple of one symbol (c*s); change the model so the size is a multiple "
                    f"of the Dim, or {REEXPORT}.")


def test_two_symbols_in_one_dim_are_refused(tmp_path):
    pt2, text, _ = _refused(tmp_path, lambda m, x: x.view(x.shape[0] * x.shape[1], 8),
                            (torch.randn(2, 256, 8),),
                            ({0: Dim("b", max=8), 1: 64 * Dim("s", max=32)},))
    assert re.fullmatch(re.escape(f"{pt2}: tensor view dim 0 has size 64*") + r"s\d+\*s\d+" +
                        re.escape(": spyrec tiles only a multiple of one symbol (c*s); change "
                                  "the model so the size is a multiple of the Dim, or "
                                  f"{REEXPORT}."), text), text


def _checks_multiple_of_128(m, x):
    torch._check(x.shape[1] % 128 == 0)
    return x * 2


GUARD_TAIL = ("the export admits fewer lengths than the Dim's range. Give the Dim the range and "
              "multiple the model needs (e.g. c*torch.export.Dim('…', min=…, max=…)), so that "
              "every length in it is valid.")


def test_a_guard_that_narrows_the_lengths_is_refused_at_the_first_length_it_excludes(tmp_path):
    pt2, text, s = _refused(tmp_path, _checks_multiple_of_128, (torch.randn(1, 256, 8),),
                            ({1: 64 * Dim("s", max=32)},))
    assert text == (f"{pt2}: torch recorded the guard (L['args'][0].size()[1] % 128) == 0, "
                    f"which does not hold at length 192 of input args_0 dim 1 (64*{s}): "
                    f"{GUARD_TAIL}")


def test_a_length_the_export_specialized_on_is_refused(tmp_path):
    pt2, text, s = _refused(tmp_path, lambda m, x: x.new_zeros(int(x.shape[1] / 64), 3),
                            (torch.randn(1, 256, 8),), ({1: 64 * Dim("s", max=32)},))
    assert text == (f"{pt2}: torch recorded the guard math.trunc(L['args'][0].size()[1] / 64) "
                    f"== 4, which does not hold at length 128 of input args_0 dim 1 (64*{s}): "
                    f"{GUARD_TAIL}")


def test_a_derived_range_narrower_than_the_symbols_is_refused(tmp_path):
    pt2 = _multiple_of_64(tmp_path)
    s = _only_symbol(read_program(pt2))
    edited = with_model_json(pt2, tmp_path / "narrowed.pt2", lambda model: model[
        "range_constraints"].update({f"64*{s}": {"min_val": 0, "max_val": 1024}}))
    with pytest.raises(UnsupportedProgram) as err:
        read_program(edited)
    assert str(err.value) == (f"{edited}: torch recorded the range constraint 64*{s} in "
                              f"[0, 1024], which does not hold at length 1088 of input x dim 1 "
                              f"(64*{s}): {GUARD_TAIL}")


def test_an_op_torch_cannot_decompose_in_a_dynamic_program_is_refused(tmp_path):
    """torch 2.13's run_decompositions fails on a loaded program with a derived Dim (64*s):
    the torch front end says so instead of a traceback."""
    pt2 = export(tmp_path, Lambda(lambda m, x: x + torch.ones(x.shape[1], 8).cumprod(0)),
                 (torch.randn(1, 256, 8),), dynamic_shapes={"args": ({1: 64 * Dim("s", max=32)},)})
    with pytest.raises(UnsupportedProgram) as err:
        load_program(pt2, "torch", allow_symbols=True)
    assert str(err.value) == (
        f"{pt2}: the graph uses aten.cumprod.default, which spyrec does not lower directly, and "
        f"torch {torch.__version__} cannot decompose this dynamic-shape program "
        f"(AssertionError: expected sympy.Symbol); compute what these ops build from the input "
        f"outside the model, or re-export with static shapes.")


def test_bind_names_a_known_symbol_and_an_admissible_length(tmp_path):
    pt2 = _multiple_of_64(tmp_path)
    s = _only_symbol(read_program(pt2))
    for length in (100, 4096, 64):
        with pytest.raises(ConfigError) as err:
            read_program(pt2, bind={s: length})
        assert str(err.value) == (f"bind: {s} = {length} is not an admissible length of input "
                                  f"x dim 1 (64*{s}): give one of 128..2048 by 64")
    with pytest.raises(ConfigError) as err:
        load_program(pt2, "torch", bind={"t9": 128}, allow_symbols=True)
    assert str(err.value) == f"bind: unknown symbol 't9' (the program's symbols: {s})"
    static = export(tmp_path, Linear(), (torch.randn(1, 256, 128),), name="static")
    with pytest.raises(ConfigError) as err:
        read_program(static, bind={s: 128})
    assert str(err.value) == (f"bind: unknown symbol '{s}' (the program's symbols: none: the "
                              f"program's shapes are static)")


def test_compile_tiles_a_dynamic_program_and_a_plain_load_refuses_it(tmp_path, capsys):
    """`spyrec compile` serves the symbols (tests/passes/test_symbolic_tiling.py,
    tests/sim/); a caller that does not ask for them still gets the refusal."""
    pt2 = _multiple_of_64(tmp_path)
    s = _only_symbol(read_program(pt2))
    code, out, err = cli(capsys, "compile", pt2, "-o", tmp_path / "tiled", "--set",
                         "symbolic_lengths.mode=tiled")
    assert code == 0 and "Traceback" not in err
    (row,) = json.loads((tmp_path / "tiled" / "report.json").read_text())["symbols"]
    assert {(lp["count_at_maximum"], lp["per_trip"]) for lp in row["loops"]} == {(32, 64)}
    code, out, err = cli(capsys, "compile", pt2, "-o", tmp_path / "out")
    assert code == 0 and "Traceback" not in err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (row,) = report["symbols"]
    assert (row["symbol"], row["minimum"], row["maximum"], row["granularity"]) == \
        (s, 128, 2048, 64)
    assert row["loops"] == [] and row["sized_ops"] >= 1     # the default: ops sized by it
    curve = report["cost_curve"]
    assert [p["lengths"][s] for p in curve] == list(range(128, 2049, 64))
    times = [p["time_us"] for p in curve]
    assert times == sorted(times)
    assert times[-1] == pytest.approx(report["cost"]["totals"]["time_us"])
    from spyrec.sim.files import validate

    validate({k: report[k] for k in ("format", "build", "passes", "restickify", "layouts",
                                     "ops", "cost", "cost_curve", "symbols")},
             "report", "report.json")
    with pytest.raises(UnsupportedProgram) as e:
        load_program(pt2, "torch")
    assert str(e.value) == (f"{pt2}: dynamic shapes are not supported yet (input x dim 1 "
                            f"(64*{s}): 128..2048 by 64); {REEXPORT}.")
    assert load_program(pt2, "fast", allow_symbols=True).symbols[s].maximum == 2048


def test_expressions_are_read_without_running_them():
    srepr = "Mul(Integer(64), Symbol('s81', positive=True, integer=True))"
    assert multiple_of_symbol(srepr) == (64, "s81")
    assert multiple_of_symbol("Symbol('s3', positive=True, integer=True)") == (1, "s3")
    assert multiple_of_symbol(f"Add({srepr}, Integer(-1))") is None
    assert readable(f"Add({srepr}, Integer(-1))") == "64*s81 - 1"
    assert evaluate(f"FloorDiv({srepr}, Integer(3))", {"s81": 31}) == 661
    assert evaluate("64*s81", {"s81": 2}) == 128
    square = "Mul(Integer(4096), Pow(Symbol('s81', positive=True, integer=True), Integer(2)))"
    assert evaluate(square, {"s81": 3}) == 36864
    with pytest.raises(ValueError):
        evaluate("Pow(Integer(10), Integer(100000000))", {})
    with pytest.raises(ValueError):
        evaluate("__import__('os').system('true')", {})
    with pytest.raises(ValueError):
        evaluate("Symbol('s1').__class__", {"s1": 1})
