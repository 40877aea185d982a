"""`spyrec compile A.pt2 B.pt2 ... -o OUT`: several programs (a prefill and a decode step)
in one output directory (issue 59; docs/formats.md "Several programs").

Each program is compiled as a one-program compile would (the same files, byte for byte, the
same safety rules) into the subdirectory named by its `.pt2`'s file stem, and
`programs.json` (`programs_dir.INDEX`) lists the names in command-line order. The whole of
OUT is built in a temporary sibling and swapped in at once (`outdir.replace_directory`), so a
failure in any program leaves an earlier OUT as it was.

A buffer the programs mutate (a KV cache, by FQN) is one set of device bytes for all of
them: `spyrec.Session` and `spyrec generate` hand the bytes one program leaves to the next.
Its layout follows from the programs' own ops; the session refuses programs that store it
differently.

Not yet: weights shared across programs are stored once per program (each subdirectory has
its own weights.bin).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from spyrec.errors import ConfigError, OutputDirError
from spyrec.programs_dir import INDEX, INDEX_FORMAT

SUMMARY = "report.txt"      # the serving projection of causal-LM programs (`generate.py`)


def program_names(models: list[Path]) -> list[str]:
    """Each program's name, its file stem; two programs of one name are refused (exit 2)."""
    names = [Path(m).stem for m in models]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"programs {', '.join(twice)}: two .pt2 files with one name; each "
                          f"program is named by its file stem, so rename one")
    bad = [n for n in names if not n or n.startswith(".") or n == Path(INDEX).stem]
    if bad:
        raise ConfigError(f"program name {bad[0]!r} (from its file stem) cannot name a "
                          f"subdirectory of OUT; rename the .pt2")
    return names


def check_multi_output(out: Path) -> Path:
    """The real path of OUT if it may be (re)placed by a several-program directory: missing,
    empty, a one-program spyrec directory, or an earlier several-program one whose every
    entry is its index or a program directory spyrec wrote."""
    from spyrec.outdir import check_output_dir

    target = Path(out).resolve()
    if not (target / INDEX).is_file():
        return check_output_dir(out)
    for entry in sorted(target.iterdir()):
        if entry.name in (INDEX, SUMMARY):
            continue
        if entry.is_symlink() or not entry.is_dir():
            raise OutputDirError(f"-o {out}: this spyrec output directory also holds "
                                 f"{entry.name}, which its build did not write; move it out, "
                                 f"or choose another -o")
        check_output_dir(entry)
    return target


def compile_programs(models: list[Path], out: Path,
                     compile_one: Callable[[Path, Path], dict],
                     finish: Callable[[Path], None] = lambda _: None) -> dict[str, dict]:
    """Compile each of `models` with `compile_one(model, directory)` into OUT/<stem>/, then
    write the index and call `finish(directory)` (the serving projection, before OUT is
    swapped in); name -> that program's report."""
    from spyrec.outdir import replace_directory

    names = program_names(models)
    target = check_multi_output(out)
    for model in models:
        path = Path(model).resolve()
        if path == target or target in path.parents:
            raise OutputDirError(f"{model}: lies inside -o {out}, which the compile replaces; "
                                 f"move it out first")
    reports: dict[str, dict] = {}

    def build(tmp: Path) -> None:
        for name, model in zip(names, models):
            reports[name] = compile_one(Path(model), tmp / name)
        (tmp / INDEX).write_text(json.dumps({"format": INDEX_FORMAT, "programs": names},
                                            indent=1) + "\n")
        finish(tmp)
    replace_directory(target, build, check_multi_output)
    return reports
