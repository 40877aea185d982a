"""`sdsc_<n>.json` in the SuperDSC format the Spyre backend compiles (reference/F-superdsc.md).

Pure data building from one op's spec (`opspec.op_spec`) and its dims (`sdsc_dims.op_dims`):
the `"<n>_<opfunc>"` wrapper with the work split per core, one DSC with `N_`, masking,
`primaryDsInfo_`, a `scheduleTree_` of allocate nodes (per-core start addresses, `coordInfo`
folds, back gaps), `labeledDs_`, `constantInfo_` and `computeOp_`, keys in the reference's
emission order (F §1.2, §2.1, §2.4). Where the reference has a quirk the backend relies on, we
match it and say so at the line.

Start addresses are computed twice, independently: from our device coordinates at each core's
slice origin (`opspec._cores`) and from the SuperDSC fields (F §4.2 step 6). They must agree,
or the emitter stops with an internal error: the simulator reads only the fields, so the fields
alone must place every core. That half of the emitter, where each arg starts, is
`codegen/sdsc_placement.py`; a constant's encoding is `codegen/sdsc_constants.py`.

Deliberate differences from the reference, each because the reference is wrong or has no
form for it:
- `maskingConstId_` is the index of `samv-maskvalue`, not 0 (the reference's bug, F §5).
- Only a reduction over a partial stick pads `N_` (with `coordinateMasking_`); other stick dims
  keep their real size, so no op reads past the end of a tensor whose other dims are shorter.
- A gathered dim is its own (synthetic, size-1) dim, and the value tensor's node carries
  `indirectDim_` naming it with the gathered extent (the reference's format loses the extent,
  F §4.4): one per index tensor (multi-index gathers), the stick dim itself for an element
  gather along the stick, with a constant offset folded into the start address. Index
  tensors are `SENUINT32` as in the reference.
- A scatter's *output* node is marked like a gathered input (`value_tensor`, `indirectDim_`):
  the reference has no scatter codegen and no field for an indirect output; this is the
  smallest extension that keeps one emission path (docs/formats.md).
- A view starting inside a stick (`x[..., 16:]`) carries its lane shift in the stick fold's
  `beta_`, which the reference always leaves at 0 (F §2.5: coordinate = Σ idx·alpha + beta).
- Op attributes that are not numbers (`scalar_side`, `approximate`, `scatter`) go in
  `computeOp_[0].attributes_` next to `dataFormat_` and `fidelity_`.
- An op given to the emitter must have a SuperDSC form: passes/superdsc_legalize.py rewrites
  every view it can into ops that have one and refuses the rest, so the only file format we
  write is the one the backend compiles. Without that pass in the pipeline, an op with no
  form stops the compile, naming the op, its source line and the reason.
"""

from __future__ import annotations

import math

from spyrec.codegen.sdsc_constants import encode_constant
from spyrec.codegen.sdsc_placement import Placement
from spyrec.codegen.symbols import SymbolTable
from spyrec.errors import UnsupportedProgram
from spyrec.plan.sdsc_dims import (
    Digit, NotExpressible, OpDims, TensorDims, digit_splits, op_dims,
)


_LABELS = ("mb", "x", "y", "i", "j", "ki", "kj")
_MATMUL_LABELS = ("ki", "kj", "y", "x", "mb", "out", "in")
_LAYOUT_NAMES = ("OUTPUT", "KERNEL", "INPUT", "KERNEL_IDX")
_MATMUL_LAYOUT_NAMES = ("INPUT", "KERNEL", "OUTPUT", "KERNEL_IDX")
# a matmul that converts an 8-bit KERNEL on chip reads its scale as a fifth layout
_SCALED_MATMUL_LAYOUT_NAMES = ("INPUT", "KERNEL", "KERNEL_SCALE", "OUTPUT", "KERNEL_IDX")
_MASK_VALUE = {"max": -math.inf, "argmax": -math.inf, "min": math.inf, "argmin": math.inf}


