"""Device facts that both the compiler and the simulator check against (DESIGN §3).

Kept in one dependency-free module because the simulator must not import the compiler
(tests/sim/test_imports.py) and the two must agree on the limits.
"""

from __future__ import annotations

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
