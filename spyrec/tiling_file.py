"""Reading a tiling file (`--tiling FILE.yaml`, DESIGN §6): the YAML read safely, its shape
checked (`plan/tiling/spec.py check_shape`, which planning shares without touching files)."""

from __future__ import annotations

from pathlib import Path

from spyrec.plan.tiling.spec import check_shape
from spyrec.yamlfile import read_yaml_file


def read_tiling_file(path: Path) -> dict:
    """The YAML document of `--tiling FILE` (safe_load), its shape checked; ConfigError if
    the file is missing, not YAML, or not a tiling file."""
    data = read_yaml_file(Path(path), "tiling", "--tiling")
    check_shape(data, str(path))
    return data
