"""bundle.mlir: the execution order of the per-op specs, rendered from the Jinja template.

This module builds plain data (affine maps, body lines); `templates/bundle.mlir.j2` only loops
and substitutes. Without coarse tiling every op executes once with the concrete addresses in its
spec, so the body is one `sdscbundle.sdsc_execute` per op.

The template is package data (`spyrec/templates` is a symlink to the repository's
`templates/`, which the wheel ships as files), read with importlib.resources so an installed
spyrec renders the same bundle as a checkout.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import jinja2

TEMPLATE = resources.files("spyrec") / "templates" / "bundle.mlir.j2"


def bundle_data(sdsc_files: list[str]) -> dict:
    body = [f'sdscbundle.sdsc_execute () {{sdsc_filename = "{name}"}}' for name in sdsc_files]
    return {"maps": [], "body": body}


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    return env.from_string(TEMPLATE.read_text(encoding="utf-8"))


def render_bundle(data: dict) -> str:
    text = _template().render(**data)
    return text.lstrip("\n") if text.endswith("\n") else text.lstrip("\n") + "\n"
