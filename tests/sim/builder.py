"""Hand-written programs for simulator tests, straight from docs/formats.md.

No compiler imports (spyrec.ir, passes, codegen, frontend): a test states the layouts and the
device coordinates itself, as text, so each fixture reads like the op it runs. Defaults
fill in what is mechanical: default layouts (`spyrec.layout.default_layout`), 128-byte aligned
addresses packed in declaration order, a product core split, each core's `arg_start_bytes`,
and a flat bundle executing the ops in order.

The manifest and the bundles are spyrec's own documents, read as the simulator reads a
directory's; each op stays in the access form (tests/sim/access_form.py: coordinates as
expressions, wrong ones included, which SuperDSC cannot state) and reaches the simulator as an
OpSpec (`spyrec.sim.program.program_from_op_specs`). Tests about files and directories use
compiled programs instead (tests/programs.py).
"""

from __future__ import annotations

import zlib
import itertools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from spyrec.build_record import stamp
from spyrec.indexing import Var, evaluate, parse_expr
from spyrec.layout import default_layout
from spyrec.layout.dtypes import device_dtype_for
from spyrec.sim.files import OutputFiles, validate
from spyrec.sim.program import OutputProgram, program_from_op_specs, read_manifest
from spyrec.sim.program_cost import program_cost
from spyrec.sim.runner import SimResult, simulate
from spyrec.sim.specs import OpSpec
from spyrec.sim.verify import verify_program
from spyrec.sim.weights import WeightsFile
from tests.sealing import record
from tests.sim.access_form import read_access_form


