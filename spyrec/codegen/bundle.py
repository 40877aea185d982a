"""bundle.mlir: the execution order of the per-op specs, rendered from the Jinja template.

This module builds plain data (affine maps, body lines); `templates/bundle.mlir.j2` only loops
and substitutes. Without coarse tiling every op executes once with the concrete addresses in its
spec, so the body is one `sdscbundle.sdsc_execute` per op (and nothing else: untiled bundles stay
byte-identical to those written before loops existed).

Inside loops (issue 8 contract §2) the body nests `scf.for` per loop level, with constant
bounds; each symbolic start address of an op (codegen/symbols.py) is an `affine.apply` of its
map (one `#map_<k>` per distinct vector of byte advances, `d_l` = the loop var of level l,
outermost first) to `%sym_<n>`, its address at iteration 0, and the execute lists the ids its
operands bind (`symbol_ids`).

The template is package data (`spyrec/templates` is a symlink to the repository's
`templates/`, which the wheel ships as files), read with importlib.resources so an installed
spyrec renders the same bundle as a checkout.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Sequence

import jinja2

from spyrec.codegen.symbols import Symbol
from spyrec.ir import Loop

TEMPLATE = resources.files("spyrec") / "templates" / "bundle.mlir.j2"
_INDENT = "  "


def bundle_data(sdsc_files: list[str], loops: Sequence[tuple[Loop, ...]] | None = None,
                symbols: Sequence[list[Symbol]] | None = None) -> dict:
    """Template data for ops executed in order: `loops[i]` encloses op i (outermost first) and
    `symbols[i]` are its symbolic start addresses (both empty by default)."""
    loops = list(loops) if loops is not None else [()] * len(sdsc_files)
    symbols = list(symbols) if symbols is not None else [[] for _ in sdsc_files]
    b = _Builder()
    b.nest(list(zip(sdsc_files, loops, symbols)), 0)
    if not b.bounds:
        return {"maps": [], "body": b.body}
    head = ["%c0 = arith.constant 0 : index", "%c1 = arith.constant 1 : index"]
    head += [f"%loop_bound_{k} = arith.constant {n} : index" for k, n in enumerate(b.bounds)]
    head += [f"%sym_{s.n} = arith.constant {s.address} : index" for s in b.syms]
    maps = [{"index": k, "dims": [f"d{j}" for j in range(len(adv))], "expr": _map_expr(adv)}
            for adv, k in b.maps.items()]
    return {"maps": maps, "body": head + b.body}


def _map_expr(advance: tuple[int, ...]) -> str:
    return " + ".join(["s0"] + [f"{a}*d{j}" for j, a in enumerate(advance) if a])


class _Builder:
    """Walks the ops once, collecting loop bounds, maps, symbols and body lines in order."""

    def __init__(self) -> None:
        self.bounds: list[int] = []
        self.maps: dict[tuple[int, ...], int] = {}
        self.syms: list[Symbol] = []
        self.body: list[str] = []

    def nest(self, items: list, depth: int) -> None:
        i = 0
        while i < len(items):
            name, loops, syms = items[i]
            pad = _INDENT * depth
            if len(loops) <= depth:
                self.execute(name, syms, depth, pad)
                i += 1
                continue
            ident = _loop_ids(loops[:depth + 1])
            j = i
            while j < len(items) and _loop_ids(items[j][1][:depth + 1]) == ident:
                j += 1
            bound = len(self.bounds)
            self.bounds.append(loops[depth].count)
            self.body.append(f"{pad}scf.for %i_{depth} = %c0 to %loop_bound_{bound} "
                             f"step %c1 {{")
            self.nest(items[i:j], depth + 1)
            self.body.append(f"{pad}}}")
            i = j

    def execute(self, name: str, syms: list[Symbol], depth: int, pad: str) -> None:
        if not syms:
            self.body.append(f'{pad}sdscbundle.sdsc_execute () {{sdsc_filename = "{name}"}}')
            return
        ivars = ", ".join(f"%i_{j}" for j in range(depth))
        for s in syms:
            assert len(s.advance_bytes) == depth, (name, s)
            k = self.maps.setdefault(s.advance_bytes, len(self.maps))
            self.syms.append(s)
            self.body.append(f"{pad}%addr_{s.n} = affine.apply #map_{k}({ivars})[%sym_{s.n}]")
        operands = ", ".join(f"%addr_{s.n}" for s in syms)
        ids = ", ".join(str(s.id) for s in syms)
        self.body.append(f'{pad}sdscbundle.sdsc_execute ({operands}) {{sdsc_filename = '
                         f'"{name}", symbol_ids = [{ids}]}}')


def _loop_ids(loops: tuple[Loop, ...]) -> tuple:
    """What makes two ops share a loop: its key and count (their tiled vars may differ)."""
    return tuple((loop.key, loop.count) for loop in loops)


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    return env.from_string(TEMPLATE.read_text(encoding="utf-8"))


def render_bundle(data: dict) -> str:
    text = _template().render(**data)
    return text.lstrip("\n") if text.endswith("\n") else text.lstrip("\n") + "\n"
