"""The access form of a hand-written op (tests/sim/builder.py): its OpSpec, structure checked.

Simulator tests state each arg's device coordinates as expressions, wrong ones included, to
test the faults they cause; SuperDSC fields cannot state a wrong coordinate. The compiler never
writes this form and the simulator never reads it from a file: the builder turns each op into
an OpSpec here and hands them to `spyrec.sim.program.program_from_op_specs`. The fields are
those of an OpSpec in opspecs.json (docs/formats.md); messages name the op as the file
`sdsc_<n>.json` it stands for, as the simulator names its ops.
"""

from __future__ import annotations

import re
from pathlib import Path

from spyrec.errors import InputFileError
from spyrec.indexing import ExprSyntaxError, Indirect, Var, parse_expr
from spyrec.layout import DeviceLayout
from spyrec.sim.specs import ArgSpec, CoreSplit, OpSpec, device_layout


def read_access_form(path: Path, filename: str, index: int, data: dict) -> OpSpec:
    """The OpSpec of the access form `data` of op `index` (named `filename`, at `path` in
    messages), its structure checked."""
    index_names = _indirect_names(data)
    args = tuple(_arg(f"{path}: at $.args[{i}]", a, index_names)
                 for i, a in enumerate(data["args"]))
    space = {v: (n, k) for v, (n, k) in data["iteration_space"].items()}
    cores = tuple(CoreSplit(c["core"], {v: (lo, hi) for v, (lo, hi) in c["ranges"].items()},
                            tuple(c["arg_start_bytes"])) for c in data["cores"])
    spec = OpSpec(file=filename, index=index, op=data["op"], name=data["name"],
                  source=data["source"], is_reduction=data["is_reduction"],
                  iteration_space=space, reduced=tuple(data["reduced"]),
                  constants=dict(data["op_info"].get("constants", {})), args=args, cores=cores)
    _check_structure(path, spec)
    return spec


def _check_structure(path: Path, spec: OpSpec) -> None:
    """Facts about args and vars that every later stage relies on."""
    def fail(where: str, msg: str) -> None:
        raise InputFileError(f"{path}: at $.{where}: {msg}")

    names = [a.name for a in spec.args]
    for i, a in enumerate(spec.args):
        if a.arg_index != i:
            fail(f"args[{i}].arg_index", f"{a.arg_index}, but arg_index is the position {i}")
        if a.is_input != (i < len(spec.args) - 1):
            fail(f"args[{i}].is_input", "args are the inputs followed by exactly one output")
        for j, coord in enumerate(a.coordinates):
            for leaf in coord.free_atoms():
                if isinstance(leaf, Var) and leaf.name not in spec.iteration_space:
                    fail(f"args[{i}].device_coordinates[{j}]",
                         f"'{leaf.name}' is not an iteration variable ({', '.join(spec.vars)})")
                if isinstance(leaf, Indirect) and (
                        leaf.tensor not in names or not spec.args[names.index(leaf.tensor)]
                        .is_input or leaf.tensor == a.name):
                    fail(f"args[{i}].device_coordinates[{j}]",
                         f"IndirectAccess('{leaf.tensor}') must name another input arg")
    seen_value = False
    for i, a in enumerate(spec.args[:-1]):
        if a.is_index and seen_value:
            fail(f"args[{i}]", f"index tensor '{a.name}' must come before the value inputs")
        seen_value = seen_value or not a.is_index
        if a.is_index and any(isinstance(x, Indirect) for c in a.coordinates
                              for x in c.free_atoms()):
            fail(f"args[{i}]", "an index tensor cannot itself be gathered")
    for v in spec.reduced:
        if v not in spec.iteration_space:
            fail("reduced", f"'{v}' is not an iteration variable")
    for k, core in enumerate(spec.cores):
        if set(core.ranges) != set(spec.iteration_space):
            fail(f"cores[{k}].ranges", f"vars {sorted(core.ranges)}, expected "
                                       f"{list(spec.vars)}")
        if len(core.arg_start_bytes) != len(spec.args):
            fail(f"cores[{k}].arg_start_bytes", f"{len(core.arg_start_bytes)} entries for "
                                                f"{len(spec.args)} args")


def _coordinates(label: str, texts: list[str], layout: DeviceLayout) -> tuple:
    if len(texts) != len(layout.device_size):
        raise InputFileError(f"{label}.device_coordinates: {len(texts)} coordinates for "
                             f"{len(layout.device_size)} device dims")
    out = []
    for j, text in enumerate(texts):
        try:
            out.append(parse_expr(text))
        except ExprSyntaxError as e:
            raise InputFileError(f"{label}.device_coordinates[{j}]: {e}") from None
    return tuple(out)


def _arg(label: str, a: dict, index_names: set[str]) -> ArgSpec:
    layout = device_layout(label, a["device_size"], a["stride_map"], a["device_dtype"])
    alloc = a["allocation"]
    return ArgSpec(
        name=a["name"], is_input=a["is_input"], arg_index=a["arg_index"], layout=layout,
        coordinates=_coordinates(label, a["device_coordinates"], layout),
        coordinate_text=tuple(a["device_coordinates"]),
        hbm_address=alloc.get("hbm"), lx_offset=alloc.get("lx"), operand=a["operand"],
        per_tile_fixed=a["per_tile_fixed"], is_index=a["name"] in index_names)


def _indirect_names(data: dict) -> set[str]:
    names = set()
    for a in data["args"]:
        for text in a["device_coordinates"]:
            names.update(re.findall(r"IndirectAccess\('([^']*)'\)", text))
    return names
