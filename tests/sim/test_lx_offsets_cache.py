"""The simulator's per-chunk offset cache must not merge two LX args that differ only in how
they are spread over the cores.

A replicated LX mask ([32], every core holds it whole) and a row-split LX tensor ([4, 32],
core k holds row k) read at the same per-core coordinates had one cache key: the second read
reused the first's offsets, thinned to core 0, so every core saw row 0 and histc -> cumsum
came back [9, 18, 27, 36] instead of eager's [9, 18, 23, 32] — silently, with no fault.
"""

from __future__ import annotations

import torch

from tests.differential.harness import run_and_compare
from tests.programs import load_json


class HistcCumsum(torch.nn.Module):
    def forward(self, e):
        return torch.cumsum(torch.histc(e, bins=4, min=0, max=3).to(torch.int32), 0)


def test_replicated_and_split_lx_args_read_their_own_cores(tmp_path):
    torch.manual_seed(0)
    e = torch.sort(torch.randint(0, 4, (32,))).values.float()
    out = run_and_compare(tmp_path, HistcCumsum(), (e,), frontend="fast")
    # the shape of plan the bug needs: some intermediate of the histogram lives in LX
    assert any(t.get("lx_address") is not None for t in load_json(out / "manifest.json")
               ["tensors"])
