"""bundle.mlir: the execution order of the per-op specs, rendered from the Jinja template.

This module builds plain data (affine maps, body lines); `templates/bundle.mlir.j2` only loops
and substitutes. Without coarse tiling every op executes once with the concrete addresses in its
spec, so the body is one `sdscbundle.sdsc_execute` per op.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def bundle_data(sdsc_files: list[str]) -> dict:
    body = [f'sdscbundle.sdsc_execute () {{sdsc_filename = "{name}"}}' for name in sdsc_files]
    return {"maps": [], "body": body}


def render_bundle(data: dict) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    text = env.get_template("bundle.mlir.j2").render(**data)
    return text.lstrip("\n") if text.endswith("\n") else text.lstrip("\n") + "\n"
