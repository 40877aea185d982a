"""Serving at the roofline (issue 59): a static-cache decode step at Granite-8B geometry,
its estimate against the bytes the step must move, and the bytes it writes.

The program: Granite-3.x-8B's width (hidden 4096, 32 heads / 8 KV heads, head dim 128, MLP
12800, vocab 49155), `--layers` layers (default 4), fp16, random weights built from the config
(no download), transformers' static-cache export recipe (`TorchExportableModuleWithStaticCache`,
strict export), a cache of `--slots` slots (default 32,768). It is exported and compiled in
fresh processes; the estimate is the cost model's at cache position `--position` (default
16,384: the decode's key loop runs to the position, `ir/symbols.py` `ValueSource`).

Columns:
- est_us: the estimate at the position (`spyrec.generate.Costs`);
- bound_us: (weight bytes + the filled K/V + the new rows) / HBM bandwidth (the cost model's
  `hbm_bytes_per_s`): weight bytes are every stored constant the step reads (the embedding
  table: one row; the caches are not weights), the filled K/V `position` rows of every layer's
  K and V, the new rows one row of each;
- ratio: est / bound (issue 59's target <= 1.1);
- written_MB: HBM bytes the step writes (the estimate's `hbm_write_bytes`; target <= 2 MB;
  with the whole-cache copy it was the caches' size);
- in_place: the `mutations` rows of report.json that are in place, of all.

Usage: `python bench/serving.py [--layers 4] [--slots 32768] [--position 16384] [--keep DIR]
[--json FILE]`. Needs ~4 GB of disk for the export and the output directory (deleted unless
`--keep`) and transformers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

EXPORT = r"""
import torch, transformers as tf
config = tf.GraniteConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
    intermediate_size=12800, vocab_size=49155, num_hidden_layers={layers},
    max_position_embeddings={slots}, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    use_cache=True, tie_word_embeddings=False)
torch.manual_seed(0)
torch.set_default_dtype(torch.float16)
model = tf.GraniteForCausalLM(config).eval()
torch.set_default_dtype(torch.float32)
model.generation_config.use_cache = True
model.generation_config.cache_implementation = "static"
from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

class DecodeStep(TorchExportableModuleWithStaticCache):
    def forward(self, input_ids, cache_position):
        return super().forward(input_ids=input_ids, cache_position=cache_position)

step = DecodeStep(model, batch_size=1, max_cache_len={slots}, device=torch.device("cpu")).eval()
args = (torch.tensor([[7]]), torch.tensor([{position}]))
with torch.no_grad():
    ep = torch.export.export(step, args, strict=True)
torch.export.save(ep, {pt2!r})
"""

KV_HEADS, HEAD_DIM, HIDDEN, FP16 = 8, 128, 4096, 2


def _run(args: list[str], what: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    if done.returncode:
        sys.exit(f"{what} failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - t0


def measure(work: Path, layers: int, slots: int, position: int) -> dict:
    pt2, out = work / "decode.pt2", work / "out"
    export_s = _run([PY, "-c", EXPORT.format(layers=layers, slots=slots, position=position,
                                             pt2=str(pt2))], "export")
    compile_s = _run([PY, "-m", "spyrec", "compile", str(pt2), "-o", str(out), "-q"],
                     "compile")
    return {"layers": layers, "slots": slots, "position": position,
            "export_s": round(export_s, 1), "compile_s": round(compile_s, 1),
            **_estimate(out, layers, position)}


def _estimate(out: Path, layers: int, position: int) -> dict:
    from spyrec.costmodel import CostParams
    from spyrec.generate import Costs
    from spyrec.session import Session

    report = json.loads((out / "report.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    mutated = set(manifest.get("mutated_buffers", {}).values())
    weights = 0
    for t in manifest["tensors"]:
        if t["role"] != "constant" or t["name"] in mutated:
            continue
        embed = "embed_tokens" in (t.get("source") or "")
        weights += HIDDEN * FP16 if embed else t["device_bytes"]
    row = KV_HEADS * HEAD_DIM * FP16
    filled, new = 2 * layers * position * row, 2 * layers * row
    hbm = CostParams().hbm_bytes_per_s
    with Session(out) as session:
        totals = Costs(session).at(session.programs[0], position)
    bound_us = (weights + filled + new) / hbm * 1e6
    rows = report.get("mutations", [])
    return {"est_us": round(totals["time_us"], 1), "bound_us": round(bound_us, 1),
            "ratio": round(totals["time_us"] / bound_us, 3),
            "read_MB": round(totals["hbm_read_bytes"] / 1e6, 1),
            "written_MB": round(totals["hbm_write_bytes"] / 1e6, 3),
            "weights_MB": round(weights / 1e6, 1), "filled_kv_MB": round(filled / 1e6, 1),
            "in_place": f"{sum(r['in_place'] for r in rows)}/{len(rows)}",
            "estimate_at_max_us": round(report["cost"]["totals"]["time_us"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--slots", type=int, default=32768)
    ap.add_argument("--position", type=int, default=16384)
    ap.add_argument("--keep", type=Path, help="keep the export and output here")
    ap.add_argument("--json", type=Path, help="also write the row as JSON")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="spyrec-serving-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        row = measure(work, args.layers, args.slots, args.position)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    for key, value in row.items():
        print(f"{key:>20}  {value}")
    if args.json:
        args.json.write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
