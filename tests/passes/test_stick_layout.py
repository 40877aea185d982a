"""Layouts and restickifies the greedy pass chooses, with real numbers."""

import torch

from tests.programs import Lambda, compile_pt2, export, load_json

S = 128


def _compile(tmp_path, fn, *inputs, **params):
    out = compile_pt2(export(tmp_path, Lambda(fn, **params), inputs))
    return load_json(out / "manifest.json"), load_json(out / "report.json")


def _tensor(manifest, name):
    return next(t for t in manifest["tensors"] if t["name"] == name)


def test_fp16_1024x256_input_layout(tmp_path):
    m, _ = _compile(tmp_path, lambda mod, x: x * 2, torch.randn(1024, 256).half())
    x = _tensor(m, m["inputs"][0])
    assert (x["device_size"], x["stride_map"], x["device_dtype"]) == \
        ([4, 1024, 64], [64, 256, 1], "fp16")


def test_transpose_plus_x_restickifies_one_operand(tmp_path):
    _, r = _compile(tmp_path, lambda mod, a, x: a.t() + x,
                    torch.randn(S, S).half(), torch.randn(S, S).half())
    assert r["restickify"]["count"] == 1 and r["restickify"]["elements"] == S * S


def test_matmul_needs_no_restickify(tmp_path):
    _, r = _compile(tmp_path, lambda mod, x, y: x @ y,
                    torch.randn(S, S).half(), torch.randn(S, S).half())
    assert r["restickify"] == {"count": 0, "elements": 0, "list": []}


def test_transposed_lhs_costs_its_numel(tmp_path):
    _, r = _compile(tmp_path, lambda mod, x, y: x.t() @ y,
                    torch.randn(S, 2 * S).half(), torch.randn(S, S).half())
    assert r["restickify"]["elements"] == S * 2 * S


def test_linear_weight_is_laid_out_for_the_matmul_at_no_cost(tmp_path):
    w = torch.randn(192, 256)
    m, r = _compile(tmp_path, lambda mod, x: x @ mod.w.t(), torch.randn(64, 256), w=w)
    assert r["restickify"]["count"] == 0
    weight = _tensor(m, "p_w")
    assert weight["stride_map"][-1] == 256  # lanes step along the host rows: stick on N


def test_reduction_along_the_stick_gives_a_sparse_output(tmp_path):
    m, r = _compile(tmp_path, lambda mod, x: x.sum(1), torch.randn(64, 128).half())
    out = _tensor(m, m["outputs"][0])
    assert (out["device_size"], out["stride_map"]) == ([1, 64, 64], [-1, 1, -1])
    assert r["restickify"]["count"] == 0


def test_sparse_read_across_its_stick_is_infeasible(tmp_path):
    import pytest

    from spyrec.errors import UnsupportedProgram
    with pytest.raises(UnsupportedProgram, match="no mechanism to gather elements"):
        _compile(tmp_path, lambda mod, a, b: a.sum(1) + b,
                 torch.randn(S, S).half(), torch.randn(S, S).half())
