"""`spyrec generate` against eager PyTorch's own loop, whole processes side by side (issue 59's
target: generate <= 2x eager's wall time).

A tiny Granite (or Llama; hidden 128, 2 layers, static cache 256, fp32, transformers' export
recipe) is exported as a prefill of the prompt's length and a decode step and compiled into
one directory; then, alternately `--pairs` times:
- generate: `python -m spyrec generate OUT --prompt P --new-tokens N -q` (the prompt through
  the prefill, N - 1 decode steps on the simulator, each step's estimate);
- eager: a fresh `python` that loads both `.pt2` files (`torch.export.load`) and runs the same
  greedy loop, the decode module's cache copied from the prefill's.
The table gives the medians and their ratio, and whether the two processes printed the same
tokens.

Usage: `python bench/generate_wall.py [--family granite] [--new-tokens 24] [--pairs 3]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
PROMPT = [5, 17, 33, 2, 99, 140, 7, 64]

EXPORT = r"""
import sys, torch
sys.path.insert(0, {root!r})
from tests.models import hf
step, (ids, pos) = hf.decode({family!r}, torch.float32, slots=256, position=8)
for name, args in (("prefill", (torch.tensor([{prompt}]), torch.arange(8))), ("decode", (ids, pos))):
    torch.export.save(torch.export.export(step, args, strict=True), {work!r} + f"/{{name}}.pt2")
"""

EAGER = r"""
import torch
prefill = torch.export.load({work!r} + "/prefill.pt2").module()
decode = torch.export.load({work!r} + "/decode.pt2").module()
prompt = {prompt}
with torch.no_grad():
    logits = prefill(torch.tensor([prompt]), torch.arange(len(prompt)))
    for name, buf in prefill.named_buffers():
        if name in dict(decode.named_buffers()):
            decode.get_buffer(name).copy_(buf)
    tokens = [int(logits[0, -1].argmax())]
    for k in range({new} - 1):
        logits = decode(torch.tensor([[tokens[-1]]]), torch.tensor([len(prompt) + k]))
        tokens.append(int(logits[0, -1].argmax()))
print("tokens:", ",".join(map(str, tokens)))
"""


def _timed(args: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"{args[:4]} failed: {done.stderr.strip().splitlines()[-1:]}")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("tokens:")), "")
    return wall, line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="granite", choices=["granite", "llama"])
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="spyrec-genwall-") as work:
        _timed([PY, "-c", EXPORT.format(root=str(ROOT), family=args.family, prompt=PROMPT,
                                        work=work)])
        _timed([PY, "-m", "spyrec", "compile", f"{work}/prefill.pt2", f"{work}/decode.pt2",
                "-o", f"{work}/out", "-q"])
        gen_cmd = [PY, "-m", "spyrec", "generate", f"{work}/out", "--prompt",
                   ",".join(map(str, PROMPT)), "--new-tokens", str(args.new_tokens), "-q"]
        eager_cmd = [PY, "-c", EAGER.format(work=work, prompt=PROMPT, new=args.new_tokens)]
        gens, eagers, same = [], [], True
        for _ in range(args.pairs):
            g, g_tokens = _timed(gen_cmd)
            e, e_tokens = _timed(eager_cmd)
            gens.append(g)
            eagers.append(e)
            same &= g_tokens == e_tokens
    row = {"family": args.family, "new_tokens": args.new_tokens, "pairs": args.pairs,
           "generate_s": round(statistics.median(gens), 2),
           "eager_s": round(statistics.median(eagers), 2),
           "ratio": round(statistics.median(gens) / statistics.median(eagers), 2),
           "same_tokens": same}
    print(json.dumps(row))


if __name__ == "__main__":
    main()
