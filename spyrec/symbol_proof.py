"""The proof behind a program with symbolic lengths (issue 30): the program lowered again one
granule shorter must differ from the one at the maximum only where the symbols say.

Apart from the compiler's driver because it lowers the program a second time and asks the
symbolic tiling's checks (`plan/tiling/symbolic.py`).
"""

from __future__ import annotations

from pathlib import Path


def attach_symbols(graph, program, source: Path, frontend: str) -> None:
    """A program with symbolic lengths (issue 30): the graph (its instance at every symbol's
    maximum) records them and the input and output dims that have them, once the program
    lowered one granule shorter proves it depends on them only through those dims
    (`check_instances`)."""
    from spyrec.frontend import load_program, lower_program
    from spyrec.plan.tiling.symbolic import (
        check_instances, constant_dims, shorter_binding,
    )

    graph.symbols = dict(program.symbols)
    users = [spec.name for spec in program.outputs if spec.kind == "user_output"]
    buffers = dict(zip(users, graph.outputs)) | {name: name for name in graph.inputs}
    graph.symbolic_dims = {buffers[name]: dict(dims)
                           for name, dims in program.symbolic_dims.items() if name in buffers}
    alt = lower_program(load_program(source, frontend, bind=shorter_binding(graph),
                                     allow_symbols=True))
    graph.symbolic_dims |= constant_dims(graph, alt)
    check_instances(graph, alt)
