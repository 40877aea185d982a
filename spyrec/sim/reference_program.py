"""Which `.pt2` `--check` runs in eager, and whether it can run, decided before simulating.

The reference is the source `.pt2` (`reference_program`), and only a file with the SHA-256
`manifest.json` records (`source.sha256`), so a correct compile is never blamed for another
program: `--model PATH` when given, else `OUT/program.pt2` when the manifest names it
(`source.copy`: compiled `--self-contained`), else the absolute path the manifest records. A
`program.pt2` the manifest does not name is a stray file and never runs. A file whose hash
differs is one exit-2 line naming it, both hashes and what to do, before simulating; each
file is hashed once per run (a multi-GB `.pt2` takes seconds).
Everything that would make the check impossible is found by `check_reference_program`
*before* the simulation starts, from the archive's JSON alone (no torch): a missing or damaged
`program.pt2`, an in_spec holding a container torch cannot rebuild, user inputs that are not
the manifest's inputs. Running it is `sim/eager.py`; judging the outputs `sim/check.py`.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

from spyrec.errors import InputFileError

RERUN = "re-run spyrec compile to restore it, or run without --check"
PROGRAM_COPY = "program.pt2"     # OUT's copy of the source, with compile --self-contained


def _sha256(path: Path) -> str:
    """The SHA-256 of `path`, a regular file (a FIFO or a device is refused, not read)."""
    from spyrec.userfiles import open_regular

    h = hashlib.sha256()
    try:
        with open_regular(path, "the .pt2 the directory was compiled from") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        raise InputFileError(f"{path}: cannot read it ({e.strerror}); --check runs it in "
                             f"PyTorch eager") from None
    return h.hexdigest()


def _recorded_source(out_dir) -> dict:
    """manifest.json's `source` (file, path, sha256); {} when the manifest does not say.
    `out_dir` may be the run's handle on the directory (`files.OutputFiles`): its manifest
    is the one the run read, not whatever a recompile has put at the path since."""
    from spyrec.sim.files import OutputFiles

    try:
        if isinstance(out_dir, OutputFiles):
            text = out_dir.read_text("manifest.json")
        else:
            text = (Path(out_dir) / "manifest.json").read_text(encoding="utf-8")
        source = json.loads(text)["source"]
    except (OSError, ValueError, KeyError, TypeError, InputFileError):
        return {}
    return source if isinstance(source, dict) else {}


def reference_program(out_dir: Path, model: Path | None = None) -> Path:
    """The `.pt2` that --check runs in eager, verified against the SHA-256 manifest.json
    records (`source.sha256`), so a mismatch is never blamed on a correct compile: `model`
    (--model) when given; else OUT/program.pt2 when the manifest names it (`source.copy`: the
    directory was compiled --self-contained); else the source path the manifest records. A
    program.pt2 the manifest does not name is a stray file, never run. Each candidate file is
    hashed once (a multi-GB .pt2 takes seconds); every problem is one InputFileError (exit 2)
    naming the file, both hashes and what to do. torch is not imported."""
    source = _recorded_source(out_dir)
    out_dir = Path(getattr(out_dir, "path", out_dir))
    if model is not None:
        return _given_model(out_dir, Path(model), source)
    if not source.get("path") or not source.get("sha256"):
        raise InputFileError(
            f"{out_dir / 'manifest.json'}: records no source program (its `source`), so "
            f"--check cannot tell which .pt2 {out_dir} was compiled from; pass --model PATH "
            f"to that .pt2, or re-run spyrec compile")
    if source.get("copy"):
        return _self_contained_copy(out_dir, source)
    return _recorded_path(out_dir, source)


def _given_model(out_dir: Path, model: Path, source: dict) -> Path:
    from spyrec.userfiles import check_regular

    recorded, sha = source.get("path"), source.get("sha256")
    check_regular(model, f"the .pt2 that {out_dir} was compiled from" +
                  (f" ({recorded})" if recorded else ""), "--model")
    digest = _sha256(model) if sha else None
    if sha and digest != sha:
        raise InputFileError(
            f"--model {model}: not the program {out_dir} was compiled from (its sha256 is "
            f"{_short(digest)}, {out_dir / 'manifest.json'} records "
            f"{recorded or source.get('file', '?')} with sha256 {_short(sha)}); give that "
            f".pt2, or re-run spyrec compile on {model}")
    return model


def _self_contained_copy(out_dir: Path, source: dict) -> Path:
    """OUT's copy of the source (compiled --self-contained), when it is still that file."""
    copy, sha, recorded = out_dir / PROGRAM_COPY, source["sha256"], source["path"]
    todo = (f"pass --model PATH to the .pt2 it was compiled from (the source was {recorded}), "
            f"or re-run spyrec compile {recorded} -o {out_dir} --self-contained")
    if not copy.exists():
        raise InputFileError(f"{copy}: missing, though {out_dir} was compiled "
                             f"--self-contained; --check runs it in PyTorch eager: {todo}")
    digest = _sha256(copy)
    if digest != sha:
        raise InputFileError(
            f"{copy}: not the program {out_dir} was compiled from (its sha256 is "
            f"{_short(digest)}, {out_dir / 'manifest.json'} records {_short(sha)}): the copy "
            f"was changed or replaced, and --check would blame the compile for it; {todo}")
    return copy


