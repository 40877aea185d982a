"""`spyrec inspect OUT [TENSOR] [--json] [--svg FILE] [--trace FILE.json]`.

Reads only the output directory (like the simulator): without TENSOR, every tensor's layout,
address and size, the restickifies and the estimated cost; with TENSOR, its layout and every op
that reads or writes it, with the device coordinates of each access. `inspect_data` is the same
content as one JSON document (`--json`, schemas/inspect.schema.json); `write_svg` draws
TENSOR's sticks (stick_svg.py), `write_trace` the cost model's timeline (cost_trace.py).

Every view refuses a broken directory as `spyrec run` does (exit 2, one line naming the file):
the manifest, every `sdsc_<n>.json` a kernel lists (present, JSON, schema-valid) and every
kernel's bundle file (present) are checked before anything is shown or written, although the
text views read no SuperDSC file: inspecting a directory must not vouch for one that cannot run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from spyrec.errors import InputFileError
from spyrec.userfiles import write_replacing

MAX_REPORT_BYTES = 256 << 20   # report.txt: a line per op; more is not a report spyrec wrote
# manifest tensor fields that tools outside spyrec read (DESIGN §2), in --json
TENSOR_KEYS = ("name", "role", "host_shape", "host_dtype", "device_size", "stride_map",
               "device_dtype", "hbm_address", "device_bytes", "source")


def _load(files, name: str, schema: str) -> dict:
    """A JSON file of the directory (`files`: its handle, `sim/files.OutputFiles`), checked
    against its schema and its build's record: inspect reads the same fields the simulator
    does, so a tampered file, or one of another build, gets the same one-line message."""
    if not files.exists(name):
        raise InputFileError(f"{files.label(name)}: no such file; is {files.path} a spyrec "
                             f"compile output directory?")
    return files.read_json(name, schema)


def _manifest(out_dir: Path):
    """The directory opened once (every file inspect reads comes through the handle, so a
    recompile meanwhile cannot mix two builds into one view) and its manifest, the kernels'
    files checked."""
    from spyrec.sim.files import OutputFiles

    files = OutputFiles(out_dir)
    manifest = _load(files, "manifest.json", "manifest")
    files.expect(manifest.get("build"))
    _check_kernel_files(files, manifest)
    return files, manifest


def _check_kernel_files(files, manifest: dict) -> None:
    """Every bundle the kernels name exists, and every sdsc file they list exists and passes
    its schema: the same files, and the same messages, as `spyrec run` (sim/files.py)."""
    for bundle in dict.fromkeys(k["bundle"] for k in manifest["kernels"]):
        if not files.exists(bundle):
            raise InputFileError(f"{files.label(bundle)}: no such file (manifest.json names it "
                                 f"as a kernel's bundle); re-run spyrec compile")
    for name in _op_files(manifest):
        if not files.exists(name):
            raise InputFileError(f"{files.label(name)}: no such file (manifest.json lists it "
                                 f"in a kernel's ops); re-run spyrec compile")
        _load(files, name, "sdsc")


def _report(files, manifest: dict) -> dict:
    """report.json when the directory has one, of the manifest's build (another compile's
    report would show another program's costs)."""
    if not files.exists("report.json"):
        return {}
    report = _load(files, "report.json", "report")
    _same_build(files, "report.json", manifest, report.get("build"))
    return report


def _report_text(files, manifest: dict) -> str | None:
    """report.txt's text when the directory has one, of the manifest's build."""
    if not files.exists("report.txt"):
        return None
    fd = files.open("report.txt")
    try:
        size = os.fstat(fd).st_size
        if size > MAX_REPORT_BYTES:
            raise InputFileError(f"{files.label('report.txt')}: {size} bytes, more than the "
                                 f"report spyrec compile writes can be; re-run spyrec compile")
        text = os.read(fd, size + 1).decode("utf-8", "replace")
    finally:
        os.close(fd)
    lines = text.splitlines()[:3]
    stamp = next((line[len("build "):] for line in lines if line.startswith("build ")), None)
    _same_build(files, "report.txt", manifest, stamp)
    return text


