"""Read a fused SuperDSC (`{"<n>_fused": ...}`, docs/formats.md "Fused SuperDSCs") into the
OpSpecs of its compute ops, and run its `sdsc_execute`s as theirs.

A fused file lists its compute ops in `computeOp_`, each naming (`fusedDsc_`) the member
SuperDSC in `fusedDscs_` that holds its own iteration space, work split and tensors. Each
member is read by the same reader as a one-op file (`superdsc.py`), with every check it makes,
and becomes an OpSpec named `<file>#<j>` (the name manifest `lx_args` and `hbm_args` list its
args under). What only the fused form states is checked here: the compute ops name their
members in order, say what the members say, and every member runs on the fused file's cores.

The members execute in order, each exactly as its one-op file would, so a fused program's
values are the unfused program's bit for bit; what fusion changes is time (`cost.py`: the
units run as concurrent streams). One `sdsc_execute` binds the symbols of every member;
`member_executes` gives each member the operands of its own symbol ids.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Mapping

from spyrec.errors import InputFileError
from spyrec.sim.specs import Execute, OpSpec

# (member's JSON path for messages, member wrapper, member file key) -> the member's OpSpec
MemberReader = Callable[[str, dict, str], OpSpec]


def is_fused(key: str) -> bool:
    """Whether the top key of an sdsc document names a fused SuperDSC."""
    return key.endswith("_fused")


def read_fused(path, filename: str, key: str, wrapper: dict,
               read_member: MemberReader) -> tuple[OpSpec, ...]:
    """The member OpSpecs of the fused document `wrapper` (top key `key`) of `filename`."""
    def fail(where: str, msg: str):
        raise InputFileError(f"{path}: at $.{key}.{where}: {msg}; the file is not as spyrec "
                             f"compile wrote it (re-run spyrec compile)")

    index = key.split("_", 1)[0]
    members, ops = wrapper["fusedDscs_"], wrapper["computeOp_"]
    if len(ops) != len(members):
        fail("computeOp_", f"{len(ops)} compute ops for {len(members)} members in fusedDscs_")
    specs = []
    for j, (op, doc) in enumerate(zip(ops, members)):
        (member_key, member), = doc.items()
        if member_key.split("_", 1)[0] != index:
            fail(f"fusedDscs_[{j}]", f"member {member_key!r} is not numbered {index}")
        if op["fusedDsc_"] != j:
            fail(f"computeOp_[{j}].fusedDsc_", f"{op['fusedDsc_']}: compute ops name their "
                 f"members in order")
        (_, dsc), = member["dscs_"][0].items()
        own = {k: v for k, v in op.items() if k != "fusedDsc_"}
        if own != dsc["computeOp_"][0]:
            fail(f"computeOp_[{j}]", f"says {own}, its member's computeOp_ says "
                 f"{dsc['computeOp_'][0]}")
        if member["numCoresUsed_"] != wrapper["numCoresUsed_"]:
            fail(f"fusedDscs_[{j}]", f"member runs on {member['numCoresUsed_']} cores, the "
                 f"fused SuperDSC on {wrapper['numCoresUsed_']}")
        # messages name the member's fields by their path in the fused file
        spec = read_member(f"{key}.fusedDscs_[{j}].{member_key}", member, f"{filename}#{j}")
        specs.append(replace(spec, fused=filename))
    return tuple(specs)


def member_executes(ex: Execute, members: tuple[OpSpec, ...]) -> list[Execute]:
    """The executes of each member of a fused file for one `sdsc_execute` `ex` of it: the
    same loop point, each binding the operands of its own symbol ids (in order of first
    appearance in its args; unbound ids are left for the member's symbol check to name)."""
    bound = dict(zip(ex.symbol_ids, ex.operands))
    out = []
    for spec in members:
        ids = dict.fromkeys(i for arg in spec.args for i in arg.symbols or ())
        known = [i for i in ids if i in bound]
        out.append(Execute(spec.file, tuple(bound[i] for i in known), ex.location,
                           tuple(known), ex.loop))
    return out


def expand_executes(executes: Iterable[Execute], fused: Mapping[str, tuple[OpSpec, ...]]
                    ) -> list[Execute]:
    """`executes` with each execute of a fused file replaced by its members' (in order)."""
    return [run for ex in executes for run in
            (member_executes(ex, fused[ex.file]) if ex.file in fused else (ex,))]
