"""Where an arg's tile starts at one execution, and proof that the tile stays in its tensor.

Inside loops an HBM arg's start addresses are symbolic (tiling contract §2, F §3.G): every
core's `data_` entry is a negative symbol id, and the `sdsc_execute` that runs the op binds
operand k to `symbol_ids[k]`. Resolving them per execution gives each core's start; two facts
must then hold, or the backend would read or write the wrong bytes:

- every core starts where its slice of the tile begins: core c's start minus core 0's is the
  offset the layout gives c's slice origin (F §4.2 step 6), so a map or a `%sym` that is off
  for one core is caught, not only one that is off for all;
- the tile window, from its start to the end of the last stick the arg touches, lies inside
  the tensor the arg names: a map stride that overruns on the last iteration would otherwise
  write silently into the neighbouring tensor.

The messages name the op (file, FX name, source), the iteration (`i_0=1, i_1=3`), the arg and
the tensor.
"""

from __future__ import annotations

from spyrec.device import STICK_BYTES
from spyrec.errors import SimulatorFault
from spyrec.sim.memory import Hbm
from spyrec.sim.specs import ArgSpec, Execute, OpSpec


def symbolic_base(spec: OpSpec, arg: ArgSpec, ex: Execute) -> int:
    """Byte address of the arg's element 0 (the tile origin) at execution `ex`."""
    where = f"{spec.describe()} {ex.where()}: arg '{arg.name}'"
    bound = dict(zip(ex.symbol_ids, ex.operands))
    starts = []
    for core, symbol in enumerate(arg.symbols or ()):
        if symbol not in bound:
            raise SimulatorFault(f"{where}: core {core} starts at symbol id {symbol}, which the "
                                 f"sdsc_execute does not bind (symbol_ids "
                                 f"{list(ex.symbol_ids)}); re-run spyrec compile")
        starts.append(bound[symbol])
    origins = arg.core_origin_bytes
    base = starts[0] - origins[0]
    for core, start in enumerate(starts):
        if start - origins[core] != base:
            raise SimulatorFault(
                f"{where}: core {core} starts at {start} (symbol id {arg.symbols[core]}), but "
                f"its slice of the tile that core 0 starts at {starts[0]} begins at "
                f"{base + origins[core]}; the bundle's %sym/%addr values disagree with the "
                f"core split: re-run spyrec compile")
    return base


def check_window(spec: OpSpec, arg: ArgSpec, base: int, ex: Execute, hbm: Hbm) -> None:
    """The bytes [base, base + span) of one execution lie inside the tensor the arg names."""
    span = arg.extent_bytes
    where = f"{spec.describe()} {ex.where()}: arg '{arg.name}'"
    if base % STICK_BYTES:
        raise SimulatorFault(f"{where}: the tile starts at {base}, not on a {STICK_BYTES}-byte "
                             f"stick boundary; re-run spyrec compile")
    tensor = hbm.named(arg.name)
    if tensor is None:
        if hbm.find(base, span) is None:
            raise SimulatorFault(f"{where}: the tile window [{base}, {base + span}) is not "
                                 f"inside one tensor of manifest.json")
        return
    if tensor.contains(base, span):
        return
    if base < tensor.address:
        how = f"starts {tensor.address - base} bytes before it"
    elif base >= tensor.end:
        how = f"starts {base - tensor.end} bytes past its end"
    else:
        how = f"runs {base + span - tensor.end} bytes past its end"
    raise SimulatorFault(
        f"{where}: the tile window [{base}, {base + span}) leaves tensor '{tensor.name}' "
        f"[{tensor.address}, {tensor.end}): it {how}; an affine map stride or a loop bound is "
        f"wrong: re-run spyrec compile")