def _same_build(files, name: str, manifest: dict, build: str | None) -> None:
    record = manifest.get("build")
    if record and build != record["id"]:
        raise InputFileError(f"{files.label(name)}: belongs to build {str(build)[:12]}, "
                             f"manifest.json to build {record['id'][:12]}: the directory mixes "
                             f"files of different compiles; re-run spyrec compile")


def _tensor(out_dir, manifest: dict, tensor: str) -> dict:
    tensors = {t["name"]: t for t in manifest["tensors"]}
    if tensor not in tensors:
        import difflib

        near = difflib.get_close_matches(tensor, list(tensors), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise InputFileError(f"{getattr(out_dir, 'path', out_dir)}: no tensor named "
                             f"{tensor!r}{hint}")
    return tensors[tensor]


def inspect_directory(out_dir: Path, tensor: str | None = None) -> str:
    files, manifest = _manifest(out_dir)
    if tensor is None:
        return _summary(files, manifest)
    return _tensor_view(files, manifest, _tensor(files, manifest, tensor))


def inspect_data(out_dir: Path, tensor: str | None = None) -> dict:
    """`inspect --json`: the summary, or one tensor and its accesses, with stable keys."""
    files, manifest = _manifest(out_dir)
    out_dir = files.path
    if tensor is not None:
        t = _tensor(files, manifest, tensor)
        return {"out_dir": str(out_dir), "tensor": {k: t[k] for k in TENSOR_KEYS},
                "accesses": [{"file": name, "op": spec["op"],
                              "access": "read" if arg["is_input"] else "write",
                              "device_coordinates": arg["device_coordinates"],
                              "iteration_space": {v: n for v, (n, _) in
                                                  spec["iteration_space"].items()}}
                             for name, spec, arg in _accesses(files, manifest, t)]}
    report = _report(files, manifest)
    cost = report.get("cost")
    return {"out_dir": str(out_dir), "ops": len(_op_keys(files, manifest)),
            "hbm_bytes": manifest["hbm_bytes"], "inputs": manifest["inputs"],
            "outputs": manifest["outputs"],
            "tensors": [{k: t[k] for k in TENSOR_KEYS} for t in manifest["tensors"]],
            "restickify": report.get("restickify"),
            "cost_totals": {k: v for k, v in cost["totals"].items() if k != "per_bundle"}
            if cost else None}


def check_output_files(out_dir: Path, svg_path: Path | None, trace_path: Path | None) -> None:
    """`--svg` and `--trace` judged together before either is drawn, so a refused second path
    leaves no first file written (each writer checks its own again)."""
    from spyrec.sim.inputs import check_replaceable

    for path, option, suffix in ((svg_path, "--svg", ".svg"), (trace_path, "--trace", ".json")):
        if path is not None:
            check_replaceable(path, option, (suffix,), Path(out_dir))


def write_svg(out_dir: Path, tensor: str, path: Path) -> None:
    """TENSOR's stick layout drawn into `path` (stick_svg.py)."""
    from spyrec.sim.inputs import check_replaceable
    from spyrec.stick_svg import stick_layout_svg

    out_dir = Path(out_dir)
    check_replaceable(path, "--svg", (".svg",), out_dir)
    files, manifest = _manifest(out_dir)
    write_replacing(path, stick_layout_svg(_tensor(files, manifest, tensor)).encode(),
                    "--svg", "the picture")


def write_trace(out_dir: Path, path: Path) -> dict:
    """The cost model's timeline as a Chrome/Perfetto trace in `path`; returns the cost."""
    from spyrec.cost_trace import cost_trace
    from spyrec.sim.directory import is_foreign, load_output_dir, open_output_dir
    from spyrec.sim.inputs import check_replaceable
    from spyrec.sim.program_cost import program_cost

    out_dir = Path(out_dir)
    check_replaceable(path, "--trace", (".json",), out_dir)
    files = open_output_dir(out_dir)
    if not is_foreign(files):   # a reference bundle has its own manifest
        _manifest(out_dir)    # the same checks and messages as the other views
    program = load_output_dir(files)
    cost = program_cost(program)
    trace = [(kernel, ex.file) for kernel, ex in program.trace]
    write_replacing(path, (json.dumps(cost_trace(trace, cost), indent=1) + "\n").encode(),
                    "--trace", "the trace")
    return cost


def _op_files(manifest: dict) -> list[str]:
    """Every sdsc file the kernels list, once, in kernel order."""
    return list(dict.fromkeys(f for k in manifest["kernels"] for f in k["ops"]))


def _op_keys(files, manifest: dict) -> list[str]:
    """Every op's name in execution order, as the simulator names it: its sdsc file, or
    `<file>#<j>` for the j-th compute op of a fused file (docs/formats.md, Fused SuperDSCs).
    One per OpSpec of opspecs.json."""
    keys = []
    for name in _op_files(manifest):
        (key, body), = _load(files, name, "sdsc").items()
        keys += [f"{name}#{j}" for j in range(len(body["fusedDscs_"]))] \
            if key.endswith("_fused") else [name]
    return keys


def _summary(files, manifest: dict) -> str:
    lines = [f"{files.path}: {len(_op_keys(files, manifest))} ops, "
             f"{manifest['hbm_bytes']} bytes of device memory",
             f"inputs {manifest['inputs']}  outputs {manifest['outputs']}"]
    lines += [_symbol_line(s) for s in manifest.get("symbols", [])] + [""]
    rows = [("tensor", "role", "host", "device layout", "address")]
    rows += [(t["name"], t["role"], f"{t['host_dtype']}{t['host_shape']}",
              f"{t['device_size']} / {t['stride_map']} {t['device_dtype']}",
              _where(t)) for t in manifest["tensors"]]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  "
                     + r[4].rjust(widths[4]))
    lines += ["", *_op_tree(files, manifest)]
    text = _report_text(files, manifest)
    if text is not None:
        start = text.find("restickify:")
        lines += ["", text[start:text.find("\nops:", start)].rstrip()] if start >= 0 else []
        cost = text.find("total:")
        if cost >= 0:
            lines += ["", text[cost:].strip()]
    return "\n".join(lines) + "\n"