def label_names(n: int, matmul: bool) -> list[str]:
    """Positional dim labels (F §2.2); spyrec's refined dims can outnumber the reference's
    names, and the extra ones are `d<k>`."""
    if matmul:
        base = list(_MATMUL_LABELS)
        return [f"d{k}" for k in range(n - len(base))] + base[-n:] if n > len(base) \
            else base[-n:]
    if n == 0:
        return []
    first = list(_LABELS[:n - 1]) + [f"d{k}" for k in range(len(_LABELS), n - 1)]
    return first + ["out"]


def superdsc_document(index: int, spec: dict, bufs: list, roles: list[str],
                      symbols: SymbolTable | None = None, check: bool = True) -> dict:
    """The `sdsc_<n>.json` object of one op; `bufs` and `roles` (index | input | output) are
    the args' buffers and roles in arg order. `symbols` issues the ids of the op's symbolic
    start addresses (args that advance with an enclosing loop; codegen/symbols.py). Gathers
    and scatters are SuperDSC like any op; an op no SuperDSC fields can express is refused
    (superdsc_legalize rewrites the ones it can before codegen). `check`: compare every
    core's start address with the one our coordinates give (`--verify-each`, and every test
    compile; a third of the emitter's time)."""
    coords = [a["_coords"] for a in spec["args"]]
    try:
        dims = op_dims(list((v, n) for v, (n, _) in spec["iteration_space"].items()), coords,
                       [b.layout.device_size for b in bufs],
                       [b.layout.device_strides_elems for b in bufs],
                       [b.layout.elems_per_stick for b in bufs])
        return _Emitter(index, spec, dims, bufs, roles, symbols, check).document()
    except NotExpressible as e:
        raise UnsupportedProgram(
            f"op {_debug_handle(spec)} has no SuperDSC form: {e} — keep the superdsc_legalize "
            f"pass in the pipeline, or copy the tensor (.contiguous()) before the op") from None


def _least_significant_first(digits: list[Digit]) -> list[Digit]:
    """`digits` (labels in order; one var's digits adjacent, most significant first) with
    each var's run of digits reversed."""
    out: list[Digit] = []
    run: list[Digit] = []
    for d in digits:
        if run and (d.var != run[0].var or not d.var):
            out += reversed(run)
            run = []
        run.append(d)
    return out + run[::-1]


