"""Device layouts: sticks, padding, stride maps, and the dtype facts they rest on."""

from spyrec.layout.device_layout import (
    SPARSE, DeviceLayout, contiguous_strides, default_layout, stick_layout,
)
from spyrec.layout.dtypes import STICK_BYTES, DeviceDtype, device_dtype_for

__all__ = ["SPARSE", "STICK_BYTES", "DeviceDtype", "DeviceLayout", "contiguous_strides",
           "default_layout", "device_dtype_for", "stick_layout"]