def _symbol_line(symbol: dict) -> str:
    """`symbol s81: 128..2048 by 64 (input x dim 1); shapes below are at the maximum`."""
    return (f"symbol {symbol['name']}: {symbol['minimum']}..{symbol['maximum']} by "
            f"{symbol['granularity']} ({symbol.get('where') or 'a symbolic length'}); "
            f"shapes below are at the maximum")


def _trip_range(loop: dict) -> str:
    """A loop's trip range in words when it has one (docs/formats.md: start and stop are
    a*i + b of the enclosing loop's index i, clamped to [0, count]): ", trips
    [0*i+0, 1*i+1)" for a causal key loop; and for a loop bound by a symbolic length,
    ", runs ceil(s81/64) of them": `count` is then the count at the maximum."""
    bound = loop.get("count_symbol")
    text = f", runs ceil({bound['symbol']}/{bound['per_trip']}) of them" if bound else ""
    if bound and bound.get("past_end"):
        text += ", the last past the length"
    if "start" not in loop:
        return text
    (a, b), (c, d) = loop["start"], loop["stop"]
    return f", trips [{a}*i{b:+d}, {c}*i{d:+d}){text}"


def _op_tree(files, manifest: dict) -> list[str]:
    """Every op in execution order, inside its loop nest (counts and tiled dims), with the
    node name and module path a tiling config selects it by (DESIGN §6), one tile's
    iteration space, and where each arg lives (HBM, or LX at a per-core offset)."""
    opspecs = _load(files, "opspecs.json", "opspecs")
    op_files = iter(_op_keys(files, manifest))
    lines = ["ops (file, op, node [module path], one tile's iteration space, args):"]

    def walk(body: list, depth: int) -> None:
        pad = "  " * (depth + 1)
        for item in body:
            if "loop" in item:
                loop = item["loop"]
                lines.append(f"{pad}loop {loop['count']}x over "
                             f"[{', '.join(loop['tiled_symbols'])}]{_trip_range(loop)}")
                walk(loop["body"], depth + 1)
                continue
            space = ", ".join(f"{v}<{n}" for v, (n, _) in item["iteration_space"].items())
            scope = f" [{item['scope']}]" if item.get("scope") else ""
            args = ", ".join(f"{a['name']}@{_placement(a)}" for a in item["args"])
            lines.append(f"{pad}{next(op_files, '?'):<14} {item['op']:<16} "
                         f"node {item.get('node') or '-'}{scope}  [{space}]  {args}")
    for kernel in opspecs["kernels"]:
        walk(kernel["specs"], 0)
    return lines


