"""The `sdscbundle` dialect: the one op of ours that `bundle.mlir` uses (DESIGN §5).

    sdscbundle.sdsc_execute (%addr_0, %addr_1) {sdsc_filename = "sdsc_0.json"}

executes one device op; each index operand is a byte address that the op's JSON names through an
arg's `operand` field (docs/formats.md). Declared with IRDL so xDSL parses and verifies the
pretty form we emit; `sdsc_filename` is an attribute (not a property) so the generic form uses
the same `{...}` that real MLIR with `--allow-unregistered-dialect` expects.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IndexType, StringAttr
from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation, attr_def, irdl_op_definition, var_operand_def
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class SdscExecuteOp(IRDLOperation):
    """Run one device op described by `sdsc_filename`; operands are tile base addresses."""

    name = "sdscbundle.sdsc_execute"
    args = var_operand_def(IndexType)
    sdsc_filename = attr_def(StringAttr)
    assembly_format = "`(` $args `)` attr-dict"

    def verify_(self) -> None:
        if not self.sdsc_filename.data.endswith(".json"):
            raise VerifyException(
                f"sdsc_filename must end with '.json', got {self.sdsc_filename.data!r}")


SdscBundle = Dialect("sdscbundle", [SdscExecuteOp], [])
