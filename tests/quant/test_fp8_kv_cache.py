"""A static KV cache kept in float8_e4m3fn (issue 60, the dtype side): a decode step quantizes
K and V with a scale as it writes them into the cache and dequantizes the cache to read it.
The cache lives on the device 8-bit (128 per stick), the write rounds and saturates as torch's
conversion does, and the step's output and both caches equal eager's (the caches compared by
value: a 16-bit K an ulp from eager's may quantize one fp8 step away).

Not built here (issue 60 item 3, with the in-place cache writes of the serving work): the
attention reading the 8-bit cache inside its key loop; the dequantization is a device op of its
own that writes a 16-bit copy of the cache every step."""

from __future__ import annotations

import torch

from tests.differential.harness import run_and_compare
from tests.programs import load_json


class Fp8CacheStep(torch.nn.Module):
    def __init__(self, heads: int = 2, dim: int = 128, slots: int = 64):
        super().__init__()
        shape = (1, heads, slots, dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=torch.float8_e4m3fn))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=torch.float8_e4m3fn))
        self.heads, self.dim = heads, dim
        self.k_scale, self.v_scale = 0.05, 0.02
        g = torch.Generator().manual_seed(0)
        width = heads * dim
        for name in ("wq", "wk", "wv"):
            self.register_parameter(name, torch.nn.Parameter(
                torch.randn(width, width, generator=g).half() / 16, requires_grad=False))

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(1, 1, self.heads, self.dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q, k, v = (self._heads(x @ w) for w in (self.wq, self.wk, self.wv))
        self.k_cache[:, :, pos] = (k / self.k_scale).to(torch.float8_e4m3fn)
        self.v_cache[:, :, pos] = (v * (1 / self.v_scale)).to(torch.float8_e4m3fn)
        keys = self.k_cache.to(torch.float16) * self.k_scale
        values = self.v_cache.to(torch.float16) * self.v_scale
        return torch.nn.functional.scaled_dot_product_attention(q, keys, values)


def test_an_fp8_kv_cache_decode_step_equals_eager_with_the_cache_8bit(tmp_path):
    module = Fp8CacheStep()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():       # earlier steps' entries, some past e4m3's range (saturated)
        module.k_cache.copy_((torch.randn(module.k_cache.shape, generator=g) * 100).to(
            torch.float8_e4m3fn))
        module.v_cache.copy_((torch.randn(module.v_cache.shape, generator=g) * 10).to(
            torch.float8_e4m3fn))
    x = torch.randn(1, 256, generator=g).half() * 4
    out = run_and_compare(tmp_path, module, (x, torch.tensor([3])))
    manifest = load_json(out / "manifest.json")
    tensors = {t["source"]: t for t in manifest["tensors"]}
    for fqn in ("k_cache", "v_cache"):
        assert tensors[fqn]["device_dtype"] == "fp8_e4m3"
        assert tensors[fqn]["device_bytes"] == 2 * 64 * 128    # a byte per element, whole sticks
    assert set(manifest["mutated_buffers"]) == {"k_cache", "v_cache"}
