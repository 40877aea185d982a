"""The stick_layout pass: the reference's known optimal restickify costs (A-layout §4.5), with
inputs in the default layout and with free input layouts, plus layouts chosen and errors."""

import pytest
import torch

from spyrec.errors import ConfigError
from tests.programs import Lambda, compile_pt2, export, load_json

S, T = 128, 64


def h(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).half()


def _compile(tmp_path, fn, inputs, params=None, **opts):
    out = compile_pt2(export(tmp_path, Lambda(fn, **(params or {})), inputs), **opts)
    return load_json(out / "manifest.json"), load_json(out / "report.json")


def _elements(tmp_path, fn, inputs, input_layouts):
    _, r = _compile(tmp_path, fn, inputs, sets=[f"stick_layout.input_layouts={input_layouts}"])
    return r["restickify"]["elements"]


def _tensor(manifest, name):
    return next(t for t in manifest["tensors"] if t["name"] == name)


def ss(n):
    return tuple(h(S, S, seed=i) for i in range(n))


# (name, program, inputs, optimum with default input layouts)
OPTIMA = [
    ("a.t() + x", lambda m, a, x: a.t() + x, ss(2), S * S),
    ("x @ y", lambda m, x, y: x @ y, ss(2), 0),
    ("x.t() @ y", lambda m, x, y: x.t() @ y, ss(2), S * S),
    ("x @ y.t()", lambda m, x, y: x @ y.t(), ss(2), S * S),
    ("x.t() @ y.t()", lambda m, x, y: x.t() @ y.t(), ss(2), 2 * S * S),
    ("(a + b.t() + c.t() + d.t()) @ e",
     lambda m, a, b, c, d, e: (a + b.t() + c.t() + d.t()) @ e, ss(5), 2 * S * S),
    ("a @ (b + c.t())", lambda m, a, b, c: a @ (b + c.t()), ss(3), S * S),
    ("(a @ b) + c.t()", lambda m, a, b, c: (a @ b) + c.t(), ss(3), S * S),
    ("(a @ b) @ c", lambda m, a, b, c: (a @ b) @ c, ss(3), 0),
    ("buf = a + b.t(); buf + buf", lambda m, a, b: (lambda t: t + t)(a + b.t()), ss(2), S * S),
    ("(a + b.t()) + (e.t() + f.t() + g)",
     lambda m, a, b, e, f, g: (a + b.t()) + (e.t() + f.t() + g), ss(5), 2 * S * S),
    ("ones_like(x) + x.t()", lambda m, x: torch.ones_like(x) + x.t(), ss(1), 0),
    ("full + x.t()", lambda m, x: torch.full((S, S), 2.0, dtype=torch.float16) + x.t(),
     ss(1), 0),
    ("ones_like(y) @ y", lambda m, y: torch.ones_like(y) @ y, ss(1), 0),
    ("(64x128).t() @ (64x192)", lambda m, a, b: a.t() @ b, (h(64, 128), h(64, 192, seed=1)),
     64 * 128),
]


@pytest.mark.parametrize("name, fn, inputs, optimum", OPTIMA, ids=[o[0] for o in OPTIMA])
def test_reference_optimum_with_default_input_layouts(name, fn, inputs, optimum, tmp_path):
    assert _elements(tmp_path, fn, inputs, "default") == optimum


@pytest.mark.parametrize("name, fn, inputs, optimum", OPTIMA, ids=[o[0] for o in OPTIMA])
def test_free_input_layouts_need_no_restickify(name, fn, inputs, optimum, tmp_path):
    assert _elements(tmp_path, fn, inputs, "free") == 0


@pytest.mark.parametrize("perms, optimum", [
    ([(0, 3)], T ** 4),                          # one transposed operand
    ([(0, 3), (1, 3), (2, 3)], 3 * T ** 4),      # three different transposes
    ([(0, 3), (0, 3), (0, 3)], T ** 4),          # the majority stick wins: restick d only
])
def test_four_d_transposes(perms, optimum, tmp_path):
    def fn(m, a, b, c, d):
        ts = [x.transpose(*p) for x, p in zip((a, b, c), perms + [None] * (3 - len(perms)))
              if p is not None]
        rest = [b, c][len(perms) - 1:] if len(perms) < 3 else []
        total = ts[0]
        for t in ts[1:] + rest:
            total = total + t
        return total + d
    inputs = tuple(h(T, T, T, T, seed=i) for i in range(4))
    assert _elements(tmp_path, fn, inputs, "default") == optimum


def test_greedy_optimizer_is_worse_where_the_beam_looks_ahead(tmp_path):
    """(a.t() + x) @ y: sticking the sum on c0 (first candidate) forces a second copy for the
    matmul; the beam keeps the c1 branch and pays once."""
    fn = lambda m, a, x, y: (a.t() + x) @ y  # noqa: E731
    sets = ["stick_layout.input_layouts=default"]
    _, greedy = _compile(tmp_path, fn, ss(3), sets=sets + ["stick_layout.optimizer=greedy"])
    _, beam = _compile(tmp_path, fn, ss(3), sets=sets)
    assert greedy["restickify"]["elements"] == 2 * S * S
    assert greedy["layout_search"] == {"optimizer": "greedy", "beam_width": 1,
                                       "estimated_elements": 2 * S * S}
    assert beam["restickify"]["elements"] == S * S


def test_one_restickified_copy_is_shared_by_its_consumers(tmp_path):
    fn = lambda m, a, x, y: (a.t() + x, a.t() * y)  # noqa: E731
    _, r = _compile(tmp_path, fn, ss(3), sets=["stick_layout.input_layouts=default"])
    assert r["restickify"]["count"] == 1 and r["restickify"]["elements"] == S * S
    row = r["restickify"]["list"][0]
    assert (row["tensor"], row["from_stick_dim"], row["to_stick_dim"]) == ("args_0", 1, 0)
    assert len(row["consumers"]) == 2