class _Emitter(Placement):
    def __init__(self, index: int, spec: dict, dims: OpDims, bufs: list, roles: list[str],
                 symbols: SymbolTable | None = None, check: bool = True):
        self.check = check
        self.index, self.spec, self.bufs = index, spec, bufs
        self.symbols = symbols
        self.matmul = spec["op"] == "batchmatmul"
        self.dims = dims
        self.roles = roles
        # an op over no dims (0-d tensors) still needs one: the size-1 stick dim the
        # reference appends to a reference tensor without a stick variable (F §2.2)
        self.digits = dims.digits or [Digit("", 0, 1)]
        if any(t.stick is None and {lv.digit for lv in t.levels} >= set(self.digits)
               for t in dims.tensors):
            # a stickless tensor over every dim: its sparse stick is an extra size-1 dim
            self.digits = self.digits + [Digit("", len(self.digits) + 1000, 1)]
        self.names = dict(zip(self.digits, label_names(len(self.digits), self.matmul)))
        split = digit_splits(dims.var_digits, self.spec["iteration_space"])
        self.splits = {d: split.get(d, 1) for d in self.digits}
        self.nc = math.prod(self.splits.values())
        self.sizes = {d: d.size for d in self.digits}
        self.masking = self._masking(dims)
        self.core_slices = self._core_slices()
        self.lengths = self._length_digits(spec.get("lengths", {}))

    # --- op level ---------------------------------------------------------------------------

    def _masking(self, dims: OpDims) -> dict[Digit, tuple[int, int]]:
        """A reduction over a partial stick runs over whole sticks and masks the padding lanes
        with the reduction's identity (F §2.7)."""
        if not self.spec["is_reduction"] or self.matmul:
            return {}
        src = dims.tensors[0]
        reduced = set(self.spec["reduced"])
        d = src.stick
        if d is None or d.var not in reduced or d.size % src.elems_per_stick == 0:
            return {}
        padded = -(-d.size // src.elems_per_stick) * src.elems_per_stick
        self.sizes[d] = padded
        return {d: (d.size, padded - d.size)}

    def _length_digits(self, lengths: dict[str, str]) -> dict[Digit, str]:
        """The label of each var that runs a symbolic length (`Operation.lengths`) -> the
        symbol: `dimToSymbolMapping_`. Such a var is one label (N_ holds its maximum)."""
        out = {}
        for v, symbol in lengths.items():
            digits = self.dims.var_digits.get(v, [])
            if len(digits) != 1:
                raise NotExpressible(f"{v} runs the symbolic length {symbol} but is "
                                     f"{len(digits)} SuperDSC dims, not one (compile with "
                                     f"--set symbolic_lengths.mode=tiled)")
            out[digits[0]] = symbol
        return out

    def _core_slices(self) -> list[dict[Digit, int]]:
        """The core -> slice map (F §2.9): labels in order, the first split dim fastest, as
        HEAD's — except that the digits of one var (a var a view cut into several labels,
        most significant first) are walked least significant first. Core c then runs the
        c-th contiguous slice of that var, the numbering ir/lx.py plans LX slices with (HEAD's
        order would hand a core another core's LX slice). The map is explicit in the file
        (`coreIdToWkSlice_`, which readers must read, not recompute), so any bijection is
        a valid SuperDSC; this one keeps a var's slices in core order."""
        walk = _least_significant_first(self.digits)
        out = []
        for c in range(self.nc):
            q, slices = 1, {}
            for d in walk:
                s = self.splits[d]
                slices[d] = (c // q) % s if s > 1 else 0
                q *= s
            out.append(slices)
        return out

    def document(self) -> dict:
        opfunc = self._opfunc()
        nc = self.nc
        wrapper = {
            "sdscFoldProps_": [{"factor_": 1, "label_": "time"}],
            "sdscFolds_": {"dim_prop_func": [{"Affine": {"alpha_": 1, "beta_": 0}}],
                           "dim_prop_attr": [{"factor_": 1, "label_": "time"}],
                           "data_": {"[0]": "0"}},
            "coreFoldProp_": {"factor_": nc, "label_": "core"},
            "coreletFoldProp_": {"factor_": 1, "label_": "corelet"},
            "numCoresUsed_": nc,
            "coreIdToDsc_": {str(c): 0 for c in range(nc)},
            "numWkSlicesPerDim_": {self.names[d]: self.splits[d] for d in self.digits},
            "coreIdToWkSlice_": {str(c): {self.names[d]: s[d] for d in self.digits}
                                 for c, s in enumerate(self.core_slices)},
            "coreIdToDscSchedule": {str(c): [[-1, 0, 0, 0]] for c in range(nc)},
            "dscs_": [{opfunc: self._dsc()}],
        }
        if self.lengths:    # later-format optional key (F §5): dims whose size is a symbol
            wrapper["dimToSymbolMapping_"] = {self.names[d]: s for d, s in self.lengths.items()}
        # later-format optional key (F §5): the FX node and source line, for messages
        debug = {"debug_handle_": _debug_handle(self.spec)}
        return {f"{self.index}_{opfunc}": {**debug, **wrapper}}

    def _opfunc(self) -> str:
        """`<op>nonstick` for a reduction that does not reduce its input's stick dim (F §2.10;
        the reference keys this on a sparse output, which is the same thing for its layouts,
        while ours may keep a stick reduction's output dense)."""
        op = self.spec["op"]
        if self.spec["is_reduction"] and not self.matmul and op not in ("argmax", "argmin"):
            stick = self.dims.tensors[0].stick
            if stick is None or stick.var not in self.spec["reduced"]:
                return f"{op}nonstick"
        return op

    def _dsc(self) -> dict:
        layouts, per_tensor = self._layouts()
        constants, mask_id = self._constants()
        return {
            "numCoresUsed_": self.nc,
            "numCoreletsUsed_": 1,
            "coreIdsUsed_": list(range(self.nc)),
            "N_": {"name_": "n", **{f"{self.names[d]}_": self.sizes[d] for d in self.digits}},
            "coordinateMasking_": {self.names[d]: [list(m)] for d, m in self.masking.items()},
            "maskingConstId_": mask_id,
            "dataStageParam_": {"0": {
                "ss_": {"name_": "core", **{f"{self.names[d]}_": self.sizes[d] // self.splits[d]
                                           for d in self.digits}},
                "el_": {"name_": "core", **{f"{self.names[d]}_": self.sizes[d] // self.splits[d]
                                           for d in self.digits}}}},
            "primaryDsInfo_": layouts,
            "scheduleTree_": [self._node(i, per_tensor[i]) for i in range(len(self.bufs))],
            "labeledDs_": [self._labeled(i, per_tensor[i]) for i in range(len(self.bufs))],
            # the backend tells a missing constantInfo_ from an empty one: "{}" is a string
            "constantInfo_": constants if constants else "{}",
            "computeOp_": [self._compute_op()],
        }

    # --- layouts ----------------------------------------------------------------------------

    def _node_order(self, t: TensorDims) -> list[Digit]:
        """The tensor's own dims, innermost first; non-matmul ops append the dims it lacks."""
        order = [lv.digit for lv in t.levels]
        if not self.matmul:
            order += [d for d in self.digits if d not in order]
        return order

    def _layouts(self) -> tuple[dict, list[dict]]:
        """`primaryDsInfo_` and, per tensor, its label, stick dim and node order (F §2.3)."""
        names = _LAYOUT_NAMES if not self.matmul else _SCALED_MATMUL_LAYOUT_NAMES \
            if self.spec["op_info"]["constants"].get("dequantize") else _MATMUL_LAYOUT_NAMES
        ref = self.dims.tensors[0 if self.spec["is_reduction"] and not self.matmul else -1]
        op_stick = ref.stick or next((t.stick for t in self.dims.tensors if t.stick), None) \
            or self.digits[-1]
        layouts: dict[str, dict] = {}
        keys: dict[tuple, str] = {}
        per_tensor = []
        for i, t in enumerate(self.dims.tensors):
            order = self._node_order(t)
            stick = t.stick or self._free_stick(t, op_stick, i)
            index = self.roles[i] == "index"
            key = (index, stick, t.elems_per_stick, frozenset(order))
            if key not in keys:
                label = self._new_label(names, layouts, index)
                keys[key] = label
                layouts[label] = {"layoutDimOrder_": [self.names[d] for d in order],
                                  "stickDimOrder_": [self.names[stick]],
                                  "stickSize_": [t.elems_per_stick]}
            label = keys[key]
            lo = layouts[label]["layoutDimOrder_"]
            label_order = sorted((d for d in self.digits if self.names[d] in lo),
                                 key=lambda d, lo=lo: lo.index(self.names[d]))
            per_tensor.append({"label": label, "stick": stick, "order": order,
                               "label_order": label_order, "dims": t})
        return layouts, per_tensor

    @staticmethod
    def _new_label(names: tuple[str, ...], layouts: dict, index: bool) -> str:
        """The label of a new distinct layout: index tensors take `KERNEL_IDX` (F §2.3); a
        second index layout (a multi-index gather whose index tensors differ in layout) takes
        the next free name, as the others do: a label names a layout, not a role, and
        `indirectAllocType_` says which tensors are index tensors."""
        if index and "KERNEL_IDX" not in layouts:
            return "KERNEL_IDX"
        free = [n for n in names if n not in layouts and n != "KERNEL_IDX"]
        if not free:
            raise NotExpressible("the op's tensors need more than four layouts")
        return free[0]

    def _free_stick(self, t: TensorDims, op_stick: Digit, i: int) -> Digit:
        """The stick dim of a tensor without one (scale -2, F §2.6): the op's stick dim, or
        else a dim the tensor does not address."""
        used = {lv.digit for lv in t.levels}
        for d in [op_stick] + self.digits[::-1]:
            if d not in used:
                return d
        raise NotExpressible(f"arg {i} has no stick and addresses every dim of the op")

    def _scale(self, info: dict, d: Digit) -> int:
        t: TensorDims = info["dims"]
        if d in [lv.digit for lv in t.levels]:
            return 1
        return -2 if d == info["stick"] else -1

    # --- tensors ----------------------------------------------------------------------------

    def _node(self, i: int, info: dict) -> dict:
        arg, t = self.spec["args"][i], info["dims"]
        role = self.roles[i]
        memory = "lx" if self._in_lx(i) else "hbm"
        node = {
            "nodeType_": "allocate",
            "name_": f"allocate-Tensor{i}_{memory}",
            "prev_": "",
            "ldsIdx_": i,
            "component_": memory,
            **({"isStartAddrSymbolic_": 1} if self._symbolic(i) else {}),
            "layoutDimOrder_": [self.names[d] for d in info["order"]],
            "maxDimSizes_": [-1] * len(info["label_order"]),
            "indirectAllocType_": "no_indirection",
        }
        if role == "index":
            node["indirectAllocType_"] = "index_tensor"
            node["relatedIndirectAccessAlloc_"] = f"allocate-Tensor{self._gatherer(arg)}_hbm"
            node["indexTensorType_"] = "index"
        elif t.indirect:
            node["indirectAllocType_"] = "value_tensor"
            first = next(iter(t.indirect))
            node["relatedIndirectAccessAlloc_"] = f"allocate-Tensor{self._arg_of(first)}_hbm"
        node["startAddressCoreCorelet_"] = {
            "dim_prop_func": [{"Map": {}}, {"Const": {}}, {"Const": {}}],
            "dim_prop_attr": [{"factor_": self.nc, "label_": "core"},
                              {"factor_": 1, "label_": "corelet"},
                              {"factor_": 1, "label_": "time"}],
            "data_": self._start_data(i, info)}
        gaps = self._gaps(t)
        if gaps:
            node["backGapCore_"] = self._back_gaps(i, gaps)
        if t.indirect:
            node["indirectDim_"] = {f"Tensor{self._arg_of(name)}": {
                "dim": self.names[d], "size": n} for name, (d, n) in t.indirect.items()}
        node["coordinates_"] = {
            "coordInfo": {self.names[d]: self._coord_info(info, d) for d in info["label_order"]},
            "coreIdToWkSlice_": {}}
        return node

    def _arg_of(self, name: str) -> int:
        return next(i for i, a in enumerate(self.spec["args"]) if a["name"] == name)

    def _gatherer(self, index_arg: dict) -> int:
        for i, t in enumerate(self.dims.tensors):
            if index_arg["name"] in t.indirect:
                return i
        return len(self.bufs) - 1

    def _gaps(self, t: TensorDims) -> dict[Digit, int]:
        """Back gaps in elements of the dim (F §2.4): the allocated extent past `N_`."""
        gaps = {}
        for lv in t.levels[:-1] if t.levels else []:
            if lv.digit == t.stick:
                used = -(-(self.sizes[lv.digit] + t.lane_shift) // t.elems_per_stick)
                gap = (lv.extent - used) * t.elems_per_stick
            else:
                gap = lv.extent - self.sizes[lv.digit]
            if gap:
                gaps[lv.digit] = gap
        return gaps

    def _coord_info(self, info: dict, d: Digit) -> dict:
        """F §2.5: the fold algebra of one dim for this tensor."""
        e = info["dims"].elems_per_stick
        scale = self._scale(info, d)
        s = self.splits[d] if scale == 1 else 1
        p = self.sizes[d] // self.splits[d]
        betas = [0] * 5
        if scale == 1 and d == info["stick"]:
            alphas, attrs = [p, 0, 0, e, 1], [s, 1, 1, -(-p // e), e]
            # a view that starts inside the stick (x[..., 16:]): the coordinate starts at
            # the shift, the fold algebra's own offset (coordinate = Σ idx·alpha + beta)
            betas[4] = info["dims"].lane_shift
        elif scale == 1:
            alphas, attrs = [p, 0, 0, 1], [s, 1, 1, p]
        elif scale == -2:
            alphas, attrs = [e, 0, 0, e, 0], [1, 1, 1, 1, e]
        else:
            alphas, attrs = [1, 0, 0, 1], [1, 1, 1, 1]
        labels = ["core_fold", "corelet_fold", "row_fold"] + \
            (["elem_arr_1", "elem_arr_0"] if len(alphas) == 5 else ["elem_arr_0"])
        return {"spatial": 3, "temporal": 0, "elemArr": len(alphas) - 3, "padding": "nopad",
                "folds": {"dim_prop_func": [{"Affine": {"alpha_": a, "beta_": b}}
                                            for a, b in zip(alphas, betas)],
                          "dim_prop_attr": [{"factor_": f, "label_": lab}
                                            for f, lab in zip(attrs, labels)]}}

    def _labeled(self, i: int, info: dict) -> dict:
        buf = self.bufs[i]
        index = self.roles[i] == "index"
        fmt = "SENUINT32" if index else buf.layout.dtype.reference_name
        return {"ldsIdx_": i, "dsName_": f"Tensor{i}", "dsType_": info["label"],
                "scale_": [self._scale(info, d) for d in info["label_order"]],
                "wordLength": buf.layout.dtype.itemsize, "dataFormat_": fmt,
                "memOrg_": {"hbm": {"isPresent": 1}} if index
                else {"lx": {"isPresent": 1}} if self._in_lx(i)
                else {"hbm": {"isPresent": 1}, "lx": {"isPresent": 1}}}

    # --- constants and the compute op ------------------------------------------------------

    def _op_format(self) -> str:
        values = [i for i in range(len(self.bufs) - 1) if self.roles[i] != "index"]
        i = values[0] if values else len(self.bufs) - 1
        return self.bufs[i].layout.dtype.reference_name

    def _constants(self) -> tuple[dict, int]:
        fmt = self._op_format()
        items = [(k, v) for k, v in self.spec["op_info"]["constants"].items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if self.masking:
            items.append(("samv-maskvalue", _MASK_VALUE.get(self.spec["op"], 0.0)))
        out = {}
        for k, (name, value) in enumerate(items):
            cfmt, code = encode_constant(value, fmt)
            out[str(k)] = {"dataFormat_": cfmt, "name_": name, "data_": {
                "dim_prop_func": [{"Const": {}}, {"Const": {}}, {"Map": {}}],
                "dim_prop_attr": [{"factor_": self.nc, "label_": "core"},
                                  {"factor_": 1, "label_": "corelet"},
                                  {"factor_": 1, "label_": "time"}],
                "data_": {"[0, 0, 0]": [code]}}}
        mask_id = len(items) - 1 if self.masking else -1
        return out, mask_id

    def _compute_op(self) -> dict:
        n = len(self.bufs)
        roles = self.roles
        inputs = [f"Tensor{i}-idx{i}" for i in range(n - 1) if roles[i] != "index"]
        if self.spec["is_reduction"] and not self.matmul:
            inputs.append(f"Tensor{n - 1}-idx{n - 1}")   # the output is the accumulator
        attrs = {"dataFormat_": self._op_format(), "fidelity_": "regular"}
        attrs.update({k: v for k, v in self.spec["op_info"]["constants"].items()
                      if not isinstance(v, (int, float)) or isinstance(v, bool)})
        op = {"exUnit": "pt" if self.matmul else "sfp", "opFuncName": self._opfunc(),
              "attributes_": attrs, "location": "Inner", "inputLabeledDs": inputs,
              "outputLabeledDs": [f"Tensor{n - 1}-idx{n - 1}"]}
        index = [f"Tensor{i}-idx{i}" for i in range(n - 1) if roles[i] == "index"]
        if index:
            op["indirectAccessIndexLabeledDs"] = index
        return op


def _debug_handle(spec: dict) -> str:
    return f"{spec['name']} ({spec['source']})" if spec.get("source") else spec["name"]