def _recorded_path(out_dir: Path, source: dict) -> Path:
    """The source path the manifest records (a directory not compiled --self-contained),
    when it is still that file. A program.pt2 in OUT is not used: the manifest does not name
    it, so nothing says which program it is (--model can vouch for it, by its hash)."""
    manifest, path, sha = out_dir / "manifest.json", Path(source["path"]), source["sha256"]
    stray = out_dir / PROGRAM_COPY
    unnamed = (f" ({stray} is not used: {out_dir} was not compiled --self-contained, so "
               f"{manifest} does not name it; pass --model {stray} if it is that program)"
               if stray.exists() else "")
    if not path.exists():
        raise InputFileError(
            f"{path}: the source program {manifest} records is gone; --check runs it in "
            f"PyTorch eager: pass --model PATH to a copy of it (sha256 {_short(sha)}), or "
            f"compile again with --self-contained to keep a copy in {out_dir}{unnamed}")
    digest = _sha256(path)
    if digest != sha:
        raise InputFileError(
            f"{path}: changed since {out_dir} was compiled from it (its sha256 is now "
            f"{_short(digest)}, {manifest} records {_short(sha)}); pass --model PATH to the "
            f".pt2 it was compiled from, or re-run spyrec compile {path} -o {out_dir}{unnamed}")
    return path


def _short(digest: str) -> str:
    return f"{digest[:16]}…"


def check_reference_program(out_dir, input_names: list[str] | None = None,
                            model: Path | None = None) -> Path:
    """The reference `.pt2` (`reference_program`), after the checks that need no torch: it
    exists and is an exported program archive (a zip with models/*.json), not text or a
    TorchScript file; with `input_names` (the manifest's inputs), also that its in_spec can be
    rebuilt from them (`_check_call`). Called before simulating, so a --check that cannot be
    done fails at once rather than after the whole run."""
    path = reference_program(out_dir, model)
    if not path.exists():
        raise InputFileError(f"{path}: missing; --check runs it in PyTorch eager: {RERUN}")
    if not path.is_file() or not zipfile.is_zipfile(path):
        raise InputFileError(f"{path}: not a torch.export archive (not a zip file); {RERUN}")
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            models = [n for n in names
                      if n.split("/")[-2:-1] == ["models"] and n.endswith(".json")]
            if not models:
                kind = "a TorchScript file" if any(n.endswith("/code/") or "/code/" in n
                                                    for n in names) else "a zip file"
                raise InputFileError(f"{path}: {kind}, not a torch.export program (no "
                                     f"models/*.json); {RERUN}")
            if input_names is not None:
                _check_call(path, _model_json(path, zf, models[0]), list(input_names))
    except (OSError, zipfile.BadZipFile) as e:
        raise InputFileError(f"{path}: damaged archive ({e}); {RERUN}") from None
    if input_names is not None:
        from spyrec.pt2archive import open_archive

        open_archive(path)     # every member torch.export.load will read, and no pickles
    return path


MAX_MODEL_JSON_BYTES = 1 << 30    # as pt2archive: a graph larger than this is a crafted file

# Containers of an in_spec/out_spec that torch.export.load rebuilds without any import of
# ours: torch.utils._pytree's own serialized type names. Anything else (a transformers cache
# class, a user dataclass) needs its module imported and registered, which --check does not do.
REBUILDABLE = frozenset({
    "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict",
    "collections.defaultdict", "collections.deque", "collections.namedtuple", "torch.Size",
    "torch.fx.immutable_collections.immutable_dict",
    "torch.fx.immutable_collections.immutable_list"})


def _model_json(path: Path, zf: zipfile.ZipFile, member: str) -> dict:
    size = zf.getinfo(member).file_size
    if size > MAX_MODEL_JSON_BYTES:
        raise InputFileError(f"{path}: member {member} claims {size} bytes of JSON; {RERUN}")
    try:
        model = json.loads(zf.read(member))
    except ValueError as e:      # JSONDecodeError and UnicodeDecodeError
        raise InputFileError(f"{path}: {member} is not valid JSON ({e}); {RERUN}") from None
    if not isinstance(model, dict):
        raise InputFileError(f"{path}: {member} is not an exported program; {RERUN}")
    return model


