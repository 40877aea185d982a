"""The functional simulator: executes a `spyrec compile` output directory.

It only reads files (docs/formats.md): manifest.json, sdsc_<n>.json, bundle.mlir,
weights.bin (mapped as the constants' device memory) and, for `--check`, the source `.pt2`;
it never imports the compiler (spyrec.ir, spyrec.passes, spyrec.codegen, spyrec.frontend),
and a test enforces that. Device memory is sparse (only allocated bytes) and ops read and
write it through strided views where an access is one (`strided.py`).

    simulate(out_dir, {"x": array}) -> SimResult(outputs, output_dtypes, program, wall_s; .cost)
    cost_for_directory(out_dir)     -> the data-independent cost section of report.json
    cost_for_files(texts, out_dir)  -> the same, from the compiler's in-memory {name: text}
    load_program(out_dir)           -> the loaded, validated and verified Program
"""


__all__ = ["SimResult", "cost_for_directory", "cost_for_files", "load_program", "simulate"]


def __getattr__(name: str):
    """Import the runner on first use, so `spyrec run --help` and a bad `run` option do not
    pay for numpy, sympy and xDSL (DESIGN §1: options are checked before heavy imports)."""
    if name in __all__:
        from spyrec.sim import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'spyrec.sim' has no attribute {name!r}")
