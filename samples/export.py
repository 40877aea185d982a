"""Export a sample: `python samples/export.py NAME OUT_DIR` writes NAME.pt2 and NAME.npz.

NAME is one of samples/models.py SAMPLES or samples/tiling.py TILING_SAMPLES (the programs of
configs/tiling/NAME.yaml)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from samples.models import SAMPLES  # noqa: E402
from samples.tiling import TILING_SAMPLES  # noqa: E402

EXPORTABLE = {**SAMPLES, **TILING_SAMPLES}


def export_sample(name: str, out_dir: Path) -> tuple[Path, Path]:
    module, inputs = EXPORTABLE[name]()
    out_dir.mkdir(parents=True, exist_ok=True)
    ep = torch.export.export(module, inputs)
    pt2 = out_dir / f"{name}.pt2"
    torch.export.save(ep, str(pt2))
    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    npz = out_dir / f"{name}.npz"
    np.savez(npz, **{n: t.numpy() for n, t in zip(names, inputs)})
    return pt2, npz


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in EXPORTABLE:
        sys.exit(f"usage: export.py NAME OUT_DIR   (NAME: {', '.join(EXPORTABLE)})")
    for p in export_sample(sys.argv[1], Path(sys.argv[2])):
        print(p)
