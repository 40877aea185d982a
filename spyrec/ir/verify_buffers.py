"""The IR verifier's checks per buffer (`BUFFER_CHECKS`, run by `ir/verify.py`): a role and a
host dtype the device stores, sizes, a layout of the right device dtype that tiles the host
tensor, an aligned device address, and an LX offset only for an intermediate with a layout.

`layout_tiles` lives here because the op checks (`ir/verify_ops.py`) ask it too: a stick
analysis of a buffer whose layout does not tile it would fail, and the buffer check has
already said why.
"""

from __future__ import annotations

from typing import Callable, Iterator

from spyrec.device import ALIGN_BYTES
from spyrec.indexing.coordinates import device_dim_sources
from spyrec.ir.graph import ROLES, Buffer
from spyrec.layout.dtypes import HOST_TO_DEVICE


def check_dtype_and_size(buf: Buffer) -> Iterator[str]:
    if buf.role not in ROLES:
        yield f"role {buf.role!r} is not one of {', '.join(ROLES)}"
    if buf.host_dtype not in HOST_TO_DEVICE:
        yield f"host dtype {buf.host_dtype!r} has no device format"
    if any(not isinstance(n, int) or n < 0 for n in buf.host_size):
        yield f"host size {list(buf.host_size)} is not a list of non-negative integers"


def check_layout(buf: Buffer) -> Iterator[str]:
    lay = buf.layout
    if lay is None or buf.host_dtype not in HOST_TO_DEVICE:
        return
    want = HOST_TO_DEVICE[buf.host_dtype].name
    if lay.device_dtype != want:
        yield f"layout device dtype {lay.device_dtype} but {buf.host_dtype} is stored as {want}"
    if not layout_tiles(buf):
        yield (f"layout {list(lay.device_size)} / {list(lay.stride_map)} does not tile host "
               f"{list(buf.host_size)}")


def check_address(buf: Buffer) -> Iterator[str]:
    if buf.hbm_address is None:
        return
    if buf.hbm_address < 0 or buf.hbm_address % ALIGN_BYTES:
        yield f"device address {buf.hbm_address} is not a non-negative multiple of {ALIGN_BYTES}"
    if buf.layout is None:
        yield "has a device address but no layout"


def layout_tiles(buf: Buffer) -> bool:
    """Every host element has a device position (an empty tensor has nothing to place)."""
    if buf.numel == 0:
        return True
    try:
        device_dim_sources(tuple(buf.host_size), buf.host_strides, buf.layout.device_size,
                           buf.layout.stride_map)
    except ValueError:
        return False
    return True


def check_lx_address(buf: Buffer) -> Iterator[str]:
    """An LX buffer (scratchpad_planning) is an intermediate at one aligned offset of every
    core's LX, and lives nowhere else (whole buffers used in loops: `check_lx_slices`)."""
    if buf.lx_address is None:
        return
    if buf.lx_address < 0 or buf.lx_address % ALIGN_BYTES:
        yield f"LX offset {buf.lx_address} is not a non-negative multiple of {ALIGN_BYTES}"
    if buf.hbm_address is not None:
        yield f"lives in LX at {buf.lx_address} and in HBM at {buf.hbm_address}"
    if buf.role != "intermediate":
        yield f"lives in LX but is a program {buf.role} (only intermediates live in LX)"
    if buf.layout is None:
        yield "lives in LX but has no layout"


BUFFER_CHECKS: tuple[Callable[[Buffer], Iterator[str]], ...] = (
    check_dtype_and_size, check_layout, check_address, check_lx_address)
