"""A buffer the program updates in place comes back under its FQN and `--check` compares it
with eager's buffer after the call (DESIGN §1)."""

import numpy as np
import torch

from spyrec.sim.check import check_outputs, format_checks
from spyrec.sim.inputs import npz_arrays
from spyrec.sim.directory import load_output_dir
from spyrec.sim.runner import simulate
from tests.programs import compile_pt2, export


class Cache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k_cache", torch.arange(12, dtype=torch.float32).reshape(4, 3))

    def forward(self, x):
        self.k_cache.mul_(0.5).add_(x)
        return self.k_cache.sum(0)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))
        self.layers = torch.nn.ModuleList([Cache()])

    def forward(self, x):
        self.count.add_(1)
        return x * 2 + self.count, self.layers[0](x)


def test_mutated_buffers_come_back_under_their_fqn_and_match_eager(tmp_path):
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    out = compile_pt2(export(tmp_path, Model(), (x,)), tmp_path / "out")
    result = simulate(out, {"x": x.numpy()})
    arrays = npz_arrays(result.outputs, result.output_dtypes, result.names)
    assert sorted(arrays) == ["count", "layers.0.k_cache", "output_0", "output_1"]
    eager = Model()
    y0, y1 = eager(x)
    np.testing.assert_allclose(arrays["count"], np.ones(3))
    np.testing.assert_allclose(arrays["layers.0.k_cache"], eager.layers[0].k_cache.numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(arrays["output_0"], y0.numpy(), rtol=1e-6)
    np.testing.assert_allclose(arrays["output_1"], y1.numpy(), rtol=1e-6)
    checks = check_outputs(out, load_output_dir(out).manifest, {"x": x.numpy()}, result.outputs)
    assert [c.ok for c in checks] == [True] * 4
    assert [c.key for c in checks] == [None, None, "count", "layers.0.k_cache"]
    assert "layers.0.k_cache" in format_checks(checks)


def test_check_flags_a_wrong_mutated_buffer(tmp_path):
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    out = compile_pt2(export(tmp_path, Model(), (x,)), tmp_path / "out")
    result = simulate(out, {"x": x.numpy()})
    outputs = list(result.outputs)
    k = result.names.index("layers.0.k_cache")
    outputs[k] = outputs[k] + 1
    checks = check_outputs(out, load_output_dir(out).manifest, {"x": x.numpy()}, outputs)
    assert [c.ok for c in checks] == [i != k for i in range(4)]
