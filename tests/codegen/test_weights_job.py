"""weights.bin is written while the passes after the last one that changes constants still run
(`codegen/weights_job.py`): once, on its own thread, byte for byte the file a compile writes at
the end, and never left behind by a compile that fails."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from spyrec.codegen import weights_file, weights_job
from spyrec.codegen.weights_file import WeightsBlob
from spyrec.compile_instruments import constants_steps
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

    def recording(self, path, stop=None, **options):
        seen.append(threading.current_thread().name)
        return original(self, path, stop, **options)

    monkeypatch.setattr(WeightsBlob, "write", recording)
    return seen


def test_the_default_pipeline_may_change_constants_at_stick_layout_and_split_padding():
    entries, where = read_pipeline_file(None)
    pipeline = build_pipeline(entries, (), where=where)
    first, last = constants_steps(pipeline)
    assert pipeline[first - 1].name == "stick_layout"
    assert pipeline[last - 1].name == "split_padding"
    between = [p.name for p in pipeline[first:last - 1]]
    assert "coarse_tiling" in between               # runs while the weights are written
    later = [p.name for p in pipeline[last:]]
    assert later[:2] == ["work_division", "superdsc_legalize"] and "memory_planning" in later


def test_weights_are_written_once_during_the_passes_and_equal_a_late_write(
        tmp_path, pt2, writes, monkeypatch):
    early = compile_pt2(pt2, tmp_path / "early")
    assert writes == ["spyrec-weights"]                 # once, on the job's thread
    monkeypatch.setattr("spyrec.compiler.constants_steps", lambda pipeline: (-1,))
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
    monkeypatch.setattr(weights_file, "constants_state", lambda graph: (object(), ()))
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
    def broken(buf, host, pad, out, rows):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(weights_file, "_device_form", broken)
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


def _doubling(pick, doubled: list):
    """A split_padding that also doubles one constant's value (a new value object: the plan
    changes), `pick(names)` of the sorted constant names; its name goes into `doubled`."""
    from spyrec.passes.split_padding import SplitPadding

    real = SplitPadding.run

    def run(self, graph, ctx):
        real(self, graph, ctx)
        name = pick(sorted(graph.constants))
        graph.constants[name] = np.asarray(graph.constants[name]) * 2
        doubled.append(name)
    return run


def _compile_patched(pt2, out, monkeypatch, form, replan, split_padding):
    """compile_pt2 with the weights' conversion, the job's replan and split_padding's run
    replaced."""
    from spyrec.passes.split_padding import SplitPadding

    monkeypatch.setattr(weights_file, "_device_form", form)
    monkeypatch.setattr(weights_job.WeightsJob, "replan", replan)
    monkeypatch.setattr(SplitPadding, "run", split_padding)
    return compile_pt2(pt2, out)


def _late_weights(tmp_path, pt2, monkeypatch) -> bytes:
    """weights.bin of the same compile with no early job (written at the end)."""
    monkeypatch.setattr("spyrec.compiler.constants_steps", lambda pipeline: (-1,))
    return (compile_pt2(pt2, tmp_path / "late") / "weights.bin").read_bytes()


def test_a_changed_constant_after_the_job_started_rewrites_only_that_tensor(
        tmp_path, pt2, monkeypatch):
    """The job starts after stick_layout; split_padding (here made to double the second
    layer's weight) plans it again: only that tensor is converted again, on the job's thread,
    in the same file, and the file equals a compile that wrote it at the end."""

    converted: list[tuple[str, str]] = []
    real_form, real_replan = weights_file._device_form, weights_job.WeightsJob.replan

    def form(buf, host, pad, out, rows):
        converted.append((buf.name, threading.current_thread().name))
        return real_form(buf, host, pad, out, rows)

    def replan(self, graph):
        self._thread.join()              # the first plan wholly written: a deterministic test
        converted.append(("replan", "MainThread"))
        return real_replan(self, graph)

    doubled: list[str] = []
    out = _compile_patched(pt2, tmp_path / "out", monkeypatch, form=form, replan=replan,
                           split_padding=_doubling(lambda names: names[1], doubled))
    names = [n for n, _ in converted]
    cut = names.index("replan")
    assert len(names[:cut]) == 3 and doubled[0] in names[:cut]
    assert names[cut + 1:] == doubled
    assert {t for n, t in converted if n != "replan"} == {"spyrec-weights"}
    data = (out / "weights.bin").read_bytes()
    assert data == _late_weights(tmp_path, pt2, monkeypatch)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_replan_before_the_first_plan_is_written_gives_the_same_file(
        tmp_path, pt2, monkeypatch):
    """The writer stopped part way (between two tensors) and started over on the new plan:
    the file is still exactly the late write's."""

    gate = threading.Event()
    real_form, real_replan = weights_file._device_form, weights_job.WeightsJob.replan

    def slow_form(buf, host, pad, out, rows):
        gate.wait(5)                     # held until split_padding has planned again
        return real_form(buf, host, pad, out, rows)

    def replan(self, graph):
        gate.set()                       # the writer converts its tensor, then sees the stop
        return real_replan(self, graph)

    doubled: list[str] = []
    out = _compile_patched(pt2, tmp_path / "out", monkeypatch, form=slow_form, replan=replan,
                           split_padding=_doubling(lambda names: names[0], doubled))
    assert doubled
    assert (out / "weights.bin").read_bytes() == _late_weights(tmp_path, pt2, monkeypatch)


def test_bytes_a_later_plan_wrote_over_are_not_taken_for_the_first_plans(
        tmp_path, pt2, monkeypatch):
    """Three plans: the first writes weight w, the second writes 2w in its place, the third
    (w again, the same value) must write w again, not trust the first plan's record."""
    from spyrec.passes.split_padding import SplitPadding

    jobs = []
    real_init, real_replan = weights_job.WeightsJob.__init__, weights_job.WeightsJob.replan

    def init(self, graph, target):
        real_init(self, graph, target)
        jobs.append(self)

    def replan(self, graph):
        self._thread.join()              # each plan wholly written: a deterministic test
        return real_replan(self, graph)

    real_run = SplitPadding.run

    def run(self, graph, ctx):
        real_run(self, graph, ctx)
        name = sorted(graph.constants)[0]
        original = graph.constants[name]
        graph.constants[name] = np.asarray(original) * 2
        assert jobs[0].replan(graph)                       # the second plan: 2w
        graph.constants[name] = original                   # the third (the instrument's): w

    monkeypatch.setattr(weights_job.WeightsJob, "__init__", init)
    monkeypatch.setattr(weights_job.WeightsJob, "replan", replan)
    monkeypatch.setattr(SplitPadding, "run", run)
    out = compile_pt2(pt2, tmp_path / "out")
    monkeypatch.setattr(SplitPadding, "run", real_run)
    assert (out / "weights.bin").read_bytes() == _late_weights(tmp_path, pt2, monkeypatch)
