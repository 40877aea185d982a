"""Runtime checks of the stored graph that spyrec drops: the nodes that only feed assertions.

A data-dependent size makes torch.export record its guards as ops on symbolic scalars:
Granite Speech asserts that the number of audio tokens equals the number of audio features
(`sym_size(index, 0)`, then `ge`/`le`/`eq` against 256, each into `_assert_scalar`), Granite
Vision (LLaVA-Next) that a condition over the image sizes holds (`_is_all_true` -> `item` ->
`torch.sym_ite(item, 1, 0)` -> comparisons -> `_assert_scalar`). The asserts already lower to
nothing (`registry.PASSTHROUGH`: eager runs them only for their check), so everything whose
results reach nothing but asserts is dead code for spyrec; dropping it at read time keeps
scalar-symbol ops the lowering has no form for out of the program.

A `torch.sym_ite` that something else reads (a size, an argument) is kept: its value must be
static (its condition a literal), else the reader refuses it (`pt2json.py`).
"""

from __future__ import annotations

from spyrec.errors import UnsupportedProgram

ASSERTS = {"torch.ops.aten._assert_scalar.default", "torch.ops.aten._assert_async.msg",
           "torch.ops.aten._assert_async.default"}
_KINDS = ("as_tensor", "as_sym_int", "as_sym_bool", "as_sym_float")


def drop_check_only(nodes: list[dict], outputs: list) -> list[dict]:
    """`nodes` without the asserts and the nodes whose every result only asserts read."""
    users: dict[str, set[int]] = {}
    for i, node in enumerate(nodes):
        for name in _names(node.get("inputs") or []):
            users.setdefault(name, set()).add(i)
    kept_names = set(_names(outputs))
    dead = {i for i, n in enumerate(nodes) if n.get("target") in ASSERTS}
    changed = bool(dead)
    while changed:
        changed = False
        for i, node in enumerate(nodes):
            results = _results(node)
            if i in dead or not results or results & kept_names:
                continue
            readers = set().union(*(users.get(r, set()) for r in results))
            if readers and readers <= dead:  # read, and only by checks (an unread in-place
                # write's result stays: the write is its effect)
                dead.add(i)
                changed = True
    return [n for i, n in enumerate(nodes) if i not in dead]


def _results(node: dict) -> set[str]:
    return set(_names(node.get("outputs") or []))


def _names(value) -> list[str]:
    """Every value name a JSON argument or output mentions (tensors and symbolic scalars)."""
    found = []
    if isinstance(value, dict):
        for key, v in value.items():
            if key in _KINDS and isinstance(v, dict):
                found.append(v.get("name") or v.get("as_name"))
            elif key in ("as_tensors", "as_optional_tensors") and isinstance(v, list):
                for t in v:
                    found += [t["name"]] if isinstance(t, dict) and "name" in t else _names(t)
            elif key != "as_graph":
                found += _names(v)
    elif isinstance(value, list):
        for v in value:
            found += _names(v)
    return [n for n in found if isinstance(n, str)]


def static_condition(raw: dict, name: str, where: str) -> None:
    """A `torch.sym_ite(b, t, f)` that the program reads: resolved at compile time when `b` is
    a literal (the serialized value is then the chosen branch), refused otherwise."""
    first = (raw.get("inputs") or [{}])[0].get("arg") or {}
    if "as_bool" not in first:
        raise UnsupportedProgram(
            f"node {name}: torch.sym_ite chooses a size by a condition on runtime data "
            f"({where}); spyrec compiles static shapes: make the condition a Python bool at "
            f"export time (pass sizes as Python ints, not tensors)")
