"""Op kernels of the simulator, one module per op family, all registered in `KERNELS`.

Importing this package registers every kernel; `KERNELS[op]` is the one lookup (no isinstance
ladders). Adding an op = one decorated function in the module of its family; its cost class
is `spyrec/costmodel.py`'s.
"""

# imported for their @kernel registrations
from spyrec.sim.kernels import argreduce, arith, copy, index, pointwise, reduce  # noqa: F401
from spyrec.sim.kernels.registry import KERNELS, Kernel, KernelContext, kernel

__all__ = ["KERNELS", "Kernel", "KernelContext", "kernel"]
