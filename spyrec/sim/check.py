"""`--check`: run the source program in PyTorch eager and compare every output.

The reference is the source `.pt2` (`reference_program`), and only a file with the SHA-256
`manifest.json` records (`source.sha256`), so a correct compile is never blamed for another
program: `--model PATH` when given, else `OUT/program.pt2` when the manifest names it
(`source.copy`: compiled `--self-contained`), else the absolute path the manifest records. A
`program.pt2` the manifest does not name is a stray file and never runs. A file whose hash
differs is one exit-2 line naming it, both hashes and what to do, before simulating; each
file is hashed once per run (a multi-GB `.pt2` takes seconds). It is called the way its
signature says: the manifest's inputs are the program's flat user inputs, and
`tree_unflatten(flat, ep.call_spec.in_spec)` turns them back into the `(args, kwargs)` the
module takes, so keyword-only inputs (transformers' ExecuTorch recipe exports
`forward(input_ids=..., cache_position=...)`) and mixed positional + keyword inputs work.
Everything that would make the check impossible is found by `check_reference_program`
*before* the simulation starts, from the archive's JSON alone (no torch): a missing or damaged
`program.pt2`, an in_spec holding a container torch cannot rebuild, user inputs that are not
the manifest's inputs.

Comparison, per output, decided by the first of two rules that applies (`OutputCheck.rule`):

1. allclose: torch.testing's rule `|sim - eager| <= atol + rtol * |eager|` with atol = rtol =
   the dtype's tolerance (DESIGN §9: fp32 1e-4, fp16/bf16 1e-2; integers and bools exact).
   NaN matches only NaN and an infinity only the same infinity, so a padding leak (NaN where
   eager is finite) is a mismatch. An output that passes it passes.
2. reference (floating outputs): a fixed tolerance does not scale with depth or with
   conditioning. Two correct fp16 implementations round in different places (fp32
   accumulation order, fused or separate ops) and drift apart layer after layer: a correct
   16-layer Llama prefill differs from fp16 eager by up to 0.019 on 838 of 8.2 M logits,
   while against an fp32 run of the same weights its error equals eager's own (rms 0.00285
   vs 0.00289). An ill-conditioned fp32 program does the same in one op: row sums of 1024
   values of size 1e4 that cancel to ~0.1 differ between spyrec and fp32 eager by up to
   0.13 (1e-4 allowed), while against float64 both are ~0.03 rms off (spyrec 0.031 / max
   0.072, eager 0.035 / 0.099; tests/sim/test_check_fp32.py). So the same program also runs
   eagerly with its floating weights, buffers and inputs upcast (`eager_outputs(upcast=)`:
   to fp32 for a fp16/bf16 output, to float64 for a fp32 one, `REFERENCE_DTYPE`; casts the
   graph itself spells out still happen), and an output that failed rule 1 passes when
   spyrec's error against that reference is not materially worse than eager's own
   (`ReferenceErrors.ok`):

       rms_spyrec <= K_RMS * max(rms_eager, u * rms(ref))
       max_spyrec <= K_MAX * max(max_eager, u * max|ref|)

   K_RMS = 2: on average spyrec may lose at most one bit against eager's own rounding error
   (the rms is a mean over many elements, so it is stable); K_MAX = 4: the max is one
   extreme element, noisier, so two bits. The floor, one rounding (unit roundoff u of the
   output's dtype: fp16 2^-11, bf16 2^-8, fp32 2^-24) of the reference's size, stands in for
   eager's error when eager happens to be exact (a copy, an output of few ops). A miscompile
   (a swapped operand, an access off by one stick, a dropped term) gives errors the size of
   the signal, orders above either bound, and fails. The upcast run happens only when rule 1
   rejected an output on finite elements: it holds every weight in fp32 (float64), twice
   the program's bytes, which a program that passes rule 1 never needs; a program with both
   kinds of outputs runs each upcast it needs once. The random sweep
   (tests/differential/test_random_programs.py) judges its fp32 programs with this rule.
   When the upcast run is impossible (a cast the graph spells out meeting an upcast weight,
   an op without a kernel for the wider dtype, a constant the module does not own), rule 1
   alone decides (`rule` stays `allclose`) and `no_reference` and the table say why.

Non-finite values are never hidden. `OutputCheck.nonfinite` counts the elements where exactly
one side is NaN, or where an infinity differs (inf vs a finite value, +inf vs -inf); the
`--check` table shows it in its own column (`nan/inf`), `run --json` as
`nonfinite_mismatches`, and any such element fails the check. When that count is not zero the
max abs and max rel errors are `inf` (the error at those elements is unbounded), never the
largest error among the finite elements alone; `run --json` writes them as null (JSON has no
infinity), next to the non-zero count that says why. Elements that are NaN on both sides, or
the same infinity on both sides, agree and are left out of the max columns.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from spyrec.errors import InputFileError, InternalError
from spyrec.bf16 import bf16_bits_to_float32

TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
# rule 2 (module docstring): the dtype each floating output's reference run computes in, and
# the output dtype's unit roundoff (the floor's one rounding)
REFERENCE_DTYPE = {"float16": "float32", "bfloat16": "float32", "float32": "float64"}
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24}
SHORT = {"float32": "fp32", "float64": "fp64"}
K_RMS = 2.0     # rule 2 (module docstring): spyrec's rms error <= K_RMS x eager's
K_MAX = 4.0     # and its max abs error <= K_MAX x eager's, each with a one-rounding floor


@dataclass(frozen=True)
class ReferenceErrors:
    """spyrec's and eager's errors against the upcast eager reference (rule 2): rms and max
    abs over the elements finite in all three, and the floors `ok` uses for eager's."""
    rms: float
    max_abs: float
    eager_rms: float
    eager_max_abs: float
    floor_rms: float
    floor_max: float

    @property
    def allowed_rms(self) -> float:
        return K_RMS * max(self.eager_rms, self.floor_rms)

    @property
    def allowed_max_abs(self) -> float:
        return K_MAX * max(self.eager_max_abs, self.floor_max)

    @property
    def ok(self) -> bool:
        return self.rms <= self.allowed_rms and self.max_abs <= self.allowed_max_abs


