"""Program inputs and constants as numpy arrays: read `.npz` files and check them.

Keys are the user-input names of the exported program (manifest `inputs`). numpy has no
bfloat16, so a bf16 array travels as its uint16 bit patterns plus a tag key
`__dtype__.<name>` = "bfloat16" (DESIGN §1); outputs are written the same way. Every problem
with a file (missing or extra keys, wrong shapes or dtypes) is collected into ONE error that
ends with the expected signature, so a user fixes everything in one round trip.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from spyrec.errors import InputFileError
from spyrec.sim.numerics import float32_to_bf16_bits
from spyrec.sim.specs import Manifest, TensorSpec
from spyrec.sim.transfer import HOST_NUMPY

DTYPE_TAG = "__dtype__."


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of an .npz file, tags included (no pickles: data files are not code)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise InputFileError(f"{path}: not a readable .npz file ({e})") from None


def host_form(t: TensorSpec) -> str:
    """How an array of tensor `t` must look in an npz: dtype (and tag) and shape."""
    dtype = "uint16 bits tagged bfloat16" if t.host_dtype == "bfloat16" else t.host_dtype
    return f"shape {list(t.host_shape)}, {dtype}"


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
    if array.shape != t.host_shape:
        return f"shape {list(array.shape)}, expected {list(t.host_shape)}"
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
    is); a file must carry the tag.
    """
    tensors = input_tensors(manifest)
    return check_arrays(arrays, tensors, label, signature(tensors), tags_required=from_file)


def read_inputs(manifest: Manifest, path: str | Path) -> dict[str, np.ndarray]:
    return check_inputs(manifest, read_npz(path), str(path), from_file=True)


def read_constants(manifest: Manifest, out_dir: Path) -> dict[str, np.ndarray]:
    """Values of the `constant` tensors from OUT/constants.npz (none needed: no file needed)."""
    tensors = [t for t in manifest.tensors.values() if t.role == "constant"]
    if not tensors:
        return {}
    path = out_dir / "constants.npz"
    return check_arrays(read_npz(path), tensors, str(path), signature(tensors))


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


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float values -> bfloat16 bit patterns (what a bf16 array in an npz holds)."""
    return float32_to_bf16_bits(np.asarray(values, dtype=np.float32))
