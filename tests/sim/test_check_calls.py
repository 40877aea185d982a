"""`spyrec run --check` calls program.pt2 the way its signature says (issue: exit 70 "kwarg
keyword mismatch" after the whole simulation on every program exported with keyword inputs),
and refuses a check it cannot do before simulating (exit 2, one line, no outputs written).

Programs: keyword-only inputs, keyword inputs given in another order than the signature's,
mixed positional + keyword inputs, transformers' ExecuTorch recipe (a tiny Llama decode step
with a static cache) when transformers is installed; and two programs --check cannot call
(another program's program.pt2, inputs inside a registered dataclass).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.programs import cli, compile_pt2, record_source


class KeywordOnly(torch.nn.Module):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 64 * 64).reshape(64, 64),
                                    requires_grad=False)
        self.scale = scale

    def forward(self, *, input_ids, cache_position):
        return input_ids @ self.w + self.scale * cache_position


class Mixed(torch.nn.Module):
    def forward(self, x, *, y):
        return x * 2 + y


def _build(tmp: Path, name: str, module, args: tuple, kwargs: dict) -> tuple[Path, Path]:
    """Export with `kwargs`, compile, and write the inputs (by user-input name) to an .npz."""
    pt2 = tmp / f"{name}.pt2"
    torch.export.save(torch.export.export(module.eval(), args, kwargs), str(pt2))
    out = compile_pt2(pt2, tmp / name)
    flat = {f"args_{i}": a for i, a in enumerate(args)} if not kwargs else {}
    if args and kwargs:      # the placeholders are named after forward's parameters
        flat = {"x": args[0]}
    flat.update(kwargs)
    npz = tmp / f"{name}.npz"
    np.savez(npz, **{k: v.numpy() for k, v in flat.items()})
    return out, npz


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    tmp = tmp_path_factory.mktemp("check_calls")
    gen = torch.Generator().manual_seed(0)
    ids, pos = torch.randn(4, 64, generator=gen), torch.randn(4, 64, generator=gen)
    return {
        "kwonly": _build(tmp, "kwonly", KeywordOnly(), (),
                         {"input_ids": ids, "cache_position": pos}),
        "reordered": _build(tmp, "reordered", KeywordOnly(), (),
                            {"cache_position": pos, "input_ids": ids}),
        "mixed": _build(tmp, "mixed", Mixed(), (ids,), {"y": pos}),
        # the same signature computing something else: --check must notice
        "other": _build(tmp, "other", KeywordOnly(scale=2.0), (),
                        {"input_ids": ids, "cache_position": pos}),
    }


@pytest.mark.parametrize("name", ["kwonly", "reordered", "mixed"])
def test_keyword_inputs_check_passes(programs, name, tmp_path, capsys):
    out, npz = programs[name]
    code, stdout, err = cli(capsys, "run", out, "--inputs", npz, "-o", tmp_path / "y.npz",
                            "--check", "-q")
    assert code == 0, err
    assert stdout.splitlines()[-1].endswith("ok") and err == ""


def test_keyword_inputs_wrong_result_still_fails(programs, tmp_path, capsys):
    out, npz = programs["kwonly"]
    wrong = Path(shutil.copytree(out, tmp_path / "out"))
    # the directory now says it was compiled from the other program: eager runs that one
    record_source(wrong, programs["other"][1].with_suffix(".pt2"))
    code, stdout, err = cli(capsys, "run", wrong, "--inputs", npz, "-o", tmp_path / "y.npz",
                            "--check", "-q")
    assert code == 1, err
    assert "MISMATCH" in stdout and err.count("\n") == 1
    assert "1 of 1 outputs differ from PyTorch eager" in err


def test_api_check_calls_keyword_programs(programs):
    import spyrec

    out, npz = programs["mixed"]
    with np.load(npz) as data:
        inputs = {k: data[k] for k in data.files}
    got = spyrec.run(out, inputs, check=True)
    np.testing.assert_allclose(got["output_0"], inputs["x"] * 2 + inputs["y"], rtol=1e-6)


def _swapped(programs, tmp_path: Path, pt2: Path) -> Path:
    out = Path(shutil.copytree(programs["kwonly"][0], tmp_path / "out"))
    record_source(out, pt2)
    return out


class OneInput(torch.nn.Module):
    def forward(self, *, input_ids):
        return input_ids * 2


def test_another_programs_pt2_is_refused_before_simulating(programs, tmp_path, capsys):
    """A program.pt2 taking one input where the directory was compiled for two: exit 2 at
    once, nothing simulated (no outputs written)."""
    pt2 = tmp_path / "one.pt2"
    torch.export.save(torch.export.export(OneInput(), (), {"input_ids": torch.ones(4, 64)}),
                      str(pt2))
    out = _swapped(programs, tmp_path, pt2)
    code, stdout, err = cli(capsys, "run", out, "--inputs", programs["kwonly"][1], "--check",
                            "-q")
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert "program.pt2: takes 1 inputs [input_ids] but manifest.json lists 2 [input_ids, " \
           "cache_position]" in err
    assert not (out / "outputs.npz").exists()


@dataclass
class Cache:
    k: torch.Tensor


torch.utils._pytree.register_dataclass(Cache, serialized_type_name="tests.check_calls.Cache")


class TakesCache(torch.nn.Module):
    def forward(self, input_ids, cache_position):
        return input_ids + cache_position.k


def test_an_input_container_check_cannot_rebuild_is_refused_before_simulating(
        programs, tmp_path, capsys):
    """Inputs inside a registered dataclass: torch.export.load could only rebuild them with
    the class imported; the placeholders are still named input_ids, cache_position_k."""
    x = torch.randn(4, 64)
    pt2 = tmp_path / "cache.pt2"
    torch.export.save(torch.export.export(TakesCache(), (x, Cache(x))), str(pt2))
    out = compile_pt2(pt2, tmp_path / "cache")
    np.savez(tmp_path / "in.npz", input_ids=x.numpy(), cache_position_k=x.numpy())
    code, stdout, err = cli(capsys, "run", out, "--inputs", tmp_path / "in.npz", "--check",
                            "-q")
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert "cannot rebuild the program's inputs: they are passed in " \
           "tests.check_calls.Cache" in err
    assert not (out / "outputs.npz").exists()


def test_transformers_executorch_recipe_decode_step(tmp_path, capsys):
    """A decode step exported by TorchExportableModuleForDecoderOnlyLM (keyword-only
    input_ids and cache_position, a static KV cache the step updates in place)."""
    transformers = pytest.importorskip("transformers")
    executorch = pytest.importorskip("transformers.integrations.executorch")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, use_cache=True)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=16,
        cache_config={"batch_size": 1, "max_cache_len": 16})
    recipe = executorch.TorchExportableModuleForDecoderOnlyLM(model, batch_size=1,
                                                              max_cache_len=16)
    ids, pos = torch.tensor([[5]]), torch.tensor([3])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = recipe.export(input_ids=ids, cache_position=pos)
    assert program.call_spec.in_spec.child(1).context == ["input_ids", "cache_position"]
    torch.export.save(program, str(tmp_path / "decode.pt2"))
    out = compile_pt2(tmp_path / "decode.pt2", tmp_path / "decode")
    np.savez(tmp_path / "in.npz", input_ids=ids.numpy(), cache_position=pos.numpy())
    code, stdout, err = cli(capsys, "run", out, "--inputs", tmp_path / "in.npz", "--check",
                            "-q")
    assert code == 0, err
    rows = stdout.splitlines()[1:]
    assert rows and all(r.endswith("ok") for r in rows), stdout