def reference_errors(sim: np.ndarray, eager: np.ndarray, reference: np.ndarray,
                     host_dtype: str) -> ReferenceErrors:
    """Rule 2's numbers for one floating output of dtype `host_dtype` (float64 arrays of one
    shape: spyrec's, eager's, and the upcast run's). `tests/differential` judges its random
    fp32 programs with it too."""
    finite = np.isfinite(sim) & np.isfinite(eager) & np.isfinite(reference)
    ref = reference[finite]

    def errors(a: np.ndarray) -> tuple[float, float]:
        d = np.abs(a[finite] - ref)
        return (float(np.sqrt(np.mean(d * d))), float(d.max())) if d.size else (0.0, 0.0)

    u = UNIT_ROUNDOFF[host_dtype]
    (rms, worst), (eager_rms, eager_worst) = errors(sim), errors(eager)
    scale_rms, scale_max = errors(np.zeros_like(reference))
    return ReferenceErrors(rms, worst, eager_rms, eager_worst, u * scale_rms, u * scale_max)


@dataclass(frozen=True)
class OutputCheck:
    index: int
    name: str
    dtype: str
    tolerance: float
    max_abs: float
    max_rel: float
    mismatches: int
    total: int
    problem: str | None = None    # shape or count mismatch: no element comparison possible
    key: str | None = None        # outputs.npz key when not output_<index> (a buffer's FQN)
    nonfinite: int = 0            # elements where NaN/Inf differ from eager (module docstring)
    reference: ReferenceErrors | None = None   # rule 2's errors vs the upcast eager reference
    no_reference: str | None = None            # why a floating output has no reference

    @property
    def reference_dtype(self) -> str | None:
        """The dtype rule 2's reference run computes in: fp32 for fp16/bf16, fp64 for fp32."""
        return REFERENCE_DTYPE.get(self.dtype)

    @property
    def rule(self) -> str:
        """The rule that decides (module docstring): "allclose", or "reference" when rule 1
        failed only on elements that are finite and a reference exists."""
        if self.problem or self.nonfinite or self.mismatches == 0 or self.reference is None:
            return "allclose"
        return "reference"

    @property
    def ok(self) -> bool:
        if self.problem is not None or self.nonfinite:
            return False
        return self.mismatches == 0 or (self.reference is not None and self.reference.ok)


