"""A small `.safetensors` reader and writer: the ecosystem's container for bf16 (DESIGN §1).

Format: an 8-byte little-endian header length N, N bytes of JSON
`{name: {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}`,
then the raw little-endian bytes; offsets are relative to the end of the header. Our own code
rather than the `safetensors` package: no new dependency, and the reader is written for files
from strangers. Before anything is allocated, the header length is checked against the file size
and a cap, every entry's dtype, shape and offsets are checked, and the tensors must tile the
data exactly (no gaps, overlaps or trailing bytes), so a crafted header can neither make us
allocate more than the file holds nor alias two tensors.

Arrays come back in spyrec's host form: bf16 as uint16 bits plus a `__dtype__.<name>` tag,
like the .npz files (`inputs.DTYPE_TAG`), so every later check is shared.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np

from spyrec.errors import InputFileError
from spyrec.userfiles import open_regular

TAG = "__dtype__."
MAX_HEADER_BYTES = 100 * 1024 * 1024   # the safetensors package's own limit
FIX = "write it with safetensors.numpy.save_file or spyrec run -o NAME.safetensors"

# safetensors dtype -> numpy dtype (little-endian); BF16 travels as uint16 bits.
DTYPES = {
    "BOOL": np.dtype("?"), "U8": np.dtype("u1"), "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"), "U16": np.dtype("<u2"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "I32": np.dtype("<i4"), "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"), "I64": np.dtype("<i8"), "U64": np.dtype("<u8"),
    "F64": np.dtype("<f8"),
}
_NAMES = {np.dtype(v).newbyteorder("="): k for k, v in DTYPES.items() if k != "BF16"}


class _Bad(Exception):
    """A malformed file; read_safetensors turns it into one InputFileError line."""


def read_safetensors(path: str | Path, check=None) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file, plus a dtype tag per bf16 tensor. With `check`
    (`inputs.HeaderCheck`), it first sees every tensor as a data-less stand-in of its host
    dtype and shape, may refuse the file, and names the tensors to read: no other is read."""
    path = Path(path)
    try:
        with open_regular(path, "a .safetensors file") as f:
            size = os.fstat(f.fileno()).st_size
            header, data_start = _read_header(f, size)
            entries = _check_entries(header, size - data_start)
            if check is not None:
                wanted = set(check(_stand_ins(entries)))
                entries = {k: v for k, v in entries.items() if k in wanted}
            arrays: dict[str, np.ndarray] = {}
            for name, (dtype_name, shape, begin, end) in entries.items():
                f.seek(data_start + begin)
                raw = f.read(end - begin)
                if len(raw) != end - begin:
                    raise _Bad(f"tensor {name!r} is cut short")
                arrays[name] = _array(raw, dtype_name, shape)
                if dtype_name == "BF16":
                    arrays[f"{TAG}{name}"] = np.array("bfloat16")
            return arrays
    except _Bad as e:
        raise InputFileError(f"{path}: not a valid .safetensors file: {e}; {FIX}") from None
    except OSError as e:
        raise InputFileError(f"{path}: cannot read ({e.strerror})") from None


def _stand_ins(entries: dict) -> dict[str, np.ndarray]:
    """Each tensor as `read_safetensors` would return it, but holding no data (strides 0)."""
    out: dict[str, np.ndarray] = {}
    for name, (dtype_name, shape, _, _) in entries.items():
        dtype = np.dtype("?") if dtype_name == "BOOL" else DTYPES[dtype_name].newbyteorder("=")
        out[name] = np.broadcast_to(np.zeros((), dtype), shape)
        if dtype_name == "BF16":
            out[f"{TAG}{name}"] = np.array("bfloat16")
    return out


def _read_header(f, size: int) -> tuple[dict, int]:
    """The parsed JSON header and the file offset where the data begins."""
    if size < 8:
        raise _Bad(f"{size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", f.read(8))
    if n > size - 8 or n > MAX_HEADER_BYTES:
        raise _Bad(f"header length {n} exceeds the file ({size} bytes)" if n > size - 8 else
                   f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    try:
        header = json.loads(f.read(n).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        raise _Bad(f"the header is not UTF-8 JSON ({' '.join(str(e).split())})") from None
    except RecursionError:
        raise _Bad("the header nests too deeply (a header is one object of flat entries)") \
            from None
    if not isinstance(header, dict):
        raise _Bad("the header is not a JSON object")
    return header, 8 + n


def _no_duplicates(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _Bad(f"the header names {sorted(k for k in set(keys) if keys.count(k) > 1)[0]!r} "
                   f"twice")
    return dict(pairs)


def _check_entries(header: dict, data_bytes: int) -> dict[str, tuple[str, tuple, int, int]]:
    """name -> (dtype, shape, begin, end), every field checked, the data tiled exactly."""
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _Bad("__metadata__ must map names to strings")
    entries = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if name.startswith(TAG):
            raise _Bad(f"tensor name {name!r} uses the reserved prefix {TAG!r}")
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise _Bad(f"tensor {name!r} needs exactly dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPES:
            raise _Bad(f"tensor {name!r} has dtype {dtype!r}; known: {', '.join(DTYPES)}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise _Bad(f"tensor {name!r} has shape {shape!r}, not a list of sizes")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))
                and offsets[0] <= offsets[1] <= data_bytes):
            raise _Bad(f"tensor {name!r} has data_offsets {offsets!r} outside the "
                       f"{data_bytes} data bytes")
        need = math.prod(shape) * DTYPES[dtype].itemsize
        if need != offsets[1] - offsets[0]:
            raise _Bad(f"tensor {name!r} is {dtype}{shape} ({need} bytes) but data_offsets "
                       f"span {offsets[1] - offsets[0]}")
        entries[name] = (dtype, tuple(shape), offsets[0], offsets[1])
    end = 0
    for name, (_, _, begin, stop) in sorted(entries.items(), key=lambda e: e[1][2:]):
        if begin != end:
            raise _Bad(f"tensor {name!r} starts at byte {begin}, expected {end} (tensors must "
                       f"tile the data without gaps or overlaps)")
        end = stop
    if end != data_bytes:
        raise _Bad(f"{data_bytes - end} bytes after the last tensor")
    return entries


def _array(raw: bytes, dtype_name: str, shape: tuple) -> np.ndarray:
    """A native-order, writable array of the raw bytes (a BOOL byte other than 0 is True)."""
    if dtype_name == "BOOL":
        return np.frombuffer(raw, np.uint8).reshape(shape) != 0
    dtype = DTYPES[dtype_name]
    return np.frombuffer(raw, dtype).reshape(shape).astype(dtype.newbyteorder("="))


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def safetensors_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """The file content for `arrays` in spyrec's host form (a `__dtype__.<name>` =
    "bfloat16" tag turns that uint16 array into BF16)."""
    bf16 = {k[len(TAG):] for k, v in arrays.items()
            if k.startswith(TAG) and str(np.asarray(v)[()]) == "bfloat16"}
    header: dict[str, dict] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, array in arrays.items():
        if name.startswith(TAG):
            continue
        array = np.asarray(array)
        kind = "BF16" if name in bf16 else _NAMES.get(array.dtype.newbyteorder("="))
        assert kind is not None, f"no safetensors dtype for {array.dtype}"
        raw = np.ascontiguousarray(array, DTYPES[kind]).tobytes()
        header[name] = {"dtype": kind, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)   # the data starts 8-byte aligned, as the package writes it
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)
