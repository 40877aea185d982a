"""A symbolic output directory made from a static one (issue 30), for the simulator's and
codegen's tests while the front end cannot yet read a dynamic `.pt2`.

An MLP `x[1, 256, 128] -> Linear(128, 256) -> relu` is compiled with a tiling file that loops
4 times over the token dim (tiles of 64 tokens); its IR after the last pass is parsed back
with a symbol `s81` of 128..256 by 64 on the input's and output's token dim and a bound
`s81/64` on the loop, and codegen builds the directory from that graph, as compile does. The
graph is planned for 256 tokens, which is the symbol's maximum: what a symbolic compile plans.
The directory's source is a dynamic export of the same module (`64 * Dim(min=2, max=4)`
tokens), which `run --check` calls in eager at the input's length.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tests.programs import compile_pt2, export, load_json

TILING = "dims: {input: [_, S, _]}\ngroups: [{ops: ['*'], loops: [{S: 4}]}]\n"
SYMBOL = "symbol s81 128..256 by 64 at [input:1, relu:1]"


@dataclass(frozen=True)
class SymbolicMlp:
    out: Path              # the symbolic output directory
    static: Path           # the static compile it was made from
    weight: np.ndarray     # [256, 128]
    bias: np.ndarray       # [256]
    output: object         # codegen.writer.BuiltOutput of `out`

    def expected(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x @ self.weight.T + self.bias, 0)


def last_ir(text: str) -> str:
    """The IR printed after the last pass of a `dump_after="all"` compile's stderr."""
    return text[text.rindex("// ----- IR after"):].split("\n", 1)[1]


def build_symbolic_mlp(tmp: Path) -> SymbolicMlp:
    from spyrec.codegen import build_outputs, write_atomically
    from spyrec.ir.parser import parse

    tmp.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU())
    pt2 = export(tmp, module, (torch.randn(1, 256, 128),), "mlp")
    (tmp / "tiling.yaml").write_text(TILING)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        compile_pt2(pt2, tmp / "static", tiling=tmp / "tiling.yaml", dump_after="all")
    text = last_ir(err.getvalue())
    assert text.count("loops [4(c1)@g0.0]") == 3, text
    graph = parse(text.replace("loops [4(c1)@g0.0]", "loops [4(c1)@g0.0 bound(s81/64)]")
                  + SYMBOL + "\n")
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    graph.constants = {b.name: state[b.source] for b in graph.buffers.values()
                       if b.role == "constant"}
    manifest = load_json(tmp / "static" / "manifest.json")
    dynamic = export(tmp, module, (torch.randn(1, 256, 128),), "dynamic", dynamic_shapes={
        "input": {1: 64 * torch.export.Dim("s", min=2, max=4)}})
    output = build_outputs(graph, dynamic, manifest["pipeline"], manifest["configs"],
                           {"hbm_bytes": manifest["hbm_bytes"]})
    write_atomically(tmp / "symbolic", output.files, dynamic)
    return SymbolicMlp(tmp / "symbolic", tmp / "static", state["0.weight"], state["0.bias"],
                       output)
