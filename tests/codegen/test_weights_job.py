"""weights.bin is written while the passes after the last one that changes constants still run
(`codegen/weights_job.py`): once, on its own thread, byte for byte the file a compile writes at
the end, and never left behind by a compile that fails."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from spyrec.codegen import weights_job, writer
from spyrec.codegen.writer import WeightsBlob
from spyrec.compiler import _constants_final_step
from spyrec.errors import InternalError
from spyrec.ir.writes import snapshot, written_fields
from spyrec.passes.pipeline import build_pipeline, read_pipeline_file
from spyrec.passes.work_division import WorkDivision
from tests.codegen.test_weights_streaming import Stack
from tests.programs import compile_pt2, export


@pytest.fixture
def pt2(tmp_path):
    return export(tmp_path, Stack(3, 128).eval(), (torch.randn(4, 128),), "stack")


@pytest.fixture
def writes(monkeypatch):
    """The threads that ran `WeightsBlob.write`, in order."""
    seen: list[str] = []
    original = WeightsBlob.write

    def recording(self, path, stop=None):
        seen.append(threading.current_thread().name)
        return original(self, path, stop)

    monkeypatch.setattr(WeightsBlob, "write", recording)
    return seen


def test_the_default_pipeline_fixes_constants_at_split_padding():
    entries, where = read_pipeline_file(None)
    pipeline = build_pipeline(entries, (), where=where)
    step = _constants_final_step(pipeline)
    assert pipeline[step - 1].name == "split_padding"
    later = [p.name for p in pipeline[step:]]
    assert later[:2] == ["work_division", "superdsc_legalize"] and "memory_planning" in later


def test_weights_are_written_once_during_the_passes_and_equal_a_late_write(
        tmp_path, pt2, writes, monkeypatch):
    early = compile_pt2(pt2, tmp_path / "early")
    assert writes == ["spyrec-weights"]                 # once, on the job's thread
    monkeypatch.setattr("spyrec.compiler._constants_final_step", lambda pipeline: -1)
    late = compile_pt2(pt2, tmp_path / "late")          # no job: written at the end
    assert writes == ["spyrec-weights", "MainThread"]
    data = (early / "weights.bin").read_bytes()
    assert len(data) >= 3 * 128 * 128 * 4
    assert data == (late / "weights.bin").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["early", "late", "stack.pt2"]


def test_a_plan_that_changed_after_the_job_started_is_written_again(
        tmp_path, pt2, writes, monkeypatch):
    """The guard behind the contract: a final blob unlike the early one (here: every key made
    different) is written by code generation, and the early file is removed."""
    monkeypatch.setattr(writer, "constants_state", lambda graph: (object(), ()))
    out = compile_pt2(pt2, tmp_path / "out")
    assert writes[0] == "spyrec-weights" and writes[-1] == "MainThread"
    reference = compile_pt2(pt2, tmp_path / "ref")      # keys differ again: same bytes
    assert (out / "weights.bin").read_bytes() == (reference / "weights.bin").read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_compile_failing_after_the_job_started_leaves_nothing(tmp_path, pt2, monkeypatch):
    started = []
    real = weights_job.WeightsJob.__init__

    def init(self, graph, target):
        real(self, graph, target)
        started.append(self._dir)

    def fail(self, graph, ctx):
        assert started[0].is_dir()        # the job started before this pass
        raise InternalError("work division failed on purpose")

    monkeypatch.setattr(weights_job.WeightsJob, "__init__", init)
    monkeypatch.setattr(WorkDivision, "run", fail)
    with pytest.raises(InternalError, match="on purpose"):
        compile_pt2(pt2, tmp_path / "out")
    assert len(started) == 1 and not started[0].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stack.pt2"]


def test_a_failing_writer_fails_the_compile_with_its_own_error(tmp_path, pt2, monkeypatch):
    def broken(buf, value, out):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "_device_form", broken)
    with pytest.raises(Exception, match="No space left on device"):
        compile_pt2(pt2, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stack.pt2"]


def test_no_early_job_when_the_output_parent_does_not_exist(tmp_path, pt2, writes):
    out = compile_pt2(pt2, tmp_path / "new" / "deeper" / "out")
    assert writes == ["MainThread"] and (out / "weights.bin").exists()


def test_a_pass_changing_a_constant_is_a_written_constants_field(tmp_path, pt2):
    from spyrec.frontend import load_program, lower_program

    graph = lower_program(load_program(pt2))
    before = snapshot(graph)
    name = next(iter(graph.constants))
    graph.constants[name] = np.asarray(graph.constants[name]).copy()   # another value
    assert written_fields(before, graph) == {"constants": f"constant {name!r}"}