def test_fp16_1024x256_input_layout(tmp_path):
    m, _ = _compile(tmp_path, lambda mod, x: x * 2, (h(1024, 256),))
    x = _tensor(m, m["inputs"][0])
    assert (x["device_size"], x["stride_map"], x["device_dtype"]) == \
        ([4, 1024, 64], [64, 256, 1], "fp16")


def test_free_input_takes_the_layout_its_consumer_needs(tmp_path):
    m, r = _compile(tmp_path, lambda mod, a, x: a.t() + x, ss(2))
    a, x = (_tensor(m, n) for n in m["inputs"])
    assert a["stride_map"][-1] == S and x["stride_map"][-1] == 1  # a sticked on its dim 0
    assert r["restickify"]["count"] == 0


def test_linear_weight_is_laid_out_for_the_matmul_at_no_cost(tmp_path):
    w = torch.randn(192, 256)
    m, r = _compile(tmp_path, lambda mod, x: x @ mod.w.t(), (torch.randn(64, 256),), {"w": w},
                    sets=["stick_layout.input_layouts=default"])
    assert r["restickify"]["count"] == 0
    assert _tensor(m, "p_w")["stride_map"][-1] == 256  # lanes step along host rows: stick on N


def test_reduction_along_the_stick_gives_a_sparse_output(tmp_path):
    m, r = _compile(tmp_path, lambda mod, x: x.sum(1), (h(64, 128),),
                    sets=["stick_layout.input_layouts=default"])
    out = _tensor(m, m["outputs"][0])
    assert (out["device_size"], out["stride_map"]) == ([1, 64, 64], [-1, 1, -1])
    assert r["restickify"]["count"] == 0


def test_layouts_file_pins_an_input(tmp_path):
    pins = tmp_path / "layouts.yaml"
    pins.write_text("inputs:\n  args_0: {stick_dim: 0}\n")
    m, r = _compile(tmp_path, lambda mod, x, y: x + y, ss(2), layouts=pins)
    assert _tensor(m, "args_0")["stride_map"][-1] == S
    bad = tmp_path / "bad.yaml"
    bad.write_text("inputs:\n  nope: {stick_dim: 0}\n")
    with pytest.raises(ConfigError, match="'nope' is not a program input; inputs: args_0, args_1"):
        _compile(tmp_path, lambda mod, x, y: x + y, ss(2), layouts=bad)


def test_sparse_read_across_its_stick_goes_through_a_compacting_copy(tmp_path):
    """A [S,1] input arrives stick-sparse (one element per stick); broadcasting it along the
    output's stick would gather S sticks into one. A sparse tensor cannot be restickified
    (the reference gives up here), but a copy of the accessed view can read it element by
    element into one dense stick run, so the program compiles (issue 14: never infeasible)."""
    _, r = _compile(tmp_path, lambda mod, x, b: x.t() + b, (h(S, 1), h(3, S, seed=1)),
                    sets=["stick_layout.input_layouts=default"])
    (row,) = r["restickify"]["list"]
    assert (row["tensor"], row["from_stick_dim"], row["inserted"]) == ("args_0", None, True)
    assert r["restickify"]["elements"] == S * 64  # reads all S sparse sticks once


def test_reduction_along_the_stick_then_broadcast_across_it_compacts_the_sum(tmp_path):
    """The reference rejects a.sum(1) + b. Restickifying a first (S*S slots) makes the sum
    dense; compacting the sparse sum (S sticks of 64 slots, read once) is cheaper."""
    _, r = _compile(tmp_path, lambda mod, a, b: a.sum(1) + b, ss(2),
                    sets=["stick_layout.input_layouts=default"])
    assert r["restickify"]["elements"] == S * 64 < S * S
    (row,) = r["restickify"]["list"]
    assert (row["from_stick_dim"], row["to_stick_dim"]) == (None, 0)


def test_option_errors(tmp_path):
    with pytest.raises(ConfigError, match="input_layouts must be one of free, default"):
        _compile(tmp_path, lambda mod, x: x + 1, ss(1), sets=["stick_layout.input_layouts=x"])


def test_matmul_k_padding_pads_only_the_operand_carrying_n(tmp_path):
    """A-layout §6.2 E: [55,67] @ [67,128] pads y to [128,128] = [2,128,64] / [64,128,1]."""
    m, r = _compile(tmp_path, lambda mod, x, y: x @ y, (h(55, 67), h(67, 128, seed=1)))
    pad = r["matmul_padding"]
    assert pad["count"] == 1 and pad["list"][0]["tensor"] == "args_1"
    y_pad = _tensor(m, pad["list"][0]["padded"])
    assert (y_pad["host_shape"], y_pad["device_size"], y_pad["stride_map"]) == \
        ([128, 128], [2, 128, 64], [64, 128, 1])
    x = _tensor(m, "args_0")
    assert x["host_shape"] == [55, 67]


def test_batched_matmul_k_padding_layout(tmp_path):
    m, r = _compile(tmp_path, lambda mod, x, y: torch.bmm(x, y),
                    (h(2, 55, 67), h(2, 67, 128, seed=1)))
    y_pad = _tensor(m, r["matmul_padding"]["list"][0]["padded"])
    assert (y_pad["device_size"], y_pad["stride_map"]) == ([128, 2, 2, 64], [128, 64, 16384, 1])


def test_aligned_k_needs_no_padding(tmp_path):
    _, r = _compile(tmp_path, lambda mod, x, y: x @ y, ss(2))
    assert r["matmul_padding"]["count"] == 0
