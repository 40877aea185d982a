"""Tiled bundles: scf.for + affine.apply supply tile bases; the coordinates are tile-relative.

fp16 [128, 256] lives in device [4, 128, 64] (element strides 8192, 64, 1). A 2 x 2 tiling
(64 rows x 128 columns per tile) starts tile (i0, i1) at row 64*i0 and stick 2*i1, i.e. at
byte base + 2 * (64*64*i0 + 2*8192*i1) = base + 8192*i0 + 32768*i1 (DESIGN §5 semantics).
"""

import numpy as np
import pytest

from spyrec.errors import SimulatorFault
from tests.sim.builder import flat_bundle, rowmajor2d

TILED = """\
#map_0 = affine_map<(d0, d1)[s0] -> (s0 + 8192*d0 + 32768*d1)>
module {{
  func.func @sdsc_bundle() {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %loop_bound_0 = arith.constant 2 : index
    %loop_bound_1 = arith.constant 2 : index
    %sym_1 = arith.constant {x} : index
    %sym_2 = arith.constant {y} : index
    %sym_3 = arith.constant {z} : index
    scf.for %i_0 = %c0 to %loop_bound_0 step %c1 {{
      scf.for %i_1 = %c0 to %loop_bound_1 step %c1 {{
        %addr_0 = affine.apply #map_0(%i_0, %i_1)[%sym_1]
        %addr_1 = affine.apply #map_0(%i_0, %i_1)[%sym_2]
        %addr_2 = affine.apply #map_0(%i_0, %i_1)[%sym_3]
        sdscbundle.sdsc_execute (%addr_0, %addr_1, %addr_2) {{sdsc_filename = "sdsc_0.json"}}
      }}
    }}
    func.return
  }}
}}
"""


def tiled_add(out, tile_map="8192*d0 + 32768*d1"):
    for name in ("x", "y"):
        out.input(name, [128, 256])
    out.output("z", [128, 256])
    out.op("add", {"c0": 64, "c1": 128},
           [("x", rowmajor2d(), 0), ("y", rowmajor2d(), 1), ("z", rowmajor2d(), 2)],
           split={"c0": 2})
    addr = {n: out.tensors[n]["hbm_address"] for n in "xyz"}
    out.bundle = TILED.format(**addr).replace("8192*d0 + 32768*d1", tile_map)
    return out


def test_tiled_loop_covers_the_tensor(out, rng):
    x = rng.standard_normal((128, 256)).astype(np.float16)
    y = rng.standard_normal((128, 256)).astype(np.float16)
    result = tiled_add(out).run({"x": x, "y": y})
    assert np.array_equal(result.outputs[0], x + y)
    assert result.cost["ops"][0]["executions"] == 4


def test_unrolled_form_gives_the_same_result(out, rng):
    x = rng.standard_normal((128, 256)).astype(np.float16)
    y = rng.standard_normal((128, 256)).astype(np.float16)
    tiled = tiled_add(out).run({"x": x, "y": y}).outputs[0]
    bases = [8192 * i0 + 32768 * i1 for i0 in range(2) for i1 in range(2)]
    addr = {n: out.tensors[n]["hbm_address"] for n in "xyz"}
    lines = flat_bundle(0).splitlines()
    executes = [f"    sdscbundle.sdsc_execute (%a{k}_x, %a{k}_y, %a{k}_z) "
                f'{{sdsc_filename = "sdsc_0.json"}}' for k in range(4)]
    consts = [f"    %a{k}_{n} = arith.constant {addr[n] + b} : index"
              for k, b in enumerate(bases) for n in "xyz"]
    out.bundle = "\n".join(lines[:2] + consts + executes + lines[2:])
    assert np.array_equal(out.run({"x": x, "y": y}).outputs[0], tiled)


def test_host_row_major_tile_offsets_leave_nan(out, rng):
    """Host byte offsets (64 rows = 32768 B, 128 columns = 256 B; the seed's mistake) stay in
    range but put tiles in the wrong place: rows never written keep the NaN fill."""
    x = rng.standard_normal((128, 256)).astype(np.float16)
    z = tiled_add(out, tile_map="32768*d0 + 256*d1").run({"x": x, "y": x}).outputs[0]
    assert np.array_equal(z[:2], x[:2] + x[:2]) and np.isnan(z[66:]).all()


@pytest.mark.parametrize("tile_map, message", [
    ("49152*d0 + 8192*d1", r"arg 'x' device dim 0 coordinate floor\(c1/64\) = 4 \(tile base "
                           r"adds 3\) is outside 0..3 of device_size \[4, 128, 64\] at c1=64"),
    ("65536*d0 + 8192*d1", r"arg 'x': tile base 65536 from operand 0 at .*bundle.mlir:16:9 is "
                           r"not a stick-aligned address inside the tensor \[0, 65536\)"),
])
def test_tile_outside_the_tensor_is_caught(out, rng, tile_map, message):
    x = rng.standard_normal((128, 256)).astype(np.float16)
    with pytest.raises(SimulatorFault, match=message):
        tiled_add(out, tile_map=tile_map).run({"x": x, "y": x})


def test_tile_base_off_a_stick_is_caught(out, rng):
    x = rng.standard_normal((128, 256)).astype(np.float16)
    tiled = tiled_add(out, tile_map="8192*d0 + 32768*d1 + 64")
    with pytest.raises(SimulatorFault, match=r"tile base \d+ from operand 0 at .*bundle.mlir:"
                                             r"16:9 is not a stick-aligned address"):
        tiled.run({"x": x, "y": x})
