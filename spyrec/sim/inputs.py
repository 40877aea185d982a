"""Program inputs and outputs as numpy arrays: read `.npz` files and check them, write the
outputs (the constants are mapped from `weights.bin` by `sim/weights.py`).

Keys are the user-input names of the exported program (manifest `inputs`). numpy has no
bfloat16, so a bf16 array travels as its uint16 bit patterns plus a tag key
`__dtype__.<name>` = "bfloat16" (DESIGN §1); outputs are written the same way. A
`.safetensors` file (the ecosystem's bf16 container) may stand in for an .npz on either side:
`safetensors.py` turns its BF16 tensors into the same tagged form. Every problem
with a file (missing or extra keys, wrong shapes or dtypes) is collected into ONE error that
ends with the expected signature, so a user fixes everything in one round trip.
"""

from __future__ import annotations

import fnmatch
import io
import math
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

from spyrec.errors import InputFileError
from spyrec.outdir import OWN_FILES, RUN_OUTPUTS
from spyrec.sim.lengths import bind_lengths, fits_shape, shape_text
from spyrec.sim.safetensors import read_safetensors, safetensors_bytes
from spyrec.sim.specs import Manifest, TensorSpec
from spyrec.sim.transfer import HOST_NUMPY

DTYPE_TAG = "__dtype__."


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of an .npz file, tags included.

    Each member's header is read and checked before its data, because numpy trusts headers: a
    corrupt one raises whatever its parser hits, and a header claiming 10**12 elements would be
    allocated before the read fails. No pickles: data files are not code.
    """
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: no such file")
    if not path.is_file():
        raise InputFileError(f"{path}: not a regular file; expected an .npz file from "
                             f"numpy.savez")
    if not zipfile.is_zipfile(path):
        raise InputFileError(f"{path}: not a readable .npz file (not a zip archive); write the "
                             f"arrays with numpy.savez(path, name=array, ...)")
    try:
        with zipfile.ZipFile(path) as zf:
            return {_member_name(info.filename): _read_member(path, zf, info)
                    for info in zf.infolist() if not info.is_dir()}
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise InputFileError(f"{path}: damaged .npz archive ({type(e).__name__}: {e}); write "
                             f"it again with numpy.savez") from None


def _member_name(filename: str) -> str:
    return filename[:-4] if filename.endswith(".npy") else filename


def _read_member(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One array, after checking that its header parses, holds no Python objects, and
    describes no more data than the member has."""
    where = f"{path}: member {info.filename}"
    with zf.open(info) as f:
        try:
            version = npformat.read_magic(f)
            read_header = npformat.read_array_header_1_0 if version == (1, 0) else \
                npformat.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
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
    needed = math.prod(shape) * dtype.itemsize
    if needed > info.file_size - header_bytes:
        raise InputFileError(f"{where}: header says {list(shape)} {dtype} ({needed} bytes) but "
                             f"the member holds {info.file_size - header_bytes} bytes of data; "
                             f"write the file again with numpy.savez")
    with zf.open(info) as f:
        try:
            return npformat.read_array(f, allow_pickle=False)
        except ValueError as e:   # what the checks above missed, said the same way
            raise InputFileError(f"{where}: not a readable .npy array ({e}); write the file "
                                 f"again with numpy.savez") from None


def is_safetensors(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".safetensors"


def read_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """An .npz or (by its suffix) a .safetensors file, in the same tagged host form."""
    return read_safetensors(path) if is_safetensors(path) else read_npz(path)


def write_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` to exactly `path` (numpy.savez would append `.npz` to a bare name), as
    .safetensors when the name ends so."""
    if is_safetensors(path):
        data = safetensors_bytes(arrays)
    else:
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        data = buffer.getvalue()
    write_file(path, data, "-o", "the outputs")


def write_file(path: str | Path, data: bytes, option: str, what: str) -> None:
    """Write `data` to exactly `path` through a temporary sibling renamed into place: no
    half-written file on failure; a directory or a missing parent is refused first."""
    path = Path(path)
    check_output_path(path, option)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        raise InputFileError(f"{option} {path}: cannot write {what} ({e.strerror}); choose "
                             f"another path") from None
    finally:
        tmp.unlink(missing_ok=True)


def check_output_path(path: str | Path, option: str) -> None:
    """Fail before any work when an output file could not be written where asked."""
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        raise InputFileError(f"{option} {path}: is a directory; give a file name such as "
                             f"{path / 'outputs.npz'}")
    if not parent.is_dir():
        raise InputFileError(f"{option} {path}: directory {parent} does not exist; create it "
                             f"first or choose another path")


OUTPUT_SUFFIXES = (".npz", ".safetensors")


def check_replaceable(path: str | Path, option: str, suffixes: tuple[str, ...],
                      out_dir: Path | None = None, reads: dict[str, Path] | None = None
                      ) -> None:
    """Refuse to let `option` replace a file the command reads, a file of the compiled
    directory `out_dir` (its own names, spyrec run's RUN_OUTPUTS aside), or an existing file
    whose suffix is not one of `suffixes` (the kind `option` writes). Files are written under
    exactly the name given, so `spyrec run -o OUT/manifest.json` made the manifest an .npz
    and `inspect --trace OUT/report.json` would put a trace in the report; a new file may
    have any name."""
    path = Path(path)
    if not path.is_file():
        return
    for what, other in (reads or {}).items():
        if _same_file(path, other):
            raise InputFileError(f"{option} {path}: is the {what} file; the command reads "
                                 f"it, and its output would replace it: choose another name")
    if out_dir is not None and _same_file(path.parent, out_dir) and path.name != RUN_OUTPUTS \
            and any(fnmatch.fnmatchcase(path.name, own) for own in OWN_FILES):
        raise InputFileError(f"{option} {path}: is a file of the compiled directory {out_dir}; "
                             f"{option} does not replace it: choose a name outside it")
    if path.suffix.lower() not in suffixes:
        raise InputFileError(f"{option} {path}: an existing file that is not "
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
    return check_inputs(manifest, read_arrays(path), str(path), from_file=True)


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

