"""The full lowering table (spyrec/frontend/lowerings.py): every module that registers a
lowering is imported by `register_lowerings`, so `lowerable` and the model catalog's list of
unlowered ops (`tests/models/catalog.py`) see every lowering.

Each check runs in a fresh interpreter: in this one, other tests have imported the lowering
modules already, which would hide a module `register_lowerings` forgets.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

EVERY_FRONTEND_MODULE = """
import importlib, pkgutil
import spyrec.frontend
for m in pkgutil.iter_modules(spyrec.frontend.__path__):
    importlib.import_module(f"spyrec.frontend.{m.name}")
"""


def _lowerings_after(code: str) -> set[str]:
    """The aten ops in the lowering table after `code` ran in a fresh interpreter."""
    script = code + ("\nimport json\nfrom spyrec.frontend.registry import LOWERINGS\n"
                     "print(json.dumps(sorted(LOWERINGS)))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return set(json.loads(done.stdout))


def test_register_lowerings_fills_the_whole_table():
    every = _lowerings_after(EVERY_FRONTEND_MODULE)
    registered = _lowerings_after("from spyrec.frontend.lowerings import register_lowerings\n"
                                  "register_lowerings()")
    assert len(every) > 200
    assert sorted(every - registered) == [], "import their module in register_lowerings"


def test_the_model_catalog_lists_every_lowering():
    every = _lowerings_after(EVERY_FRONTEND_MODULE)
    catalog = _lowerings_after("from tests.models.catalog import spyrec_registry\n"
                               "spyrec_registry()")
    assert sorted(every - catalog) == []