def _spec_tree(path: Path, text, which: str) -> dict:
    """The root node of a serialized TreeSpec (`[version, {type, context, children_spec}]`)."""
    try:
        spec = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        spec = None
    if not (isinstance(spec, list) and len(spec) == 2 and isinstance(spec[1], dict)):
        raise InputFileError(f"{path}: --check cannot read how the program is called (its "
                             f"{which} is not a serialized TreeSpec); {RERUN}")
    return spec[1]


def _spec_walk(path: Path, node, which: str) -> tuple[int, set[str]]:
    """(leaf count, container type names) of a serialized TreeSpec node."""
    leaves, types, stack = 0, set(), [node]
    while stack:
        n = stack.pop()
        children = n.get("children_spec") if isinstance(n, dict) else None
        if not isinstance(children, list):
            raise InputFileError(f"{path}: --check cannot read how the program is called (a "
                                 f"malformed node in its {which}); {RERUN}")
        if n.get("type") is None:
            leaves += 1
        else:
            types.add(str(n["type"]))
        stack.extend(children)
    return leaves, types


def _user_inputs(path: Path, model: dict) -> list[tuple[str, str]]:
    """(name, what) of every user input of the serialized graph, in call order: what is
    "tensor", or the kind of a non-tensor input (a constant int, a SymInt...)."""
    try:
        specs = model["graph_module"]["signature"]["input_specs"]
        found = []
        for spec in specs:
            kind, body = next(iter(spec.items()))
            if kind == "constant_input":
                value = body.get("value") or {}
                what = next(iter(value), "as_constant").removeprefix("as_")
                found.append((str(body.get("name")), f"a constant {what}"))
            elif kind == "user_input":
                arg_kind, arg = next(iter(body["arg"].items()))
                found.append((str(arg.get("name")) if isinstance(arg, dict) else "?",
                              "tensor" if arg_kind == "as_tensor"
                              else f"a {arg_kind.removeprefix('as_')}"))
        return found
    except (KeyError, TypeError, AttributeError, StopIteration) as e:
        raise InputFileError(f"{path}: --check cannot read the program's inputs "
                             f"({type(e).__name__}: {e}); {RERUN}") from None


def _check_call(path: Path, model: dict, input_names: list[str]) -> None:
    """That `tree_unflatten(manifest inputs, in_spec)` will give the (args, kwargs) the
    program takes: as many user inputs as the manifest lists (matched by position: the
    manifest lists the graph's user inputs in order), all tensors; the in_spec has one leaf
    per input; every container of the in_spec and out_spec is one torch.export.load rebuilds
    by itself (REBUILDABLE)."""
    graph_module = model.get("graph_module")
    calls = graph_module.get("module_call_graph") if isinstance(graph_module, dict) else None
    root = next((c for c in calls or [] if isinstance(c, dict) and c.get("fqn") == ""), None)
    signature = root.get("signature") if root else None
    if not isinstance(signature, dict):
        raise InputFileError(f"{path}: --check cannot read how the program is called (no "
                             f"module_call_graph signature for the root module); {RERUN}")
    user = _user_inputs(path, model)
    other = [f"{name} ({what})" for name, what in user if what != "tensor"]
    if other:
        raise InputFileError(f"{path}: --check cannot call the program: it takes non-tensor "
                             f"inputs {', '.join(other)}, which {path.parent} was not compiled "
                             f"with; {RERUN}")
    names = [name for name, _ in user]
    if len(names) != len(input_names):     # matched by position, as the frontend numbers them
        raise InputFileError(f"{path}: takes {len(names)} inputs [{', '.join(names)}] but "
                             f"manifest.json lists {len(input_names)} "
                             f"[{', '.join(input_names)}]: not the program this directory was "
                             f"compiled from; {RERUN}")
    leaves, types = _spec_walk(path, _spec_tree(path, signature.get("in_spec"), "in_spec"),
                               "in_spec")
    _, out_types = _spec_walk(path, _spec_tree(path, signature.get("out_spec"), "out_spec"),
                              "out_spec")
    for which, found in (("inputs", types), ("outputs", out_types)):
        foreign = sorted(found - REBUILDABLE)
        if foreign:
            raise InputFileError(f"{path}: --check cannot rebuild the program's {which}: they "
                                 f"are passed in {', '.join(foreign)} (only tuples, lists and "
                                 f"dicts of tensors); run without --check")
    if leaves != len(input_names):
        raise InputFileError(f"{path}: its in_spec holds {leaves} inputs, its graph "
                             f"{len(input_names)}; {RERUN}")

