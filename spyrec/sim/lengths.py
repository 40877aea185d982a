"""Symbolic lengths at run time (issue 30; docs/formats.md, manifest.json `symbols`).

A program compiled for every length of a symbol is planned at its maximum: every tensor's
`host_shape`, layout and address hold the maximum, and only the bundle's trip counts follow
the length (`arith.divui` of a function argument). A run binds each symbol from the shapes of
the inputs that have it (manifest `symbolic_dims`), pads those inputs with zeros up to the
maximum before they go to the device (a correct program never reads the padding: its loops
stop at the length), and slices the outputs back to the bound lengths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from spyrec.errors import InputFileError
from spyrec.sim.specs import Manifest, TensorSpec, ValueRead


def describe(values: range) -> str:
    """`128..2048 by 64`: a symbol's admissible lengths, for messages."""
    return f"{values.start}..{values[-1]} by {values.step}"


def read_symbols(path: Path, entries: list[dict], tensors: dict[str, TensorSpec],
                 inputs: list[str]) -> tuple[dict[str, range], dict[str, ValueRead]]:
    """manifest.json `symbols` by name, checked, and those read from a value: a non-empty
    ladder, each symbolic dim of a tensor names one and holds its maximum, and each is read
    from an input's element or is some input's dim (else no run can bind it). A constant's
    symbolic dim (a folded position table) needs nothing at run time: the bound loops read
    only its first rows."""
    symbols: dict[str, range] = {}
    read_from: dict[str, ValueRead] = {}
    for i, s in enumerate(entries):
        label = f"{path}: at $.symbols[{i}] ('{s['name']}')"
        if s["name"] in symbols:
            raise InputFileError(f"{label}: symbol '{s['name']}' is listed twice")
        if s["minimum"] > s["maximum"] or (s["maximum"] - s["minimum"]) % s["granularity"]:
            raise InputFileError(f"{label}: {s['minimum']}..{s['maximum']} is not a ladder of "
                                 f"steps of {s['granularity']}; re-run spyrec compile")
        symbols[s["name"]] = range(s["minimum"], s["maximum"] + 1, s["granularity"])
        if "value" in s:
            read_from[s["name"]] = _value_read(label, s["value"], tensors, inputs)
    for t in tensors.values():
        for dim, name in t.symbolic_dims:
            label = f"{path}: at $.tensors ('{t.name}').symbolic_dims.{dim}"
            if name not in symbols or name in read_from:
                raise InputFileError(f"{label}: '{name}' is not a symbol of $.symbols read "
                                     f"from a shape")
            if t.role not in ("input", "output", "constant") or \
                    dim >= len(t.host_shape) or t.host_shape[dim] != symbols[name][-1]:
                raise InputFileError(f"{label}: a symbolic dim is a dim of an input, output or "
                                     f"constant whose host_shape holds the symbol's maximum "
                                     f"({symbols[name][-1]}); {t.role} '{t.name}' has shape "
                                     f"{list(t.host_shape)}: re-run spyrec compile")
    bound = {name for n in inputs for _, name in tensors[n].symbolic_dims} | set(read_from)
    for name in symbols:
        if name not in bound:
            raise InputFileError(f"{path}: at $.symbols: symbol '{name}' is no input's dim nor "
                                 f"read from an input, so no run can bind it; re-run spyrec "
                                 f"compile")
    return symbols, read_from


def _value_read(label: str, value: dict, tensors: dict[str, TensorSpec], inputs: list[str]
                ) -> ValueRead:
    """A symbol's `value`: an element of an integer input, inside it."""
    t = tensors.get(value["input"])
    if value["input"] not in inputs or not t.host_dtype.startswith("int") or \
            value["index"] >= t.numel:
        raise InputFileError(f"{label}: value reads element {value['index']} of "
                             f"'{value['input']}', which is not an element of an integer input; "
                             f"re-run spyrec compile")
    return ValueRead(value["input"], value["index"], value["offset"])


def shape_text(t: TensorSpec) -> str:
    """`[1, s81, 128]`: the host shape with each symbolic dim named by its symbol."""
    names = dict(t.symbolic_dims)
    return "[" + ", ".join(names.get(d, str(n)) for d, n in enumerate(t.host_shape)) + "]"


def fits_shape(t: TensorSpec, shape: tuple[int, ...]) -> bool:
    """`shape` is `t`'s host shape but for its symbolic dims (checked by `bind_lengths`)."""
    symbolic = dict(t.symbolic_dims)
    return len(shape) == len(t.host_shape) and all(
        d in symbolic or n == m for d, (n, m) in enumerate(zip(shape, t.host_shape)))


def bind_lengths(manifest: Manifest, arrays: dict[str, np.ndarray], label: str
                 ) -> dict[str, int]:
    """Each symbol's length, read from the inputs' shapes (already `fits_shape`) or, for one
    read from a value, from that input's element (`read_length`): a shape's length that is
    not admissible, or two inputs that disagree, is an InputFileError naming the symbol, the
    input and dim, the value and the admissible ones. Empty for a static program."""
    if not manifest.symbols:
        return {}
    lengths: dict[str, tuple[int, str, int]] = {}     # symbol -> (length, input, dim)
    read = {symbol: (read_length(manifest, symbol, arrays), "", -1)
            for symbol in manifest.read_from}
    for name in dict.fromkeys(manifest.inputs):
        for dim, symbol in manifest.tensors[name].symbolic_dims:
            n, values = arrays[name].shape[dim], manifest.symbols[symbol]
            if n not in values:
                raise InputFileError(f"{label}: input '{name}' dim {dim} has length {n}, which "
                                     f"symbol {symbol} does not admit: its lengths are "
                                     f"{describe(values)}")
            first = lengths.setdefault(symbol, (n, name, dim))
            if first[0] != n:
                raise InputFileError(f"{label}: input '{name}' dim {dim} has length {n} but "
                                     f"input '{first[1]}' dim {first[2]} has {first[0]}; both "
                                     f"are symbol {symbol} ({describe(values)}), so they "
                                     f"must agree")
    return {symbol: n for symbol, (n, _, _) in (lengths | read).items()}


def read_length(manifest: Manifest, symbol: str, arrays: dict[str, np.ndarray]) -> int:
    """A length read from an input's element (`Manifest.read_from`), plus its offset, clamped
    to the symbol's ladder (granularity 1): a decode step's cache position + 1 keys."""
    source, values = manifest.read_from[symbol], manifest.symbols[symbol]
    n = int(np.asarray(arrays[source.input]).reshape(-1)[source.index]) + source.offset
    return min(max(n, values.start), values[-1])


def padded_to_maximum(t: TensorSpec, array: np.ndarray) -> np.ndarray:
    """An input at a bound length, zero-padded along its symbolic dims to its host shape (the
    maximum), which its layout holds."""
    if array.shape == t.host_shape:
        return array
    return np.pad(array, [(0, m - n) for n, m in zip(array.shape, t.host_shape)])


def sliced_to_lengths(t: TensorSpec, array: np.ndarray, lengths: Mapping[str, int]
                      ) -> np.ndarray:
    """An output read at its host shape (the maximum), cut to the bound lengths (a symbol
    `lengths` does not bind stays at its maximum)."""
    cuts = [(dim, lengths[symbol]) for dim, symbol in t.symbolic_dims if symbol in lengths]
    if not cuts:
        return array
    index = [slice(None)] * array.ndim
    for dim, n in cuts:
        index[dim] = slice(0, n)
    return np.ascontiguousarray(array[tuple(index)])
