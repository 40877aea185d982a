"""Catalog what the tiny `transformers` models of `tests/models/hf.py` export to, and what spyrec
says about them.

    python tests/models/catalog.py [--family NAME]... [--markdown tests/models/CATALOG.md]
                                   [--json FILE] [--keep DIR]

For each family: export it (timed) the ordinary way, `torch.export.save` it to a temporary `.pt2`,
then read the graph STORED in the archive (`<archive>/models/model.json`) and list

- the op histogram (node targets, counts);
- for every node whether it is data-dependent (a transitive input is a user input or a buffer the
  program mutates), constant (depends on parameters / buffers / lifted constants only: foldable
  at compile time) or shape-only (no tensor input at all but what shape-only ops made: arange,
  full, ...; foldable without looking at any weight);
- higher-order ops with the contents of their subgraphs;
- `python -m spyrec compile X.pt2 -o OUT`: exit code and the first lines of stderr.

Because spyrec stops at the first wall (a higher-order op refused before anything else is looked at),
it also lists what spyrec's torch front end would see past it: the graph after
`torch.export.load(...).run_decompositions(<spyrec's table>)`, its ops that have no lowering in
`spyrec.frontend.registry.LOWERINGS`, and whether each of those is foldable. This imports spyrec
read-only (the decomposition table and the lowering registry); nothing in spyrec is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DATA, CONST, SHAPE = "data", "const", "shape"
STDERR_LINES = 6


# --- the stored graph (JSON) -----------------------------------------------------------------

def _tensor_names(arg) -> list[str]:
    """Names of the tensors an argument of a serialized node refers to (not inside subgraphs)."""
    out: list[str] = []

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "as_graph":
                    continue
                if k == "as_tensor" and isinstance(v, dict) and "name" in v:
                    out.append(v["name"])
                elif k == "as_tensors" and isinstance(v, list):  # [{"name": ...}, ...]
                    out.extend(t["name"] for t in v if isinstance(t, dict) and "name" in t)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(arg)
    return out


def _short(target: str) -> str:
    return target.removeprefix("torch.ops.")


def _is_inplace(target: str) -> bool:
    parts = _short(target).split(".")
    return len(parts) == 3 and parts[0] == "aten" and parts[1].endswith("_") \
        and not parts[1].startswith("_")


def read_model_json(pt2: Path) -> dict:
    with zipfile.ZipFile(pt2) as z:
        name = next(n for n in z.namelist() if n.endswith("models/model.json"))
        return json.loads(z.read(name))


def _subgraph_ops(node: dict) -> list[dict]:
    subs = []
    for inp in node.get("inputs", []):
        g = inp.get("arg", {}).get("as_graph")
        if g:
            c = Counter(_short(n["target"]) for n in g["graph"]["nodes"])
            subs.append({"name": g.get("name"), "ops": dict(c.most_common()),
                         "nodes": len(g["graph"]["nodes"])})
    return subs


def analyze_stored(model: dict) -> dict:
    gm = model["graph_module"]
    graph, sig = gm["graph"], gm["signature"]
    kind_of: dict[str, str] = {}
    for spec in sig["input_specs"]:
        (kind, body), = spec.items()
        names = _tensor_names(body.get("arg", {})) or [body.get("arg", {}).get("name")]
        for n in names:
            if n:
                kind_of[n] = kind
    producer: dict[str, dict] = {}
    for node in graph["nodes"]:
        for o in _tensor_names(node.get("outputs", [])):
            producer[o] = node

    # placeholders written in place (through any chain of first arguments): runtime state
    mutated: set[str] = set()
    for node in graph["nodes"]:
        if _is_inplace(node["target"]) and node["inputs"]:
            names = _tensor_names(node["inputs"][0]["arg"])
            seen = 0
            while names and seen < 100:
                name = names[0]
                if name in kind_of:
                    mutated.add(name)
                    break
                p = producer.get(name)
                names = _tensor_names(p["inputs"][0]["arg"]) if p and p["inputs"] else []
                seen += 1

    cls: dict[str, str] = {}
    for name, kind in kind_of.items():
        cls[name] = DATA if kind == "user_input" or name in mutated else CONST
    rank = {SHAPE: 0, CONST: 1, DATA: 2}
    per_op: dict[str, Counter] = defaultdict(Counter)
    sub_ops: dict[str, Counter] = defaultdict(Counter)
    hops = []
    for node in graph["nodes"]:
        ins = [n for i in node["inputs"] for n in _tensor_names(i.get("arg"))]
        c = max((cls.get(n, SHAPE) for n in ins), key=rank.__getitem__, default=SHAPE)
        for o in _tensor_names(node.get("outputs", [])):
            cls[o] = c
        t = _short(node["target"])
        per_op[t][c] += 1
        if t.startswith("higher_order."):
            subs = _subgraph_ops(node)
            hops.append({"target": t, "class": c, "subgraphs": subs})
            for sg in subs:  # a subgraph node is as foldable as the op's operands
                for st, sn in sg["ops"].items():
                    sub_ops[st][c] += sn
    hist = Counter({t: sum(c.values()) for t, c in per_op.items()})
    return {
        "nodes": len(graph["nodes"]),
        "inputs": {k: sum(1 for v in kind_of.values() if v == k) for k in set(kind_of.values())},
        "mutated_inputs": sorted(mutated),
        "histogram": dict(hist.most_common()),
        "classes": {t: dict(c) for t, c in per_op.items()},
        "higher_order": hops,
        "subgraph_classes": {t: dict(c) for t, c in sub_ops.items()},
    }


# --- what spyrec's torch front end would see ---------------------------------------------------

def spyrec_registry():
    """The aten ops spyrec lowers and those it passes through: the full lowering table."""
    from spyrec.frontend.lowerings import register_lowerings
    from spyrec.frontend.registry import LOWERINGS, PASSTHROUGH

    register_lowerings()
    return set(LOWERINGS), set(PASSTHROUGH)


def analyze_decomposed(pt2: Path) -> dict:
    import torch
    from torch.export.graph_signature import InputKind
    from spyrec.frontend.load import decomposition_table

    lowered, passthrough = spyrec_registry()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.load(str(pt2)).run_decompositions(decomposition_table())
    mutated = set(ep.graph_signature.buffers_to_mutate.values())
    cls: dict = {}
    for spec in ep.graph_signature.input_specs:
        data = spec.kind == InputKind.USER_INPUT or (spec.kind == InputKind.BUFFER and
                                                      spec.target in mutated)
        cls[spec.arg.name] = DATA if data else CONST
    rank = {SHAPE: 0, CONST: 1, DATA: 2}
    per_op: dict[str, Counter] = defaultdict(Counter)
    for n in ep.graph.nodes:
        if n.op != "call_function":
            continue
        c = max((cls.get(a.name, SHAPE) for a in n.all_input_nodes), key=rank.__getitem__,
                default=SHAPE)
        cls[n.name] = c
        per_op[str(n.target)][c] += 1
    hist = Counter({t: sum(c.values()) for t, c in per_op.items()})
    missing = {t: dict(per_op[t]) for t in hist if t not in lowered and t not in passthrough}
    return {
        "nodes": sum(1 for n in ep.graph.nodes if n.op == "call_function"),
        "histogram": dict(hist.most_common()),
        "classes": {t: dict(c) for t, c in per_op.items()},
        "buffers_to_mutate": dict(ep.graph_signature.buffers_to_mutate),
        "not_lowered": missing,
    }


# --- one family --------------------------------------------------------------------------------

def compile_pt2(pt2: Path, out: Path, timeout: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "spyrec", "compile", str(pt2), "-o", str(out)],
                           capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"exit": None, "stderr": [f"timed out after {timeout:.0f} s"],
                "seconds": time.perf_counter() - t}
    lines = [ln.replace(str(pt2.parent), "<tmp>") for ln in p.stderr.splitlines() if ln.strip()]
    unsupported = Counter(m.group(1) for ln in lines
                          if (m := re.match(r"\s+(\S+) \(node ", ln)))
    return {"exit": p.returncode, "stderr": lines[:STDERR_LINES], "stderr_lines": len(lines),
            "unsupported": dict(unsupported), "seconds": round(time.perf_counter() - t, 2)}


def catalog_one(name: str, workdir: Path, timeout: float) -> dict:
    import torch
    from tests.models import hf

    rec: dict = {"family": name, "export_kwargs": hf.export_kwargs(name)}
    try:
        module, example_inputs = hf.FAMILIES[name]()
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(module, example_inputs, **hf.export_kwargs(name))
        rec["export_seconds"] = round(time.perf_counter() - t, 2)
        rec["export"] = "ok"
    except Exception as e:  # report any failure of the export itself
        rec["export"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        rec["export_traceback_tail"] = traceback.format_exc().splitlines()[-4:]
        return rec
    pt2 = workdir / f"{name}.pt2"
    torch.export.save(ep, str(pt2))
    rec["pt2_bytes"] = pt2.stat().st_size
    rec["stored"] = analyze_stored(read_model_json(pt2))
    rec["compile"] = compile_pt2(pt2, workdir / f"{name}.out", timeout)
    if rec["stored"]["higher_order"]:
        # past the first wall: the same program with its higher-order ops inlined (and
        # functionalized: in-place writes become buffer mutations), nothing decomposed
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inlined = torch.export.load(str(pt2)).run_decompositions({})
        pt2b = workdir / f"{name}.inlined.pt2"
        torch.export.save(inlined, str(pt2b))
        rec["compile_inlined"] = compile_pt2(pt2b, workdir / f"{name}.inlined.out", timeout)
    try:
        rec["decomposed"] = analyze_decomposed(pt2)
    except Exception as e:
        rec["decomposed"] = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"}
    return rec


# --- markdown ----------------------------------------------------------------------------------

def _classes(c: dict) -> str:
    return ", ".join(f"{k} {c[k]}" for k in (DATA, CONST, SHAPE) if c.get(k))


def _fold_word(c: dict) -> str:
    if not c.get(DATA):
        return "foldable"
    if c.get(CONST) or c.get(SHAPE):
        return "mixed"
    return "data"


def render_family(rec: dict) -> list[str]:
    out = [f"### {rec['family']}", ""]
    kw = rec.get("export_kwargs") or {}
    how = "torch.export.export(module, example_inputs" + \
        "".join(f", {k}={v!r}" for k, v in kw.items()) + ")"
    if rec["export"] != "ok":
        out += [f"- export (`{how}`): **FAILED** `{rec['export']}`", ""]
        out += ["```"] + rec.get("export_traceback_tail", []) + ["```", ""]
        return out
    s, c = rec["stored"], rec["compile"]
    out += [f"- export (`{how}`): ok in {rec['export_seconds']} s; .pt2 {rec['pt2_bytes']} bytes",
            f"- stored graph: {s['nodes']} call nodes; inputs "
            + ", ".join(f"{k} {v}" for k, v in sorted(s["inputs"].items()))
            + (f"; written in place: {', '.join(s['mutated_inputs'])}" if s["mutated_inputs"] else ""),
            f"- `spyrec compile`: exit {c['exit']} ({c['seconds']} s)"]
    if c["stderr"]:
        out += ["  ```"] + [f"  {ln}" for ln in c["stderr"]] + ["  ```"]
    ci = rec.get("compile_inlined")
    if ci:
        out.append(f"- `spyrec compile` of the same program with its higher-order ops inlined "
                   f"(`ep.run_decompositions({{}})`): exit {ci['exit']} ({ci['seconds']} s)"
                   + (f"; unsupported: " + ", ".join(f"`{t}` x{n}" for t, n in
                                                     ci["unsupported"].items())
                      if ci["unsupported"] else ""))
        out += ["  ```"] + [f"  {ln}" for ln in ci["stderr"][:3]] + ["  ```"]
    out += ["", "| op (stored graph) | count | data / const / shape |", "|---|---:|---|"]
    for t, n in s["histogram"].items():
        out.append(f"| `{t}` | {n} | {_classes(s['classes'][t])} |")
    data_ops = [t for t, cc in s["classes"].items() if cc.get(DATA)]
    fold_ops = [t for t, cc in s["classes"].items() if not cc.get(DATA)]
    out += ["", f"- data-dependent ops (at least one node): {', '.join(f'`{t}`' for t in data_ops)}",
            f"- foldable ops (every node depends only on constants/shapes): "
            f"{', '.join(f'`{t}`' for t in fold_ops) or '—'}"]
    for h in s["higher_order"]:
        for sg in h["subgraphs"]:
            out.append(f"- higher-order `{h['target']}` ({h['class']}) subgraph `{sg['name']}`, "
                       f"{sg['nodes']} nodes: "
                       + ", ".join(f"`{t}` {n}" for t, n in sg["ops"].items()))
    d = rec.get("decomposed", {})
    if "error" in d:
        out.append(f"- after spyrec's decomposition: **error** `{d['error']}`")
    elif d:
        miss = d["not_lowered"]
        out.append(f"- after spyrec's decomposition: {d['nodes']} call nodes"
                   + (f"; buffer mutations {d['buffers_to_mutate']}" if d["buffers_to_mutate"] else "")
                   + "; ops without a lowering: "
                   + (", ".join(f"`{t}` ({_classes(cc)})" for t, cc in miss.items()) or "none"))
    out.append("")
    return out


def render(records: list[dict], lowered: set[str], passthrough: set[str], meta: dict) -> str:
    lines = ["# Real models: export and spyrec catalog", "",
             "Generated by `python tests/models/catalog.py` (see its docstring); models from "
             "`tests/models/hf.py`.", "",
             f"- transformers {meta['transformers']}, torch {meta['torch']}, "
             f"spyrec worktree commit {meta['commit']}, {meta['date']}",
             "- classes: **data** = a transitive input is a user input or a buffer written in "
             "place; **const** = depends on parameters/buffers/constants only (foldable at compile "
             "time); **shape** = depends on no input tensor at all (arange/full/... of static "
             "shapes).", "",
             "## Summary", "",
             "Columns: the ordinary export; `spyrec compile` of it (exit code, first stderr line); "
             "`spyrec compile` of the same program with higher-order ops inlined by "
             "`ep.run_decompositions({})` (exit code; the ops it reports unsupported, with counts); "
             "ops spyrec's torch front end has no lowering for after its own decomposition.", "",
             "| family | export | stored call nodes | spyrec compile | unsupported ops listed, else first stderr line | "
             "compile, HOPs inlined | not lowered after spyrec's decomposition |",
             "|---|---|---:|---|---|---|---|"]
    for r in records:
        if r["export"] != "ok":
            lines.append(f"| {r['family']} | FAILED: `{r['export'][:120]}` | | | | | |")
            continue
        c, d = r["compile"], r.get("decomposed", {})
        miss = ", ".join(f"`{t}`" for t in d.get("not_lowered", {})) if "error" not in d \
            else f"error `{d['error'][:80]}`"
        first = (", ".join(f"`{t}` x{n}" for t, n in c["unsupported"].items()) if c["unsupported"]
                 else (c["stderr"][0] if c["stderr"] else "")).replace("|", "\\|")
        ci = r.get("compile_inlined")
        inl = "—" if not ci else f"exit {ci['exit']}" + (
            ": " + ", ".join(f"`{t}` x{n}" for t, n in ci["unsupported"].items())
            if ci["unsupported"] else (f": {ci['stderr'][0][:120]}" if ci["stderr"] else ""))
        lines.append(f"| {r['family']} | ok ({r['export_seconds']} s) | {r['stored']['nodes']} | "
                     f"exit {c['exit']} | {first[:160]} | {inl.replace('|', chr(92) + '|')} | "
                     f"{miss} |")
    lines += ["", "## Distinct ops of the stored graphs", "",
              "`lowered`: the name (without `torch.ops.`) is registered with `@lowering` in "
              "`spyrec/frontend/aten_*.py` (or is a pass-through assert). `decomposed`: not "
              "registered, but absent after spyrec's decomposition of every family using it "
              "(torch's default table minus `KEEP_OPS`), so it reaches the lowering as other ops. "
              "`NO`: reaches the lowering as is. Both are about spyrec's torch front end "
              "(`spyrec.frontend.load`: `torch.export.load` + `run_decompositions`); a front end "
              "reading the stored JSON without decomposing would see the stored names. Fold: `foldable` = in every program every node of "
              "it depends only on constants/shapes; `mixed`/`data` otherwise. Ops inside a "
              "higher-order op's subgraph are counted too, with the class of the op's operands.",
              "",
              "| op | programs | nodes | lowered? | fold | data / const / shape (all families) |",
              "|---|---:|---:|---|---|---|"]
    fams: dict[str, set] = defaultdict(set)
    totals: dict[str, Counter] = defaultdict(Counter)
    still: dict[str, bool] = defaultdict(bool)
    sub_only: dict[str, set] = defaultdict(set)
    for r in records:
        if r["export"] != "ok":
            continue
        dh = r.get("decomposed", {}).get("histogram", {})
        for t, cc in r["stored"]["subgraph_classes"].items():
            if t not in r["stored"]["classes"]:
                sub_only[t].add(r["family"])
        for t, cc in list(r["stored"]["classes"].items()) + \
                list(r["stored"]["subgraph_classes"].items()):
            fams[t].add(r["family"])
            totals[t].update(cc)
            if t.replace("_operator.getitem", "<built-in function getitem>") in dh or \
                    t.removeprefix("higher_order.") in dh:
                still[t] = True
    for t in sorted(fams, key=lambda t: (-len(fams[t]), t)):
        name = "<built-in function getitem>" if t == "_operator.getitem" else t
        if t.startswith("higher_order."):
            status = "**NO** (refused when reading the .pt2; run_decompositions inlines it)"
        elif name in lowered:
            status = "lowered"
        elif name in passthrough:
            status = "pass-through"
        elif not still[t]:
            status = "decomposed"
        else:
            status = "**NO**"
        where = " (only inside a higher-order op's subgraph)" if sub_only[t] == fams[t] else ""
        lines.append(f"| `{t}`{where} | {len(fams[t])} | {sum(totals[t].values())} | {status} | "
                     f"{_fold_word(totals[t])} | {_classes(totals[t])} |")
    lines += ["", "## Ops without a lowering after spyrec's decomposition", "",
              "What spyrec's torch front end (`torch.export.load` + `run_decompositions`) hands to "
              "the lowering that `LOWERINGS` has no entry for.", "",
              "| op | programs | nodes | fold | data / const / shape |", "|---|---:|---:|---|---|"]
    mf: dict[str, set] = defaultdict(set)
    mt: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        for t, cc in r.get("decomposed", {}).get("not_lowered", {}).items():
            mf[t].add(r["family"])
            mt[t].update(cc)
    for t in sorted(mf, key=lambda t: (-len(mf[t]), t)):
        lines.append(f"| `{t}` | {len(mf[t])} | {sum(mt[t].values())} | {_fold_word(mt[t])} | "
                     f"{_classes(mt[t])} |")
    lines += ["", "## Per family", ""]
    for r in records:
        lines += render_family(r)
    return "\n".join(lines) + "\n"


NOTES_BEGIN, NOTES_END = "<!-- notes:begin -->", "<!-- notes:end -->"


def _keep_notes(path: Path, md: str) -> str:
    """Carry the hand-written block between the notes markers of an existing file over, after
    the generated header."""
    if not path.exists():
        return md
    old = path.read_text()
    if NOTES_BEGIN not in old or NOTES_END not in old:
        return md
    notes = old[old.index(NOTES_BEGIN):old.index(NOTES_END) + len(NOTES_END)]
    head, sep, rest = md.partition("## Summary")
    return head + notes + "\n\n" + sep + rest


def main(argv=None) -> int:
    from tests.models import hf

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", action="append", choices=sorted(hf.FAMILIES),
                    help="only these (repeatable); default every family")
    ap.add_argument("--markdown", type=Path, help="write the catalog as Markdown here")
    ap.add_argument("--json", type=Path, help="write the raw records as JSON here")
    ap.add_argument("--keep", type=Path, help="keep the .pt2 files and spyrec outputs here")
    ap.add_argument("--timeout", type=float, default=600, help="per spyrec compile, seconds")
    args = ap.parse_args(argv)

    import torch
    import transformers

    names = args.family or list(hf.FAMILIES)
    records = []
    with tempfile.TemporaryDirectory(prefix="spyrec-models-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for name in names:
            t = time.perf_counter()
            rec = catalog_one(name, workdir, args.timeout)
            records.append(rec)
            c = rec.get("compile", {})
            print(f"{name}: export {rec['export'][:100]}; nodes {rec.get('stored', {}).get('nodes')};"
                  f" spyrec exit {c.get('exit')}: {(c.get('stderr') or [''])[0][:140]}"
                  f" [{time.perf_counter() - t:.1f} s]", file=sys.stderr, flush=True)
    lowered, passthrough = spyrec_registry()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                            capture_output=True).stdout.strip()
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "records": records}, indent=1) + "\n")
    md = render(records, lowered, passthrough, meta)
    if args.markdown:
        md = _keep_notes(args.markdown, md)
        args.markdown.write_text(md)
    else:
        sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
