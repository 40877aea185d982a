"""Read one SuperDSC file (`sdsc_<n>.json`) into the OpSpec the simulator executes.

Every core's accesses come from the SuperDSC fields alone (reference/F-superdsc.md §4): a
tensor is a dense array of 128-byte sticks, its dims nested in the node's `layoutDimOrder_`
(innermost first), each level's extent `N_` plus its back gap (sticks for the stick dim, one
value for a dim the tensor lacks), and core c starts at `startAddressCoreCorelet_` entry c.
From those we build, per tensor, device dims (outermost first, lanes last) with coordinates in
the dim labels, so the vectorized executor runs the op as it runs any other.

Nothing is trusted that can be checked: the work split against `N_`, each core's slice, the
`coordInfo` folds and `dataStageParam_` against the split, and every core's start address
against core 0's plus its slice origin (F §2.12, §4.2 step 6). A file edited by hand (a core's
address, a fold factor, a scale) is reported, naming the field, before anything runs, on
every path: the compiler's in-memory documents of its cost estimate are read the same way as
the files `spyrec run` reads (sim/program.py). This module shares no code with the compiler's
emitter.
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import replace
from pathlib import Path
from typing import Callable

from spyrec.errors import InputFileError
from spyrec.indexing import Indirect, Lin, Var, floordiv, mod, substitute, var
from spyrec.indexing.expr import ZERO
from spyrec.layout import DeviceLayout
from spyrec.sim.specs import ArgSpec, CoreSplit, Execute, OpSpec

# dataFormat_ -> our device dtype name (F §2.6); SENUINT32 is how index tensors are labelled
FORMATS = {"SEN169_FP16": "fp16", "IEEE_FP32": "fp32", "IEEE_INT32": "int32",
           "SENUINT32": "int32", "SENINT8": "int8", "SEN143_FP8": "fp8_e4m3",
           "SEN152_FP8": "fp8_e5m2"}
_WORD = {"fp16": 2, "fp32": 4, "int32": 4, "int8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}

# What an address resolves to: (tensor name, its first byte, its byte length) or None.
Resolver = Callable[[int], "tuple[str, int, int] | None"]
# The tensor manifest hbm_args names for an arg index (its bytes are reused), or None.
HeldResolver = Callable[[int], "tuple[str, int, int] | None"]
# The manifest's LX tensors by lx_address (manifest order).
LxNames = dict[int, list[str]]


def lx_starts_of(lx_names: LxNames) -> dict[str, int]:
    """Each LX tensor's offset, by name (its first in `lx_names`)."""
    starts: dict[str, int] = {}
    for start, names in lx_names.items():
        for name in names:
            starts.setdefault(name, start)
    return starts


