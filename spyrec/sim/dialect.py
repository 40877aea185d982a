"""The `sdscbundle` dialect: the one op of ours that `bundle.mlir` uses (DESIGN §5).

    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}
    sdscbundle.sdsc_execute (%addr_1, %addr_2) {sdsc_filename = "sdsc_1.json", symbol_ids = [-1, -2]}

executes one device op. Outside loops it has no operands (every address in the op's JSON is
concrete). Inside loops each operand is the byte address a symbolic start address of the op's
JSON takes at this iteration: operand k binds the symbol id `symbol_ids[k]` (a negative id that
appears in the JSON's `data_` entries; reference/F-superdsc.md §3.G rule 2), so the two lists
must have equal length. (Without `symbol_ids`, operands bind through each arg's `operand`
field: the form the simulator's older tests write.) Declared with IRDL so xDSL parses and verifies the pretty form we emit;
`sdsc_filename` and `symbol_ids` are attributes (not properties) so the generic form uses the
same `{...}` that real MLIR with `--allow-unregistered-dialect` expects.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ArrayAttr, IndexType, IntegerAttr, StringAttr
from xdsl.ir import Dialect
from xdsl.irdl import (
    IRDLOperation, attr_def, irdl_op_definition, opt_attr_def, var_operand_def,
)
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class SdscExecuteOp(IRDLOperation):
    """Run one device op described by `sdsc_filename`; operands are tile base addresses,
    bound to the JSON's symbolic start addresses by `symbol_ids`."""

    name = "sdscbundle.sdsc_execute"
    args = var_operand_def(IndexType)
    sdsc_filename = attr_def(StringAttr)
    symbol_ids = opt_attr_def(ArrayAttr)
    assembly_format = "`(` $args `)` attr-dict"

    def verify_(self) -> None:
        if not self.sdsc_filename.data.endswith(".json"):
            raise VerifyException(
                f"sdsc_filename must end with '.json', got {self.sdsc_filename.data!r}")
        if self.symbol_ids is None:
            return   # the older form: operands bound through each arg's `operand` field
        ids = symbol_ids(self)
        if len(ids) != len(self.args):
            raise VerifyException(
                f"{len(self.args)} operands but {len(ids)} symbol_ids: operand k binds "
                f"symbol_ids[k], so the two must have equal length")
        if any(i >= 0 for i in ids) or len(set(ids)) != len(ids):
            raise VerifyException(f"symbol_ids {ids} must be distinct negative ids")


def symbol_ids(op: SdscExecuteOp) -> list[int]:
    """The op's symbol ids (empty without the attribute); a VerifyException when an entry is
    not an integer."""
    if op.symbol_ids is None:
        return []
    ids = []
    for entry in op.symbol_ids.data:
        if not isinstance(entry, IntegerAttr):
            raise VerifyException(f"symbol_ids entries must be integers, got {entry}")
        ids.append(entry.value.data)
    return ids


SdscBundle = Dialect("sdscbundle", [SdscExecuteOp], [])
