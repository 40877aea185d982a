"""Device facts: the one module that states them (DESIGN §3, reference/A-layout.md,
reference/C-simulator.md). The compiler and the simulator both read them from here.

Dependency-free, below everything else: `layout/` (a leaf otherwise), the passes and the
simulator import it, and the simulator must not import the compiler (tests/sim/test_imports.py).
The cost model's parameters and formulas sit beside it in `costmodel.py`, its only importer
there. Older names (`spyrec.layout.STICK_BYTES`, `memory_planning.ALIGN_BYTES`) are re-exports
of these.
"""

from __future__ import annotations

# A stick: the unit of device memory and of the vector lanes, whatever the dtype
# (64 fp16, 32 fp32, 128 int8 elements). reference/A-layout.md §1.
STICK_BYTES = 128

# Cores per card (torch-spyre docs, SENCORES default).
CORES = 32

# Each core's LX scratchpad is 2 MiB; the compiler may use the first 1,625,344 bytes: the
# backend places its own buffer at byte 1,625,344 (the older figure 1,677,721 let ops corrupt
# it; reference/G §1).
LX_BYTES_PER_CORE = 2 * 2**20
LX_USABLE_BYTES_PER_CORE = 1_625_344

# Each core of an op addresses at most a 256 MiB span of device memory per argument
# (`MAX_SPAN_BYTES` in the reference's work division; reference/A-layout.md §1 and §5.6): work
# division keeps every core under it, the verifier checks it (ir/span.py).
MAX_SPAN_BYTES = 256 * 2**20

# Every HBM and LX allocation starts on a stick boundary.
ALIGN_BYTES = STICK_BYTES

# The most trips one counted loop may run: a loop bound the backend accepts (reference/G §4.1
# item 7). Firm.
MAX_LOOP_TRIPS = 65535

# Aggregate device-memory bandwidth (torch-spyre work_division.py `_HBM_BW_GBS`, LPDDR5):
# a medium-confidence figure the cost model uses.
HBM_BYTES_PER_S = 204.8e9

# Device memory ("HBM" in the formats, LPDDR5 on the card): 128 GB per card with 16 GB reserved
# for ECC, so ~112 GB usable (reference/C-simulator.md, "Device memory" row, from torch-spyre's
# dataflow_architecture.md). Memory sizes are binary, so GB is read as GiB here.
DEVICE_MEMORY_BYTES = 112 * 2**30


def format_bytes(n: int) -> str:
    """`1234567 bytes (1.2 MiB)`: exact for scripts, readable for people."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n} bytes ({n / size:.1f} {unit})"
    return f"{n} bytes"
