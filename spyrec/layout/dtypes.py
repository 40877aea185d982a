"""Host (PyTorch) dtypes and how the device stores them.

A stick is 128 bytes whatever the dtype, so the elements per stick E = 128 / device itemsize.
bf16 is stored as fp16 and bool as fp16 (2 bytes); int64 is stored as int32 (values that do not
fit are an error at transfer time, never a silent wrap). Source: reference/A-layout.md §1.
"""

from __future__ import annotations

from dataclasses import dataclass

from spyrec.device import STICK_BYTES


@dataclass(frozen=True)
class DeviceDtype:
    name: str          # our name, used in JSON: fp16, fp32, int32, int8, fp8_e4m3, fp8_e5m2
    itemsize: int      # bytes per element on the device
    reference_name: str  # the reference's DataFormats name, for readers of both

    @property
    def elems_per_stick(self) -> int:
        return STICK_BYTES // self.itemsize


FP16 = DeviceDtype("fp16", 2, "SEN169_FP16")
FP32 = DeviceDtype("fp32", 4, "IEEE_FP32")
INT32 = DeviceDtype("int32", 4, "IEEE_INT32")
INT8 = DeviceDtype("int8", 1, "SENINT8")
FP8_E4M3 = DeviceDtype("fp8_e4m3", 1, "SEN143_FP8")
FP8_E5M2 = DeviceDtype("fp8_e5m2", 1, "SEN152_FP8")

DEVICE_DTYPES = {d.name: d for d in (FP16, FP32, INT32, INT8, FP8_E4M3, FP8_E5M2)}

# host dtype name (torch's, without the "torch." prefix) -> device storage dtype
HOST_TO_DEVICE = {
    "float16": FP16,
    "bfloat16": FP16,
    "bool": FP16,
    "float32": FP32,
    "int32": INT32,
    "int64": INT32,
    "int8": INT8,
    "float8_e4m3fn": FP8_E4M3,
    "float8_e5m2": FP8_E5M2,
}


# Host dtypes with a device format that no lowering computes with yet (none today: 8-bit
# floats stay 8-bit on the device, DESIGN §3, converted on chip where they are read).
NOT_COMPUTED_YET: frozenset[str] = frozenset()


def computed_on_device(host_dtype: str) -> bool:
    """Whether the compiler keeps tensors of this host dtype on the device today: it has a
    storage format there and the lowering computes with it (not float64, complex, uint16,
    float8_e4m3fnuz, ...)."""
    name = str(host_dtype).removeprefix("torch.")
    return name in HOST_TO_DEVICE and name not in NOT_COMPUTED_YET


def device_dtype_for(host_dtype: str) -> DeviceDtype:
    """The device storage dtype of a host dtype name such as `float16` or `torch.bfloat16`."""
    name = str(host_dtype).removeprefix("torch.")
    try:
        return HOST_TO_DEVICE[name]
    except KeyError:
        known = ", ".join(sorted(HOST_TO_DEVICE))
        raise ValueError(f"dtype {name} has no device storage format (supported: "
                         f"{known})") from None
