"""A damaged or hand-edited graph JSON is one clear error (exit 2 or 3), never a crash.

Random structural mutations of a real model.json (keys dropped, values of the wrong type,
references renamed, lists emptied) go through the fast reader and the lowering; the only
acceptable outcomes are a compiled Graph or a SpyrecError with one line (exit 2 or 3; exit 70
naming the node for a value of the wrong type that only the lowering notices).
"""

import copy
import json
import random
import zipfile

import pytest
import torch

from spyrec.errors import SpyrecError
from spyrec.frontend.load import load_program
from spyrec.frontend.driver import lower_program
from tests.jsonpaths import json_paths
from tests.programs import Lambda, export

MUTATIONS = 200


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    module = Lambda(lambda m, x: torch.softmax(x @ m.w, -1).split([3, 5], 1)[1] * 2,
                    w=torch.randn(16, 8))
    pt2 = export(tmp, module, (torch.randn(4, 16),))
    with zipfile.ZipFile(pt2) as zf:
        member = next(n for n in zf.namelist() if n.endswith("models/model.json"))
        return pt2, member, json.loads(zf.read(member))




def _mutate(model, rng):
    model = copy.deepcopy(model)
    paths = [p for p in json_paths(model["graph_module"]) if p]
    path = rng.choice(paths)
    parent = model["graph_module"]
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    choice = rng.randrange(5)
    if choice == 0 and isinstance(parent, dict):
        del parent[key]
    elif choice == 1:
        parent[key] = rng.choice([None, 7, -1, "x", [], {}, 1.5, True])
    elif choice == 2 and isinstance(parent[key], str):
        parent[key] = parent[key] + "_renamed"
    elif choice == 3 and isinstance(parent[key], list):
        parent[key] = []
    else:
        parent[key] = {"as_tensor": {"name": "nowhere"}}
    return model


def test_mutated_graph_json_is_a_clear_error(source, tmp_path):
    pt2, member, model = source
    rng = random.Random(1234)
    outcomes = {"compiled": 0, "refused": 0, "internal": 0}
    for i in range(MUTATIONS):
        bad = tmp_path / f"m{i}.pt2"
        mutated = _mutate(model, rng)
        with zipfile.ZipFile(pt2) as zin, zipfile.ZipFile(bad, "w") as zout:
            for name in zin.namelist():
                zout.writestr(name, json.dumps(mutated) if name == member else zin.read(name))
        try:
            lower_program(load_program(bad, "fast"))
            outcomes["compiled"] += 1
        except SpyrecError as e:
            assert str(e) and "\n" not in str(e).strip() or e.exit_code == 3, str(e)
            outcomes["internal" if e.exit_code == 70 else "refused"] += 1
        bad.unlink()
    assert outcomes["refused"] > MUTATIONS // 2, outcomes
    assert outcomes["internal"] <= MUTATIONS // 10, outcomes  # type confusion deep in a lowering
