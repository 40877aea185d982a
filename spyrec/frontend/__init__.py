"""torch.export front end: load a .pt2, decompose it, lower it to a spyrec Graph.

Three stages, each its own group of modules (arrows: what a module imports; no circle):

Reading a .pt2 into a torch-free `Program` (`program.py`):
    load.py          the entry point: front-end choice, torch's decomposition table
    pt2json.py       the fast reader: the archive's graph JSON and weights, no torch
    from_torch.py    the same `Program` from a `torch.export.ExportedProgram`
    inline.py        grad-mode regions (higher-order ops) inlined
    functionalize.py in-place ops of the stored graph made functional

Constant folding (what depends on no runtime value, evaluated with numpy):
    fold.py          the pass over a `Program`
    folders.py       aten op -> its numpy folder
    host_dtypes.py   eager's host dtype rules (casts, promotion, Python scalars)

Lowering a `Program` to a `Graph` of device ops:
    driver.py        the walk over the nodes, `lower_program`
    registry.py      aten op -> lowering: the table and `@lowering` (a leaf)
    lowerings.py     imports every lowering module: the full table, `lowerable`
    context.py       what a lowering emits with (buffers, ops, a pointwise op's shape)
    views.py         `TensorValue`: a buffer through a view, as an index expression
    indexed.py       gathers and scatters as indirect accesses
    windows.py       convolution and pooling windows over a channels-last copy
    names.py, sources.py   the names and source lines users see
    limits.py        device limits checked after lowering
    aten_pointwise.py  aten_views.py  aten_copies.py  aten_reductions.py  aten_training.py
    aten_conv.py  aten_batch_norm.py  aten_pooling.py  aten_moe.py  aten_scan.py
    aten_mutation.py  the lowerings, one theme each (their docstrings say which ops)
"""

from spyrec.frontend.load import load_program
from spyrec.frontend.driver import lower_program

__all__ = ["load_program", "lower_program"]
