"""The causal-LM programs of an output directory, as `spyrec generate` needs them (issue 59).

A causal-LM program takes `input_ids` [1, T] and `cache_position` [T] (integers) and returns
the logits [1, T, vocab] first; it keeps its K/V cache in buffers it updates in place. The
decode program takes one token (T = 1); a prefill program takes the prompt whole (T > 1).
Which program is which follows from those shapes, not from names. The cache's slots are the
positions the buffers hold: dim -2 of the K/V buffers ([batch, heads, slots, head_dim], as
transformers' StaticCache and the ExecuTorch recipe lay them out).

Every problem is one message, exit 2 (`InputFileError`): a program without those inputs, no
decode program, a prompt longer than the cache, a token id outside the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

from spyrec.errors import InputFileError

INPUTS = ("input_ids", "cache_position")
INTEGER = ("int64", "int32")


@dataclass(frozen=True)
class LmPrograms:
    """`decode` (one token) and `prefill` (the prompt whole, `prefill_tokens` of it, or
    None), the vocabulary and the cache's slots (None when no buffer says)."""

    decode: str
    prefill: str | None
    prefill_tokens: int | None
    vocab: int
    slots: int | None
    logits_dtype: str


def lm_programs(session) -> LmPrograms:
    """The directory's prefill and decode programs (`session`: a `spyrec.Session`)."""
    tokens: dict[str, int] = {}
    vocab, dtype, slots = {}, {}, []
    for name in session.programs:
        manifest = session.program(name).manifest
        tokens[name], vocab[name], dtype[name] = _signature(session.out, name, manifest)
        slots += [manifest.tensors[t].host_shape[-2] for _, t in manifest.mutated_buffers
                  if len(manifest.tensors[t].host_shape) >= 3]
    decode = [n for n, t in tokens.items() if t == 1]
    if not decode:
        raise InputFileError(f"{session.out}: no decode program (input_ids of one token: "
                             f"[1, 1]); spyrec generate needs one; it holds "
                             f"{', '.join(f'{n} ({t} tokens)' for n, t in tokens.items())}")
    prefill = next((n for n, t in tokens.items() if t > 1), None)
    return LmPrograms(decode[0], prefill, tokens.get(prefill), vocab[decode[0]],
                      min(slots) if slots else None, dtype[decode[0]])


def _signature(out, name: str, manifest) -> tuple[int, int, str]:
    """(tokens per call, vocabulary, logits dtype) of one program, checked."""
    where = f"{out}: program {name!r}"
    if tuple(manifest.inputs) != INPUTS:
        raise InputFileError(f"{where} takes {', '.join(manifest.inputs) or 'no inputs'}; "
                             f"spyrec generate runs causal-LM programs taking exactly "
                             f"input_ids [1, T] and cache_position [T] (transformers' "
                             f"static-cache export recipe)")
    ids, pos = (manifest.tensors[n] for n in INPUTS)
    if len(ids.host_shape) != 2 or ids.host_shape[0] != 1 or ids.host_dtype not in INTEGER \
            or list(pos.host_shape) != [ids.host_shape[1]] or pos.host_dtype not in INTEGER:
        raise InputFileError(f"{where}: input_ids {list(ids.host_shape)} {ids.host_dtype} and "
                             f"cache_position {list(pos.host_shape)} {pos.host_dtype}; "
                             f"spyrec generate needs integer input_ids [1, T] and "
                             f"cache_position [T]")
    if not manifest.outputs:
        raise InputFileError(f"{where} returns no logits (its first output)")
    logits = manifest.tensors[manifest.outputs[0]]
    if len(logits.host_shape) != 3 or logits.host_shape[1] != ids.host_shape[1]:
        raise InputFileError(f"{where}: its first output is {list(logits.host_shape)}, not "
                             f"the logits [1, {ids.host_shape[1]}, vocab]")
    return ids.host_shape[1], logits.host_shape[2], logits.host_dtype


def check_request(lm: LmPrograms, prompt: list[int], new_tokens: int) -> None:
    """The prompt and the count fit the programs (exit 2 naming the problem)."""
    if not prompt:
        raise InputFileError("--prompt: give at least one token id (e.g. --prompt 1,2,3)")
    if new_tokens < 1:
        raise InputFileError(f"--new-tokens {new_tokens}: give at least 1")
    bad = [t for t in prompt if not 0 <= t < lm.vocab]
    if bad:
        raise InputFileError(f"--prompt: token id {bad[0]} is outside the vocabulary "
                             f"(0..{lm.vocab - 1}, the logits' last dim)")
    if lm.slots is not None and len(prompt) > lm.slots:
        raise InputFileError(f"--prompt: {len(prompt)} tokens, longer than the cache's "
                             f"{lm.slots} slots")
    if lm.slots is not None and len(prompt) + new_tokens - 1 > lm.slots:
        raise InputFileError(f"--new-tokens {new_tokens}: the prompt's {len(prompt)} tokens "
                             f"and {new_tokens - 1} decode steps pass the cache's {lm.slots} "
                             f"slots; give at most {lm.slots - len(prompt) + 1}")


def parse_prompt(text: str) -> list[int]:
    """`1,2,3` -> [1, 2, 3] (exit 2 for anything else)."""
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise InputFileError(f"--prompt {text!r}: give token ids separated by commas, e.g. "
                             f"--prompt 1,2,3") from None
