"""The functional simulator: executes a `spyrec compile` output directory.

It only reads files (docs/formats.md): manifest.json, sdsc_<n>.json, bundle.mlir,
weights.bin (mapped as the constants' device memory) and, for `--check`, the source `.pt2`;
it never imports the compiler (spyrec.ir, spyrec.passes, spyrec.codegen, spyrec.frontend),
and a test enforces that. Device memory is sparse (only allocated bytes) and ops read and
write it through strided views where an access is one (`strided.py`).

How a directory becomes the program it runs: `directory.py` decides whether it is spyrec's
(`loader.py`) or a reference bundle (`foreign.py`); both read files through `files.py` and
build one `OutputProgram` (`program.py`), whose builder the compiler's cost estimate also
calls, with the documents it has just built (`program_from_documents`, composed with the
compiler in spyrec/driver.py, since the compiler imports nothing from here). A program's cost
estimate is `program_cost.py`, apart from the run machinery compile does not need.

    simulate(out_dir, {"x": array})   -> SimResult(outputs, output_dtypes, program, wall_s; .cost)
    cost_for_directory(out_dir)       -> the data-independent cost section of report.json
    load_output_dir(out_dir)          -> the read, checked and verified OutputProgram
    program_from_documents(out_dir, manifest, sdsc, executions) -> the same from documents
"""

# public name -> the module defining it
_MODULES = {"SimResult": "runner", "cost_for_directory": "runner", "simulate": "runner",
            "load_output_dir": "directory", "program_from_documents": "program"}
__all__ = sorted(_MODULES)


def __getattr__(name: str):
    """Import the defining module on first use, so `spyrec run --help` and a bad `run` option
    do not pay for numpy, sympy and xDSL (DESIGN §1: options are checked before heavy
    imports)."""
    if name in _MODULES:
        from importlib import import_module

        return getattr(import_module(f"spyrec.sim.{_MODULES[name]}"), name)
    raise AttributeError(f"module 'spyrec.sim' has no attribute {name!r}")