class SuperDscReader:
    """One SuperDSC document (`wrapper`, under top key `key`; `path` for messages) read into an
    OpSpec by `op`, with the manifest's lookups: HBM tensors by address (`resolve`), LX
    tensors by offset (`lx_names`), this file's `lx_args` and `hbm_args` (`held`)."""

    def __init__(self, path: Path, key: str, wrapper: dict, resolve: Resolver,
                 first: Execute | None = None, lx_names: LxNames | None = None,
                 lx_args: dict | None = None, held: HeldResolver | None = None,
                 lx_starts: dict[str, int] | None = None):
        self.path, self.key, self.w, self.resolve = path, key, wrapper, resolve
        self.first, self.lx_names = first, lx_names or {}
        self.lx_args = lx_args or {}   # manifest lx_args of this file: arg index -> tensor
        self.held = held or (lambda i: None)   # manifest hbm_args of this file
        # LX tensor name -> its offset (`lx_names` inverted; the caller's, built once)
        self.lx_starts = lx_starts if lx_starts is not None else lx_starts_of(self.lx_names)

    def fail(self, where: str, msg: str) -> None:
        raise InputFileError(f"{self.path}: at $.{self.key}.{where}: {msg}; the file is not "
                             f"as spyrec compile wrote it (re-run spyrec compile)")

    # --- the op -------------------------------------------------------------------------------

    def op(self, filename: str, index: int) -> OpSpec:
        w = self.w
        (opfunc, dsc), = w["dscs_"][0].items()
        self.dsc = dsc
        nc = w["numCoresUsed_"]
        self._check_cores(nc)
        self.N = {k[:-1]: v for k, v in dsc["N_"].items() if k != "name_"}
        self.labels = list(self.N)
        self.split = dict(w["numWkSlicesPerDim_"])
        self._check_split(nc)
        self.slices = [w["coreIdToWkSlice_"][str(c)] for c in range(nc)]
        self.P = {d: self.N[d] // self.split[d] for d in self.labels}
        self.lengths = self._lengths()
        args = self._args(nc)
        out_labels = {d for d, used in self.addressed[-1].items() if used}
        for j in self.gathers[-1]:      # a scatter's destination moves with its index reads
            out_labels |= {d for d, used in self.addressed[j].items() if used}
        constants = {**self._constants(), **self._attributes()}
        # a scatter reduces nothing: points that land on one element follow its mode (even
        # with no index left: a destination dim of size 1 takes every point at 0)
        replica = self._replica_labels()
        reduced = () if "scatter" in constants else \
            tuple(d for d in self.labels if d not in out_labels and d not in replica)
        op = opfunc.removesuffix("nonstick") if opfunc.endswith("nonstick") else opfunc
        name, source = _debug(w.get("debug_handle_", opfunc))
        firsts = [[None if s is None else s + shift for s in starts]   # LX or symbolic: None
                  for starts, shift in zip(self.starts, self.shift_bytes)]
        ranges = _core_ranges(tuple(self.labels), tuple(self.P.values()), self.slice_keys)
        cores = tuple(CoreSplit(c, ranges[c], tuple(f[c] for f in firsts)) for c in range(nc))
        masking = {d: (m[0][0], m[0][1]) for d, m in dsc["coordinateMasking_"].items()}
        return OpSpec(file=filename, index=index, op=op, name=name, source=source,
                      is_reduction=bool(reduced), iteration_space={d: (self.N[d], self.split[d])
                                                                   for d in self.labels},
                      reduced=reduced, constants=constants, args=tuple(args), cores=cores,
                      masking=masking, lengths=self.lengths)

    def _lengths(self) -> dict[str, str]:
        """`dimToSymbolMapping_`: labels of N_ that run a symbolic length, each a var of the
        iteration space no reduction, gather or copy count uses (checked by the caller's
        manifest: the symbol, and N_ at its maximum, `program.py`)."""
        mapping = self.w.get("dimToSymbolMapping_", {})
        for d, symbol in mapping.items():
            if d not in self.N:
                self.fail(f"dimToSymbolMapping_.{d}", f"{d} is not a dim of N_ {self.labels}")
            if not isinstance(symbol, str) or not symbol:
                self.fail(f"dimToSymbolMapping_.{d}", f"a symbol name is required, got {symbol!r}")
        return dict(mapping)

    def _replica_labels(self) -> set[str]:
        """Labels no tensor addresses, split over all their values (docs/formats.md,
        replicas): each core runs one value, i.e. the whole op once, into its own LX; such
        a label reduces nothing (a real reduction's dim is addressed by an input)."""
        used = {d for a in self.addressed for d, on in a.items() if on}
        return {d for d in self.labels if d not in used and self.N[d] > 1
                and self.split[d] == self.N[d]}

    def _check_cores(self, nc: int) -> None:
        w, dsc = self.w, self.dsc
        if w["coreFoldProp_"]["factor_"] != nc or dsc["numCoresUsed_"] != nc:
            self.fail("coreFoldProp_", f"the core counts disagree (numCoresUsed_ {nc})")
        if dsc["coreIdsUsed_"] != list(range(nc)):
            self.fail("dscs_[0].coreIdsUsed_", f"expected cores 0..{nc - 1}")
        for field in ("coreIdToWkSlice_", "coreIdToDsc_", "coreIdToDscSchedule"):
            if sorted(w[field], key=int) != [str(c) for c in range(nc)]:
                self.fail(field, f"expected one entry per core 0..{nc - 1}")

    def _check_split(self, nc: int) -> None:
        if list(self.split) != self.labels:
            self.fail("numWkSlicesPerDim_", f"dims {list(self.split)} but N_ has {self.labels}")
        if math.prod(self.split.values()) != nc:
            self.fail("numWkSlicesPerDim_", f"the splits multiply to "
                      f"{math.prod(self.split.values())}, not numCoresUsed_ {nc}")
        stage = self.dsc["dataStageParam_"]["0"]["ss_"]
        for d in self.labels:
            if self.N[d] % self.split[d]:
                self.fail(f"numWkSlicesPerDim_.{d}", f"{self.split[d]} does not divide N_ "
                          f"{self.N[d]}")
            if stage.get(f"{d}_") != self.N[d] // self.split[d]:
                self.fail(f"dscs_[0].dataStageParam_.0.ss_.{d}_", f"{stage.get(f'{d}_')}, but "
                          f"N_ / split = {self.N[d] // self.split[d]}")
        labels = set(self.labels)
        splits = [self.split[d] for d in self.labels]
        keys = []
        for c in range(nc):
            s = self.w["coreIdToWkSlice_"][str(c)]
            key = tuple(map(s.__getitem__, self.labels)) if s.keys() == labels else None
            if key is None or not all(0 <= k < n for k, n in zip(key, splits)):
                self.fail(f"coreIdToWkSlice_.{c}", f"{s} is not a slice of every dim within "
                          f"its split")
            keys.append(key)
        if len(set(keys)) != nc:
            self.fail("coreIdToWkSlice_", "two cores run the same slice")
        self.slice_keys = tuple(keys)     # per core: its slice number of each dim of N_

    # --- tensors ------------------------------------------------------------------------------

    def _args(self, nc: int) -> list[ArgSpec]:
        dsc = self.dsc
        nodes, lds = dsc["scheduleTree_"], dsc["labeledDs_"]
        if len(nodes) != len(lds) or len(nodes) < 1:
            self.fail("dscs_[0].labeledDs_", "one entry per allocate node is required")
        self.addressed: list[dict[str, bool]] = []
        self.gathers: list[set[int]] = []        # per arg: the index args it is read through
        self.shift_bytes: list[int] = []         # per arg: start address -> first element
        self.starts: list[list[int]] = []
        names = [self._tensor_name(i, n) for i, n in enumerate(nodes)]
        args = [self._arg(i, nodes[i], lds[i], nc, names) for i in range(len(nodes))]
        self._check_indirection(nodes)
        return args

    def _check_indirection(self, nodes: list[dict]) -> None:
        """`indirectAllocType_` and `relatedIndirectAccessAlloc_` must say what `indirectDim_`
        says: a tensor read or written through index tensors is a value_tensor related to one
        of them, and each index tensor is related to a tensor addressed through it."""
        users: dict[int, set[str]] = {}
        for i, js in enumerate(self.gathers):
            for j in js:
                users.setdefault(j, set()).add(f"allocate-Tensor{i}_hbm")
        for i, node in enumerate(nodes):
            where = f"dscs_[0].scheduleTree_[{i}]"
            kind = node.get("indirectAllocType_", "no_indirection")
            related = node.get("relatedIndirectAccessAlloc_")
            if self.gathers[i]:
                want = {f"allocate-Tensor{j}_hbm" for j in self.gathers[i]}
                if kind != "value_tensor" or related not in want:
                    self.fail(where, f"indirectDim_ addresses it through {sorted(want)}, so it "
                              f"must be a value_tensor related to one of them (it is {kind}, "
                              f"related to {related})")
            elif kind == "value_tensor":
                self.fail(f"{where}.indirectAllocType_", "a value_tensor needs indirectDim_")
            if kind == "index_tensor" and related not in users.get(i, ()):
                self.fail(f"{where}.relatedIndirectAccessAlloc_", f"{related}, but no tensor "
                          f"of that name is addressed through index tensor Tensor{i}")

    def _tensor_name(self, i: int, node: dict) -> str:
        a0 = int(node["startAddressCoreCorelet_"]["data_"].get("[0, 0, 0]", "-1"))
        if node["component_"] == "lx":
            named = self.lx_args.get(str(i))
            if named is not None:
                # at the tensor's start, or inside it (one of several writers of a slice;
                # the binding checks the arg's whole window lies in the tensor)
                start = self.lx_starts.get(named)
                if start is None or a0 < start:
                    self.fail(f"dscs_[0].scheduleTree_[{i}]", f"LX offset {a0} is not where "
                              f"manifest lx_args puts '{named}'")
                return named
            return self.lx_names.get(a0, [f"Tensor{i}"])[0]
        if a0 < 0:
            a0 = _bound(self.first, a0)
        named = self.held(i)
        if named is not None:
            name, start, nbytes = named
            if a0 is not None and not start <= a0 < start + nbytes:
                self.fail(f"dscs_[0].scheduleTree_[{i}]", f"address {a0} is outside "
                          f"'{name}' [{start}, {start + nbytes}), where manifest hbm_args "
                          f"puts the arg")
            return name
        found = self.resolve(a0) if a0 is not None else None
        return found[0] if found else f"Tensor{i}"

    def _arg(self, i: int, node: dict, lds: dict, nc: int, names: list[str]) -> ArgSpec:
        where = f"dscs_[0].scheduleTree_[{i}]"
        if node["ldsIdx_"] != i or lds["ldsIdx_"] != i:
            self.fail(where, f"ldsIdx_ must be the position {i}")
        lx = node["component_"] == "lx"
        layouts = self.dsc["primaryDsInfo_"]
        if lds["dsType_"] not in layouts:
            self.fail(f"dscs_[0].labeledDs_[{i}].dsType_", f"{lds['dsType_']} is not in "
                      f"primaryDsInfo_")
        label = layouts[lds["dsType_"]]
        label_order = label["layoutDimOrder_"]
        stick, eps = label["stickDimOrder_"][0], label["stickSize_"][0]
        if len(lds["scale_"]) != len(label_order):
            self.fail(f"dscs_[0].labeledDs_[{i}].scale_", f"{len(lds['scale_'])} scales for "
                      f"the {len(label_order)} dims of {lds['dsType_']}")
        scale = dict(zip(label_order, lds["scale_"]))
        order = node["layoutDimOrder_"]
        if sorted(order) != sorted(label_order) or any(d not in self.N for d in order):
            self.fail(f"{where}.layoutDimOrder_", f"{order} is not a permutation of "
                      f"{lds['dsType_']}'s dims {label_order}")
        dtype = FORMATS.get(lds["dataFormat_"])
        if dtype is None or _WORD[dtype] != lds["wordLength"] or eps * lds["wordLength"] != 128:
            self.fail(f"dscs_[0].labeledDs_[{i}]", f"dataFormat_ {lds['dataFormat_']}, "
                      f"wordLength {lds['wordLength']} and stickSize_ {eps} do not make a "
                      f"128-byte stick")
        gaps = self._lx_gaps(where, node, nc) if lx else {
            d: int(g["-1"]) for d, g in node.get("backGapCore_", {}).items()}
        held = self.P if lx else self.N      # an LX arg holds only its core's slice
        indirect = {v["dim"]: (k, v["size"]) for k, v in node.get("indirectDim_", {}).items()}
        shift = self._check_folds(i, node, scale, stick, eps, label_order)
        if stick in gaps and gaps[stick] % eps and scale.get(stick, 0) > 0:
            self.fail(f"{where}.backGapCore_.{stick}", f"{gaps[stick]} is not whole sticks "
                      f"of {eps}")
        shape = (tuple(order), stick, eps, dtype, tuple(scale[d] for d in order),
                 tuple(held[d] for d in order), tuple(gaps.get(d, 0) for d in order), shift)
        if indirect:
            values = {d: self._gathered(i, d, indirect, names) if d in indirect else var(d)
                      for d in order}
            coords, layout, strides, last = _geometry(*shape, values, indirect)
        else:      # the args of a stack's layers: one geometry per shape (`_plain_geometry`)
            coords, layout, strides, last = _plain_geometry(*shape)
        dims = list(reversed(order))
        self.addressed.append({d: scale[d] == 1 for d in order})
        self.gathers.append({int(k.removeprefix("Tensor")) for k, _ in indirect.values()})
        wl = lds["wordLength"]
        self.shift_bytes.append(wl * (shift // eps * strides[stick] + shift % eps)
                                if shift else 0)
        arg = ArgSpec(name=names[i], is_input=i < len(self.dsc["scheduleTree_"]) - 1,
                      arg_index=i, layout=layout, coordinates=coords,
                      coordinate_text=None, hbm_address=None,
                      lx_offset=None, operand=None, per_tile_fixed=False,
                      is_index=node.get("indirectAllocType_") == "index_tensor",
                      span_bytes=wl * (last + eps))
        if lx:
            self.starts.append([None] * nc)
            return self._lx_arg(i, node, nc, arg, dims, stick, eps)
        steps = self._origin_steps(wl, scale, stick, eps, strides)
        origins = self._origins(steps)
        if self.lengths:
            arg = replace(arg, origin_steps=tuple(steps))
        if node.get("isStartAddrSymbolic_") == 1:
            self.starts.append([None] * nc)
            return self._symbolic_arg(i, node, nc, arg, origins)
        if any(d in self.lengths for d, _ in steps):
            self.fail(f"{where}.isStartAddrSymbolic_", f"cores start at a share of the "
                      f"symbolic length of {[d for d, _ in steps if d in self.lengths]}, "
                      f"which no fixed address can say: the start must be symbolic")
        starts = self._starts(i, node, nc, origins, scale.get(stick) == 1)
        self.starts.append(starts)
        return replace(arg, hbm_address=starts[0] - origins[0])

    def _gathered(self, i: int, d: str, indirect: dict, names: list[str]) -> Lin:
        """The value of dim d of arg i where `indirectDim_` names it: the index tensor's value
        at the same point (spyrec's extension for gathers and scatters, docs/formats.md)."""
        where = f"dscs_[0].scheduleTree_[{i}].indirectDim_"
        tensor, size = indirect[d]
        j = int(tensor.removeprefix("Tensor")) if tensor.removeprefix("Tensor").isdigit() \
            else -1
        nodes = self.dsc["scheduleTree_"]
        if not 0 <= j < len(nodes) or j == i or \
                nodes[j].get("indirectAllocType_") != "index_tensor":
            self.fail(f"{where}.{tensor}", f"{tensor} is not another tensor of the op marked "
                      f"indirectAllocType_ index_tensor")
        if self.N[d] != 1 or self.split[d] != 1 or size < 1:
            self.fail(f"{where}.{tensor}", f"the gathered dim {d} must be a size-1, unsplit "
                      f"dim of N_ with a positive size (N_ {self.N[d]}, split "
                      f"{self.split[d]}, size {size})")
        return Lin({Indirect(names[j]): 1})

    def _origin_steps(self, wl: int, scale: dict, stick: str, eps: int,
                      strides: dict) -> list[tuple[str, int]]:
        """(dim, bytes per slice) of each split dim the arg addresses (F §4.2 step 6)."""
        return [(d, wl * (self.P[d] // eps if d == stick else self.P[d]) * strides[d])
                for d in self.labels if scale.get(d) == 1 and self.split[d] > 1]

    def _origins(self, steps: list[tuple[str, int]]) -> list[int]:
        """Bytes from the tensor's origin to each core's first element (F §4.2 step 6): linear
        in the core's slice numbers, one step per addressed dim (`_origin_steps`)."""
        if not steps:
            return [0] * len(self.slices)
        return [sum(slc[d] * step for d, step in steps) for slc in self.slices]

    def _starts(self, i: int, node: dict, nc: int, origins: list[int],
                stick_addressed: bool) -> list[int]:
        where = f"dscs_[0].scheduleTree_[{i}].startAddressCoreCorelet_"
        data = node["startAddressCoreCorelet_"]["data_"]
        if node["startAddressCoreCorelet_"]["dim_prop_attr"][0]["factor_"] != nc:
            self.fail(f"{where}.dim_prop_attr", f"the core factor is not {nc}")
        try:
            starts = [int(data[f"[{c}, 0, 0]"]) for c in range(nc)]
        except (KeyError, ValueError):
            self.fail(f"{where}.data_", f"one decimal address per core 0..{nc - 1} is required")
        base = starts[0] - origins[0]
        for c, (start, origin) in enumerate(zip(starts, origins)):
            if start != base + origin:
                self.fail(f"{where}.data_.[{c}, 0, 0]", f"core {c} starts at {start}, but "
                          f"its slice {self.slices[c]} of the tensor that core 0 starts at "
                          f"{starts[0]} begins at {base + origin}")
        if base < 0 or base % 128 and stick_addressed:
            self.fail(f"{where}.data_", f"the tensor origin {base} is not stick-aligned")
        return starts

    # --- symbolic starts and LX (tiling contract §2; F §3.G, §4.2 step 8) -------------------

    def _symbolic_arg(self, i: int, node: dict, nc: int, arg: ArgSpec,
                      origins: list[int]) -> ArgSpec:
        """An HBM arg whose per-core starts are negative symbol ids, bound per execution from
        the sdsc_execute operands; the addresses are checked there (sim/addresses.py)."""
        where = f"dscs_[0].scheduleTree_[{i}].startAddressCoreCorelet_"
        if node["startAddressCoreCorelet_"]["dim_prop_attr"][0]["factor_"] != nc:
            self.fail(f"{where}.dim_prop_attr", f"the core factor is not {nc}")
        data = node["startAddressCoreCorelet_"]["data_"]
        try:
            ids = tuple(int(data[f"[{c}, 0, 0]"]) for c in range(nc))
        except (KeyError, ValueError):
            self.fail(f"{where}.data_", f"one symbol id per core 0..{nc - 1} is required")
        if any(k >= 0 for k in ids):
            self.fail(f"{where}.data_", f"isStartAddrSymbolic_ is 1, so every core's entry "
                      f"must be a negative symbol id, got {list(ids)}")
        return replace(arg, symbols=ids, core_origin_bytes=tuple(origins))

    def _lx_gaps(self, where: str, node: dict, nc: int) -> dict[str, int]:
        """An LX node's back gaps: one value per core (keys "0".."NC-1"), equal on every core,
        since every core holds its slice in the same per-core layout."""
        gaps = {}
        for d, per_core in node.get("backGapCore_", {}).items():
            values = {per_core.get(str(c)) for c in range(nc)}
            if len(values) != 1 or None in values or len(per_core) != nc:
                self.fail(f"{where}.backGapCore_.{d}", f"an LX gap needs one equal entry per "
                          f"core 0..{nc - 1}, got {per_core}")
            gaps[d] = int(values.pop())
        return gaps

    def _lx_arg(self, i: int, node: dict, nc: int, arg: ArgSpec, dims: list[str],
                stick: str, eps: int) -> ArgSpec:
        """An LX arg: the same offset on every core; each core holds its own slice (F §4.2
        step 8), so coordinates are the core-local ones (var mod the per-core size)."""
        where = f"dscs_[0].scheduleTree_[{i}]"
        data = node["startAddressCoreCorelet_"]["data_"]
        offsets = {data.get(f"[{c}, 0, 0]") for c in range(nc)}
        if len(offsets) != 1 or None in offsets or not offsets.copy().pop().isdigit():
            self.fail(f"{where}.startAddressCoreCorelet_.data_", f"an LX tensor has one "
                      f"non-negative offset, the same on every core 0..{nc - 1}")
        if node.get("isStartAddrSymbolic_") == 1:
            self.fail(f"{where}.isStartAddrSymbolic_", "LX addresses are never symbolic")
        replica = self._replica_labels()
        if not arg.is_input and any(self.split[d] > 1 for d in self.labels
                                    if not self.addressed[-1].get(d) and d not in replica):
            self.fail(f"{where}.component_", "a reduction split over cores (partial sums) "
                      "cannot write its output into LX: each core would hold a partial")
        local = {Var(d): mod(var(d), self.P[d]) for d in self.labels if self.split[d] > 1}
        coords = tuple(substitute(c, local) for c in arg.coordinates)
        if self.lengths:        # localized again at each length (`OpSpec.at`)
            arg = replace(arg, global_coordinates=arg.coordinates)
        lead = len(arg.coordinates) - 1 - len(dims)     # a padding dim added for rank 1
        # the tile's unsplit layout: where each stick's data sits in the whole tile
        full = tuple(1 if c == ZERO else -(-self.N[d] // eps) if d == stick else self.N[d]
                     for d, c in zip(dims, arg.coordinates[lead:-1]))
        tile_coords = arg.coordinates[lead:-1]
        stick_strides = (0,)     # a 0-d op: its tile is the one stick at tile coordinate 0
        if full:
            tile = DeviceLayout(full + (eps,), (-1,) * (len(dims) + 1),
                                arg.layout.device_dtype)
            stick_strides = tuple(s // eps for s in tile.device_strides_elems[:-1])
        else:
            tile_coords = (ZERO,)
        return replace(arg, coordinates=coords, coordinate_text=None,
                       lx_offset=int(offsets.pop()), tile_coordinates=tile_coords,
                       tile_strides_elems=stick_strides)

    def _check_folds(self, i: int, node: dict, scale: dict, stick: str, eps: int,
                     label_order: list[str]) -> int:
        """coordInfo must say what N_, the split and the scale say (F §2.5, §2.12). Returns
        the lane shift: the `beta_` of the stick dim's `elem_arr_0` fold, where the stick dim's
        coordinate starts (a view starting inside the stick); every other beta_ is 0."""
        shift = 0
        info = node["coordinates_"]["coordInfo"]
        where = f"dscs_[0].scheduleTree_[{i}].coordinates_.coordInfo"
        if list(info) != label_order:
            self.fail(where, f"dims {list(info)}, expected {label_order}")
        for d in label_order:
            folds = info[d]["folds"]
            alphas = [f["Affine"]["alpha_"] for f in folds["dim_prop_func"]]
            factors = [f["factor_"] for f in folds["dim_prop_attr"]]
            p, s = self.P[d], self.split[d]
            if scale[d] == 1 and d == stick:
                want = ([p, 0, 0, eps, 1], [s, 1, 1, -(-p // eps), eps])
            elif scale[d] == 1:
                want = ([p, 0, 0, 1], [s, 1, 1, p])
            elif scale[d] == -2:
                want = ([eps, 0, 0, eps, 0], [1, 1, 1, 1, eps])
            elif scale[d] == -1:
                want = ([1, 0, 0, 1], [1, 1, 1, 1])
            else:
                self.fail(f"dscs_[0].labeledDs_[{i}].scale_", f"scale {scale[d]} of {d} is "
                          f"not 1, -1 or -2")
            if (alphas, factors) != want:
                self.fail(f"{where}.{d}.folds", f"alphas {alphas} and factors {factors}, but "
                          f"N_ {self.N[d]}, split {s} and scale {scale[d]} give {want[0]} and "
                          f"{want[1]}")
            betas = [f["Affine"].get("beta_", 0) for f in folds["dim_prop_func"]]
            shifted = scale[d] == 1 and d == stick
            if any(betas[:-1]) or betas[-1] and not shifted or betas[-1] < 0 or \
                    betas[-1] and s > 1 and p % eps:
                self.fail(f"{where}.{d}.folds", f"betas {betas}: only the lanes (elem_arr_0) "
                          f"of an iterated stick dim may start past 0, and not on a split "
                          f"that starts a core inside a stick")
            if shifted:
                shift = betas[-1]
        return shift

    # --- constants ----------------------------------------------------------------------------

    def _constants(self) -> dict:
        info = self.dsc["constantInfo_"]
        if info == "{}":
            return {}
        if not isinstance(info, dict):
            self.fail("dscs_[0].constantInfo_", 'an object or the string "{}"')
        out = {}
        for k in sorted(info, key=int):
            c = info[k]
            (code,) = c["data_"]["data_"]["[0, 0, 0]"]
            out[c["name_"]] = decode_constant(int(code), c["dataFormat_"])
        return out

    def _attributes(self) -> dict:
        attrs = self.dsc["computeOp_"][0]["attributes_"]
        return {k: v for k, v in attrs.items() if k not in ("dataFormat_", "fidelity_")}


def _bound(first: Execute | None, symbol: int) -> int | None:
    """The value symbol id `symbol` takes at the op's first execution (None if unbound)."""
    if first is None or symbol not in first.symbol_ids:
        return None
    return first.operands[first.symbol_ids.index(symbol)]


def _reach(size: int, is_stick: bool, eps: int) -> int:
    """The values of a gathered dim of `size` elements, in sticks for the stick dim."""
    return -(-size // eps) if is_stick else size


def _debug(handle: str) -> tuple[str, str | None]:
    """`name (source)` of the debug handle."""
    if handle.endswith(")") and " (" in handle:
        name, source = handle[:-1].split(" (", 1)
        return name, source
    return handle, None


def decode_constant(code: int, fmt: str) -> int | float:
    """The value of a `constantInfo_` code (F §2.8)."""
    if fmt == "IEEE_FP32":
        return struct.unpack("<f", struct.pack("<I", code & 0xFFFFFFFF))[0]
    if fmt in ("IEEE_INT32", "SENUINT32"):
        return code - (1 << 32) if code & 0x80000000 else code
    return dlfloat16_value(code)


def dlfloat16_value(bits: int) -> float:
    """DLFloat16: sign, 6-bit exponent (bias 31), 9-bit mantissa, no subnormals; 0x7FFF and
    0xFFFF are +-infinity."""
    sign = -1.0 if bits & 0x8000 else 1.0
    body = bits & 0x7FFF
    if body == 0x7FFF:
        return sign * math.inf
    if body == 0:
        return sign * 0.0
    exp, mant = body >> 9, body & 0x1FF
    return sign * (1 + mant / 512) * 2.0 ** (exp - 31)


@functools.lru_cache(maxsize=1024)
def _core_ranges(labels: tuple[str, ...], per_core: tuple[int, ...],
                 slice_keys: tuple[tuple[int, ...], ...]) -> tuple[dict, ...]:
    """Each core's half-open range of every dim (dims `labels`, `per_core` values each, core c
    running slice `slice_keys[c]`): cores x dims is the reader's hottest loop, and the ops of a
    stack's layers share their splits. The dicts are shared: CoreSplit's ranges are read only."""
    return tuple({d: (k * p, (k + 1) * p) for d, p, k in zip(labels, per_core, key)}
                 for key in slice_keys)


def _geometry(order: tuple[str, ...], stick: str, eps: int, dtype: str, scales: tuple,
              held: tuple[int, ...], gaps: tuple[int, ...], shift: int, values: dict,
              indirect: dict) -> tuple:
    """An arg's device dims from its node (F §4): (coordinates in the dim labels, DeviceLayout,
    device stride of each dim in elements, the offset of the last element a core reaches).
    `values`: each dim's value (a var, or the index tensor's value where `indirectDim_`
    names it); `indirect`: dim -> (index tensor, size)."""
    if shift:
        values = {**values, stick: values[stick] + shift}
    extent, coord = {}, {}
    for d, scale, n, gap in zip(order, scales, held, gaps):
        if scale <= 0:
            extent[d], coord[d] = 1 + gap, ZERO
        elif d == stick:
            extent[d] = -(-(n + shift) // eps) + gap // eps
            coord[d] = floordiv(values[d], eps)
        else:
            extent[d], coord[d] = n + gap, values[d]
        if d in indirect:
            # the values an index may reach; a back gap (a strided view above the gathered
            # dim) only widens the pitch, never the valid range
            extent[d] = max(extent[d], _reach(indirect[d][1], d == stick, eps))
    stick_scale = dict(zip(order, scales)).get(stick)
    lane = mod(values[stick], eps) if stick_scale == 1 else ZERO
    dims = list(reversed(order))
    sizes = tuple(extent[d] for d in dims) + (eps,)
    coords = tuple(coord[d] for d in dims) + (lane,)
    if len(sizes) < 2:
        sizes, coords = (1,) + sizes, (ZERO,) + coords
    layout = DeviceLayout(sizes, (-1,) * len(sizes), dtype)
    strides = dict(zip(dims, layout.device_strides_elems))
    last = sum((n - 1) * strides[d] for d, n0 in zip(order, held)
               if (n := (1 if coord[d] == ZERO else
                         _reach(indirect[d][1], d == stick, eps) if d in indirect
                         else -(-(n0 + shift) // eps) if d == stick
                         else n0)) > 1)
    return coords, layout, strides, last


@functools.lru_cache(maxsize=4096)
def _plain_geometry(order: tuple[str, ...], stick: str, eps: int, dtype: str, scales: tuple,
                    held: tuple[int, ...], gaps: tuple[int, ...], shift: int) -> tuple:
    """`_geometry` of an arg read through no index tensor (every dim its own var): a pure
    function of its shape, so memoized (ops alike in a stack's layers ask alike). Shared
    results: the caller reads them only."""
    return _geometry(order, stick, eps, dtype, scales, held, gaps, shift,
                     {d: var(d) for d in order}, {})
