"""Big ops' chunks on worker threads (spyrec.sim.threads): the same numbers as one thread.

The differential test shrinks `CHUNK_POINTS` so the small sample programs take the threaded
path on almost every op, and requires their outputs to be bit-identical to a one-thread run
(the threaded path is not merely close: chunk boundaries never depend on the thread count).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from spyrec.errors import ConfigError
from spyrec.sim import executor, threads
from spyrec.sim.runner import simulate
from tests.programs import compile_samples, load_json


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, Path]:
    names = ["mlp_fp16", "attention_fp32", "layernorm_fp16", "decoder_fp32"]
    return compile_samples(tmp_path_factory.mktemp("threads"), names)


def _inputs(out: Path, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    manifest = load_json(out / "manifest.json")
    arrays = {}
    for name in manifest["inputs"]:
        spec = next(t for t in manifest["tensors"] if t["name"] == name)
        arrays[name] = rng.standard_normal(spec["host_shape"]).astype(spec["host_dtype"])
    return arrays


def _run(out: Path, inputs, monkeypatch, workers: int, chunk_points: int) -> tuple[list, int]:
    calls = []
    real = threads.run_all

    def counting(fn, items):
        calls.append(len(items))
        real(fn, items)

    pool = ThreadPoolExecutor(max_workers=workers)   # the shared one has SPYREC_SIM_THREADS
    monkeypatch.setattr(threads, "count", lambda: workers)
    monkeypatch.setattr(threads, "_pool", lambda: pool)
    monkeypatch.setattr(threads, "CHUNK_POINTS", chunk_points)
    monkeypatch.setattr(threads, "run_all", counting)
    try:
        result = simulate(out, inputs)
    finally:
        pool.shutdown(wait=True)
    return [np.array(o) for o in result.outputs], sum(n > 1 for n in calls)


@pytest.mark.parametrize("name", ["mlp_fp16", "attention_fp32", "layernorm_fp16",
                                  "decoder_fp32"])
def test_threaded_chunks_bit_identical(samples, name, monkeypatch):
    """Two workers give the bits one worker gives on the same chunks, and those small chunks
    give what the default (few, large) chunks give up to BLAS rounding (a one-column chunk is
    a GEMV, which sums in another order)."""
    out = samples[name]
    inputs = _inputs(out, seed=7)
    default, _ = _run(out, inputs, monkeypatch, workers=1, chunk_points=1 << 30)
    one, chunked_ops = _run(out, inputs, monkeypatch, workers=1, chunk_points=64)
    assert chunked_ops >= 2, "the chunked path was not taken"
    many, threaded_ops = _run(out, inputs, monkeypatch, workers=2, chunk_points=64)
    assert threaded_ops == chunked_ops
    for a, b, c in zip(one, many, default):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
        np.testing.assert_allclose(a.astype(np.float64), c.astype(np.float64),
                                   rtol=2e-3, atol=2e-3)


def test_run_all_raises_first_failure_after_all_finished(monkeypatch):
    """On worker threads (two, whatever SPYREC_SIM_THREADS is: on one, run_all runs the items
    in order on the calling thread and stops at the first failure)."""
    pool = ThreadPoolExecutor(max_workers=2)
    monkeypatch.setattr(threads, "count", lambda: 2)
    monkeypatch.setattr(threads, "_pool", lambda: pool)
    done = []
    lock = threading.Lock()

    def work(i: int) -> None:
        if i in (3, 5):
            raise ValueError(f"chunk {i}")
        with lock:
            done.append(i)

    with pytest.raises(ValueError, match="chunk 3"):
        threads.run_all(work, range(8))
    assert sorted(done) == [0, 1, 2, 4, 6, 7]
    pool.shutdown(wait=True)


@pytest.mark.parametrize("value", ["zero", "0", "-2", "1.5", "257"])
def test_thread_count_refuses_bad_values(monkeypatch, value):
    monkeypatch.setenv("SPYREC_SIM_THREADS", value)
    threads.count.cache_clear()
    try:
        with pytest.raises(ConfigError, match="SPYREC_SIM_THREADS"):
            threads.count()
    finally:
        threads.count.cache_clear()


def test_interrupt_cancels_chunks_not_started(monkeypatch):
    """Ctrl-C while run_all waits for its chunks: the ones still queued never run. A pool
    of its own with two workers (the shared one has SPYREC_SIM_THREADS workers, maybe more
    than two), shut down before counting: every chunk that would ever run has run then."""
    from concurrent.futures import Future

    pool = ThreadPoolExecutor(max_workers=2)
    monkeypatch.setattr(threads, "count", lambda: 2)
    monkeypatch.setattr(threads, "_pool", lambda: pool)
    started = []
    gate = threading.Event()

    def work(i: int) -> None:
        started.append(i)
        gate.wait(60)           # released below; only a hang waits this long

    def interrupted(self, timeout=None):
        raise KeyboardInterrupt     # the signal arrives while the main thread waits

    monkeypatch.setattr(Future, "exception", interrupted)
    with pytest.raises(KeyboardInterrupt):
        threads.run_all(work, range(50))
    gate.set()
    pool.shutdown(wait=True)
    assert len(started) <= 2        # the two running when it came; 48 cancelled


def test_thread_count_from_environment(monkeypatch):
    threads.count.cache_clear()
    try:
        monkeypatch.setenv("SPYREC_SIM_THREADS", " 3 ")
        assert threads.count() == 3
        threads.count.cache_clear()
        monkeypatch.delenv("SPYREC_SIM_THREADS")
        assert threads.count() == len(os.sched_getaffinity(0))
    finally:
        threads.count.cache_clear()


def test_overlapping_output_is_not_threaded(samples, monkeypatch):
    """An output sharing bytes with an input (an in-place op) runs chunk after chunk; the
    same op with its own output is threaded."""
    from dataclasses import replace

    from spyrec.sim.binding import bind
    from spyrec.sim.directory import load_output_dir
    from spyrec.sim.runner import place_lx, place_tensors

    monkeypatch.setattr(threads, "CHUNK_POINTS", 64)
    program = load_output_dir(samples["mlp_fp16"])
    kernel, ex = next((k, e) for k, e in program.trace
                      if program.ops[e.file].op == "batchmatmul")
    spec = program.ops[ex.file]
    bindings = bind(spec, ex, place_tensors(program), place_lx(program))
    assert executor.parallel_safe(spec, bindings)
    first_in = bindings[0]
    onto_input = replace(bindings[-1], base_elems=first_in.base_elems * first_in.arg.itemsize
                         // bindings[-1].arg.itemsize, lx=first_in.lx)
    assert not executor.parallel_safe(spec, bindings[:-1] + [onto_input])
    monkeypatch.setattr(threads, "CHUNK_POINTS", 1 << 30)     # too small to be worth it
    assert not executor.parallel_safe(spec, bindings)
