"""The shape of a tiling YAML file (DESIGN §6), checked before the program is known.

```yaml
dims: {a: [A, B], fc1.weight: [_, K]}     # program inputs or parameter FQNs: one name per dim
groups:
  - ops: [add, mul]                       # FX node name globs, or `scope: "layers.0.mlp*"`
    loops: [{A: 2}, {B: 4}]               # outermost first: one dim per level, a count each
attention:                                # optional: flash attention tiles (issue 29)
  - ops: [scaled_dot_product_attention]   # FX node globs of the attention; omitted: every one
    query_tile: 512                       # rows of q per query tile (0 or omitted: chosen)
    key_tile: 128                         # keys per key tile
    head_tile: 8                          # heads per head tile (a loop over head groups)
```
Everything the file alone can get wrong (keys, types, a dim twice in one group, a count that
is not a positive integer) is one `ConfigError` here, naming the file and the group; what needs
the graph (unknown inputs, ops and dims, sizes) is config.py's.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from spyrec.errors import ConfigError

TILING_FORM = ("{dims: {INPUT: [NAME|_, ...]}, groups: [{ops: [GLOB, ...] | scope: GLOB, "
               "loops: [{NAME: COUNT}, ...]}], attention: [{ops: [GLOB, ...], query_tile: N, "
               "key_tile: N}]}")
UNNAMED = "_"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class GroupSpec:
    """One entry of `groups`: a selector (exactly one of `ops`, `scope`) and its loops."""

    ops: tuple[str, ...] | None
    scope: str | None
    loops: tuple[tuple[str, int], ...]   # (dim, count), outermost first


@dataclass(frozen=True)
class AttentionSpec:
    """One entry of `attention`: the flash tiles of the attentions whose FX node matches one
    of `ops` (every attention when None); 0 leaves a tile to the cost model."""

    ops: tuple[str, ...] | None
    query_tile: int
    key_tile: int
    head_tile: int = 0
    where: str = ""             # how messages name the entry: "FILE: attention entry N"


@dataclass(frozen=True)
class TilingSpec:
    dims: dict[str, tuple[str | None, ...]]   # tensor -> name per dim (None for `_`)
    groups: tuple[GroupSpec, ...]
    attention: tuple[AttentionSpec, ...] = ()


def near(name: str, choices) -> str:
    """The suffix `(did you mean 'x' or 'y'?)` for up to three close names, or ''."""
    close = difflib.get_close_matches(name, sorted(set(choices)), n=3)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def group_where(where: str, index: int) -> str:
    """How messages name a group: the file, then its 1-based position in `groups`."""
    return f"{where}: group {index + 1}"


def check_shape(data, where: str) -> TilingSpec:
    """The checked, normalized form of a tiling document (`where` prefixes messages)."""
    if data is None:
        raise ConfigError(f"{where}: the tiling file is empty; a tiling file is {TILING_FORM}")
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a tiling file is a mapping {TILING_FORM}, got "
                          f"{type(data).__name__}")
    keys = ("dims", "groups", "attention")
    for key in data:
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r}{near(str(key), keys)}; a tiling "
                              f"file has dims and groups, and optionally attention: "
                              f"{TILING_FORM}")
    attention = _attention(data.get("attention"), where)
    if "attention" in data and "dims" not in data and "groups" not in data:
        return TilingSpec({}, (), attention)      # flash tiles only
    for key in ("dims", "groups"):
        if key not in data:
            raise ConfigError(f"{where}: no {key!r}; a tiling file is {TILING_FORM}")
    groups = data["groups"]
    if groups == [] and data["dims"] in ({}, None):
        return TilingSpec({}, (), attention)   # no group, no loops: auto's "nothing pays"
    dims = _dims(data["dims"], where)
    if not isinstance(groups, list) or not groups:
        raise ConfigError(f"{where}: groups must be a non-empty list of {{ops: [...] | scope: "
                          f"..., loops: [...]}}, got {groups!r}")
    return TilingSpec(dims, tuple(_group(g, group_where(where, i)) for i, g in enumerate(groups)),
                      attention)


ATTENTION_FORM = ("attention: [{ops: [GLOB, ...], query_tile: N, key_tile: N, head_tile: N}] "
                  "(ops optional: every attention; a tile left out or 0: the cost model's "
                  "choice; head_tile 0 with both other tiles given: every head)")


def _attention(entries, where: str) -> tuple[AttentionSpec, ...]:
    """The flash-attention tiles of a tiling file (a mapping is one entry)."""
    if entries is None:
        return ()
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where}: attention must be a non-empty list; {ATTENTION_FORM}")
    out = []
    for i, entry in enumerate(entries):
        at = f"{where}: attention entry {i + 1}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: expected a mapping, got {entry!r}; {ATTENTION_FORM}")
        known = ("ops", "query_tile", "key_tile", "head_tile")
        for key in entry:
            if key not in known:
                raise ConfigError(f"{at}: unknown key {key!r}{near(str(key), known)}; "
                                  f"{ATTENTION_FORM}")
        ops = entry.get("ops")
        if ops is not None and (not isinstance(ops, list) or not ops or
                                not all(isinstance(o, str) and o for o in ops)):
            raise ConfigError(f"{at}: ops must be a non-empty list of node name globs, got "
                              f"{ops!r}")
        tiles = []
        for key in ("query_tile", "key_tile", "head_tile"):
            value = entry.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{at}: {key} must be a positive integer (or 0: the cost "
                                  f"model's choice), got {value!r}")
            tiles.append(value)
        out.append(AttentionSpec(tuple(ops) if ops else None, *tiles, where=at))
    return tuple(out)


def _dims(dims, where: str) -> dict[str, tuple[str | None, ...]]:
    if not isinstance(dims, dict) or not dims:
        raise ConfigError(f"{where}: dims must map input names or parameter FQNs to a list "
                          f"of dim names, e.g. {{x: [T, _]}}; got {dims!r}")
    out = {}
    for tensor, names in dims.items():
        if not isinstance(tensor, str):
            raise ConfigError(f"{where}: dims: key {tensor!r} is not a tensor name; keys are "
                              f"input names or parameter FQNs (fc1.weight)")
        if not isinstance(names, list) or not names:
            raise ConfigError(f"{where}: dims: {tensor} must be a list with one name per dim "
                              f"('_' for a dim left unnamed), got {names!r}")
        for n in names:
            if not isinstance(n, str) or not (n == UNNAMED or _NAME.match(n)):
                raise ConfigError(f"{where}: dims: {tensor}: {n!r} is not a dim name; use a "
                                  f"name like T or d_model (a letter first), or '_'")
        named = [n for n in names if n != UNNAMED]
        twice = sorted({n for n in named if named.count(n) > 1})
        if twice:
            raise ConfigError(f"{where}: dims: {tensor} names two of its dims {twice[0]!r}; "
                              f"one name marks one dim of a tensor")
        out[tensor] = tuple(None if n == UNNAMED else n for n in names)
    return out


def _group(group, where: str) -> GroupSpec:
    if not isinstance(group, dict):
        raise ConfigError(f"{where}: a group is {{ops: [GLOB, ...] | scope: GLOB, loops: "
                          f"[{{NAME: COUNT}}, ...]}}, got {group!r}")
    known = ("ops", "scope", "loops")
    for key in group:
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r}{near(str(key), known)}; a group "
                              f"has ops or scope, and loops")
    if ("ops" in group) == ("scope" in group):
        raise ConfigError(f"{where}: give exactly one of ops (FX node name globs) or scope "
                          f"(a module path glob)")
    ops = scope = None
    if "ops" in group:
        ops = group["ops"]
        if (not isinstance(ops, list) or not ops
                or not all(isinstance(o, str) and o for o in ops)):
            raise ConfigError(f"{where}: ops must be a non-empty list of node name globs, "
                              f"e.g. [add, mul] or ['*'], got {ops!r}")
        ops = tuple(ops)
    else:
        scope = group["scope"]
        if not isinstance(scope, str):
            raise ConfigError(f"{where}: scope must be a module path glob such as "
                              f"'layers.0.mlp*', got {scope!r}")
    if "loops" not in group:
        raise ConfigError(f"{where}: no loops; give them outermost first, e.g. "
                          f"loops: [{{A: 2}}, {{B: 4}}]")
    return GroupSpec(ops, scope, _loops(group["loops"], where))


def _loops(loops, where: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(loops, list) or not loops:
        raise ConfigError(f"{where}: loops must be a non-empty list of {{NAME: COUNT}}, "
                          f"outermost first, got {loops!r}")
    out: list[tuple[str, int]] = []
    for level in loops:
        if not isinstance(level, dict) or len(level) != 1:
            raise ConfigError(f"{where}: loops: each level is one {{NAME: COUNT}} (one dim per "
                              f"level), got {level!r}")
        ((dim, count),) = level.items()
        if not isinstance(dim, str) or dim == UNNAMED or not _NAME.match(dim):
            raise ConfigError(f"{where}: loops: {dim!r} is not a dim name")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError(f"{where}: loops: the count of {dim} must be a positive integer, "
                              f"got {count!r}")
        if any(d == dim for d, _ in out):
            raise ConfigError(f"{where}: loops: {dim} appears at two levels; each dim may be "
                              f"tiled once per group")
        out.append((dim, count))
    return tuple(out)
