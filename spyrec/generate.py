"""`spyrec generate OUT --prompt IDS --new-tokens N [--check] [--json]`: a greedy causal-LM
loop over a directory's prefill and decode programs, on one simulated device (issue 59).

The prompt goes through the prefill program when the directory has one of the prompt's
length, else token by token through the decode program; then each new token is the argmax of
the last logits, fed back through the decode program at the next cache position. The K/V
cache stays in simulated device memory from call to call (`spyrec.Session`), as on the
device. Each call's estimated time is the cost model's for that call (at its cache position
where the program's attention is bounded by it, `ir/symbols.py` `ValueSource`).

`--check` runs the same loop in PyTorch eager from the source `.pt2` files (their buffers
shared by FQN as the device shares them) and compares the tokens (equal) and the last step's
logits (`--check`'s rule 1, `sim/check.py`).

The projection (`projection`): the prefill's time for the prompt, decode's time per token at
the prompt's length and at the cache's end, and its HBM bytes per token there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from spyrec.errors import CheckMismatch, InputFileError
from spyrec.lm_programs import LmPrograms, check_request, lm_programs


@dataclass
class Step:
    """One call: which program, at which cache position, the token it produced."""

    program: str
    position: int           # the cache position of its first input token
    tokens_in: int
    token: int              # argmax of its last logits
    estimated_us: float
    hbm_read_bytes: int
    hbm_write_bytes: int


@dataclass
class Generation:
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    last_logits: np.ndarray | None = None
    wall_s: float = 0.0


def generate(out: Path, prompt: list[int], new_tokens: int,
             progress: Callable[[str], None] = lambda _: None):
    """(the generation, the LM programs, the session) of greedy decoding over `out`."""
    import time

    from spyrec.session import Session

    t0 = time.perf_counter()
    session = Session(out)
    lm = lm_programs(session)
    check_request(lm, prompt, new_tokens)
    gen = Generation(list(prompt))
    costs = Costs(session)
    for name, ids, position in _calls(lm, prompt):
        logits = _call(session, gen, costs, name, ids, position)
        progress(f"{name} at position {position}")
    gen.tokens.append(int(np.argmax(logits)))
    for k in range(new_tokens - 1):
        position = len(prompt) + k
        logits = _call(session, gen, costs, lm.decode, [gen.tokens[-1]], position)
        gen.tokens.append(int(np.argmax(logits)))
        progress(f"token {k + 2}/{new_tokens}")
    gen.last_logits = logits
    gen.wall_s = time.perf_counter() - t0
    return gen, lm, session


def _calls(lm: LmPrograms, prompt: list[int]):
    """(program, input ids, first cache position) of each call that reads the prompt."""
    if lm.prefill is not None and lm.prefill_tokens == len(prompt):
        return [(lm.prefill, prompt, 0)]
    return [(lm.decode, [t], i) for i, t in enumerate(prompt)]


def _call(session, gen: Generation, costs: "Costs", name: str, ids: list[int],
          position: int) -> np.ndarray:
    """Run one program call; its last logits (float64)."""
    inputs = _inputs(ids, position)
    out = session.run(name, inputs)
    logits = np.asarray(out["output_0"], dtype=np.float64)[0, -1]
    totals = costs.at(name, position)
    gen.steps.append(Step(name, position, len(ids), int(np.argmax(logits)),
                          totals["time_us"], totals["hbm_read_bytes"],
                          totals["hbm_write_bytes"]))
    return logits


def _inputs(ids: list[int], position: int) -> dict[str, np.ndarray]:
    return {"input_ids": np.asarray([ids], dtype=np.int64),
            "cache_position": np.arange(position, position + len(ids), dtype=np.int64)}


class Costs:
    """The cost model's totals of a program call at a cache position: data-independent but
    for the symbolic lengths the inputs bind (a decode's key loop runs to its position), so
    computed once per program and bound lengths."""

    def __init__(self, session):
        self.session = session
        self._memo: dict[tuple, dict] = {}

    def at(self, name: str, position: int) -> dict:
        from spyrec.sim.inputs import check_inputs
        from spyrec.sim.lengths import bind_lengths
        from spyrec.sim.program_cost import program_cost
        from spyrec.sim.runner import at_lengths

        program = self.session.program(name)
        manifest = program.manifest
        ids = manifest.tensors["input_ids"].host_shape[1]
        arrays = check_inputs(manifest, _inputs([0] * ids, position))
        lengths = bind_lengths(manifest, arrays, "the generated inputs")
        key = (name, tuple(sorted(lengths.items())))
        if key not in self._memo:
            run = at_lengths(program, lengths) if lengths != manifest.maxima() else program
            self._memo[key] = program_cost(run)["totals"]
        return self._memo[key]


def projection(lm: LmPrograms, costs: Costs, prompt_tokens: int) -> dict:
    """Prefill time for the prompt, decode per token at the prompt's length and at the
    cache's end, and decode's HBM bytes per token at both."""
    if lm.prefill is not None and lm.prefill_tokens == prompt_tokens:
        prefill = costs.at(lm.prefill, 0)["time_us"]
    else:
        prefill = sum(costs.at(lm.decode, i)["time_us"] for i in range(prompt_tokens))
    end = (lm.slots or prompt_tokens + 1) - 1
    here, last = costs.at(lm.decode, prompt_tokens), costs.at(lm.decode, end)
    return {"prompt_tokens": prompt_tokens, "prefill_us": prefill,
            "prefill_program": lm.prefill if lm.prefill_tokens == prompt_tokens else lm.decode,
            "decode_us_at_prompt": here["time_us"], "decode_us_at_end": last["time_us"],
            "cache_slots": lm.slots, "end_position": end,
            "hbm_bytes_per_token_at_prompt": here["hbm_read_bytes"] + here["hbm_write_bytes"],
            "hbm_bytes_per_token_at_end": last["hbm_read_bytes"] + last["hbm_write_bytes"],
            "hbm_write_bytes_per_token": here["hbm_write_bytes"]}


def projection_text(p: dict) -> list[str]:
    return ["serving projection (estimated):",
            f"  prefill of {p['prompt_tokens']} tokens ({p['prefill_program']}): "
            f"{p['prefill_us']:.3f} us",
            f"  decode per token at position {p['prompt_tokens']}: "
            f"{p['decode_us_at_prompt']:.3f} us, "
            f"{p['hbm_bytes_per_token_at_prompt']} HBM bytes "
            f"({p['hbm_write_bytes_per_token']} written)",
            f"  decode per token at the cache's end (position {p['end_position']}): "
            f"{p['decode_us_at_end']:.3f} us, {p['hbm_bytes_per_token_at_end']} HBM bytes"]


def write_serving_report(out: Path) -> None:
    """OUT/report.txt of a directory of causal-LM programs: the projection for a prompt of
    the prefill's length (one token without a prefill) and each program's estimate. Nothing
    for programs that are not causal-LM steps."""
    from spyrec.multi_compile import SUMMARY
    from spyrec.session import Session

    try:
        session = Session(out)
    except InputFileError:      # programs that cannot share their buffers: no loop to project
        return
    with session:
        try:
            lm = lm_programs(session)
        except InputFileError:
            return
        costs = Costs(session)
        proj = projection(lm, costs, lm.prefill_tokens or 1)
    lines = ["spyrec serving report", f"programs: {', '.join(session.programs)} "
             f"(decode: {lm.decode}, prefill: {lm.prefill or 'none'})", ""]
    lines += projection_text(proj)
    (Path(out) / SUMMARY).write_text("\n".join(lines) + "\n")


# --- --check: the same loop in eager ------------------------------------------------------------

def eager_generate(session, lm: LmPrograms, prompt: list[int], new_tokens: int):
    """(tokens, last logits) of the same greedy loop in PyTorch eager over the source
    `.pt2` files, buffers shared by FQN between the programs."""
    modules = {name: _EagerProgram(session, name) for name in session.programs}
    logits = None
    for name, ids, position in _calls(lm, prompt):
        logits = _eager_call(modules, name, ids, position)
    tokens = [int(np.argmax(logits))]
    for k in range(new_tokens - 1):
        logits = _eager_call(modules, lm.decode, [tokens[-1]], len(prompt) + k)
        tokens.append(int(np.argmax(logits)))
    return tokens, logits


class _EagerProgram:
    def __init__(self, session, name: str):
        from spyrec.pt2archive import load_exported
        from spyrec.sim.reference_program import check_reference_program

        program = session.program(name)
        path = check_reference_program(program.files.path if program.files else
                                       session.out, list(program.manifest.inputs))
        exported = load_exported(path)
        self.in_spec = exported.call_spec.in_spec
        self.module = exported.module()
        self.mutated = [fqn for fqn, _ in program.manifest.mutated_buffers]

    def __call__(self, inputs: dict[str, np.ndarray]):
        import torch
        from torch.utils._pytree import tree_unflatten

        flat = [torch.from_numpy(inputs[n]) for n in ("input_ids", "cache_position")]
        args, kwargs = tree_unflatten(flat, self.in_spec)
        with torch.no_grad():
            return self.module(*args, **kwargs)


def _eager_call(modules: dict, name: str, ids: list[int], position: int) -> np.ndarray:
    import torch

    program = modules[name]
    result = program(_inputs(ids, position))
    logits = result[0] if isinstance(result, (tuple, list)) else result
    with torch.no_grad():
        for other in modules.values():
            for fqn in program.mutated:
                if other is not program and fqn in other.mutated:
                    other.module.get_buffer(fqn).copy_(program.module.get_buffer(fqn))
    return logits.detach().to(torch.float64).numpy()[0, -1]


def check_generation(gen: Generation, lm: LmPrograms, session) -> dict:
    """--check: the eager loop's tokens and last logits against the simulated ones."""
    from spyrec.sim.check import compare

    tokens, logits = eager_generate(session, lm, gen.prompt, len(gen.tokens))
    check = compare(0, "logits", lm.logits_dtype, gen.last_logits, logits)
    first_diff = next((i for i, (a, b) in enumerate(zip(gen.tokens, tokens)) if a != b), None)
    return {"ok": first_diff is None and check.ok, "eager_tokens": tokens,
            "first_different_token": first_diff, "logits_ok": check.ok,
            "logits_max_abs_err": float(check.max_abs), "logits_tolerance": check.tolerance}


def check_failure(result: dict) -> CheckMismatch | None:
    if result["ok"]:
        return None
    if result["first_different_token"] is not None:
        return CheckMismatch(f"generated token {result['first_different_token'] + 1} differs "
                             f"from PyTorch eager's (eager: {result['eager_tokens']})")
    return CheckMismatch(f"the last step's logits differ from PyTorch eager's by "
                         f"{result['logits_max_abs_err']:.3g} (tolerance "
                         f"{result['logits_tolerance']:g})")


def require_int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InputFileError(f"{what} {value!r}: give a whole number") from None
