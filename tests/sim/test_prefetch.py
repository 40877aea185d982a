"""The weights prefetcher (spyrec.sim.prefetch): execution order, a window sized by the available memory, a fallback
for kernels without MADV_POPULATE_READ, and a real mapping faulted in."""

from __future__ import annotations

import mmap
import threading
import types

import numpy as np
import pytest

from spyrec.sim import prefetch
from spyrec.sim.prefetch import MADV_POPULATE_READ, MADV_WILLNEED, Prefetcher


class Recorder:
    """Stands in for madvise: records (start offset, bytes, advice) and the step running."""

    def __init__(self, base: np.ndarray, populate_ok: bool = True):
        self.base, self.populate_ok = base, populate_ok
        self.calls: list[tuple[int, int, int, int]] = []
        self.current = 0
        self.lock = threading.Lock()

    def __call__(self, view: np.ndarray, advice: int) -> bool:
        with self.lock:
            start = view.ctypes.data - self.base.ctypes.data
            self.calls.append((start, view.size, advice, self.current))
        return advice != MADV_POPULATE_READ or self.populate_ok


class Watched(threading.Condition):
    """The prefetcher's condition, telling the test when its thread waits for room."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.idle = threading.Event()

    def wait(self, timeout=None):
        self.idle.set()         # the lock is held until the wait releases it
        return super().wait(timeout)


@pytest.fixture(autouse=True)
def watched(monkeypatch):
    """Every Prefetcher's thread signals when it waits for room in the window or has read
    everything (`_wait_idle`), so no test guesses from elapsed time that it is done."""
    monkeypatch.setattr(prefetch, "threading",
                        types.SimpleNamespace(Condition=Watched, Thread=threading.Thread))
    run = Prefetcher._run

    def run_then_idle(self):
        try:
            run(self)
        finally:
            self._changed.idle.set()

    monkeypatch.setattr(Prefetcher, "_run", run_then_idle)


def _wait_idle(pf: Prefetcher, rec: Recorder, expect: int) -> None:
    """Until the thread waits for the window to move or has read everything, having made
    `expect` calls (60 s guards only against a hang)."""
    assert pf._changed.idle.wait(60), "the prefetch thread never waited"
    assert len(rec.calls) == expect, rec.calls


def _at(pf: Prefetcher, step: int) -> None:
    """Move the running step: the thread reads what now fits, then is idle again."""
    pf._changed.idle.clear()
    pf.at(step)


def test_reads_in_execution_order_within_the_window(monkeypatch):
    monkeypatch.setattr(prefetch, "PIECE_BYTES", 100)
    arena = np.zeros(1000, dtype=np.uint8)
    a, b, c = arena[0:300], arena[300:600], arena[600:1000]
    rec = Recorder(arena)
    monkeypatch.setattr(prefetch, "advise", rec)
    steps = [[c], [], [a, c], [b]]                  # c first, a at step 2, b at step 3
    pf = Prefetcher(steps, window=500)
    _wait_idle(pf, rec, 5)
    # step 0 running: c (400 bytes, step 0) then 100 of a's (step 2) fill the window
    assert [(s, n) for s, n, _, _ in rec.calls] == [(600, 100), (700, 100), (800, 100),
                                                    (900, 100), (0, 100)]
    rec.current = 2
    _at(pf, 2)                  # c is behind: a (300, step 2) and 200 of b's (step 3)
    _wait_idle(pf, rec, 9)
    assert [s for s, _, _, _ in rec.calls][5:] == [100, 200, 300, 400]
    rec.current = 3
    _at(pf, 3)
    _wait_idle(pf, rec, 10)
    pf.close()
    assert [s for s, _, _, _ in rec.calls][9:] == [500]
    assert all(adv == MADV_POPULATE_READ for _, _, adv, _ in rec.calls)


def test_falls_back_to_read_ahead_hints(monkeypatch):
    arena = np.zeros(256, dtype=np.uint8)
    rec = Recorder(arena, populate_ok=False)
    monkeypatch.setattr(prefetch, "advise", rec)
    pf = Prefetcher([[arena[:128]], [arena[128:]]], window=1 << 20)
    _wait_idle(pf, rec, 3)
    pf.close()
    advices = [adv for _, _, adv, _ in rec.calls]
    # the first populate is refused: that piece and every later one get MADV_WILLNEED
    assert advices == [MADV_POPULATE_READ, MADV_WILLNEED, MADV_WILLNEED]


def test_close_stops_a_waiting_thread(monkeypatch):
    monkeypatch.setattr(prefetch, "PIECE_BYTES", 10)
    arena = np.zeros(1000, dtype=np.uint8)
    rec = Recorder(arena)
    monkeypatch.setattr(prefetch, "advise", rec)
    pf = Prefetcher([[arena[:500]], [arena[500:]]], window=50)
    _wait_idle(pf, rec, 5)                              # the window is full at step 0
    pf.close()
    assert not pf._thread.is_alive()


def test_real_mapping_is_faulted_in(tmp_path):
    """On this kernel the real madvise path runs and the bytes read are the file's."""
    path = tmp_path / "w.bin"
    data = np.arange(3 << 20, dtype=np.uint8)
    data.tofile(path)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), data.size, access=mmap.ACCESS_COPY)
    view = np.frombuffer(mapped, dtype=np.uint8)
    pf = Prefetcher([[view[: 1 << 20]], [view[1 << 20:]]], window=1 << 30)
    pf.at(1)
    pf.close()
    assert np.array_equal(view, data)
    if not prefetch.advise(view, MADV_POPULATE_READ):
        pytest.skip("this kernel has no MADV_POPULATE_READ (the WILLNEED path ran)")


