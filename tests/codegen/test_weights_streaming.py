"""Compile streams the weights: the fast reader keeps references into the .pt2 archive
(`StoredTensor`), the lowering keeps them as the graph's constants, and the writer copies each
one into weights.bin on its own, so compile never holds all weights (issue: Granite-8B on a
24 GB machine)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import torch

from spyrec.compiler import CompileOptions
from spyrec.driver import compile_and_estimate
from spyrec.frontend import load_program, lower_program
from spyrec.frontend.program import StoredTensor
from spyrec.frontend.pt2json import read_program
from tests.programs import compile_pt2, export, load_json, validate_outputs


class Stack(torch.nn.Module):
    """`layers` linear layers of `width` x `width` fp32 weights (4 * width**2 bytes each)."""

    def __init__(self, layers: int, width: int):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width, bias=False)
                                          for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_weights_are_references_until_read(tmp_path):
    module = Stack(2, 64).eval()
    pt2 = export(tmp_path, module, (torch.randn(4, 64),), "stack")
    program = read_program(pt2)
    stored = program.state.stored("layers.0.weight")
    assert isinstance(stored, StoredTensor) and stored.shape == (64, 64)
    assert all(isinstance(v, StoredTensor) for v in dict(program.state).values())
    value = program.state["layers.0.weight"]            # read on demand
    assert isinstance(value, np.ndarray) and not value.flags.writeable
    assert np.array_equal(value, module.layers[0].weight.detach().numpy())
    assert np.array_equal(np.asarray(stored), value)
    graph = lower_program(load_program(pt2))
    assert all(isinstance(v, StoredTensor) for v in graph.constants.values())


def test_the_torch_front_end_streams_from_the_archive_too(tmp_path):
    module = Stack(2, 64).eval()
    pt2 = export(tmp_path, module, (torch.randn(4, 64),), "stack")
    graph = lower_program(load_program(pt2, "torch"))
    assert all(isinstance(v, StoredTensor) for v in graph.constants.values())
    fast = compile_pt2(pt2, tmp_path / "fast")
    slow = compile_pt2(pt2, tmp_path / "slow", frontend="torch")
    assert (fast / "weights.bin").read_bytes() == (slow / "weights.bin").read_bytes()


def test_compile_never_holds_all_weights(tmp_path):
    """8 weights of 4 MiB: the compile's Python/numpy allocations peak well below their sum."""
    layers, width = 8, 1024
    pt2 = export(tmp_path, Stack(layers, width).eval(), (torch.randn(2, width),), "big")
    total = layers * width * width * 4
    out = tmp_path / "out"
    # a first compile imports what a compile needs (sympy, jinja2, the passes: ~16 MiB of
    # module objects, which a test running alone would count): the second one is measured
    compile_and_estimate(pt2, tmp_path / "warm", CompileOptions(verbose=-1))
    tracemalloc.start()
    try:       # the compile alone (compile_pt2 also validates the files: jsonschema's import)
        compile_and_estimate(pt2, out, CompileOptions(verbose=-1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    validate_outputs(out)
    assert (out / "weights.bin").stat().st_size >= total
    assert load_json(out / "manifest.json")["weights"]["bytes"] >= total
    assert peak < total / 4, f"compile peaked at {peak / 2**20:.1f} MiB for " \
                             f"{total / 2**20:.0f} MiB of weights"


def test_the_archive_directory_is_read_once_per_file(tmp_path):
    """Reading every weight parses the zip's directory once (`program._members`), not once
    per weight; an archive written again in place is another file, read afresh."""
    import shutil
    import zipfile

    import spyrec.frontend.program as program_module
    from tests.programs import counting_calls

    module = Stack(6, 64).eval()
    pt2 = export(tmp_path, module, (torch.randn(4, 64),), "stack")
    program_module._members.cache_clear()
    state = read_program(pt2).state
    names = [f"layers.{i}.weight" for i in range(6)]
    with counting_calls(zipfile, "ZipFile") as opened:
        values = [state[n] for n in names]
    assert opened[0] == 1
    for value, layer in zip(values, module.layers):
        assert np.array_equal(value, layer.weight.detach().numpy())

    other = Stack(6, 64)                            # new values, same names and shapes
    with torch.no_grad():
        for layer in other.layers:
            layer.weight.mul_(-1)
    (tmp_path / "again").mkdir()
    again = export(tmp_path / "again", other.eval(), (torch.randn(4, 64),), "stack")
    shutil.copyfile(again, pt2)                     # the same path, rewritten
    state = read_program(pt2).state
    assert np.array_equal(state[names[0]], -module.layers[0].weight.detach().numpy())
