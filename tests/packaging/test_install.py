"""spyrec works installed, not only from a checkout (issue 12 §1).

The default pipeline and the bundle template are package data: spyrec/configs and
spyrec/templates are symlinks to the repository's configs/ and templates/ (one copy). These tests build a wheel from a copy
of the sources, install it (and, separately, an editable install) into a fresh venv whose
dependencies come from the running venv's site-packages, and compile and check a sample from a
directory outside the repository with PYTHONPATH unset, so nothing can come from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "spyrec", "configs", "templates")


def test_configs_and_templates_have_one_copy():
    for name in ("configs", "templates"):
        link = ROOT / "spyrec" / name
        assert link.is_symlink(), f"spyrec/{name} must link to {name}/, not be a second copy"
        assert link.resolve() == (ROOT / name).resolve()
        assert (ROOT / name).is_dir() and not (ROOT / name).is_symlink()
    assert (ROOT / "spyrec" / "configs" / "pipeline.yaml").read_text().startswith("#")


def test_resources_resolve_inside_the_package():
    from spyrec.codegen.bundle import TEMPLATE
    from spyrec.passes.pipeline import DEFAULT_PIPELINE

    package = Path(__import__("spyrec").__file__).parent
    assert Path(str(DEFAULT_PIPELINE)) == package / "configs" / "pipeline.yaml"
    assert Path(str(TEMPLATE)) == package / "templates" / "bundle.mlir.j2"


def _copy_sources(dest: Path) -> Path:
    """The files a build reads, copied (symlinks kept as symlinks) so the build's
    build/ and *.egg-info never land in the repository."""
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        src = ROOT / name
        if src.is_symlink():
            os.symlink(os.readlink(src), dest / name)
        elif src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore, symlinks=True)
        else:
            shutil.copy2(src, dest / name)
    return dest


def _run(args: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"{args} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def _fresh_venv(path: Path) -> Path:
    """A venv with no spyrec; torch, numpy, ... come from this venv's site-packages through a
    .pth line (plain path entries: that directory's own .pth files, among them the editable
    finder of the checkout this venv was made from, are not processed)."""
    _run([sys.executable, "-m", "venv", "--without-pip", path], cwd=path.parent)
    python = path / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   cwd=path.parent).stdout.strip()
    (Path(purelib) / "_spyrec_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """mlp_fp16 exported to a .pt2 and its inputs to an .npz."""
    import numpy as np

    from samples.models import SAMPLES
    from tests.programs import export

    tmp = tmp_path_factory.mktemp("sample")
    module, inputs = SAMPLES["mlp_fp16"]()
    pt2 = export(tmp, module, inputs, "mlp_fp16")
    np.savez(tmp / "mlp_fp16.npz", **{"x": inputs[0].numpy()})
    return pt2, tmp / "mlp_fp16.npz"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["wheel", "editable"])
def test_installed_spyrec_compiles_and_checks_a_sample(tmp_path, sample, mode):
    src = _copy_sources(tmp_path / "src")
    python = _fresh_venv(tmp_path / "venv")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python]
    if mode == "wheel":
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
              "--no-index", "-w", tmp_path / "dist", src], cwd=tmp_path)
        wheel = next((tmp_path / "dist").glob("spyrec-*.whl"))
        members = zipfile.ZipFile(wheel).namelist()
        assert "spyrec/configs/pipeline.yaml" in members
        assert "spyrec/templates/bundle.mlir.j2" in members
        _run(pip + ["install", "--no-deps", "--no-index", wheel], cwd=tmp_path)
        package = python.parents[1]
    else:
        _run(pip + ["install", "--no-deps", "--no-index", "--no-build-isolation", "-e", src],
             cwd=tmp_path)
        package = src
    env = _clean_env()
    where = _run([python, "-c", "import spyrec; print(spyrec.__file__)"], tmp_path, env)
    assert Path(where.stdout.strip()).is_relative_to(package)   # not the checkout's spyrec

    pt2, npz = sample
    spyrec = python.parent / "spyrec"
    _run([spyrec, "compile", pt2, "-o", tmp_path / "out", "-q"], tmp_path, env)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    default = Path(manifest["configs"]["pipeline"])
    assert default.name == "pipeline.yaml" and default.is_relative_to(package)
    assert [p["pass"] for p in manifest["pipeline"]][0] == "stick_layout"
    bundle = (tmp_path / "out" / "bundle.mlir").read_text()
    assert bundle.count("sdscbundle.sdsc_execute") == len(manifest["kernels"][0]["ops"])
    r = _run([spyrec, "run", tmp_path / "out", "--inputs", npz, "--check", "-q"], tmp_path, env)
    assert r.stdout.splitlines()[1].split()[:3] == ["output_0", "linear_1", "float16"]
    assert r.stdout.rstrip().endswith("ok")


def test_constraints_pin_every_dependency_inside_its_range():
    """pyproject.toml's ranges and constraints.txt's exact pins agree; torch is exact in both."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[name.lower().replace("_", "-")] = version
    for req in reqs:
        version = pins.get(req.name.lower().replace("_", "-"))
        assert version is not None, f"constraints.txt has no pin for {req.name}"
        assert req.specifier.contains(version), f"{req.name}=={version} outside {req.specifier}"
    assert str(next(r for r in reqs if r.name == "torch").specifier) == "==2.13.0"
    assert pins["torch"] == "2.13.0"
