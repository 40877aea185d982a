"""The layout vectors of reference/A-layout.md §6.1: device_size, stride_map, strides, bytes."""

import pytest

from spyrec.layout import SPARSE, contiguous_strides, default_layout, stick_layout

# (row, host size, host dtype, dim_order or None for default, device_size, stride_map,
#  device strides or None, (element slots, bytes) or None)
VECTORS = [
    (1, [], "float16", None, [1, 64], [-1, -1], [64, 1], (64, 128)),
    (2, [120], "float16", None, [2, 64], [64, 1], [64, 1], (128, 256)),
    (3, [65], "float16", None, [2, 64], [64, 1], [64, 1], (128, 256)),
    (4, [512, 240], "float16", None, [4, 512, 64], [64, 240, 1], [32768, 64, 1], (131072, 262144)),
    (5, [1024, 256], "float16", None, [4, 1024, 64], [64, 256, 1], [65536, 64, 1], (262144, 524288)),
    (6, [512, 8, 240], "float16", None, [8, 4, 512, 64], [240, 64, 1920, 1],
     [131072, 32768, 64, 1], (1048576, 2 * 1024 * 1024)),
    (7, [5, 100, 150], "float16", None, [100, 3, 5, 64], [150, 64, 15000, 1], [960, 320, 64, 1],
     (96000, 192000)),
    (8, [5, 100, 150], "float16", [1, 0, 2], [5, 3, 100, 64], [15000, 64, 150, 1],
     [19200, 6400, 64, 1], (96000, 192000)),
    (9, [512, 256], "float16", [1, 0], [8, 256, 64], [16384, 1, 256], [16384, 64, 1],
     (131072, 262144)),
    (10, [512, 8, 256], "float16", [2, 1, 0], [8, 8, 256, 64], [256, 131072, 1, 2048],
     [131072, 16384, 64, 1], (1048576, 2 * 1024 * 1024)),
    (11, [512, 8, 256], "float16", [0, 2, 1], [256, 1, 512, 64], [1, 16384, 2048, 256], None, None),
    (12, [512, 256], "float16", [0, 1, SPARSE], [256, 1, 512, 64], [1, -1, 256, -1],
     [32768, 32768, 64, 1], (8388608, 16 * 1024 * 1024)),
    (13, [2, 3, 128, 192], "float16", None, [3, 128, 3, 2, 64], [24576, 192, 64, 73728, 1],
     [49152, 384, 128, 64, 1], (147456, 294912)),
    (14, [4, 2, 3, 100], "float16", None, [2, 3, 2, 4, 64], [300, 100, 64, 600, 1],
     [1536, 512, 256, 64, 1], (3072, 6144)),
    (15, [64, 100], "float32", None, [4, 64, 32], [32, 100, 1], [2048, 32, 1], (8192, 32768)),
    (16, [3, 192], "int32", None, [6, 3, 32], [32, 192, 1], [96, 32, 1], (576, 2304)),
    (17, [4, 300], "int8", None, [3, 4, 128], [128, 300, 1], [512, 128, 1], (1536, 1536)),
    (18, [128, 256], "float8_e4m3fn", None, [2, 128, 128], [128, 256, 1], [16384, 128, 1],
     (32768, 32768)),
    (19, [64, 1], "float16", None, [1, 64, 64], [-1, 1, -1], [4096, 64, 1], (4096, 8192)),
    (20, [1, 256, 1, 128], "float16", None, [256, 1, 2, 1, 64], [128, -1, 64, -1, 1],
     [128, 128, 64, 64, 1], (32768, 65536)),
    (21, [1024, 4096], "float16", [1, 0], [16, 4096, 64], [262144, 1, 4096], [262144, 64, 1],
     (4194304, 8 * 1024 * 1024)),
    (22, [2, 128, 128], "float16", None, [128, 2, 2, 64], [128, 64, 16384, 1], [256, 128, 64, 1],
     (32768, 65536)),
    (23, [50, 10, 200], "float16", None, [10, 4, 50, 64], [200, 64, 2000, 1], None, None),
    (24, [256], "float16", [0, SPARSE], [1, 256, 64], [-1, 1, -1], None, None),
]


@pytest.mark.parametrize("row, host, dtype, order, dsize, smap, dstrides, sizes", VECTORS,
                         ids=[f"row{v[0]}" for v in VECTORS])
def test_layout_vector(row, host, dtype, order, dsize, smap, dstrides, sizes):
    if order is None:
        layout = default_layout(host, dtype)
    else:
        layout = stick_layout(host, contiguous_strides(host), dtype, order)
    assert list(layout.device_size) == dsize
    assert list(layout.stride_map) == smap
    if dstrides is not None:
        assert list(layout.device_strides_elems) == dstrides
    if sizes is not None:
        assert (layout.device_elems, layout.device_bytes) == sizes


def test_bf16_and_int64_storage():
    assert default_layout([4, 100], "bfloat16").device_dtype == "fp16"
    assert default_layout([4, 100], "torch.int64").device_size == (4, 4, 32)


def test_unknown_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="complex64 has no device storage format"):
        default_layout([4], "complex64")


def test_dim_order_must_be_a_permutation():
    with pytest.raises(ValueError, match="not a permutation"):
        stick_layout([4, 8], [8, 1], "float16", [0, 0])
