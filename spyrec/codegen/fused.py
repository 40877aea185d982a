"""Fused SuperDSCs (issue 58): one `sdsc_<n>.json` for the ops the fusion pass grouped.

A SuperDSC's `computeOp_` is a list, "more than one op ... in case of fused operations", each
op on its unit (`exUnit` PE, PT or SFP; reference/I §1a, interface-specs super-dsc.md). The
public format gives a DSC one iteration space (`N_`) and one work split, while a matmul
(M x N x K) and its epilogue (M x N), or the flash tile body's score and output ops, each run
their own; it does not say how fused ops of different spaces are written. Our form
(docs/formats.md, "Fused SuperDSCs") keeps every member's own one-op SuperDSC, exactly as its
unfused file would hold it, in `fusedDscs_`, and lists the compute ops in `computeOp_`, each
naming its member (`fusedDsc_`): so the fused file says which unit runs what, and every
member's addresses stay checkable by the same reader as a one-op file's.

Files are numbered in execution order, one per group or lone op, so a program without fused
ops keeps the numbering (and bytes) it had before: file n is op n. A fused file's symbolic
start addresses are the union of its members' (one `sdsc_execute` binds them all).
"""

from __future__ import annotations

from spyrec.ir import Operation


def file_groups(ops: list[Operation]) -> list[list[int]]:
    """The op indices of each output file, in order: a run of ops of one fused group, or one
    op alone."""
    groups: list[list[int]] = []
    for i, op in enumerate(ops):
        if op.fused and groups and ops[groups[-1][0]].fused == op.fused:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def op_file_keys(groups: list[list[int]], names: list[str]) -> list[str]:
    """Per op (in op order), the key the manifest names its args under (`lx_args`,
    `hbm_args`) and the simulator names it by: its file, or `<file>#<j>` for the j-th member
    of a fused file."""
    keys = []
    for name, members in zip(names, groups):
        keys += [name] if len(members) == 1 else [f"{name}#{j}" for j in range(len(members))]
    return keys


def fused_document(index: int, members: list[dict]) -> dict:
    """The `sdsc_<index>.json` object of a fused group: `members` are the members' one-op
    documents (codegen/superdsc.py, all numbered `index`), in execution order."""
    compute, handles, cores = [], [], set()
    for j, doc in enumerate(members):
        (_, wrapper), = doc.items()
        (_, dsc), = wrapper["dscs_"][0].items()
        compute.append({**dsc["computeOp_"][0], "fusedDsc_": j})
        handles.append(wrapper["debug_handle_"])
        cores.add(wrapper["numCoresUsed_"])
    assert len(cores) == 1, f"fused group at {handles[0]} spans core counts {sorted(cores)}"
    return {f"{index}_fused": {"debug_handle_": "; ".join(handles),
                               "numCoresUsed_": cores.pop(),
                               "computeOp_": compute,
                               "fusedDscs_": members}}
