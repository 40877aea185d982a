"""Program inputs and outputs as numpy arrays: read `.npz` files and check them, write the
outputs (the constants are mapped from `weights.bin` by `sim/weights.py`).

Keys are the user-input names of the exported program (manifest `inputs`). numpy has no
bfloat16, so a bf16 array travels as its uint16 bit patterns plus a tag key
`__dtype__.<name>` = "bfloat16" (DESIGN §1); outputs are written the same way. A
`.safetensors` file (the ecosystem's bf16 container) may stand in for an .npz on either side:
`safetensors.py` turns its BF16 tensors into the same tagged form. Every problem
with a file (missing or extra keys, wrong shapes or dtypes) is collected into ONE error that
ends with the expected signature, so a user fixes everything in one round trip. That
judgement is made from the files' headers, before any data is read (`read_inputs`): an array
of the wrong shape or dtype, or one the program does not take, is never read or inflated.
"""

from __future__ import annotations

import fnmatch
import io
import math
import os
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

from spyrec.errors import InputFileError
from spyrec.outdir import OWN_FILES, RUN_OUTPUTS
from spyrec.sim.lengths import bind_lengths, fits_shape, shape_text
from spyrec.sim.safetensors import read_safetensors, safetensors_bytes
from spyrec.sim.specs import Manifest, TensorSpec
from spyrec.sim.transfer import HOST_NUMPY
from spyrec.userfiles import open_regular, output_target, write_replacing, zip_entry_problem

DTYPE_TAG = "__dtype__."


NPZ = "an .npz file from numpy.savez"
# More than deflate can produce (its limit is about 1032:1): a member claiming it is a bomb.
MAX_TAG_BYTES = 256     # a `__dtype__.<name>` tag is one short string
READABLE = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
# `check` of read_npz / read_safetensors: sees a data-less stand-in of every array (its dtype
# and shape), returns the names to read, or raises to refuse the file before any data is read
HeaderCheck = Callable[[dict[str, np.ndarray]], Iterable[str]]


def read_npz(path: str | Path, check: HeaderCheck | None = None) -> dict[str, np.ndarray]:
    """Every array of an .npz file, tags included; with `check`, only the arrays it names,
    after it accepted every member's header.

    numpy trusts headers and zip directories: a corrupt header raises whatever its parser
    hits, a header claiming 10**12 elements is allocated before the read fails, and a member
    claiming 2 GB that deflates from 2 MB is inflated whole. So every member's directory entry
    is checked first (not encrypted, a method zipfile reads, inside the file, no absurd
    ratio, no name twice), then every header (no Python objects, exactly as much data as the
    member holds), then `check` sees them all, and only then is data read. No pickles: data
    files are not code.
    """
    path = Path(path)
    with open_regular(path, NPZ) as f:
        if not zipfile.is_zipfile(f):
            raise InputFileError(f"{path}: not a readable .npz file (not a zip archive); write "
                                 f"the arrays with numpy.savez(path, name=array, ...)")
        try:
            with zipfile.ZipFile(f) as zf:
                headers = _headers(path, zf, os.fstat(f.fileno()).st_size)
                chosen = headers if check is None else _checked(headers, check, zf, path)
                return {name: _read_data(path, zf, headers[name]) for name in chosen}
        except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:
            raise InputFileError(f"{path}: damaged .npz archive ({type(e).__name__}: {e}); "
                                 f"write it again with numpy.savez") from None


@dataclass(frozen=True)
class _Header:
    info: zipfile.ZipInfo
    shape: tuple[int, ...]
    dtype: np.dtype

    def stand_in(self) -> np.ndarray:
        """An array of this dtype and shape that holds no data (every stride 0)."""
        return np.broadcast_to(np.zeros((), self.dtype), self.shape)


def _headers(path: Path, zf: zipfile.ZipFile, file_bytes: int) -> dict[str, _Header]:
    headers: dict[str, _Header] = {}
    for info in zf.infolist():
        if info.is_dir():
            continue
        name = _member_name(info.filename)
        where = f"{path}: member {info.filename}"
        if name in headers:
            raise InputFileError(f"{where}: a second array named {name!r}; which one is meant "
                                 f"is unclear: write the file again with numpy.savez")
        _check_entry(where, info, file_bytes)
        headers[name] = _read_header(where, zf, info)
    return headers


