"""Which programs an output directory holds, and where each one's files are.

A directory compiled from one `.pt2` is one program, named by the `.pt2`'s file stem (its
manifest's `source.file`), its files at the top as always. A directory compiled from several
(`spyrec compile prefill.pt2 decode.pt2 -o OUT`) lists them in `programs.json` (format
`spyrec-programs/1`: `programs`, the names in command-line order), each program's files in
the subdirectory of its name (docs/formats.md "Several programs").
"""

from __future__ import annotations

import json
from pathlib import Path

from spyrec.errors import InputFileError

INDEX = "programs.json"
INDEX_FORMAT = "spyrec-programs/1"


def program_dirs(out: Path) -> dict[str, Path]:
    """name -> the program's directory, in the directory's order."""
    out = Path(out)
    index = out / INDEX
    if index.is_file() and not index.is_symlink():
        names = _index_names(index)
        return {name: out / name for name in names}
    return {_single_name(out): out}


def _index_names(index: Path) -> list[str]:
    try:
        data = json.loads(index.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputFileError(f"{index}: cannot be read ({e}); re-run spyrec compile") from None
    names = data.get("programs") if isinstance(data, dict) else None
    if data.get("format") != INDEX_FORMAT or not isinstance(names, list) or not names or \
            not all(isinstance(n, str) and n and "/" not in n and n not in (".", "..")
                    for n in names):
        raise InputFileError(f"{index}: not a {INDEX_FORMAT} index of program names; "
                             f"re-run spyrec compile")
    return names


def _single_name(out: Path) -> str:
    """The program's name in a one-program directory: its source's file stem."""
    manifest = out / "manifest.json"
    if manifest.is_symlink() or not manifest.is_file():
        return "main"               # (the loader names what is wrong with it)
    try:
        data = json.loads(manifest.read_text())
        return Path(data["source"]["file"]).stem
    except (OSError, KeyError, TypeError, ValueError):
        return "main"


def resolve_program(out: Path, name: str | None) -> Path:
    """The directory of program `name` in `out` (None: the only one); exit 2 otherwise."""
    if name is None and not (Path(out) / INDEX).is_file():
        return Path(out)            # one program: nothing to read here (run checks OUT)
    dirs = program_dirs(out)
    if name is None:
        if len(dirs) == 1:
            return next(iter(dirs.values()))
        raise InputFileError(f"{out}: holds {len(dirs)} programs ({', '.join(dirs)}); "
                             f"name one with --program NAME")
    if name not in dirs:
        raise InputFileError(f"{out}: no program {name!r}; it holds {', '.join(dirs)}")
    return dirs[name]
