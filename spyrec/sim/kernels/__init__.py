"""Op kernels of the simulator, one module per op family, all registered in `KERNELS`.

Importing this package registers every kernel; `KERNELS[op]` is the one lookup (no isinstance
ladders). Adding an op = one decorated function in the module of its family.
"""

from spyrec.sim.kernels import copy, pointwise, reduce  # noqa: F401  (registration)
from spyrec.sim.kernels.registry import (
    KERNELS, MATMUL, MOVE, TRANSCENDENTAL, VECTOR, Kernel, KernelContext, kernel,
)

__all__ = ["KERNELS", "MATMUL", "MOVE", "TRANSCENDENTAL", "VECTOR", "Kernel", "KernelContext",
           "kernel"]
