"""Codegen of looped programs (issue 8 contract §1–2), from tiled IR graphs written by hand.

Each graph runs work_division, scratchpad_planning and memory_planning, then the codegen; the
bundle is parsed, verified and executed with xDSL (spyrec/sim/bundle.py), and every expected
number below is worked out by hand from the device layout:
advance of a level = device-coordinate shift of one tile × device element stride × itemsize.
The bound start address of each arg's core 0 is then checked, every iteration, against the
byte address of the tile origin computed here from the layout rule (not from the compiler).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from spyrec.codegen.writer import build_outputs, write_atomically
from spyrec.errors import InputFileError
from spyrec.ir.parser import parse
from spyrec.ir.verify import verify
from spyrec.passes.memory_planning import MemoryPlanning
from spyrec.passes.registry import CompileContext
from spyrec.passes.scratchpad_planning import ScratchpadPlanning
from spyrec.passes.work_division import WorkDivision
from spyrec.sim.bundle import execute, parse_bundle
from spyrec.sim.files import validate
from tests.passes.textir import ir

SEED = """
buffer a: input float16[1024, 4096] device [64, 1024, 64] / [64, 4096, 1] fp16
buffer b: input float16[1024, 4096] device [64, 1024, 64] / [64, 4096, 1] fp16
buffer c: input float16[1024, 4096] device [64, 1024, 64] / [64, 4096, 1] fp16
buffer y: intermediate float16[512, 1024] device [16, 512, 64] / [64, 1024, 1] fp16 per_tile
buffer z: output float16[1024, 4096] device [64, 1024, 64] / [64, 4096, 1] fp16
op y: y[1024*c0 + c1] = add(a[4096*c0 + c1], b[4096*c0 + c1]) over [c0<512, c1<1024] \
loops [2(c0)@g0.0, 4(c1)@g0.1]
op z: z[4096*c0 + c1] = mul(y[1024*c0 + c1], c[4096*c0 + c1]) over [c0<512, c1<1024] \
loops [2(c0)@g0.0, 4(c1)@g0.1]
inputs [a, b, c]
outputs [z]
"""

MIB = 2**20


def compile_text(text: str, tmp: Path, cores: int = 32) -> tuple[dict, CompileContext]:
    graph = parse(ir(text).replace("\\\n", ""))
    ctx = CompileContext()
    # LX for loop bodies' per-tile buffers only: these tests pin HBM addresses of the rest
    # (and work division prices the rest as HBM, as it is placed)
    for p in (WorkDivision(cores=cores, lx_intermediates=False),
              ScratchpadPlanning(intermediates=False),
              MemoryPlanning()):
        p.run(graph, ctx)
    assert verify(graph, ("layouts", "core_splits", "hbm_addresses")) == []
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / "prog.pt2"
    src.write_bytes(b"not read")
    configs = {"pipeline": None, "tiling": None, "layouts": None}
    files = build_outputs(graph, src, [], configs, ctx.report).files
    write_atomically(tmp / "out", files, src)
    return {path.name: path.read_text() for path in (tmp / "out").iterdir()
            if path.suffix in (".json", ".mlir")}, ctx


def dsc(files: dict, n: int) -> dict:
    ((_, wrapper),) = json.loads(files[f"sdsc_{n}.json"]).items()
    ((_, body),) = wrapper["dscs_"][0].items()
    return body


def data(node: dict) -> list[str]:
    d = node["startAddressCoreCorelet_"]["data_"]
    return [d[f"[{c}, 0, 0]"] for c in range(len(d))]


def maps(bundle: str) -> list[str]:
    return re.findall(r"^#map_\d+ = .*$", bundle, re.M)


def test_seed_example_advances_by_device_strides(tmp_path):
    files, _ = compile_text(SEED, tmp_path)
    bundle = files["bundle.mlir"]
    # one map for a, b, c and z: a tile is 512 rows (512·64·2 B) by 16 sticks (16·65536·2 B)
    assert maps(bundle) == ["#map_0 = affine_map<(d0, d1)[s0] -> (s0 + 65536*d0 + 2097152*d1)>"]
    assert "    %loop_bound_0 = arith.constant 2 : index\n" \
           "    %loop_bound_1 = arith.constant 4 : index\n" in bundle
    # a at 0, b at 8 MiB: core k starts 16 rows (2048 B) further; ids -1.. in emission order
    assert "    %sym_1 = arith.constant 0 : index\n    %sym_2 = arith.constant 2048 : index\n" \
        in bundle
    assert "    %sym_33 = arith.constant 8388608 : index\n" in bundle
    assert "        %addr_1 = affine.apply #map_0(%i_0, %i_1)[%sym_1]\n" in bundle
    first, second = dsc(files, 0), dsc(files, 1)
    a, b, y = first["scheduleTree_"]
    assert a["isStartAddrSymbolic_"] == 1 and data(a) == [str(-1 - k) for k in range(32)]
    assert data(b) == [str(-33 - k) for k in range(32)]
    # the window into the full tensor: 512 rows of a 1024-row stick column
    assert a["backGapCore_"] == {"mb": {"-1": "512"}}
    assert y["name_"] == "allocate-Tensor2_lx" and y["component_"] == "lx"
    assert "isStartAddrSymbolic_" not in y and set(data(y)) == {"0"}
    assert first["labeledDs_"][2]["memOrg_"] == {"lx": {"isPresent": 1}}
    assert second["scheduleTree_"][0]["name_"] == "allocate-Tensor0_lx"
    ids = [-1 - k for k in range(64)]
    assert f'{{sdsc_filename = "sdsc_0.json", symbol_ids = {ids}}}' in bundle
    trace = execute(parse_bundle(bundle))
    assert [e.file for e in trace] == ["sdsc_0.json", "sdsc_1.json"] * 8
    # iteration (i_0=1, i_1=3) is the 8th: a's core 0 at 65536 + 3·2097152, core 31 + 31·2048
    last = trace[14]
    assert last.operands[0] == 65536 + 3 * 2097152
    assert last.operands[31] == 65536 + 3 * 2097152 + 31 * 2048
    assert last.operands[32] == 8 * MIB + 65536 + 3 * 2097152


def test_seed_example_opspecs_and_manifest(tmp_path):
    files, _ = compile_text(SEED, tmp_path)
    specs = json.loads(files["opspecs.json"])
    validate(specs, "opspecs", "opspecs.json")
    (outer,) = specs["kernels"][0]["specs"]
    (inner,) = outer["loop"]["body"]
    assert (outer["loop"]["count"], outer["loop"]["tiled_symbols"]) == (2, ["c0"])
    assert (inner["loop"]["count"], inner["loop"]["tiled_symbols"]) == (4, ["c1"])
    add, mul = inner["loop"]["body"]
    assert add["tiled_symbols"] == ["c0", "c1"]
    assert [a["allocation"] for a in add["args"]] == [{"hbm": 0}, {"hbm": 8 * MIB}, {"lx": 0}]
    assert [a["per_tile_fixed"] for a in add["args"]] == [False, False, True]
    assert {c["arg_start_bytes"][2] for c in add["cores"]} == {0}
    manifest = json.loads(files["manifest.json"])
    validate(manifest, "manifest", "manifest.json")
    y = next(t for t in manifest["tensors"] if t["name"] == "y")
    # one tile is 512x1024 fp16 = 1 MiB; 32 cores of 16 rows each hold 32 KiB
    assert (y["hbm_address"], y["lx_address"], y["lx_bytes_per_core"]) == (None, 0, 32768)
    for n in (0, 1):
        validate(json.loads(files[f"sdsc_{n}.json"]), "sdsc", f"sdsc_{n}.json")


# (name, input buffer line, op line, loops, output host shape,
#  device coords of an input host index, input host index of the op origin, expected maps)
LAYOUTS = [
    ("transposed fp16 input", "buffer x: input float16[4096, 1024] device [16, 4096, 64] / "
     "[64, 1024, 1] fp16", "z[4096*c0 + c1] = identity(x[1024*c1 + c0]) over [c0<512, c1<1024]",
     "[2(c0)@g0.0, 4(c1)@g0.1]", (1024, 4096), lambda r, c: (c // 64, r, c % 64),
     lambda c0, c1: (c1, c0),
     # x: 8 sticks (8·4096·64·2 B) per c0 tile, 1024 rows (1024·64·2 B) per c1 tile
     ["(s0 + 4194304*d0 + 131072*d1)", "(s0 + 65536*d0 + 2097152*d1)"]),
    ("padded stick dim", "buffer x: input float16[256, 100] device [2, 256, 64] / [64, 100, 1] "
     "fp16", "z[100*c0 + c1] = identity(x[100*c0 + c1]) over [c0<128, c1<100]",
     "[2(c0)@g0.0]", (256, 100), lambda r, c: (c // 64, r, c % 64), lambda c0, c1: (c0, c1),
     ["(s0 + 16384*d0)"]),          # 128 rows · 64 · 2 B
    ("3-D fp16", "buffer x: input float16[8, 128, 256] device [128, 4, 8, 64] / "
     "[256, 64, 32768, 1] fp16",
     "z[32768*c0 + 256*c1 + c2] = identity(x[32768*c0 + 256*c1 + c2]) "
     "over [c0<4, c1<32, c2<256]", "[2(c0)@g0.0, 4(c1)@g0.1]", (8, 128, 256),
     lambda a, b, c: (b, c // 64, a, c % 64), lambda c0, c1, c2: (c0, c1, c2),
     ["(s0 + 512*d0 + 131072*d1)"]),   # 4 of dim 2 (64 el), 32 of dim 0 (2048 el), ·2 B
    ("4-D fp32", "buffer x: input float32[2, 4, 64, 96] device [4, 64, 3, 2, 32] / "
     "[6144, 96, 32, 24576, 1] fp32",
     "z[24576*c0 + 6144*c1 + 96*c2 + c3] = identity(x[24576*c0 + 6144*c1 + 96*c2 + c3]) "
     "over [c0<2, c1<2, c2<64, c3<32]", "[2(c1)@g0.0, 3(c3)@g0.1]", (2, 4, 64, 96),
     lambda a, b, c, d: (b, c, d // 32, a, d % 32), lambda c0, c1, c2, c3: (c0, c1, c2, c3),
     ["(s0 + 98304*d0 + 256*d1)"]),    # 2 of dim 0 (12288 el), 1 stick (64 el), ·4 B
    ("fp32 stick dim outer", "buffer x: input float32[256, 512] device [16, 256, 32] / "
     "[32, 512, 1] fp32", "z[512*c0 + c1] = identity(x[512*c0 + c1]) over [c0<128, c1<128]",
     "[4(c1)@g0.0, 2(c0)@g0.1]", (256, 512), lambda r, c: (c // 32, r, c % 32),
     lambda c0, c1: (c0, c1),
     ["(s0 + 131072*d0 + 16384*d1)"]),  # 4 sticks (4·8192 el), 128 rows (128·32 el), ·4 B
]


def _default_device(shape, dtype):
    from spyrec.layout import default_layout
    lay = default_layout(shape, dtype)
    return f"device {list(lay.device_size)} / {list(lay.stride_map)} {lay.device_dtype}"


@pytest.mark.parametrize("case", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_advances_follow_the_device_layout(case, tmp_path):
    _, xline, opline, loops, zshape, coords, origin, expected = case
    dtype = "float32" if "fp32" in xline.split("device")[1] else "float16"
    text = f"""
    {xline}
    buffer z: output {dtype}{list(zshape)} {_default_device(zshape, dtype)}
    op z: {opline} loops {loops}
    inputs [x]
    outputs [z]
    """
    files, _ = compile_text(text, tmp_path)
    bundle = files["bundle.mlir"]
    assert [m.split(" -> ")[1].rstrip(">") for m in maps(bundle)] == expected
    # every iteration: x's core-0 operand is x's base + the tile origin's device byte offset
    xbuf = re.search(r"buffer x: input \w+\[([\d, ]+)\] device \[([\d, ]+)\]", xline)
    size = [int(n) for n in xbuf.group(2).split(",")]
    strides = [math.prod(size[j + 1:]) for j in range(len(size))]
    itemsize = 4 if dtype == "float32" else 2
    ranges = dict(re.findall(r"(c\d)<(\d+)", opline))
    levels = re.findall(r"(\d+)\((c\d)\)", loops)
    trace = execute(parse_bundle(bundle))
    assert len(trace) == math.prod(int(n) for n, _ in levels)
    first_sym = int(re.search(r"%sym_1 = arith.constant (\d+)", bundle).group(1))
    for k, ex in enumerate(trace):
        point = {v: 0 for v in ranges}
        rest = k
        for count, v in reversed(levels):
            point[v] = (rest % int(count)) * int(ranges[v])
            rest //= int(count)
        dev = coords(*origin(*(point[v] for v in sorted(ranges))))
        offset = sum(c * s for c, s in zip(dev, strides)) * itemsize
        assert ex.operands[0] == first_sym + offset, (k, point)


def test_zero_advance_stays_concrete_and_zero_terms_are_dropped(tmp_path):
    # a bias read under a row loop does not move; under the column loop it moves one stick
    files, _ = compile_text("""
    buffer x: input float16[256, 128] device [2, 256, 64] / [64, 128, 1] fp16
    buffer bias: input float16[128] device [2, 1, 64] / [64, -1, 1] fp16
    buffer z: output float16[256, 128] device [2, 256, 64] / [64, 128, 1] fp16
    op z: z[128*c0 + c1] = add(x[128*c0 + c1], bias[c1]) over [c0<128, c1<64] \\
    loops [2(c0)@g0.0, 2(c1)@g0.1]
    inputs [x, bias]
    outputs [z]
    """, tmp_path)
    assert maps(files["bundle.mlir"]) == [
        # x: 128 rows (128·64·2 B), one stick of 256 rows (16384·2 B); bias: one stick
        "#map_0 = affine_map<(d0, d1)[s0] -> (s0 + 16384*d0 + 32768*d1)>",
        "#map_1 = affine_map<(d0, d1)[s0] -> (s0 + 128*d1)>"]
    files, _ = compile_text("""
    buffer x: input float16[256, 128] device [2, 256, 64] / [64, 128, 1] fp16
    buffer bias: input float16[128] device [2, 1, 64] / [64, -1, 1] fp16
    buffer z: output float16[256, 128] device [2, 256, 64] / [64, 128, 1] fp16
    op z: z[128*c0 + c1] = add(x[128*c0 + c1], bias[c1]) over [c0<128, c1<128] \\
    loops [2(c0)@g0.0]
    inputs [x, bias]
    outputs [z]
    """, tmp_path / "rows")
    bias = dsc(files, 0)["scheduleTree_"][1]
    assert "isStartAddrSymbolic_" not in bias and int(data(bias)[0]) >= 0


def test_a_repeated_address_reuses_its_symbol(tmp_path):
    files, _ = compile_text("""
    buffer x: input float16[256, 128] device [2, 256, 64] / [64, 128, 1] fp16
    buffer z: output float16[256, 128] device [2, 256, 64] / [64, 128, 1] fp16
    op z: z[128*c0 + c1] = mul(x[128*c0 + c1], x[128*c0 + c1]) over [c0<128, c1<128] \\
    loops [2(c0)@g0.0]
    inputs [x]
    outputs [z]
    """, tmp_path, cores=4)
    tree = dsc(files, 0)["scheduleTree_"]
    assert data(tree[0]) == data(tree[1]) == ["-1", "-2", "-3", "-4"]
    assert data(tree[2]) == ["-5", "-6", "-7", "-8"]
    assert 'symbol_ids = [-1, -2, -3, -4, -5, -6, -7, -8]}' in files["bundle.mlir"]


def test_lx_slices_agree_between_writer_and_reader(tmp_path):
    """F §4.2 step 8: each core's LX holds its slice, laid out from the node's own dim order
    with every extent P_d + the core's gap. Writer and reader must describe one layout."""
    files, _ = compile_text(SEED, tmp_path)

    def lx_layout(body: dict, i: int) -> dict:
        node = body["scheduleTree_"][i]
        per_core = body["dataStageParam_"]["0"]["ss_"]
        stride, out = 64, {}
        for d in node["layoutDimOrder_"]:
            gap = int(node.get("backGapCore_", {}).get(d, {}).get("0", 0))
            extent = per_core[f"{d}_"] // 64 + gap // 64 if d == "out" else \
                per_core[f"{d}_"] + gap
            out[d] = (extent, stride)
            stride *= extent
        return out

    # 16 rows of 64-element sticks, then 16 sticks: 32 KiB per core, as the manifest says
    assert lx_layout(dsc(files, 0), 2) == lx_layout(dsc(files, 1), 0) == \
        {"mb": (16, 64), "out": (16, 1024)}