class OutDir:
    """A program under construction: tensors, ops, then `load()` (or `run`, `cost`). `path` is
    the output directory it stands for: messages name its files there, and weights.bin (the
    simulator maps constants from the file) is written there."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.bundle: str | None = None       # bundle.mlir's text; None: `flat_bundle`
        self.kernels: list[dict] = []        # manifest kernels after 'main'
        self.bundles: dict[str, str] = {}    # their bundles' texts by file name
        self.tensors: dict[str, dict] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.constants: dict[str, np.ndarray] = {}
        self.ops: list[dict] = []
        self.next_address = 0
        self.hbm_bytes: int | None = None

    # --- tensors ------------------------------------------------------------------------------
    def tensor(self, name: str, shape, dtype: str = "float16", role: str = "intermediate",
               device_size=None, stride_map=None, address: int | None = None) -> str:
        layout = default_layout(list(shape), dtype)
        device_size = list(device_size or layout.device_size)
        stride_map = list(stride_map or layout.stride_map)
        device_dtype = device_dtype_for(dtype).name
        nbytes = math.prod(device_size[:-1]) * 128
        if address is None:
            address = self.next_address
        self.next_address = max(self.next_address, -(-(address + nbytes) // 128) * 128)
        self.tensors[name] = {
            "name": name, "role": role, "host_shape": list(shape), "host_dtype": dtype,
            "device_size": device_size, "stride_map": stride_map, "device_dtype": device_dtype,
            "hbm_address": address, "device_bytes": nbytes, "source": None}
        return name

    def input(self, name: str, shape, dtype: str = "float16", **kw) -> str:
        self.inputs.append(name)
        return self.tensor(name, shape, dtype, role="input", **kw)

    def output(self, name: str, shape, dtype: str = "float16", **kw) -> str:
        self.outputs.append(name)
        return self.tensor(name, shape, dtype, role="output", **kw)

    def constant(self, name: str, value: np.ndarray, dtype: str, **kw) -> str:
        self.constants[name] = value
        return self.tensor(name, value.shape, dtype, role="constant", **kw)

    # --- ops ----------------------------------------------------------------------------------
    def op(self, op: str, space: dict[str, int], args: list, reduced=(), constants=None,
           split: dict[str, int] | None = None, name: str | None = None,
           is_reduction: bool | None = None) -> str:
        """Add op <n> (named as its file sdsc_<n>.json). `args`: (tensor, [coords]) or
        (tensor, [coords], operand); inputs first, the output last. `split`: core slices per
        var (product split)."""
        index = len(self.ops)
        split = split or {}
        arg_list = []
        for i, a in enumerate(args):
            tensor, coords = a[0], list(a[1])
            t = self.tensors[tensor]
            arg_list.append({
                "name": tensor, "is_input": i < len(args) - 1, "arg_index": i,
                "device_dtype": t["device_dtype"], "device_size": t["device_size"],
                "stride_map": t["stride_map"], "device_coordinates": coords,
                "allocation": {"hbm": t["hbm_address"]},
                "operand": a[2] if len(a) > 2 else None, "per_tile_fixed": False})
        spec = {
            "format": "spyrec-sdsc/1", "index": index, "op": op, "name": name or f"{op}_{index}",
            "source": f"model.py:{10 + index} in forward",
            "is_reduction": bool(reduced) if is_reduction is None else is_reduction,
            "iteration_space": {v: [n, split.get(v, 1)] for v, n in space.items()},
            "reduced": list(reduced), "op_info": {"constants": dict(constants or {})},
            "args": arg_list, "cores": core_split(space, split, arg_list)}
        self.ops.append(spec)
        return f"sdsc_{index}.json"

    # --- files --------------------------------------------------------------------------------
    def manifest(self) -> dict:
        """The manifest document, with the build record of the one file this builder writes
        (weights.bin, which carries the id: `tests/sealing.py`)."""
        return record({
            "format": "spyrec-manifest/4", "spyrec_version": "0.1.0",
            "source": {"file": "model.pt2", "path": str(self.path / "program.pt2"),
                       "sha256": "0" * 64, "copy": None},
            "pipeline": [{"pass": "stick_layout", "options": {}}],
            "configs": {"pipeline": "configs/pipeline.yaml", "tiling": None, "layouts": None},
            "inputs": self.inputs, "outputs": self.outputs,
            "tensors": list(self.tensors.values()),
            "kernels": [{"name": "main", "bundle": "bundle.mlir",
                         "ops": [f"sdsc_{i}.json" for i in range(len(self.ops))]}]
            + self.kernels,
            "hbm_bytes": self.hbm_bytes if self.hbm_bytes is not None else self.next_address,
            "weights": self.weights()[0]}, ("weights.bin",) if self.constants else ())

    def weights(self) -> tuple[dict, bytes]:
        """The manifest's `weights` section and the bytes of weights.bin (docs/formats.md):
        each constant's device form (its layout's bytes, padding filled) at a multiple of 4096
        bytes."""
        from spyrec.layout import DeviceLayout
        from spyrec.layout.storage import device_bytes_of

        entries, blob = [], b""
        for name, value in self.constants.items():
            t = self.tensors[name]
            blob += bytes(-len(blob) % 4096)
            layout = DeviceLayout(tuple(t["device_size"]), tuple(t["stride_map"]),
                                  t["device_dtype"])
            data = device_bytes_of(np.asarray(value), t["host_dtype"], layout).tobytes()
            data += bytes(t["device_bytes"] - len(data))
            entries.append({"name": name, "device_dtype": t["device_dtype"],
                            "device_size": t["device_size"], "offset": len(blob),
                            "bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"})
            blob += data
        return ({"file": "weights.bin", "bytes": len(blob), "alignment": 4096,
                 "tensors": entries}, blob)

    def program(self) -> OutputProgram:
        """The program, every part checked as the simulator checks a directory it reads (the
        manifest's schema and facts, the bundles, each op's structure), not yet verified."""
        from spyrec.sim.bundle import execute, parse_bundle

        path = self.path / "manifest.json"
        document = self.manifest()
        validate(document, "manifest", str(path))
        manifest, weights = read_manifest(path, document)
        weights_file = None
        if self.constants:
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / "weights.bin").write_bytes(self.weights()[1] +
                                                    stamp(document["build"]["id"]))
            files = OutputFiles(self.path)
            files.expect(document["build"])
            weights_file = WeightsFile.open(files, weights)
        bundles = {"bundle.mlir": self.bundle or flat_bundle(len(self.ops)), **self.bundles}
        ops = {f"sdsc_{spec['index']}.json": spec for spec in self.ops}

        def op_spec(name: str, _first) -> OpSpec:
            return read_access_form(self.path / name, name, ops[name]["index"], ops[name])
        program = program_from_op_specs(
            self.path, manifest, weights, op_spec,
            lambda name: execute(parse_bundle(bundles[name], str(self.path / name))))
        return replace(program, weights_file=weights_file)

    def load(self) -> OutputProgram:
        """The program, checked and verified: what a run and the cost model start from."""
        program = self.program()
        verify_program(program)
        return program

    def run(self, inputs: dict[str, np.ndarray]) -> SimResult:
        return simulate(self.path, inputs, program=self.load())

    def cost(self) -> dict:
        """The cost section of report.json for this program."""
        return program_cost(self.load())


def flat_bundle(n_ops: int) -> str:
    lines = ["module {", "  func.func @sdsc_bundle() {"]
    lines += [f'    sdscbundle.sdsc_execute () {{sdsc_filename = "sdsc_{i}.json"}}'
              for i in range(n_ops)]
    lines += ["    func.return", "  }", "}", ""]
    return "\n".join(lines)


def _slices(n: int, k: int) -> list[tuple[int, int]]:
    """k contiguous slices of range(n), the remainder to the last ones (formats.md cores)."""
    base, extra = divmod(n, k)
    bounds = [0]
    for i in range(k):
        bounds.append(bounds[-1] + base + (1 if i >= k - extra else 0))
    return list(zip(bounds[:-1], bounds[1:]))


def start_bytes(arg: dict, point: dict[str, int]) -> int | None:
    """Byte address of the arg's element at `point` (base from allocation.hbm); None where
    it depends on data (a gathered arg)."""
    strides = [math.prod(arg["device_size"][j + 1:]) for j in range(len(arg["device_size"]))]
    itemsize = 128 // arg["device_size"][-1]
    env = {Var(v): x for v, x in point.items()}
    total = 0
    for text, stride in zip(arg["device_coordinates"], strides):
        if "IndirectAccess" in text:
            return None
        total += int(evaluate(parse_expr(text), env)) * stride
    return arg["allocation"]["hbm"] + itemsize * total


def core_split(space: dict[str, int], split: dict[str, int], args: list[dict]) -> list[dict]:
    per_var = [_slices(n, split.get(v, 1)) for v, n in space.items()]
    cores = []
    for core, box in enumerate(itertools.product(*per_var)):
        ranges = {v: list(r) for v, r in zip(space, box)}
        point = {v: lo for v, (lo, _) in ranges.items()}
        cores.append({"core": core, "ranges": ranges,
                      "arg_start_bytes": [start_bytes(a, point) for a in args]})
    return cores


# Coordinates of the default 2-D layout [ceil(b/E), a, E] for an access (c0, c1) and E lanes.
def rowmajor2d(e: int = 64, row: str = "c0", col: str = "c1") -> list[str]:
    return [f"floor({col}/{e})", row, f"Mod({col}, {e})"]


LANES = {"float16": 64, "bfloat16": 64, "bool": 64, "float32": 32, "int32": 32, "int64": 32}


def elementwise(out: OutDir, op: str, inputs: dict[str, str], out_dtype: str,
                shape=(4, 100), constants=None, split=None) -> OutDir:
    """One 2-D elementwise op over default layouts: inputs {name: host dtype} -> 'out'."""
    args = []
    for name, dtype in inputs.items():
        out.input(name, list(shape), dtype)
        args.append((name, rowmajor2d(LANES[dtype])))
    out.output("out", list(shape), out_dtype)
    args.append(("out", rowmajor2d(LANES[out_dtype])))
    out.op(op, {"c0": shape[0], "c1": shape[1]}, args, constants=constants,
           split=split or {"c0": 2})
    return out
