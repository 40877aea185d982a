"""Device facts are stated once (spyrec/device.py); everything else imports them.

A second `STICK_BYTES = 128` or a bare 1625344 somewhere is how the compiler and the simulator
drift apart (the reference has exactly that bug with the LX limit, reference/G §1).
"""

import ast
from pathlib import Path

import spyrec
from spyrec import device
from spyrec.layout import STICK_BYTES as LAYOUT_STICK_BYTES
from spyrec.passes.memory_planning import ALIGN_BYTES as PLANNING_ALIGN
from spyrec.costmodel import DEFAULT_PARAMS
from spyrec.passes.work_division import WorkDivision
from spyrec.sim import cost, verify

ROOT = Path(spyrec.__file__).parent
FACTS = {"STICK_BYTES", "CORES", "MAX_CORES", "ALIGN_BYTES", "LX_BYTES_PER_CORE",
         "LX_USABLE_BYTES_PER_CORE", "HBM_BYTES_PER_S", "DEVICE_MEMORY_BYTES"}
NUMBERS = {1_625_344, 1_677_721, 204.8e9, 2 * 2**20}


def _statements(path: Path) -> list[str]:
    """Module-level assignments of a fact's name to a number, and any of the facts' numbers."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            found += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id in FACTS]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float) and \
                node.value in NUMBERS:
            found.append(str(node.value))
    return found


def test_only_device_py_states_device_facts():
    files = [p for p in ROOT.rglob("*.py") if p != ROOT / "device.py"]
    offenders = {str(p.relative_to(ROOT)): s for p in files if (s := _statements(p))}
    assert not offenders, offenders
    assert {"STICK_BYTES", "CORES", "LX_USABLE_BYTES_PER_CORE",
            "HBM_BYTES_PER_S"} <= set(_statements(ROOT / "device.py"))


def test_the_values_and_their_old_names():
    assert (device.STICK_BYTES, device.CORES, device.ALIGN_BYTES) == (128, 32, 128)
    assert device.LX_USABLE_BYTES_PER_CORE == 1_625_344 < device.LX_BYTES_PER_CORE == 2**21
    assert LAYOUT_STICK_BYTES is device.STICK_BYTES and PLANNING_ALIGN is device.ALIGN_BYTES
    assert cost.STICK_BYTES is device.STICK_BYTES
    assert (DEFAULT_PARAMS.cores, DEFAULT_PARAMS.hbm_bytes_per_s) == \
        (device.CORES, device.HBM_BYTES_PER_S)
    assert verify.MAX_CORES == WorkDivision().cores == device.CORES
