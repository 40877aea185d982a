"""Compile a fixed set of programs into a directory, and diff two such directories.

For behaviour-preserving restructures: build a baseline before the change, build again after,
and every output file must be byte-identical, except the wall-time fields (`passes[].wall_ms`
of report.json and the pass-time lines of report.txt), the .pt2 each build exports anew
(manifest.json's `source.path` and `source.sha256`, and so the build's id, which hashes them:
manifest.json's `build.id`, report.json's `build`, report.txt's `build` line, weights.bin's
stamp) and the checkout the default pipeline was read from (`configs.pipeline` up to
`spyrec/configs/`), which are masked before comparing.

    python bench/compare_outputs.py build DIR        # compile everything into DIR/<name>/
    python bench/compare_outputs.py diff BEFORE AFTER

The set: every sample (samples/models.py), the hand-written differential programs
(tests/differential: test_programs, test_transformer_ops in fp32 and fp16, test_gather_forms),
and a few programs that exercise constant folding (bf16 included), convolutions, topk, cumsum,
buffer writes, and two tiny Hugging Face models (Llama in bf16, T5's encoder).
To test another checkout, run it with PYTHONPATH pointing at that checkout's root.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def programs() -> dict:
    """name -> (lambda: (module, inputs), export kwargs)."""
    import torch

    from samples.models import SAMPLES
    from tests.differential import test_gather_forms, test_programs, test_transformer_ops
    from tests.programs import Lambda

    out = {f"sample_{n}": (make, {}) for n, make in SAMPLES.items()}

    def table(prefix, tab, dtype=None):
        for name, (fn, inputs, *params) in tab.items():
            def make(fn=fn, inputs=inputs, params=params):
                p = params[0] if params else {}
                if dtype is not None:
                    p = {k: v.to(dtype) for k, v in p.items()}
                    ins = tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
                else:
                    ins = inputs
                return Lambda(fn, **p), ins
            out[f"{prefix}_{name}"] = (make, {})

    table("prog", test_programs.PROGRAMS)
    table("tops32", test_transformer_ops.PROGRAMS, torch.float32)
    table("tops16", test_transformer_ops.PROGRAMS, torch.float16)
    table("gather", test_gather_forms.GATHERS)

    def r(*shape, seed=0, dtype=torch.float32):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(*shape, generator=g).to(dtype)

    bf = torch.bfloat16

    def rotary_bf16(m, x):
        pos = torch.arange(x.shape[0], dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, x.shape[1], 2, dtype=torch.float32)
                               / x.shape[1]))
        ang = torch.outer(pos, inv).repeat(1, 2).to(bf)
        return x * ang.cos() + x * ang.sin() + m.w

    def mask_fold(m, x):
        n = x.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        bias = torch.zeros(n, n).masked_fill(~causal, float("-inf"))
        return torch.softmax(x + bias.to(x.dtype), -1)

    def t5_buckets(m, x):
        n = x.shape[-1]
        rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        large = torch.log(rel.abs().float() / 8) / 2.77 * 8
        b = torch.where(rel.abs() < 8, rel.abs(), 8 + large.to(torch.long).clamp(max=15))
        return x + b.to(x.dtype)

    class Buf(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(8, 64))

        def forward(self, x, pos):
            self.cache.index_copy_(0, pos, x)
            return self.cache * 2

    extra = {
        "rotary_bf16": (lambda: (Lambda(rotary_bf16, w=r(16, 64, seed=1, dtype=bf)),
                                 (r(16, 64, dtype=bf),))),
        "causal_mask_fp16": (lambda: (Lambda(mask_fold), (r(2, 33, 33, dtype=torch.float16),))),
        "t5_buckets": (lambda: (Lambda(t5_buckets), (r(2, 40, 40),))),
        "bf16_casts": (lambda: (Lambda(lambda m, x: (x.to(bf) * 3).float() + m.w.float()
                                       + x.to(bf).to(torch.float16).float(),
                                       w=r(7, 70, seed=2, dtype=bf)), (r(7, 70),))),
        "conv_bn_relu_fp16": (lambda: _conv_bn(torch.float16)),
        "max_pool": (lambda: (torch.nn.MaxPool2d(3, 2, 1), (r(1, 4, 9, 9),))),
        "topk": (lambda: (Lambda(lambda m, x: tuple(torch.topk(x, 5, -1))), (r(6, 90),))),
        "cumsum_fp16": (lambda: (Lambda(lambda m, x: torch.cumsum(x, -1)),
                                 (r(4, 100, dtype=torch.float16),))),
        "index_copy_buffer": (lambda: (Buf(), (r(2, 64), torch.tensor([5, 1])))),
    }
    out.update({k: (v, {}) for k, v in extra.items()})

    from tests.models import hf
    out["hf_llama_bf16"] = (lambda: hf.prefill("llama", bf), {})
    out["hf_t5_encoder"] = (lambda: hf.prefill("t5_encoder"), {})
    return out


def _conv_bn(dtype):
    import torch
    from torch import nn

    torch.manual_seed(3)
    bn = nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    model = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, bias=False), bn, nn.ReLU()).to(dtype)
    return model, (torch.randn(1, 4, 6, 6).to(dtype),)


def build(dest: Path, only: str | None) -> int:
    from tests.programs import compile_pt2, export

    dest.mkdir(parents=True, exist_ok=True)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (make, kwargs) in sorted(programs().items()):
            if only and not re.search(only, name):
                continue
            try:
                module, inputs = make()
                pt2 = export(Path(tmp), module, inputs, name, **kwargs)
                compile_pt2(pt2, dest / name, verify_each=False)
                status = "ok"
            except Exception as e:  # a refusal is an outcome too: record it
                status = f"{type(e).__name__}: {e}".splitlines()[0][:200]
                (dest / f"{name}.error").write_text(f"{type(e).__name__}: {e}\n")
                if not type(e).__module__.startswith("spyrec"):
                    failures.append(name)
                    traceback.print_exc()
            print(f"{name}: {status}", flush=True)
    print(f"built {dest}; unexpected failures: {failures or 'none'}")
    return 1 if failures else 0


CHECKOUT = re.compile(r"^.*/(?=spyrec/configs/)")
WALL = re.compile(r"^  (\S+)\s+\d+\.\d ms$", re.M)
# the build's id (spyrec/build_record.py) hashes the manifest, which names the .pt2 each build
# exports anew: masked where it is written (report.json, report.txt, weights.bin's stamp)
BUILD_LINE = re.compile(r"^build [0-9a-f]{64}$", re.M)
STAMP = re.compile(rb"spyrec-build [0-9a-f]{64}")
STAMP_SPAN = 78


def _masked(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name == "report.json":
        report = json.loads(data)
        for p in report.get("passes", []):
            p["wall_ms"] = 0
        report.pop("build", None)
        return json.dumps(report, indent=1, sort_keys=True).encode()
    if path.name == "report.txt":
        return BUILD_LINE.sub("build -", WALL.sub(r"  \1 - ms", data.decode())).encode()
    if path.name == "weights.bin" and STAMP.search(data[-STAMP_SPAN:]):
        return data[:-STAMP_SPAN] + STAMP.sub(b"spyrec-build -", data[-STAMP_SPAN:])
    if path.name == "manifest.json":
        # the .pt2 was exported anew into a temporary directory (its path and bytes differ
        # from build to build), and the default pipeline's path names the checkout built
        manifest = json.loads(data)
        manifest.get("source", {}).pop("path", None)
        manifest.get("source", {}).pop("sha256", None)
        manifest.get("build", {}).pop("id", None)     # a hash covering the two above
        configs = manifest.get("configs", {})
        if isinstance(configs.get("pipeline"), str):
            configs["pipeline"] = CHECKOUT.sub("<checkout>/", configs["pipeline"])
        return json.dumps(manifest, indent=1, sort_keys=True).encode()
    return data


def diff(before: Path, after: Path) -> int:
    a = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    b = {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    problems = [f"only in {before}: {p}" for p in sorted(a - b)]
    problems += [f"only in {after}: {p}" for p in sorted(b - a)]
    same = 0
    for rel in sorted(a & b):
        if _masked(before / rel) == _masked(after / rel):
            same += 1
        else:
            problems.append(f"differs: {rel}")
    for line in problems:
        print(line)
    print(f"{same} of {len(a | b)} files identical (wall times masked); "
          f"{len({p.parts[0] for p in a | b})} programs")
    return 1 if problems else 0


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dest", type=Path)
    b.add_argument("--only", help="regex: build only matching program names")
    d = sub.add_parser("diff")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "build":
        return build(args.dest, args.only)
    return diff(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
