"""The source program run in PyTorch eager for `--check` (`sim/check.py` judges the outputs).

It is called the way its signature says: the manifest's inputs are the program's flat user
inputs, and `tree_unflatten(flat, ep.call_spec.in_spec)` turns them back into the
`(args, kwargs)` the module takes, so keyword-only inputs (transformers' ExecuTorch recipe
exports `forward(input_ids=..., cache_position=...)`) and mixed positional + keyword inputs
work. For rule 2's reference (`sim/check.py`) the same program runs with its floating weights,
buffers and inputs upcast. Outputs come back as float64/int64/bool numpy arrays. torch is
imported only when a function here runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spyrec.errors import InputFileError, InternalError
from spyrec.sim.reference_program import RERUN, check_reference_program


def to_torch(array: np.ndarray, host_dtype: str):
    import torch

    if host_dtype == "bfloat16":
        return torch.from_numpy(_c_order(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(_c_order(array))


def _c_order(array: np.ndarray) -> np.ndarray:
    """C-contiguous with the same shape (np.ascontiguousarray turns a 0-d array into 1-d)."""
    return np.require(np.asarray(array), None, "C")


def eager_outputs(out_dir: Path, input_names: list[str], host_dtypes: dict[str, str],
                  inputs: dict[str, np.ndarray], mutated: tuple[str, ...] = (),
                  reference: Path | None = None, upcast: str | None = None
                  ) -> list[np.ndarray]:
    """Outputs of program.pt2 run in eager mode, as float64/int64/bool numpy arrays, then the
    values of the `mutated` buffers (FQNs) after the run: the module updates them in place.
    The inputs (in manifest order: the program's flat user inputs) are passed as the
    program's in_spec says, positionally or by keyword. `reference`: the `.pt2`
    `check_reference_program` already checked (else it is found and checked now).
    `upcast` ("float32" or "float64"): floating parameters, buffers and inputs in that dtype,
    for rule 2's reference."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_unflatten

    from spyrec.pt2archive import load_exported

    path = reference or check_reference_program(out_dir, input_names)
    try:
        program = load_exported(path)
        in_spec = program.call_spec.in_spec
        # the upcast run feeds fp32 where the export recorded fp16 (fp64 where fp32): its
        # input guards would refuse
        module = program.module(check_guards=upcast is None)
    except InputFileError:
        raise
    except Exception as e:  # noqa: BLE001 - torch raises many types here; all mean "damaged"
        raise InputFileError(f"{path}: torch.export.load failed ({type(e).__name__}: "
                             f"{_first_line(e)}); {RERUN}") from None
    flat = [to_torch(inputs[n], host_dtypes[n]) for n in input_names]
    if upcast is not None:
        dtype = getattr(torch, upcast)
        _drop_dtype_asserts(module)
        module = module.to(dtype)
        flat = [t.to(dtype) if t.is_floating_point() else t for t in flat]
    if in_spec is None or in_spec.num_leaves != len(flat):
        raise InputFileError(f"{path}: its in_spec takes "
                             f"{None if in_spec is None else in_spec.num_leaves} inputs, "
                             f"manifest.json lists {len(flat)}; {RERUN}")
    call = tree_unflatten(flat, in_spec)
    if not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[1], dict)):
        raise InputFileError(f"{path}: its in_spec is not (args, kwargs); {RERUN}")
    args, kwargs = call
    try:
        with torch.no_grad():
            result = module(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the inputs passed the manifest's checks
        raise InternalError(f"--check: {path} failed in PyTorch eager on these inputs "
                            f"({type(e).__name__}: {_first_line(e)})") from None
    after = [module.get_buffer(fqn) for fqn in mutated]
    return [_to_numpy(t) for t in tree_leaves(result)] + [_to_numpy(t) for t in after]


def _drop_dtype_asserts(module) -> None:
    """Remove the `aten._assert_tensor_metadata` checks torch.export records before each
    `.to()` (they pin the source dtype, fp16 or fp32), from this loaded copy of the program
    only: the upcast run feeds fp32 (fp64) there on purpose."""
    import torch

    target = torch.ops.aten._assert_tensor_metadata.default
    for gm in module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        asserts = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is target]
        for node in asserts:
            gm.graph.erase_node(node)
        if asserts:
            gm.recompile()


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0]


def _to_numpy(t) -> np.ndarray:
    import torch

    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    t = t.detach().cpu()
    if t.is_floating_point():
        return t.to(torch.float64).numpy()
    return t.numpy()