def to_torch(array: np.ndarray, host_dtype: str):
    import torch

    if host_dtype == "bfloat16":
        return torch.from_numpy(_c_order(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(_c_order(array))


def _c_order(array: np.ndarray) -> np.ndarray:
    """C-contiguous with the same shape (np.ascontiguousarray turns a 0-d array into 1-d)."""
    return np.require(np.asarray(array), None, "C")


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


def eager_outputs(out_dir: Path, input_names: list[str], host_dtypes: dict[str, str],
                  inputs: dict[str, np.ndarray], mutated: tuple[str, ...] = (),
                  reference: Path | None = None, upcast: str | None = None
                  ) -> list[np.ndarray]:
    """Outputs of program.pt2 run in eager mode, as float64/int64/bool numpy arrays, then the
    values of the `mutated` buffers (FQNs) after the run: the module updates them in place.
    The inputs (in manifest order: the program's flat user inputs) are passed as the
    program's in_spec says, positionally or by keyword. `reference`: the `.pt2`
    `check_reference_program` already checked (else it is found and checked now).
    `upcast` ("float32" or "float64"): floating parameters, buffers and inputs in that dtype,
    for rule 2's reference."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_unflatten

    from spyrec.pt2archive import load_exported

    path = reference or check_reference_program(out_dir, input_names)
    try:
        program = load_exported(path)
        in_spec = program.call_spec.in_spec
        # the upcast run feeds fp32 where the export recorded fp16 (fp64 where fp32): its
        # input guards would refuse
        module = program.module(check_guards=upcast is None)
    except InputFileError:
        raise
    except Exception as e:  # noqa: BLE001 - torch raises many types here; all mean "damaged"
        raise InputFileError(f"{path}: torch.export.load failed ({type(e).__name__}: "
                             f"{_first_line(e)}); {RERUN}") from None
    flat = [to_torch(inputs[n], host_dtypes[n]) for n in input_names]
    if upcast is not None:
        dtype = getattr(torch, upcast)
        _drop_dtype_asserts(module)
        module = module.to(dtype)
        flat = [t.to(dtype) if t.is_floating_point() else t for t in flat]
    if in_spec is None or in_spec.num_leaves != len(flat):
        raise InputFileError(f"{path}: its in_spec takes "
                             f"{None if in_spec is None else in_spec.num_leaves} inputs, "
                             f"manifest.json lists {len(flat)}; {RERUN}")
    call = tree_unflatten(flat, in_spec)
    if not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[1], dict)):
        raise InputFileError(f"{path}: its in_spec is not (args, kwargs); {RERUN}")
    args, kwargs = call
    try:
        with torch.no_grad():
            result = module(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the inputs passed the manifest's checks
        raise InternalError(f"--check: {path} failed in PyTorch eager on these inputs "
                            f"({type(e).__name__}: {_first_line(e)})") from None
    after = [module.get_buffer(fqn) for fqn in mutated]
    return [_to_numpy(t) for t in tree_leaves(result)] + [_to_numpy(t) for t in after]


def _drop_dtype_asserts(module) -> None:
    """Remove the `aten._assert_tensor_metadata` checks torch.export records before each
    `.to()` (they pin the source dtype, fp16 or fp32), from this loaded copy of the program
    only: the upcast run feeds fp32 (fp64) there on purpose."""
    import torch

    target = torch.ops.aten._assert_tensor_metadata.default
    for gm in module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        asserts = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is target]
        for node in asserts:
            gm.graph.erase_node(node)
        if asserts:
            gm.recompile()


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0]


def _to_numpy(t) -> np.ndarray:
    import torch

    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    t = t.detach().cpu()
    if t.is_floating_point():
        return t.to(torch.float64).numpy()
    return t.numpy()


def comparable(array: np.ndarray, host_dtype: str) -> np.ndarray:
    """A simulated output in the same numeric form as `_to_numpy` gives for eager."""
    if host_dtype == "bfloat16":
        return bf16_bits_to_float32(array).astype(np.float64)
    if array.dtype.kind == "f":
        return array.astype(np.float64)
    return array


def compare(index: int, name: str, host_dtype: str, sim: np.ndarray,
            eager: np.ndarray, reference: np.ndarray | None = None) -> OutputCheck:
    """One output against eager (rule 1) and, given the fp32 `reference` of a fp16/bf16
    output, both against the reference (rule 2)."""
    tol = TOLERANCE.get(host_dtype, 0.0)
    sim = comparable(sim, host_dtype)
    eager = np.asarray(eager)
    if sim.shape != eager.shape:
        return OutputCheck(index, name, host_dtype, tol, np.nan, np.nan, sim.size, sim.size,
                           f"shape {list(sim.shape)}, eager gives {list(eager.shape)}")
    if sim.dtype.kind in "iub" and eager.dtype.kind in "iub":
        bad = int(np.count_nonzero(sim != eager))
        diff = np.abs(sim.astype(np.int64) - eager.astype(np.int64)) if sim.size else sim
        worst = float(diff.max()) if sim.size else 0.0
        return OutputCheck(index, name, host_dtype, tol, worst, worst, bad, sim.size)
    a, b = sim.astype(np.float64), eager.astype(np.float64)
    close = np.isclose(a, b, rtol=tol, atol=tol, equal_nan=True)
    nonfinite = nonfinite_mismatches(a, b)
    finite = np.isfinite(a) & np.isfinite(b)
    diff = np.abs(a[finite] - b[finite])
    with np.errstate(over="ignore"):     # eager 0, spyrec not: an infinite relative error
        rel = diff / np.maximum(np.abs(b[finite]), np.finfo(np.float64).tiny)
    if nonfinite:       # unbounded error at those elements: never a small finite number
        max_abs = max_rel = np.inf
    else:
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float(rel.max()) if rel.size else 0.0
    errors = None
    if reference is not None and host_dtype in UNIT_ROUNDOFF and reference.shape == a.shape:
        errors = reference_errors(a, b, np.asarray(reference, np.float64), host_dtype)
    return OutputCheck(index, name, host_dtype, tol, max_abs, max_rel,
                       int(np.count_nonzero(~close)), a.size, nonfinite=nonfinite,
                       reference=errors)


def nonfinite_mismatches(a: np.ndarray, b: np.ndarray) -> int:
    """Elements where exactly one of `a`, `b` is NaN, or where an infinity differs (inf vs a
    finite value, +inf vs -inf). NaN on both sides, or the same infinity, agree."""
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    inf_either = (np.isinf(a) | np.isinf(b)) & ~nan_a & ~nan_b
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero((nan_a != nan_b) | (inf_either & (a != b))))


def check_outputs(out_dir: Path, manifest, inputs: dict[str, np.ndarray],
                  sim_outputs: list[np.ndarray],
                  reference: Path | None = None) -> list[OutputCheck]:
    """Compare every simulated output (and mutated buffer, after the user outputs, as
    `simulate` returns them) with eager PyTorch on the same inputs (rule 1), and a floating
    output rule 1 rejects also with the upcast eager reference (rule 2, module docstring).
    `reference`: the `.pt2` `check_reference_program` returned; found (and hashed) once here
    otherwise, not once per eager run."""
    host = {n: t.host_dtype for n, t in manifest.tensors.items()}
    mutated = manifest.mutated_buffers
    reference = reference or check_reference_program(out_dir, list(manifest.inputs))
    call = (out_dir, list(manifest.inputs), host, inputs, tuple(fqn for fqn, _ in mutated),
            reference)
    results = eager_outputs(*call)
    eager = _aligned(results, manifest)
    names = list(manifest.outputs) + [name for _, name in mutated]
    checks = _compare_all(names, host, sim_outputs, eager, len(results) - len(mutated))
    # rule 2 only where rule 1 rejected an output it could pass: the upcast run holds every
    # weight in fp32 (fp64), twice the program's bytes, which a passing program never needs
    for dtype in sorted({c.reference_dtype for c in checks if _wants_reference(c)}):
        checks = _with_reference(checks, dtype, call, manifest, sim_outputs, eager)
    for k, (fqn, _) in enumerate(mutated):
        checks[len(manifest.outputs) + k] = replace(checks[len(manifest.outputs) + k], key=fqn)
    return checks


def _wants_reference(c: OutputCheck) -> bool:
    """Rule 1 rejected `c` on finite elements only, and rule 2 applies to its dtype."""
    return (not c.ok and c.problem is None and not c.nonfinite
            and c.reference_dtype is not None)


def _with_reference(checks: list[OutputCheck], dtype: str, call: tuple, manifest,
                    sim_outputs: list[np.ndarray], eager: list) -> list[OutputCheck]:
    """`checks` with every output that wants a `dtype` reference judged by rule 2 against
    the program run upcast to `dtype`; when that run is impossible (an op without a kernel
    for `dtype`, a cast the graph spells out meeting an upcast weight), rule 1's verdict
    stands and `no_reference` says why."""
    wanting = [i for i, c in enumerate(checks)
               if _wants_reference(c) and c.reference_dtype == dtype]
    try:
        upcast = _aligned(eager_outputs(*call, upcast=dtype), manifest)
    except (InternalError, InputFileError) as e:
        why = f"with weights and inputs upcast to {SHORT[dtype]}, " + \
            str(e).removeprefix("--check: ")
        return [replace(c, no_reference=why) if i in wanting else c
                for i, c in enumerate(checks)]
    checks = list(checks)
    for i in wanting:
        c = checks[i]
        if i < len(upcast) and upcast[i] is not None:
            checks[i] = compare(c.index, c.name, c.dtype, sim_outputs[i], eager[i], upcast[i])
    return checks


def _aligned(results: list, manifest) -> list:
    """Eager's results laid out as the simulated outputs are (user outputs, then mutated
    buffers): None for user outputs eager does not return."""
    n_user = len(results) - len(manifest.mutated_buffers)
    return results[:n_user] + [None] * (len(manifest.outputs) - n_user) + results[n_user:]


def _compare_all(names: list[str], host: dict[str, str], sim_outputs: list[np.ndarray],
                 expected: list, n_user: int) -> list[OutputCheck]:
    """`compare` (rule 1) for every output; `n_user`: the user outputs eager returned."""
    checks = []
    for i, name in enumerate(names):
        if expected[i] is None:
            checks.append(OutputCheck(i, name, host[name], 0.0, np.nan, np.nan, 0, 0,
                                      f"eager returns only {n_user} outputs"))
            continue
        checks.append(compare(i, name, host[name], sim_outputs[i], expected[i]))
    return checks


def format_checks(checks: list[OutputCheck]) -> str:
    """The --check table; `nan/inf` counts the elements where NaN/Inf differ from eager. For
    a floating output rule 1 rejected, the `vs ref` columns give spyrec's and eager's rms /
    max abs errors against the upcast eager reference (rule 2: fp32 for fp16/bf16, fp64 for
    fp32), and the result says which rule decided, against which reference."""
    lines = [f"{'output':<10} {'tensor':<16} {'dtype':<9} {'max abs err':>12} "
             f"{'max rel err':>12} {'tolerance':>9} {'mismatches':>12} {'nan/inf':>7}  "
             f"{'vs ref: spyrec rms/max':>27} {'eager rms/max':>19}  result"]
    for c in checks:
        label = c.key or f"output_{c.index}"
        lines.append(f"{label:<10} {c.name:<16.16} {c.dtype:<9} {c.max_abs:>12.4g} "
                     f"{c.max_rel:>12.4g} {c.tolerance:>9.0e} {c.mismatches:>5}/{c.total:<6} "
                     f"{c.nonfinite:>7}  {_reference_columns(c)}  {_verdict(c)}")
    return "\n".join(lines)


def _reference_columns(c: OutputCheck) -> str:
    r = c.reference
    if r is None:
        return f"{'-':>27} {'-':>19}"
    return f"{r.rms:>13.4g} / {r.max_abs:<11.4g} {r.eager_rms:>9.4g} / {r.eager_max_abs:<7.4g}"


def _verdict(c: OutputCheck) -> str:
    if c.problem:
        return f"MISMATCH: {c.problem}"
    if c.nonfinite:
        return f"MISMATCH: {c.nonfinite} NaN/Inf differ from eager"
    if c.mismatches == 0:
        return "ok"
    ref = SHORT.get(c.reference_dtype or "", "upcast")
    if c.reference is None:
        return "MISMATCH" + (f" (no {ref} reference: {c.no_reference})" if c.no_reference
                             else "")
    bounds = f"rms <= {K_RMS:g}x, max <= {K_MAX:g}x eager's error vs {ref}"
    if c.reference.ok:
        return f"ok by reference rule ({bounds})"
    return f"MISMATCH: worse than eager vs {ref} (allowed {bounds})"


def describe_failure(c: OutputCheck) -> str:
    """One failed row for the CheckMismatch message: its key, tensor and what went wrong,
    with both errors against the upcast reference when there is one."""
    label = c.key or f"output_{c.index}"
    if c.problem:
        return f"{label} ({c.name}) {c.problem}"
    what = f"{c.mismatches}/{c.total} elements, max abs err {c.max_abs:.4g}"
    if c.nonfinite:
        what += f", {c.nonfinite} NaN/Inf differ"
    r, ref = c.reference, SHORT.get(c.reference_dtype or "", "upcast")
    if r is None and c.no_reference:
        what += f"; no {ref} reference ({c.no_reference})"
    if r is not None and not c.nonfinite:
        what += (f"; vs {ref} reference spyrec rms {r.rms:.4g} max {r.max_abs:.4g}, eager rms "
                 f"{r.eager_rms:.4g} max {r.eager_max_abs:.4g} (allowed rms {r.allowed_rms:.4g} "
                 f"max {r.allowed_max_abs:.4g})")
    return f"{label} ({c.name}) {what}"
