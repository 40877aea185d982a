"""A tiny IBM Granite, exported the ordinary way: the sample to copy for real models.

    python samples/granite.py OUT_DIR [--layers N] [--fp16]

writes, for a randomly initialized Granite (hidden 128, 4 heads, 2 KV heads, MLP 256, vocab 512;
built from a config in code, nothing is downloaded):
- `granite_prefill.pt2` + `.npz`: `torch.export.export(model, (input_ids,))` returning logits for
  32 tokens (`use_cache=False`);
- `granite_decode.pt2` + `.npz`: one decode step with a 128-slot static KV cache, through
  transformers' own export recipe (`TorchExportableModuleWithStaticCache`, `strict=True`); the
  step writes the caches in place, so `spyrec run` returns them under their names next to the
  logits.

Then: `spyrec compile OUT_DIR/granite_prefill.pt2 -o OUT_DIR/prefill` and
`spyrec run OUT_DIR/prefill --inputs OUT_DIR/granite_prefill.npz --check`.
Needs `transformers` (`pip install -e '.[models]'`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

VOCAB, HIDDEN, HEADS, KV_HEADS, MLP, POSITIONS, TOKENS, SEED = 512, 128, 4, 2, 256, 128, 32, 0


def granite(layers: int, dtype: torch.dtype, use_cache: bool):
    import transformers

    config = transformers.GraniteConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=layers,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=POSITIONS, bos_token_id=1, eos_token_id=2, use_cache=use_cache)
    torch.manual_seed(SEED)
    model = transformers.GraniteForCausalLM(config).eval().to(dtype)
    if use_cache:
        model.generation_config.use_cache = True
        model.generation_config.cache_implementation = "static"
    return model


class Logits(torch.nn.Module):
    """`model(input_ids).logits`, what a user exporting a causal LM writes."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def export_prefill(out: Path, layers: int, dtype: torch.dtype) -> None:
    ids = torch.randint(0, VOCAB, (1, TOKENS), generator=torch.Generator().manual_seed(SEED))
    ep = torch.export.export(Logits(granite(layers, dtype, use_cache=False)).eval(), (ids,))
    torch.export.save(ep, str(out / "granite_prefill.pt2"))
    np.savez(out / "granite_prefill.npz", input_ids=ids.numpy())


def export_decode(out: Path, layers: int, dtype: torch.dtype, position: int = 5) -> None:
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    class Step(TorchExportableModuleWithStaticCache):
        def forward(self, input_ids, cache_position):
            return super().forward(input_ids=input_ids, cache_position=cache_position)

    step = Step(granite(layers, dtype, use_cache=True), batch_size=1, max_cache_len=POSITIONS,
                device=torch.device("cpu")).eval()
    ids = torch.randint(0, VOCAB, (1, 1), generator=torch.Generator().manual_seed(SEED + 1))
    pos = torch.tensor([position])
    ep = torch.export.export(step, (ids, pos), strict=True)
    torch.export.save(ep, str(out / "granite_decode.pt2"))
    np.savez(out / "granite_decode.npz", input_ids=ids.numpy(), cache_position=pos.numpy())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--only", choices=["prefill", "decode"])
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    dtype = torch.float16 if args.fp16 else torch.float32
    if args.only != "decode":
        export_prefill(args.out_dir, args.layers, dtype)
    if args.only != "prefill":
        export_decode(args.out_dir, args.layers, dtype)
    print(args.out_dir)


if __name__ == "__main__":
    main()