def _placement(arg: dict) -> str:
    where = arg.get("allocation") or {}
    if where.get("lx") is not None:
        return f"lx:{where['lx']}"
    tile = "/tile" if arg.get("per_tile_fixed") else ""
    return f"hbm{tile}"


def _flat_specs(opspecs: dict) -> list[dict]:
    """Every OpSpec of opspecs.json in execution order (LoopSpec bodies flattened)."""
    out: list[dict] = []

    def walk(body: list) -> None:
        for item in body:
            if "loop" in item:
                walk(item["loop"]["body"])
            else:
                out.append(item)
    for kernel in opspecs["kernels"]:
        walk(kernel["specs"])
    return out


def _accesses(files, manifest: dict, t: dict):
    """(sdsc file, op spec, arg) for every arg of every op that names tensor `t` (from
    opspecs.json: sdsc files are SuperDSC, which names no tensors)."""
    opspecs = _load(files, "opspecs.json", "opspecs")
    for name, spec in zip(_op_keys(files, manifest), _flat_specs(opspecs)):
        for arg in spec["args"]:
            if arg["name"] == t["name"]:
                yield name, spec, arg


def _where(t: dict) -> str:
    """A tensor's HBM address, or its offset in every core's LX (scratchpad_planning)."""
    if t.get("lx_address") is not None:
        return f"LX@{t['lx_address']}"
    return str(t["hbm_address"])


def _tensor_view(files, manifest: dict, t: dict) -> str:
    lines = [f"{t['name']}: {t['role']} {t['host_dtype']}{t['host_shape']}",
             f"  device_size {t['device_size']}  stride_map {t['stride_map']}  "
             f"{t['device_dtype']}  {t['device_bytes']} bytes at {_where(t)}",
             f"  source {t['source']}", ""]
    stored = next((w for w in manifest["weights"]["tensors"] if w["name"] == t["name"]), {})
    if "relayout_of" in stored:
        pad = f", zero-padded by {stored['pad']}" if "pad" in stored else ""
        lines.insert(-1, f"  not in weights.bin: laid out at load from {stored['relayout_of']}"
                         f"{pad}")
    for name, spec, arg in _accesses(files, manifest, t):
        role = "reads " if arg["is_input"] else "writes"
        space = ", ".join(f"{v}<{n}" for v, (n, _) in spec["iteration_space"].items())
        where = ", ".join(str(w) for w in (spec.get("name"), spec.get("source")) if w)
        lines.append(f"  {name:<14} {spec['op']:<16} {role} "
                     f"[{', '.join(arg['device_coordinates'])}] over [{space}]"
                     + (f"  ({where})" if where else ""))
    return "\n".join(lines) + "\n"
