"""Looped output directories by hand: an untiled compiled directory rewritten into the tiling
contract's looped form (prompts/tiling-contract.md §2), for simulator tests that must not wait
for codegen and must be able to break one field at a time.

`tile_directory` takes a compiled directory of pointwise ops at the *full* shape and tiles every
op with the same counts per SuperDSC dim label (`{"mb": 2, "out": 2}`: loops outermost first):
`N_` becomes one tile, the folds and `dataStageParam_` follow, every full-buffer HBM node gets
back gaps that keep the full tensor's strides and symbolic per-core starts, named tensors move
into LX (one tile per core slice, fixed offset), and `bundle.mlir` gets `scf.for` loops with
one `#map` per stride vector and `symbol_ids`. The address arithmetic is written out here
(F §4.2) rather than taken from the simulator, so the two are independent.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tests.sealing import seal


@dataclass
class Looped:
    """What tile_directory wrote: the path, and per op file its symbol ids and map
    coefficients (per symbol, bytes per iteration of each level)."""

    path: Path
    symbols: dict[str, list[tuple[int, int, tuple[int, ...]]]] = field(default_factory=dict)


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def _write(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n")


def tile_directory(src: Path, dst: Path, counts: dict[str, int],
                   lx: dict[str, int] | None = None) -> Looped:
    """Copy `src` to `dst` and tile it (see the module docstring). `lx`: tensor name -> LX
    offset of the tensors to keep in LX (intermediates used only inside the loop)."""
    lx = lx or {}
    shutil.copytree(src, dst)
    manifest = _read(dst / "manifest.json")
    tensors = {t["hbm_address"]: t for t in manifest["tensors"]}
    (kernel,) = manifest["kernels"]
    looped = Looped(dst)
    next_id = 1
    for name in kernel["ops"]:
        doc = _read(dst / name)
        ((_, wrapper),) = doc.items()
        ((_, dsc),) = wrapper["dscs_"][0].items()
        ids, next_id = _tile_op(wrapper, dsc, counts, tensors, lx, next_id)
        looped.symbols[name] = ids
        _write(dst / name, doc)
    for t in manifest["tensors"]:
        if t["name"] in lx:
            tile_bytes = t["device_bytes"] // math.prod(counts.values())
            t.update(hbm_address=None, lx_address=lx[t["name"]],
                     lx_bytes_per_core=tile_bytes // _cores(dst / kernel["ops"][0]))
    _write(dst / "manifest.json", manifest)
    (dst / "bundle.mlir").write_text(loop_bundle(kernel["ops"], looped.symbols, counts))
    seal(dst)       # the looped directory is one build, as compile would have written it
    return looped


def _cores(path: Path) -> int:
    ((_, wrapper),) = _read(path).items()
    return wrapper["numCoresUsed_"]


def _tile_op(wrapper: dict, dsc: dict, counts: dict[str, int], tensors: dict, lx: dict,
             next_id: int):
    full = {k[:-1]: v for k, v in dsc["N_"].items() if k != "name_"}
    tile = {d: n // counts.get(d, 1) for d, n in full.items()}
    split = wrapper["numWkSlicesPerDim_"]
    per = {d: tile[d] // split[d] for d in tile}
    dsc["N_"].update({f"{d}_": n for d, n in tile.items()})
    for stage in dsc["dataStageParam_"]["0"].values():
        stage.update({f"{d}_": p for d, p in per.items()})
    nc = wrapper["numCoresUsed_"]
    slices = [wrapper["coreIdToWkSlice_"][str(c)] for c in range(nc)]
    ids: list[tuple[int, int, tuple[int, ...]]] = []
    seen: dict[int, int] = {}
    for node, lds in zip(dsc["scheduleTree_"], dsc["labeledDs_"]):
        label = dsc["primaryDsInfo_"][lds["dsType_"]]
        stick, eps = label["stickDimOrder_"][0], label["stickSize_"][0]
        scale = dict(zip(label["layoutDimOrder_"], lds["scale_"]))
        _folds(node, scale, stick, eps, per, split)
        address = int(node["startAddressCoreCorelet_"]["data_"]["[0, 0, 0]"])
        tensor = tensors[address]
        if tensor["name"] in lx:
            node.update(name_=node["name_"].replace("_hbm", "_lx"), component_="lx")
            lds["memOrg_"] = {"lx": {"isPresent": 1}}
            node["startAddressCoreCorelet_"]["data_"] = {
                f"[{c}, 0, 0]": str(lx[tensor["name"]]) for c in range(nc)}
            continue
        stride, strides = eps, {}
        for d in node["layoutDimOrder_"]:
            strides[d] = stride
            stride *= (-(-full[d] // eps) if d == stick else full[d]) if scale[d] == 1 else 1
        gaps = {d: full[d] - tile[d] for d in node["layoutDimOrder_"]
                if scale[d] == 1 and full[d] != tile[d]}
        if gaps:
            node["backGapCore_"] = {d: {"-1": str(g)} for d, g in gaps.items()}
        wl = lds["wordLength"]
        advance = tuple(wl * (tile[d] // eps if d == stick else tile[d]) * strides[d]
                        if scale[d] == 1 else 0 for d in counts)
        starts = [address + wl * sum(s[d] * (per[d] // eps if d == stick else per[d])
                                     * strides[d] for d in s if scale[d] == 1)
                  for s in slices]
        if not any(advance):
            node["startAddressCoreCorelet_"]["data_"] = {
                f"[{c}, 0, 0]": str(a) for c, a in enumerate(starts)}
            continue
        node["isStartAddrSymbolic_"] = 1
        data = {}
        for c, a in enumerate(starts):
            if a not in seen:
                seen[a] = -next_id
                ids.append((-next_id, a, advance))
                next_id += 1
            data[f"[{c}, 0, 0]"] = str(seen[a])
        node["startAddressCoreCorelet_"]["data_"] = data
    return ids, next_id


def _folds(node: dict, scale: dict, stick: str, eps: int, per: dict, split: dict) -> None:
    """coordInfo folds for the tile's per-core sizes (F §2.5)."""
    for d, info in node["coordinates_"]["coordInfo"].items():
        if scale[d] != 1:
            continue
        p, s = per[d], split[d]
        alphas, factors = ([p, 0, 0, eps, 1], [s, 1, 1, -(-p // eps), eps]) if d == stick \
            else ([p, 0, 0, 1], [s, 1, 1, p])
        folds = info["folds"]
        for f, a in zip(folds["dim_prop_func"], alphas):
            f["Affine"]["alpha_"] = a
        for f, k in zip(folds["dim_prop_attr"], factors):
            f["factor_"] = k


def loop_bundle(ops: list[str], symbols: dict, counts: dict[str, int]) -> str:
    """The contract's bundle: bounds, %sym constants, nested loops, maps, executes."""
    levels = list(counts)
    dims = ", ".join(f"d{k}" for k in range(len(levels)))
    maps: dict[tuple[int, ...], int] = {}
    for entries in symbols.values():
        for _, _, adv in entries:
            maps.setdefault(adv, len(maps))
    lines = [f"#map_{k} = affine_map<({dims})[s0] -> (s0 + "
             + " + ".join(f"{a}*d{j}" for j, a in enumerate(adv)) + ")>"
             for adv, k in maps.items()]
    lines += ["module {", "  func.func @sdsc_bundle() {",
              "    %c0 = arith.constant 0 : index", "    %c1 = arith.constant 1 : index"]
    lines += [f"    %loop_bound_{k} = arith.constant {counts[d]} : index"
              for k, d in enumerate(levels)]
    for entries in symbols.values():
        lines += [f"    %sym_{-i} = arith.constant {a} : index" for i, a, _ in entries]
    indent = "    "
    for k in range(len(levels)):
        lines.append(f"{indent}scf.for %i_{k} = %c0 to %loop_bound_{k} step %c1 {{")
        indent += "  "
    iv = ", ".join(f"%i_{k}" for k in range(len(levels)))
    for name in ops:
        entries = symbols[name]
        for i, _, adv in entries:
            lines.append(f"{indent}%addr_{-i} = affine.apply #map_{maps[adv]}({iv})[%sym_{-i}]")
        operands = ", ".join(f"%addr_{-i}" for i, _, _ in entries)
        attr = f', symbol_ids = [{", ".join(str(i) for i, _, _ in entries)}]' if entries else ""
        lines.append(f'{indent}sdscbundle.sdsc_execute ({operands}) '
                     f'{{sdsc_filename = "{name}"{attr}}}')
    for k in range(len(levels)):
        indent = indent[:-2]
        lines.append(f"{indent}}}")
    lines += ["    func.return", "  }", "}", ""]
    return "\n".join(lines)
