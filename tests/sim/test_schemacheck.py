"""The compiled schema check must agree with jsonschema: it may never accept a file jsonschema
rejects (the loader trusts its yes), and should not reject one jsonschema accepts (that only
costs speed, but means a keyword is implemented wrongly)."""

import copy
import json
import random

import pytest

from spyrec.sim.directory import read_output_dir
from spyrec.sim.files import SCHEMA_DIR, fast_check, sdsc_schema, validator
from spyrec.sim.schemacheck import Unsupported, compile_schema
from tests.jsonpaths import json_paths
from tests.programs import Lambda, compile_pt2, export

REPLACEMENTS = [None, True, False, 0, -1, 1, 31, 32, 2**40, 1.5, "", "x", "c0", "fp16",
                "sdsc_1.json", "spyrec-sdsc/1", [], {}, [0, 0], [1, 1], [1, 1, 1], ["c0"],
                {"hbm": 0}, {"hbm": 0, "lx": 0}, {"c0": [0, 1]}]


def _mutate(doc, rng: random.Random):
    doc = copy.deepcopy(doc)
    path = rng.choice(list(json_paths(doc))[1:])
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    key, kind = path[-1], rng.randrange(4)
    if kind == 0 or not isinstance(parent, (dict, list)):
        parent[key] = copy.deepcopy(rng.choice(REPLACEMENTS))
    elif kind == 1:
        del parent[key]
    elif kind == 2 and isinstance(parent, dict):
        parent["extra" if rng.random() < 0.5 else "r7"] = copy.deepcopy(parent[key])
    else:
        if isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        else:
            parent[key] = [copy.deepcopy(parent[key])]
    return doc


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """Real files of a compiled program with a reduction and a matmul."""
    tmp = tmp_path_factory.mktemp("schema")
    import torch

    module = Lambda(lambda m, x: torch.softmax(x @ m.w, dim=-1).sum(0),
                    w=torch.randn(64, 64))
    out = compile_pt2(export(tmp, module, (torch.randn(8, 64),)), tmp / "out")
    read_output_dir(out)        # the real files pass
    docs = {"manifest": [json.loads((out / "manifest.json").read_text())],
            "opspecs": [json.loads((out / "opspecs.json").read_text())],
            "report": [json.loads((out / "report.json").read_text())],
            "sdsc": [], "fused-sdsc": []}
    for path in sorted(out.glob("sdsc_*.json")):   # one-op files, and fused ones (fusion)
        doc = json.loads(path.read_text())
        docs[sdsc_schema(doc)].append(doc)
    assert docs["sdsc"] and docs["fused-sdsc"]
    return docs


@pytest.mark.parametrize("schema", ["manifest", "sdsc", "fused-sdsc", "opspecs", "report"])
def test_compiled_check_agrees_with_jsonschema_on_mutated_files(documents, schema):
    check, judge = compile_schema(SCHEMA_DIR, schema), validator(schema)
    rng = random.Random(f"schemacheck-{schema}")
    verdicts = {True: 0, False: 0}
    for doc in documents[schema]:
        assert check(doc) and judge.is_valid(doc)
    for _ in range(400 if schema != "report" else 150):
        doc = _mutate(rng.choice(documents[schema]), rng)
        want = judge.is_valid(doc)
        assert check(doc) == want, (want, json.dumps(doc)[:3000])
        verdicts[want] += 1
    assert verdicts[False] > 50 and verdicts[True] > 10, verdicts


def test_an_integral_float_is_rejected_by_the_fast_check_but_jsonschema_decides(documents):
    doc = copy.deepcopy(documents["sdsc"][0])
    (body,) = doc.values()
    body["numCoresUsed_"] = float(body["numCoresUsed_"])   # 2.0 is an integer to JSON Schema
    assert not compile_schema(SCHEMA_DIR, "sdsc")(doc)
    assert validator("sdsc").is_valid(doc)


def test_a_bool_is_not_an_integer_and_one_is_not_true(documents):
    check = compile_schema(SCHEMA_DIR, "sdsc")
    doc = copy.deepcopy(documents["sdsc"][0])
    (body,) = doc.values()
    body["numCoresUsed_"] = True
    assert not check(doc) and not validator("sdsc").is_valid(doc)
    doc = copy.deepcopy(documents["sdsc"][0])
    (body,) = doc.values()
    (dsc,) = body["dscs_"][0].values()
    dsc["scheduleTree_"][0]["isStartAddrSymbolic_"] = True     # the schema wants 1
    assert not check(doc) and not validator("sdsc").is_valid(doc)


def test_every_spyrec_schema_compiles(tmp_path):
    assert all(fast_check(s) is not None
               for s in ("manifest", "sdsc", "fused-sdsc", "superdsc", "opspecs", "report"))
    (tmp_path / "x.schema.json").write_text(json.dumps({"anyOf": [{"type": "string"}]}))
    with pytest.raises(Unsupported, match="anyOf"):
        compile_schema(tmp_path, "x")