def _check_entry(where: str, info: zipfile.ZipInfo, file_bytes: int) -> None:
    """The member's zip directory entry, before a byte of it is read."""
    problem = zip_entry_problem(info, file_bytes, READABLE,
                                "spyrec reads stored, deflate, bzip2 and lzma members")
    if problem:
        raise InputFileError(f"{where}: {problem}; write the file again with numpy.savez or "
                             f"numpy.savez_compressed")


def _read_header(where: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> _Header:
    """A member's .npy header, checked: it parses, holds no Python objects, and describes
    exactly the data the member holds."""
    with zf.open(info) as f:
        try:
            version = npformat.read_magic(f)
            read_header = npformat.read_array_header_1_0 if version == (1, 0) else \
                npformat.read_array_header_2_0
            shape, _, dtype = read_header(f)
        except Exception as e:  # noqa: BLE001 - numpy's header parser raises ValueError,
            # SyntaxError, tokenize.TokenError, ... for a damaged header: all mean the same
            raise InputFileError(f"{where}: not a readable .npy array (bad header: "
                                 f"{type(e).__name__}); write the file again with "
                                 f"numpy.savez") from None
        header_bytes = f.tell()
    if any(n < 0 for n in shape):
        raise InputFileError(f"{where}: not a readable .npy array (bad header: shape "
                             f"{list(shape)}); write the file again with numpy.savez")
    if dtype.hasobject:
        raise InputFileError(f"{where}: holds Python objects (a pickled object array); spyrec "
                             f"loads data only, never pickles: save numeric arrays")
    needed, held = math.prod(shape) * dtype.itemsize, info.file_size - header_bytes
    if needed != held:
        raise InputFileError(f"{where}: header says {list(shape)} {dtype} ({needed} bytes) but "
                             f"the member holds {held} bytes of data; write the file again "
                             f"with numpy.savez")
    return _Header(info, tuple(shape), dtype)


def _checked(headers: dict[str, _Header], check: HeaderCheck, zf: zipfile.ZipFile,
             path: Path) -> list[str]:
    """The members `check` accepts and wants, shown stand-ins for the data and the values of
    the (short) dtype tags it needs to judge them."""
    shown = {name: _tag(path, zf, h) if name.startswith(DTYPE_TAG) else h.stand_in()
             for name, h in headers.items()}
    wanted = set(check(shown))
    return [name for name in headers if name in wanted]


def _tag(path: Path, zf: zipfile.ZipFile, h: _Header) -> np.ndarray:
    """A dtype tag's value when it is a short string; else a description of what it is, which
    the check reports as a wrong tag (a tag never needs a large read)."""
    if h.dtype.kind in "US" and math.prod(h.shape) * h.dtype.itemsize <= MAX_TAG_BYTES:
        return _read_data(path, zf, h)
    return np.array(f"<{h.dtype} array of shape {list(h.shape)}>")


def _read_data(path: Path, zf: zipfile.ZipFile, h: _Header) -> np.ndarray:
    """One member's array, read to its end, so the zip's checksum is verified."""
    with zf.open(h.info) as f:
        try:
            array = npformat.read_array(f, allow_pickle=False)
            f.read(1)
        except ValueError as e:   # what the checks above missed, said the same way
            raise InputFileError(f"{path}: member {h.info.filename}: not a readable .npy array "
                                 f"({e}); write the file again with numpy.savez") from None
    return array


def _member_name(filename: str) -> str:
    return filename[:-4] if filename.endswith(".npy") else filename


def is_safetensors(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".safetensors"


def read_arrays(path: str | Path, check: HeaderCheck | None = None) -> dict[str, np.ndarray]:
    """An .npz or (by its suffix) a .safetensors file, in the same tagged host form; with
    `check`, only what it accepts (see `read_npz`)."""
    return read_safetensors(path, check) if is_safetensors(path) else read_npz(path, check)


def write_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` to exactly `path` (numpy.savez would append `.npz` to a bare name), as
    .safetensors when the name ends so; never over anything but a regular file
    (`userfiles.write_replacing`: a temporary sibling renamed into place)."""
    if is_safetensors(path):
        data = safetensors_bytes(arrays)
    else:
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        data = buffer.getvalue()
    write_replacing(path, data, "-o", "the outputs")


def check_output_path(path: str | Path, option: str) -> None:
    """Fail before any work when an output file could not be written where asked: a
    directory, a missing parent, or anything that is not a regular file (a FIFO, a device, a
    dangling link) is refused (`userfiles.output_target`)."""
    path = Path(path)
    if path.is_dir():
        raise InputFileError(f"{option} {path}: is a directory; give a file name such as "
                             f"{path / 'outputs.npz'}")
    output_target(path, option)


OUTPUT_SUFFIXES = (".npz", ".safetensors")


def check_replaceable(path: str | Path, option: str, suffixes: tuple[str, ...],
                      out_dir: Path | None = None, reads: dict[str, Path] | None = None
                      ) -> None:
    """Refuse to let `option` replace anything but a regular file (`userfiles`), a file the
    command reads, a file of the compiled directory `out_dir` (its own names, spyrec run's
    RUN_OUTPUTS aside), or an existing file whose suffix is not one of `suffixes` (the kind
    `option` writes). Files are written under exactly the name given, so `spyrec run -o
    OUT/manifest.json` made the manifest an .npz and `inspect --trace OUT/report.json` would
    put a trace in the report; a new file may have any name. A symbolic link is judged by the
    regular file it names, which is what the write replaces."""
    given = Path(path)
    path = output_target(given, option)
    if not path.is_file():
        return
    label = f"{option} {given}" + ("" if path == given else f" (a link to {path})")
    for what, other in (reads or {}).items():
        if _same_file(path, other):
            raise InputFileError(f"{label}: is the {what} file; the command reads it, and its "
                                 f"output would replace it: choose another name")
    if out_dir is not None and _same_file(path.parent, out_dir) and path.name != RUN_OUTPUTS \
            and any(fnmatch.fnmatchcase(path.name, own) for own in OWN_FILES):
        raise InputFileError(f"{label}: is a file of the compiled directory {out_dir}; "
                             f"{option} does not replace it: choose a name outside it")
    if path.suffix.lower() not in suffixes:
        raise InputFileError(f"{label}: an existing file that is not "
                             f"{' or '.join(suffixes)} (it may be a model or a compiled "
                             f"directory's file); {option} does not replace it: choose another "
                             f"name, or delete the file first")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def host_form(t: TensorSpec) -> str:
    """How an array of tensor `t` must look in an npz: dtype (and tag) and shape."""
    dtype = "uint16 bits tagged bfloat16" if t.host_dtype == "bfloat16" else t.host_dtype
    return f"shape {shape_text(t)}, {dtype}"


def check_arrays(arrays: dict[str, np.ndarray], tensors: list[TensorSpec], label: str,
                 expected: str, tags_required: bool = True) -> dict[str, np.ndarray]:
    """Arrays by tensor name, each with the tensor's host shape and npz dtype.

    `arrays` may carry `__dtype__.<name>` tags; for bfloat16 tensors the tag is required in
    files (`tags_required`) because an untagged uint16 array is ambiguous. Raises one
    InputFileError listing every problem and the `expected` signature.
    """
    tags = {k[len(DTYPE_TAG):]: str(np.asarray(v)[()]) for k, v in arrays.items()
            if k.startswith(DTYPE_TAG)}
    data = {k: v for k, v in arrays.items() if not k.startswith(DTYPE_TAG)}
    wanted = {t.name: t for t in tensors}
    problems = [f"missing '{name}'" for name in wanted if name not in data]
    problems += [f"unexpected key '{key}'" for key in data if key not in wanted]
    problems += [f"unexpected dtype tag '{DTYPE_TAG}{name}' (no such array)"
                 for name in tags if name not in data]
    out = {}
    for name, t in wanted.items():
        if name not in data:
            continue
        array = np.asarray(data[name])
        problem = _array_problem(t, array, tags.get(name), tags_required)
        if problem:
            problems.append(f"'{name}': {problem}")
        else:
            out[name] = array
    if problems:
        raise InputFileError(f"{label} does not match the program:\n"
                             + "\n".join(f"  - {p}" for p in problems)
                             + f"\nexpected (name: shape, dtype):\n{expected}")
    return out


def _array_problem(t: TensorSpec, array: np.ndarray, tag: str | None,
                   tags_required: bool) -> str | None:
    expected = HOST_NUMPY[t.host_dtype]
    if t.host_dtype == "bfloat16":
        if array.dtype != expected or (tag != "bfloat16" and (tag or tags_required)):
            return (f"got {_describe(array, tag)}, expected bfloat16 as uint16 bits with the "
                    f"tag {DTYPE_TAG}{t.name} = 'bfloat16'")
    elif tag is not None:
        return f"dtype tag '{tag}' on a {t.host_dtype} tensor (only bfloat16 is tagged)"
    elif array.dtype != expected:
        return f"dtype {array.dtype}, expected {t.host_dtype}"
    if not fits_shape(t, array.shape):
        return f"shape {list(array.shape)}, expected {shape_text(t)}"
    return _past_maximum(t, array.shape)


def _past_maximum(t: TensorSpec, shape: tuple[int, ...]) -> str | None:
    """A symbolic dim longer than its symbol's largest length (the host shape holds it):
    refused from the header, before such an input is read."""
    for d, symbol in t.symbolic_dims:
        if shape[d] > t.host_shape[d]:
            return (f"shape {list(shape)}, expected {shape_text(t)}: dim {d} is {shape[d]}, "
                    f"longer than {symbol}'s largest length {t.host_shape[d]}")
    return None


def _describe(array: np.ndarray, tag: str | None) -> str:
    return f"{array.dtype}" + (f" tagged '{tag}'" if tag else " without a dtype tag")


def signature(tensors: list[TensorSpec]) -> str:
    """The expected arrays, one per line: what every error about an npz file ends with."""
    if not tensors:
        return "  (none)"
    return "\n".join(f"  {t.name}: {host_form(t)}" for t in tensors)


def input_tensors(manifest: Manifest) -> list[TensorSpec]:
    return [manifest.tensors[n] for n in dict.fromkeys(manifest.inputs)]


def check_inputs(manifest: Manifest, arrays: dict[str, np.ndarray],
                 label: str = "the input dict", from_file: bool = False) -> dict[str, np.ndarray]:
    """The program inputs from an npz file's arrays or a caller's dict, validated.

    A caller's dict may give a bf16 input as untagged uint16 bits (the manifest says what it
    is); a file must carry the tag. An input dim of a symbolic length may have any admissible
    length (`lengths.bind_lengths`).
    """
    tensors = input_tensors(manifest)
    checked = check_arrays(arrays, tensors, label, signature(tensors), tags_required=from_file)
    bind_lengths(manifest, checked, label)     # every symbolic length admissible and agreed
    return checked


def read_inputs(manifest: Manifest, path: str | Path) -> dict[str, np.ndarray]:
    """The program inputs in file `path`, validated; every member's header is judged against
    the program (`header_check`) before any data is read."""
    tensors = input_tensors(manifest)
    arrays = read_arrays(path, header_check(tensors, str(path)))
    return check_inputs(manifest, arrays, str(path), from_file=True)


def header_check(tensors: list[TensorSpec], label: str) -> HeaderCheck:
    """What `read_npz` asks before reading data: the stand-ins (dtype and shape, no data)
    judged as `check_arrays` judges arrays, one error for every problem; then the names to
    read: each tensor and its dtype tag, nothing else (an extra key was reported)."""
    def check(stand_ins: dict[str, np.ndarray]) -> set[str]:
        check_arrays(stand_ins, tensors, label, signature(tensors))
        return {t.name for t in tensors} | {DTYPE_TAG + t.name for t in tensors}
    return check


def npz_arrays(outputs: list[np.ndarray], host_dtypes: list[str],
               names: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """`outputs.npz` content: output_0, output_1, … (or `names`: a mutated buffer comes back
    under its FQN) plus a tag for every bf16 output."""
    arrays: dict[str, np.ndarray] = {}
    for i, (array, dtype) in enumerate(zip(outputs, host_dtypes)):
        key = names[i] if i < len(names) else f"output_{i}"
        arrays[key] = array
        if dtype == "bfloat16":
            arrays[f"{DTYPE_TAG}{key}"] = np.array("bfloat16")
    return arrays

