"""`spyrec inspect OUT [TENSOR]`: a readable view of a compiled output directory.

Reads only the output directory (like the simulator): without TENSOR, every tensor's layout,
address and size, the restickifies and the estimated cost; with TENSOR, its layout and every op
that reads or writes it, with the device coordinates of each access.
"""

from __future__ import annotations

from pathlib import Path

from spyrec.errors import InputFileError


def _load(out_dir: Path, name: str, schema: str) -> dict:
    """A JSON file of the directory, checked against its schema: inspect reads the same
    fields the simulator does, so a tampered file gets the same one-line message."""
    from spyrec.sim.loader import read_json

    path = out_dir / name
    if not path.exists():
        raise InputFileError(f"{path}: no such file; is {out_dir} a spyrec compile output "
                             f"directory?")
    return read_json(path, schema)


def inspect_directory(out_dir: Path, tensor: str | None = None) -> str:
    from spyrec.sim.loader import check_output_directory

    out_dir = Path(out_dir)
    check_output_directory(out_dir)
    manifest = _load(out_dir, "manifest.json", "manifest")
    tensors = {t["name"]: t for t in manifest["tensors"]}
    if tensor is None:
        return _summary(out_dir, manifest)
    if tensor not in tensors:
        import difflib

        near = difflib.get_close_matches(tensor, list(tensors), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise InputFileError(f"{out_dir}: no tensor named {tensor!r}{hint}")
    return _tensor_view(out_dir, manifest, tensors[tensor])


def _op_files(manifest: dict) -> list[str]:
    """Every sdsc file the kernels list, once, in kernel order."""
    return list(dict.fromkeys(f for k in manifest["kernels"] for f in k["ops"]))


def _summary(out_dir: Path, manifest: dict) -> str:
    lines = [f"{out_dir}: {len(_op_files(manifest))} ops, "
             f"{manifest['hbm_bytes']} bytes of device memory",
             f"inputs {manifest['inputs']}  outputs {manifest['outputs']}", ""]
    rows = [("tensor", "role", "host", "device layout", "address")]
    rows += [(t["name"], t["role"], f"{t['host_dtype']}{t['host_shape']}",
              f"{t['device_size']} / {t['stride_map']} {t['device_dtype']}",
              str(t["hbm_address"])) for t in manifest["tensors"]]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  "
                     + r[4].rjust(widths[4]))
    report_txt = out_dir / "report.txt"
    if report_txt.exists():
        text = report_txt.read_text(encoding="utf-8")
        start = text.find("restickify:")
        lines += ["", text[start:text.find("\nops:", start)].rstrip()] if start >= 0 else []
        cost = text.find("total:")
        if cost >= 0:
            lines += ["", text[cost:].strip()]
    return "\n".join(lines) + "\n"


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


def _tensor_view(out_dir: Path, manifest: dict, t: dict) -> str:
    lines = [f"{t['name']}: {t['role']} {t['host_dtype']}{t['host_shape']}",
             f"  device_size {t['device_size']}  stride_map {t['stride_map']}  "
             f"{t['device_dtype']}  {t['device_bytes']} bytes at {t['hbm_address']}",
             f"  source {t['source']}", ""]
    opspecs = _load(out_dir, "opspecs.json", "opspecs")
    for name, spec in zip(_op_files(manifest), _flat_specs(opspecs)):
        for arg in spec["args"]:
            if arg["name"] != t["name"]:
                continue
            role = "reads " if arg["is_input"] else "writes"
            space = ", ".join(f"{v}<{n}" for v, (n, _) in spec["iteration_space"].items())
            where = ", ".join(str(w) for w in (spec.get("name"), spec.get("source")) if w)
            lines.append(f"  {name:<14} {spec['op']:<16} {role} "
                         f"[{', '.join(arg['device_coordinates'])}] over [{space}]"
                         + (f"  ({where})" if where else ""))
    return "\n".join(lines) + "\n"
