"""The kernel registry: one function per op family, keyed by the `op` name of sdsc JSON.

A kernel is a pure function `fn(ctx, inputs) -> values`: it receives the value inputs already
gathered as compute-dtype arrays that broadcast over the op's iteration axes and returns the
result (reductions keep the reduced axes with size 1). The executor does the reading, the single
rounding and the writing, so a kernel is only the math. Registration also records the number of
inputs (which can depend on `op_info.constants`, e.g. a scalar operand) and the cost class the
cost model charges (from `spyrec/costmodel.py`, where the compiler reads it too), keeping each
op's semantics and cost at hand in one place (reference/C-simulator.md §5.1, as xDSL's `@impl`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from spyrec.costmodel import cost_class

@dataclass(frozen=True)
class KernelContext:
    """What a kernel may know about the op besides its inputs."""

    op: str
    constants: dict
    shape: tuple[int, ...]             # iteration extents of this chunk, axis per var
    reduced_axes: tuple[int, ...]
    compute: np.dtype                  # float32, or int64 when every operand is an integer
    origin: tuple[int, ...] = ()       # the chunk's first iteration point (for messages)
    # per axis, how many trailing points are padding (a reduced stick var rounded up to whole
    # sticks, coordinateMasking_): not iteration points, so never counted in an index
    padding: tuple[int, ...] = ()

    def constant(self, key: str, default: object = None) -> object:
        return self.constants.get(key, default)


KernelFn = Callable[[KernelContext, list[np.ndarray]], np.ndarray]
Arity = Union[int, Callable[[dict], int]]


@dataclass(frozen=True)
class Kernel:
    op: str
    fn: KernelFn
    arity: Arity
    cost_class: str      # costmodel.cost_class(op): stated there once
    float_only: bool     # computes in float32 even when every operand is an integer
    requires: tuple[str, ...]   # op_info.constants keys that must be present
    conditions: int      # leading inputs that are conditions: they do not pick the dtype

    def inputs_expected(self, constants: dict) -> int:
        return self.arity(constants) if callable(self.arity) else self.arity


KERNELS: dict[str, Kernel] = {}


def kernel(*ops: str, arity: Arity, float_only: bool = False,
           requires: tuple[str, ...] = (), conditions: int = 0):
    """Register `fn` as the kernel of every op name in `ops` (its cost class is the cost
    model's, `costmodel.cost_class`)."""
    def register(fn: KernelFn) -> KernelFn:
        for op in ops:
            assert op not in KERNELS, f"kernel {op} registered twice"
            KERNELS[op] = Kernel(op, fn, arity, cost_class(op), float_only, tuple(requires),
                                 conditions)
        return fn
    return register
