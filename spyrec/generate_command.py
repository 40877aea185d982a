"""`spyrec generate OUT --prompt IDS --new-tokens N [--check] [--json] [-q]`: the thin click
command over `generate.py` (DESIGN §1). The tokens and per-step estimates (or one JSON
document with `--json`) go to stdout, progress to stderr; a bad request is one line, exit 2;
`--check` finding a difference is exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import click

from spyrec.progress import Progress
from spyrec.stdout import emit


@click.command("generate")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--prompt", required=True, metavar="IDS",
              help="The prompt's token ids, comma-separated (e.g. 1,2,3).")
@click.option("--new-tokens", "new_tokens", required=True, metavar="N",
              help="How many tokens to generate (greedy).")
@click.option("--check", is_flag=True,
              help="Also run the loop in PyTorch eager from the source .pt2 files and compare "
                   "the tokens and the last step's logits; exit 1 on a difference.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
def generate_command(out: Path, prompt: str, new_tokens: str, check: bool, as_json: bool,
                     quiet: bool) -> None:
    """Greedy generation over the causal-LM programs in OUT (a prefill and a decode step,
    inputs input_ids and cache_position, logits first out), with the K/V cache kept in
    simulated device memory between steps."""
    from spyrec.generate import (Costs, check_failure, check_generation, generate,
                                 projection, require_int)
    from spyrec.lm_programs import parse_prompt

    ids = parse_prompt(prompt)
    count = require_int(new_tokens, "--new-tokens")
    ticker = Progress("spyrec generate", enabled=not quiet)
    try:
        gen, lm, session = generate(out, ids, count, ticker.step)
    finally:
        ticker.done()
    proj = projection(lm, Costs(session), len(ids))
    checked = check_generation(gen, lm, session) if check else None
    if as_json:
        emit(json.dumps(_document(gen, proj, checked), indent=1))
    else:
        emit(_text(gen, proj, checked))
    failure = check_failure(checked) if checked is not None else None
    if failure is not None:
        raise failure


def _document(gen, proj: dict, checked: dict | None) -> dict:
    return {"prompt": gen.prompt, "tokens": gen.tokens, "wall_s": round(gen.wall_s, 6),
            "steps": [vars(s) for s in gen.steps], "projection": proj, "check": checked}


def _text(gen, proj: dict, checked: dict | None) -> str:
    lines = [f"prompt: {','.join(map(str, gen.prompt))}",
             f"tokens: {','.join(map(str, gen.tokens))}", "",
             f"{'step':>5} {'program':<12} {'position':>8} {'token':>7} {'est us':>10}"]
    lines += [f"{k:>5} {s.program:<12} {s.position:>8} {s.token:>7} {s.estimated_us:>10.3f}"
              for k, s in enumerate(gen.steps)]
    from spyrec.generate import projection_text

    lines += [""] + projection_text(proj)
    if checked is not None:
        verdict = "ok" if checked["ok"] else "MISMATCH"
        lines += ["", f"check against PyTorch eager: {verdict} (tokens "
                      f"{'equal' if checked['first_different_token'] is None else 'differ'}, "
                      f"last logits max abs err {checked['logits_max_abs_err']:.3g})"]
    return "\n".join(lines)
