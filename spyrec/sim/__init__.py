"""The functional simulator: executes a `spyrec compile` output directory.

It only reads files (docs/formats.md): manifest.json, sdsc_<n>.json, bundle.mlir,
constants.npz and, for `--check`, program.pt2; it never imports the compiler (spyrec.ir,
spyrec.passes, spyrec.codegen, spyrec.frontend), and a test enforces that.

    simulate(out_dir, {"x": array}) -> SimResult(outputs, output_dtypes, cost, wall_s)
    cost_for_directory(out_dir)     -> the data-independent cost section of report.json
    load_program(out_dir)           -> the loaded, validated and verified Program
"""

from spyrec.sim.runner import SimResult, cost_for_directory, load_program, simulate

__all__ = ["SimResult", "cost_for_directory", "load_program", "simulate"]