def test_an_execute_with_the_wrong_number_of_symbol_ids_does_not_verify(tmp_path):
    files, _ = compile_text(SEED, tmp_path)
    broken = files["bundle.mlir"].replace("symbol_ids = [-1, ", "symbol_ids = [")
    with pytest.raises(InputFileError, match="64 operands but 63 symbol_ids"):
        parse_bundle(broken)


def test_untiled_bundle_has_no_loop_scaffolding(tmp_path):
    files, _ = compile_text("""
    buffer x: input float16[64, 64] device [1, 64, 64] / [64, 64, 1] fp16
    buffer z: output float16[64, 64] device [1, 64, 64] / [64, 64, 1] fp16
    op z: z[64*c0 + c1] = identity(x[64*c0 + c1]) over [c0<64, c1<64]
    inputs [x]
    outputs [z]
    """, tmp_path)
    assert files["bundle.mlir"] == (
        "module {\n  func.func @sdsc_bundle() {\n"
        '    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}\n'
        "    func.return\n  }\n}\n")


def test_a_tile_that_is_not_a_translation_is_an_internal_error(tmp_path):
    # 100 columns in two tiles of 50: the second tile starts inside a stick (lane 50)
    from spyrec.errors import InternalError
    with pytest.raises(InternalError, match=r"op 'z': loop 0 \(g0.0\) does not move x by one "
                                            r"device translation of whole sticks"):
        compile_text("""
        buffer x: input float16[256, 100] device [2, 256, 64] / [64, 100, 1] fp16
        buffer z: output float16[256, 100] device [2, 256, 64] / [64, 100, 1] fp16
        op z: z[100*c0 + c1] = identity(x[100*c0 + c1]) over [c0<256, c1<50] \\
        loops [2(c1)@g0.0]
        inputs [x]
        outputs [z]
        """, tmp_path)