def test_the_first_window_of_a_big_weights_file_is_read_before_the_directory(tmp_path,
                                                                            monkeypatch):
    """`read_ahead_early` faults the first window of OUT/weights.bin in on a thread, piece
    by piece, unmapping each piece after it (a single POSIX_FADV_WILLNEED over the range
    read 8 MiB: the kernel cuts it to its read-ahead size); a small, missing or non-regular
    weights.bin is not read at all."""
    import os

    calls = []

    def advise(view, advice):
        calls.append((view.size, advice))
        return True

    monkeypatch.setattr(prefetch, "advise", advise)
    big = tmp_path / "big"
    big.mkdir()
    size = prefetch.SMALL_BYTES + 4096
    with open(big / "weights.bin", "wb") as f:
        f.truncate(size)          # sparse: no disk used
    prefetch.read_ahead_early(big, nbytes=1 << 20).join()
    assert calls == [(1 << 20, MADV_POPULATE_READ), (1 << 20, prefetch.MADV_DONTNEED)]
    calls.clear()
    monkeypatch.setattr(prefetch, "window_bytes", lambda: 1 << 40)     # more than the file
    prefetch.read_ahead_early(big).join()
    pieces = [n for n, advice in calls if advice == MADV_POPULATE_READ]
    assert pieces == [prefetch.PIECE_BYTES] * (size // prefetch.PIECE_BYTES) + [4096]
    assert [n for n, advice in calls if advice == prefetch.MADV_DONTNEED] == pieces
    calls.clear()
    small = tmp_path / "small"
    small.mkdir()
    (small / "weights.bin").write_bytes(bytes(4096))
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "weights.bin")
    for out in (small, fifo, tmp_path / "missing"):
        thread = prefetch.read_ahead_early(out)
        thread.join(timeout=5)
        assert not thread.is_alive(), out
    assert calls == []


@pytest.mark.parametrize("meminfo, window", [
    ("MemTotal:       24000000 kB\nMemAvailable:   20971520 kB\n", 16 << 30),
    ("MemAvailable:    3145728 kB\n", 2 << 30),      # never below WINDOW_BYTES
    ("MemTotal:       24000000 kB\n", 2 << 30),      # no MemAvailable line
    ("MemAvailable:   lots\n", 2 << 30),
    (None, 2 << 30),                                 # no /proc (not Linux)
])
def test_the_window_is_the_available_memory_less_the_reserve(meminfo, window, tmp_path):
    path = tmp_path / "meminfo"
    if meminfo is not None:
        path.write_text(meminfo)
    assert prefetch.window_bytes(str(path)) == window


def test_a_big_program_imports_torch_before_the_weights_take_the_disk(tmp_path, monkeypatch):
    """`begin_run`: torch first (its libraries queued behind the weights' reads made a cold
    Granite-8B-width d40 run 35.5 s instead of 25.2), then the read-ahead; a weights.bin
    under TORCH_FROM_BYTES, a missing one or a directory in its place imports nothing."""
    from spyrec.sim import torch_kernels

    calls = []
    monkeypatch.setattr(torch_kernels, "TORCH_FROM_BYTES", 5000)
    monkeypatch.setattr(torch_kernels, "use_torch", lambda: calls.append("torch") or True)
    monkeypatch.setattr(prefetch, "read_ahead_early", lambda out: calls.append("read"))
    cases = {"big": 5000, "small": 4999, "missing": None, "directory": "dir"}
    for name, size in cases.items():
        out = tmp_path / name
        out.mkdir()
        if size == "dir":
            (out / "weights.bin").mkdir()
        elif size is not None:
            (out / "weights.bin").write_bytes(bytes(size))
        calls.clear()
        prefetch.begin_run(out)
        assert calls == (["torch", "read"] if name == "big" else ["read"]), name
