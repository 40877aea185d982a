"""Every compile in the suite writes a report.json (and manifest.json) its schema accepts.

A schema describes what the compiler guarantees; a test only asserts what it looks at, so a
report that drifts from its schema (a row a pass writes that the schema forbids) went unseen
until a user's validator tripped on it. Here every `report.json` and spyrec `manifest.json`
a test leaves under its `tmp_path` is validated when the test ends, and at the end of the
session everything else under pytest's base temp directory (`tmp_path_factory` directories of
module-scoped fixtures) that no test's teardown saw. A violation fails naming the file, the
JSON path and the schema.

A test that rewrites a manifest on purpose (to see spyrec refuse it) says so with
`@pytest.mark.tampers_manifest`: its manifests are not validated (its reports still are).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SEEN: set[Path] = set()      # files a test's teardown validated (or skipped): the session skips


def pytest_configure(config):
    config.addinivalue_line("markers", "tampers_manifest: the test rewrites a manifest.json on "
                                       "purpose; only its report.json files are validated")


def _violations(root: Path, manifests: bool) -> list[str]:
    """One line per invalid report.json / spyrec manifest.json under `root` not seen yet."""
    from spyrec.errors import InputFileError
    from spyrec.sim.files import validate

    found = []
    for name, schema in (("report.json", "report"), ("manifest.json", "manifest")):
        for path in sorted(root.rglob(name)):
            if path in SEEN:
                continue
            SEEN.add(path)
            if schema == "manifest" and not manifests:
                continue
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue        # a file a test broke on purpose to see it refused
            if schema == "manifest" and not _spyrec_manifest(doc):
                continue
            try:
                validate(doc, schema, str(path))
            except InputFileError as e:
                found.append(str(e))
    return found


def _spyrec_manifest(doc) -> bool:
    """A manifest this spyrec writes: not a reference bundle's hand-written one, a stub, or
    an older format (spyrec refuses that by name, not by its schema)."""
    from spyrec.sim.loader import MANIFEST_FORMAT

    return isinstance(doc, dict) and doc.get("format") == MANIFEST_FORMAT


@pytest.fixture(autouse=True)
def _outputs_fit_their_schemas(request):
    """At teardown: every report.json / manifest.json the test left in its tmp_path."""
    # asked for here, before the test, so it is torn down after this fixture's check
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is None:
        return
    manifests = request.node.get_closest_marker("tampers_manifest") is None
    bad = _violations(Path(tmp), manifests)
    if bad:
        pytest.fail("compiled files that fail their schema:\n" + "\n".join(bad),
                    pytrace=False)


@pytest.fixture(autouse=True, scope="session")
def _session_outputs_fit_their_schemas(tmp_path_factory):
    """At the session's end: the files of module-scoped fixtures' directories."""
    yield
    bad = _violations(Path(tmp_path_factory.getbasetemp()), True)
    if bad:
        pytest.fail("compiled files that fail their schema:\n" + "\n".join(bad),
                    pytrace=False)
