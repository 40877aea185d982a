"""Long context (issue 29): causal prefill, decode over a long static cache and paged decode,
each one `scaled_dot_product_attention` at Granite-8B's attention geometry (32 query heads,
head dim 128, fp16), against the roofline and the compulsory bytes.

Programs (batch 1):
- prefill_N / prefill_gqa_N: `sdpa(q, k, v, is_causal=True)` over N tokens, 32 K/V heads, or
  8 with `enable_gqa=True`;
- decode_N: one new token (q [1, 32, 1, 128]) over a static cache of N slots (8 K/V heads,
  `enable_gqa=True`) with the mask a static-cache decode step has: a boolean `attn_mask`
  input [1, 1, 1, N], True on the filled slots (the first 3/4 here);
- paged{P}_N: the same step with K and V gathered from page pools [2N/P, 8, P, 128] (half
  the pages belong to other sequences) by a block-table input (int64 [N/P]) with
  `index_select`, then permuted and reshaped to [1, 8, N, 128], as vLLM-style paged
  attention exports it.

Each is exported in a fresh process and compiled by `spyrec compile` in another (its wall is
compile_s); report.json and manifest.json give:
- est_us: the cost model's estimate (`cost.totals.time_us`);
- roof_us: max(compulsory / HBM bandwidth, flops / PT peak) + one bundle launch
  (bench/hardware_plans.py's bound), the flops those of q @ kT and probs @ v over every score
  (eager's math sdpa: the issue's bound, which a plan that skips work does not lower);
  causal_us: the same with only the scores on and under the diagonal (N(N+1)/2 of a causal
  prefill's N^2, all of a decode's): the bound of a kernel that skips the masked tiles;
- flops_share: the compiled program's flops (report.json `cost.totals.flops`, the softmax's
  included) over roof_us's: about 1 for materialized attention, about (N+1)/2N plus the
  diagonal tiles' masked halves for flash attention that skips the tiles above it;
- hbm_bytes: `cost.totals` HBM read + write, per run; compulsory: the program's inputs read
  and its output written once (bench/hardware_plans.py's count, less the constants the
  lowering makes, such as the causal-mask table: the programs have no weights), and for
  paged decode only the pages the block table selects (plus the table), not the pools;
- attention: "flash QxK" (the query and key tiles) where coarse_tiling made the attention
  counted tile loops with an online softmax (report.json `attention`), else "materialized";
- target: prefill (issue 58): est <= 1.3 x causal_us, the bound of a kernel that skips the
  masked tiles (and compile <= 5 s at 32K); issue 58 retired issue 29's traffic target for
  prefill (a compute-bound flash kernel re-reads K and V by design; the time bound prices the
  bytes). Decode (issue 29): est <= 1.2 x roof; paged traffic <= 1.2 x compulsory.
A program whose export or compile fails, passes `--timeout` or `--max-rss-gb` keeps its
row, with the cause in the last column (a failed `--simulate` run: in the check column).

Usage: `python bench/long_context.py [--sizes 4096,8192,32768] [--decode-sizes 8192,32768]
[--paged-sizes 32768] [--pages 64,128] [--kinds prefill,gqa,decode,paged] [--timeout 600]
[--simulate] [--max-rss-gb 8] [--tiling auto] [--set PASS.OPTION=VALUE] [--keep DIR]
[--json FILE]`. `--simulate` also runs `spyrec run --check` (run_s, check) on the programs
whose device memory (manifest.json `hbm_bytes`, what the simulator allocates) fits a quarter
of `--max-rss-gb`.
Exports of 32K tokens are large (each input 268 MB): they live in a temporary directory,
deleted at the end unless `--keep DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import hardware_plans  # noqa: E402
import scale  # noqa: E402

PY = sys.executable
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
# kind -> (time limit, over which bound; traffic limit over compulsory)
TARGETS = {"prefill": (1.3, "est_causal", None), "decode": (1.2, "est_roof", None),
           "paged": (None, "est_roof", 1.2)}
PREFILL_COMPILE_S = 5.0      # the compile target, at 32K tokens
COMPILE_TARGET_TOKENS = 32768
TARGET_LABELS = {"est_roof": "est<={:g}x roof", "est_causal": "est<={:g}x causal",
                 "traffic_ratio": "traffic<={:g}x comp",
                 "compile_s": "compile<={:g}s"}
EXPORT_TIMEOUT_S = 600.0     # per program: torch.export of a 32K program is not what is measured


@dataclass(frozen=True)
class Program:
    """One benchmark program: `kind` prefill, decode or paged; `tokens` the sequence (prefill)
    or the cache slots (decode, paged); `page` the tokens per page (paged only)."""
    kind: str
    tokens: int
    kv_heads: int
    page: int = 0

    @property
    def name(self) -> str:
        size = f"{self.tokens // 1024}k" if self.tokens % 1024 == 0 else str(self.tokens)
        if self.kind == "prefill":
            return f"prefill{'_gqa' if self.kv_heads != HEADS else ''}_{size}"
        return f"paged{self.page}_{size}" if self.kind == "paged" else f"decode_{size}"

    @property
    def queries(self) -> int:
        return self.tokens if self.kind == "prefill" else 1

    def attention_flops(self, causal: bool = False) -> int:
        """The flops of q @ kT and of probs @ v over every score (eager's math sdpa), or with
        `causal` only over those on and under a causal prefill's diagonal."""
        n = self.tokens
        pairs = n * (n + 1) // 2 if causal and self.kind == "prefill" else self.queries * n
        return 2 * 2 * HEADS * HEAD_DIM * pairs


def programs(kinds: list[str], sizes: list[int], decode_sizes: list[int],
             paged_sizes: list[int], pages: list[int]) -> list[Program]:
    out = []
    for n in sizes:
        out += [Program("prefill", n, HEADS)] if "prefill" in kinds else []
        out += [Program("prefill", n, KV_HEADS)] if "gqa" in kinds else []
    out += [Program("decode", n, KV_HEADS) for n in decode_sizes if "decode" in kinds]
    out += [Program("paged", n, KV_HEADS, p) for n in paged_sizes for p in pages
            if "paged" in kinds]
    return out


# --- export (runs in a child process: torch and the example inputs stay out of the bench) ---

def build(program: Program):
    """(module, {input name: example tensor}) for `program`; random fp16 q/k/v, fixed seed."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=g, dtype=torch.float32).half()

    n, kv = program.tokens, program.kv_heads
    q = randn(1, HEADS, program.queries, HEAD_DIM)
    if program.kind == "prefill":
        class Prefill(torch.nn.Module):
            def forward(self, q, k, v):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                      enable_gqa=kv != HEADS)
        return Prefill(), {"q": q, "k": randn(1, kv, n, HEAD_DIM), "v": randn(1, kv, n, HEAD_DIM)}
    if program.kind == "decode":
        class Decode(torch.nn.Module):
            def forward(self, q, k_cache, v_cache, attn_mask):
                return F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=attn_mask,
                                                      enable_gqa=True)
        filled = torch.arange(n) < 3 * n // 4
        return Decode(), {"q": q, "k_cache": randn(1, kv, n, HEAD_DIM),
                          "v_cache": randn(1, kv, n, HEAD_DIM),
                          "attn_mask": filled.reshape(1, 1, 1, n)}
    per_seq = n // program.page

    class PagedDecode(torch.nn.Module):
        def forward(self, q, k_pool, v_pool, block_table):
            def gathered(pool):
                pages = pool.index_select(0, block_table)       # [per_seq, kv, page, dim]
                return pages.permute(1, 0, 2, 3).reshape(1, kv, n, HEAD_DIM)
            return F.scaled_dot_product_attention(q, gathered(k_pool), gathered(v_pool),
                                                  enable_gqa=True)
    pool = (2 * per_seq, kv, program.page, HEAD_DIM)
    table = torch.randperm(2 * per_seq, generator=g)[:per_seq]
    return PagedDecode(), {"q": q, "k_pool": randn(*pool), "v_pool": randn(*pool),
                           "block_table": table}


def export_all(specs: list[dict], work: str) -> None:
    """Export every program of `specs` (Program fields) to WORK/name.pt2 and its inputs to
    WORK/name.npz, one at a time (a 32K program's inputs are a gigabyte)."""
    import numpy as np
    import torch

    for spec in specs:
        program = Program(**spec)
        module, inputs = build(program)
        with torch.no_grad():
            ep = torch.export.export(module.eval(), tuple(inputs.values()))
        torch.export.save(ep, f"{work}/{program.name}.pt2")
        np.savez(f"{work}/{program.name}.npz", **{k: t.numpy() for k, t in inputs.items()})
        del ep, module, inputs


def export(work: Path, todo: list[Program], max_rss: float) -> None:
    script = (f"import sys; sys.path.insert(0, {str(BENCH)!r}); import long_context; "
              f"long_context.export_all({[asdict(p) for p in todo]!r}, {str(work)!r})")
    scale.measured([PY, "-c", script], "export", max_rss,
                   timeout_s=EXPORT_TIMEOUT_S * len(todo))


# --- measuring ---

def compulsory_bytes(program: Program, manifest: dict, report: dict) -> int:
    """hardware_plans' compulsory bytes without the lowering's constants (the programs have no
    weights); for paged decode, of each pool only the pages the block table selects."""
    tensors = {t["name"]: t for t in manifest["tensors"]}
    made = sum(t["device_bytes"] for t in tensors.values() if t["role"] == "constant")
    need = hardware_plans.compulsory_bytes(manifest, report) - made
    if program.kind == "paged":
        for pool in ("k_pool", "v_pool"):
            need -= tensors[pool]["device_bytes"] // 2      # half the pages are read
    return need


def targets(program: Program) -> list[tuple[str, float]]:
    """Issues 29 and 58's targets for `program`: (row key, the most it may be) pairs."""
    time_x, bound, traffic_x = TARGETS[program.kind]
    checks = [(bound, time_x)] if time_x else []
    checks += [("traffic_ratio", traffic_x)] if traffic_x else []
    if program.kind == "prefill" and program.tokens >= COMPILE_TARGET_TOKENS:
        checks.append(("compile_s", PREFILL_COMPILE_S))
    return checks


def target_text(program: Program) -> str:
    return ", ".join(TARGET_LABELS[key].format(limit) for key, limit in targets(program))


def judged(program: Program, row: dict) -> str:
    """"met", or "not met: " and the figures that miss their target."""
    missed = [f"{key} {row[key]:.2f}" for key, limit in targets(program) if not row[key] <= limit]
    return "met" if not missed else "not met: " + ", ".join(missed)


def empty_row(program: Program, status: str) -> dict:
    """The row of a program with no compiled output: every number nan, `status` says why."""
    nan = float("nan")
    return {"program": program.name, "ops": nan, "compile_s": nan, "est_us": nan,
            "roof_us": nan, "causal_us": nan, "est_roof": nan, "est_causal": nan,
            "flops_share": nan,
            "hbm_bytes": nan, "compulsory": nan, "traffic_ratio": nan, "run_s": nan,
            "check": "-", "attention": "-", "footprint": nan, "target": target_text(program), "status": status}


def measure(program: Program, out: Path, compile_s: float) -> dict:
    """The row of a compiled program, from OUT/report.json and OUT/manifest.json."""
    report = json.loads((out / "report.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    totals = report["cost"]["totals"]
    need = compulsory_bytes(program, manifest, report)
    hbm = totals["hbm_read_bytes"] + totals["hbm_write_bytes"]
    roof = hardware_plans.roofline_us(need, program.attention_flops())
    causal = hardware_plans.roofline_us(need, program.attention_flops(causal=True))
    row = {**empty_row(program, ""), "ops": report["ops"], "compile_s": compile_s,
           "est_us": totals["time_us"], "roof_us": roof, "causal_us": causal,
           "est_roof": totals["time_us"] / roof, "est_causal": totals["time_us"] / causal,
           "flops_share": totals["flops"] / program.attention_flops(),
           "hbm_bytes": hbm, "compulsory": need, "traffic_ratio": hbm / need,
           "attention": attention_form(report), "footprint": manifest["hbm_bytes"]}
    row["status"] = judged(program, row)
    return row


def attention_form(report: dict) -> str:
    """How the program's attention was compiled: "flash QxK" (query and key tile) per site
    coarse_tiling rewrote as counted tile loops (report.json `attention`), else
    "materialized" (the whole scores)."""
    sites = report.get("attention") or []
    return " ".join(f"flash {s['query_tile']}x{s['key_tile']}" for s in sites) or "materialized"


def simulated(work: Path, program: Program, out: Path, timeout_s: float,
              max_rss: float) -> tuple[float, str]:
    """(wall s, pass/fail/the cause) of `spyrec run --check` on the compiled program."""
    cmd = [PY, "-m", "spyrec", "run", str(out), "--inputs", str(work / f"{program.name}.npz"),
           "--check", "-q", "-o", str(work / f"{program.name}_outputs.npz")]
    try:
        wall, rss = scale.measured(cmd, f"spyrec run --check of {program.name}", max_rss,
                                   timeout_s=timeout_s)
    except scale.ProcessFailed as e:
        return float("nan"), "fail: " + e.cause if e.returncode == 1 else e.cause
    return wall, "pass" if rss != float("inf") else f"memory > {max_rss:g} GB"


def bench_one(work: Path, program: Program, args: argparse.Namespace) -> dict:
    pt2, out = work / f"{program.name}.pt2", work / f"{program.name}_out"
    if not pt2.exists():
        return empty_row(program, "export failed")
    cmd = [PY, "-m", "spyrec", "compile", str(pt2), "-o", str(out), "-q"]
    cmd += ["--tiling", args.tiling] if args.tiling else []
    cmd += [word for option in args.set for word in ("--set", option)]
    try:
        compile_s, rss = scale.measured(cmd, f"spyrec compile of {program.name}",
                                        args.max_rss_gb, timeout_s=args.timeout)
    except scale.ProcessFailed as e:
        return empty_row(program, f"compile: {e.cause}")
    if rss == float("inf"):
        return empty_row(program, f"compile: memory > {args.max_rss_gb:g} GB")
    row = measure(program, out, compile_s)
    if args.simulate and row["footprint"] <= args.max_rss_gb * (1 << 30) / 4:
        row["run_s"], row["check"] = simulated(work, program, out, args.timeout,
                                               args.max_rss_gb)
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return row


COLUMNS = [("program", "{:<22}"), ("ops", "{:>5}"), ("compile_s", "{:>9.1f}"),
           ("est_us", "{:>10.1f}"), ("roof_us", "{:>10.1f}"), ("causal_us", "{:>10.1f}"),
           ("est_roof", "{:>8.2f}"), ("est_causal", "{:>10.2f}"), ("flops_share", "{:>11.2f}"),
           ("hbm_bytes", "{:>16,.0f}"), ("compulsory", "{:>14,.0f}"),
           ("traffic_ratio", "{:>13.2f}")]
SIMULATE_COLUMNS = [("run_s", "{:>7.1f}"), ("check", "{:>5}")]
VERDICT_COLUMNS = [("attention", "{:<16}"), ("target", "{:<45}"), ("status", "{:<}")]


def table(rows: list[dict], simulate: bool = False) -> str:
    return scale.table(rows, COLUMNS + (SIMULATE_COLUMNS if simulate else []) + VERDICT_COLUMNS)


def run(args: argparse.Namespace) -> list[dict]:
    """Export, compile and measure every program of `args`; the rows, in order."""
    todo = programs(args.kinds.split(","), int_list(args.sizes), int_list(args.decode_sizes),
                    int_list(args.paged_sizes), int_list(args.pages))
    work = args.keep or Path(tempfile.mkdtemp(prefix="spyrec-long-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        try:
            export(work, todo, args.max_rss_gb)
        except scale.ProcessFailed as e:       # the programs exported before it still run
            print(f"long_context: export: {e.cause}", file=sys.stderr)
        for program in todo:
            rows.append(bench_one(work, program, args))
            print(table(rows[-1:], args.simulate).splitlines()[1], file=sys.stderr, flush=True)
            if not args.keep:
                for suffix in (".pt2", ".npz", "_outputs.npz"):
                    (work / f"{program.name}{suffix}").unlink(missing_ok=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return rows


def int_list(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,8192,32768", help="prefill tokens, comma-separated")
    ap.add_argument("--decode-sizes", default="8192,32768", help="decode cache slots")
    ap.add_argument("--paged-sizes", default="32768", help="paged decode cache slots")
    ap.add_argument("--pages", default="64,128", help="tokens per page of paged decode")
    ap.add_argument("--kinds", default="prefill,gqa,decode,paged")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds each compile or run may take")
    ap.add_argument("--max-rss-gb", type=float, default=8.0)
    ap.add_argument("--simulate", action="store_true",
                    help="also `spyrec run --check` the programs small enough to simulate")
    ap.add_argument("--tiling", default=None, help="passed to spyrec compile (e.g. auto)")
    ap.add_argument("--set", action="append", default=[], metavar="PASS.OPTION=VALUE",
                    help="passed to spyrec compile (e.g. flash_attention.mode=never)")
    ap.add_argument("--keep", type=Path, default=None,
                    help="export and compile into this directory and keep it")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    return ap


def main(argv: list[str] | None = None) -> list[dict]:
    args = parser().parse_args(argv)
    rows = run(args)
    print(f"roof_us = max(compulsory / {hardware_plans.DEFAULT_PARAMS.hbm_bytes_per_s / 1e9:g} "
          f"GB/s, flops / PT peak) + bundle launch; causal_us counts only the flops on and "
          f"under the diagonal; flops_share is the plan's flops over roof_us's; "
          f"tiling {args.tiling or 'default pipeline'}"
          f"{''.join(' --set ' + o for o in args.set)}")
    print(table(rows, args.simulate))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    main()
