"""The one lazy pass registry (issue 12 §4): a name -> loader dict, pass modules imported only
when named, every pass module registered, and `--list-passes` built from it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import spyrec.passes
from spyrec.passes.registry import PASSES, describe_passes, get_pass, load_all, register_pass

PASS_DIR = Path(spyrec.passes.__file__).parent


def test_every_loader_gives_the_class_of_the_module_named_like_the_pass():
    for name, cls in load_all().items():
        assert cls.name == name
        assert cls.__module__ == f"spyrec.passes.{name}"
        assert cls.contract == PASSES[name].contract


def test_every_pass_module_is_in_the_registry():
    """A module that registers a pass must be reachable by name (no second list to forget)."""
    modules = {p.stem: p for p in PASS_DIR.glob("*.py")}
    modules.update({p.parent.name: p for p in PASS_DIR.glob("*/__init__.py")})  # packages
    registering = {stem: re.findall(r'@register_pass\("(\w+)"\)', p.read_text())
                   for stem, p in modules.items()}
    registering = {stem: names for stem, names in registering.items() if names}
    assert registering == {name: [name] for name in PASSES}


def test_registering_a_name_missing_from_the_registry_fails_at_import():
    with pytest.raises(AssertionError, match="pass 'tiling' is not in "
                                             "spyrec.passes.registry.PASSES; add it"):
        register_pass("tiling")


def test_unknown_name_is_a_key_error():
    with pytest.raises(KeyError):
        get_pass("nope")


def test_building_a_pipeline_imports_only_the_passes_it_names():
    probe = ("import sys\n"
             "from spyrec.passes.pipeline import build_pipeline\n"
             "build_pipeline([{'pass': 'stick_layout'}, {'pass': 'memory_planning'}])\n"
             "print(sorted(m for m in sys.modules if m.startswith('spyrec.passes.')))\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=300, check=True)
    assert r.stdout.split() == ["['spyrec.passes.memory_planning',", "'spyrec.passes.pipeline',",
                                "'spyrec.passes.registry',", "'spyrec.passes.stick_layout',",
                                "'spyrec.passes.stick_layout.search']"]


def test_list_passes_shows_options_defaults_types_and_docs():
    text = describe_passes()
    assert [b.split(" ")[0] for b in text.strip().split("\n\n")] == list(PASSES)
    assert "work_division — split every op's iteration space across the cores.\n" \
           "    cores: int = 32\n" \
           "    strategy: str = 'cost'\n" \
           "    lx_intermediates: bool = True\n" \
           "    chain_moves: bool = True\n    k_split: bool = True\n" \
           "    replicas: bool = True\n    overlap_moves: bool = False\n" \
           "    spread_within: float = 0.02\n" \
           "    needs: a device layout for every buffer\n" \
           "    provides: core splits for every op" in text
    assert "matmul_padding — zero-pad K of the matmul operand that carries N " \
           "(A-layout §3.6).\n    (no options)\n" in text
    assert "    beam_width: int = 64\n" in text
