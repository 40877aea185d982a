"""weights.bin is written in whole page-aligned blocks at the tensors' offsets: the file is
cut to its exact size and every tensor's gap is zeros."""

import hashlib
from pathlib import Path

import numpy as np

from spyrec import build_record
from spyrec.codegen import weights_file


def _blocks(path):
    sizes = [(0, 5000), (8192, 4096), (12288, 130)]
    with weights_file._BlockFile(path) as f:
        for offset, n in sizes:
            block = weights_file._page_aligned(weights_file._round_up(n, 4096))
            block[:n] = np.arange(n, dtype=np.uint8) + offset // 4096
            f.write_at(offset, block)
        f.finish(12288 + 130)
    return path.read_bytes()


def test_blocks_land_at_their_offsets_with_zero_gaps_and_an_exact_size(tmp_path):
    data = _blocks(tmp_path / "w.bin")
    assert len(data) == 12288 + 130
    assert data[:5000] == bytes((np.arange(5000) % 256).astype(np.uint8))
    assert data[5000:8192] == bytes(8192 - 5000)              # the gap: zeros
    assert data[8192:12288] == bytes(((np.arange(4096) + 2) % 256).astype(np.uint8))
    assert data[12288:] == bytes(((np.arange(130) + 3) % 256).astype(np.uint8))


def test_page_aligned_buffers_start_on_a_page():
    buf = weights_file._page_aligned(3 * 4096)
    assert buf.ctypes.data % 4096 == 0 and not buf.any()


def test_source_sha256_from_the_map_equals_hashlib(tmp_path, monkeypatch):
    """The manifest's source digest is hashed from maps of the file, a window at a time, in
    blocks (both shrunk here so a small file spans several, the last ones partial); an empty
    file and a device are read instead and give hashlib's digest too."""
    monkeypatch.setattr(build_record, "HASH_BLOCK", 4096)
    monkeypatch.setattr(build_record, "HASH_WINDOW", 8192)
    data = bytes(range(256)) * 97 + b"tail"     # 24,836 bytes: 3 windows and a part
    cases = {"blocks": data, "empty": b""}
    for name, payload in cases.items():
        (tmp_path / name).write_bytes(payload)
        assert build_record.sha256_of(tmp_path / name) == hashlib.sha256(payload).hexdigest(), name
    assert build_record.sha256_of(Path("/dev/null")) == hashlib.sha256(b"").hexdigest()


def _fd_direct(fd):
    import fcntl
    import os
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0))


def test_blocks_bypass_the_page_cache_where_the_file_system_allows(tmp_path):
    """Aligned blocks are written with O_DIRECT when the file system takes it (the flag the
    kernel holds for the descriptor says so); the bytes are the same either way."""
    import os
    if not hasattr(os, "O_DIRECT"):
        return
    path = tmp_path / "w.bin"
    with weights_file._BlockFile(path) as f:
        assert f.direct == _fd_direct(f.fd)
        block = weights_file._page_aligned(8192)
        block[:] = 7
        f.write_at(4096, block)
        assert f.direct == _fd_direct(f.fd)
        f.finish(4096 + 8192)
    assert path.read_bytes() == bytes(4096) + bytes([7]) * 8192


def test_an_unaligned_block_is_written_through_the_cache(tmp_path):
    """A block O_DIRECT cannot take (its address off a page, its length not whole pages)
    turns direct writing off for the file instead of failing; its bytes land as given."""
    path = tmp_path / "w.bin"
    backing = weights_file._page_aligned(3 * 4096)
    backing[:] = np.arange(3 * 4096, dtype=np.uint8)
    with weights_file._BlockFile(path) as f:
        f.write_at(0, backing[:4096])
        f.write_at(4096, backing[1:1001])          # off a page, 1,000 bytes
        assert not f.direct and not _fd_direct(f.fd)
        f.finish(5096)
    data = path.read_bytes()
    assert data[:4096] == bytes(backing[:4096]) and data[4096:] == bytes(backing[1:1001])


def test_a_file_system_refusing_direct_writes_gets_cached_ones(tmp_path, monkeypatch):
    """Where setting O_DIRECT fails, or a direct write fails with EINVAL (file systems that
    accept the flag and refuse the write), the file is written through the page cache."""
    import errno
    import fcntl
    import os
    if not hasattr(os, "O_DIRECT"):
        return
    real_fcntl, real_pwrite = fcntl.fcntl, os.pwrite

    def no_direct(fd, cmd, arg=0):
        if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "no O_DIRECT here")
        return real_fcntl(fd, cmd, arg)
    monkeypatch.setattr(fcntl, "fcntl", no_direct)
    with weights_file._BlockFile(tmp_path / "a.bin") as f:
        assert not f.direct
    monkeypatch.setattr(fcntl, "fcntl", real_fcntl)

    def refuse_direct(fd, data, offset):
        if _fd_direct(fd):
            raise OSError(errno.EINVAL, "direct write refused")
        return real_pwrite(fd, data, offset)
    monkeypatch.setattr(os, "pwrite", refuse_direct)
    block = weights_file._page_aligned(4096)
    block[:] = 3
    with weights_file._BlockFile(tmp_path / "b.bin") as f:
        f.write_at(0, block)
        assert not f.direct
        f.finish(4096)
    assert (tmp_path / "b.bin").read_bytes() == bytes([3]) * 4096


def test_background_threads_are_niced_and_the_main_thread_is_not():
    """The source hash and weights.bin threads run at a lower priority than the passes (a
    thread's own nice value on Linux); the calling thread's is untouched."""
    import os
    import sys
    import threading
    if not sys.platform.startswith("linux"):
        return
    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = {}

    def probe():
        tid = threading.get_native_id()
        seen["before"] = os.getpriority(os.PRIO_PROCESS, tid)
        weights_file.background_priority()
        seen["after"] = os.getpriority(os.PRIO_PROCESS, tid)
    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert seen["after"] == max(seen["before"], weights_file.BACKGROUND_NICE)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before


def test_only_big_weight_files_are_written_direct(tmp_path, monkeypatch):
    """WeightsBlob.write asks for O_DIRECT from DIRECT_MIN_BYTES up (the first run after
    compile then reads from disk, worth it only where the page cache fill is seconds)."""
    asked = []

    class Recording(weights_file._BlockFile):
        def __init__(self, path, reuse=False, direct=True):
            asked.append(direct)
            super().__init__(path, reuse=reuse, direct=direct)

    monkeypatch.setattr(weights_file, "_BlockFile", Recording)
    blob = weights_file.WeightsBlob([], 3 * 4096, {}, [], ((), ()))
    blob.write(tmp_path / "small.bin")
    monkeypatch.setattr(weights_file, "DIRECT_MIN_BYTES", 3 * 4096)
    blob.write(tmp_path / "big.bin")
    assert asked == [False, True]
    assert (tmp_path / "big.bin").stat().st_size == 3 * 4096


def test_a_direct_write_refused_with_the_flag_stuck_on_fails_once(tmp_path, monkeypatch):
    """Where a direct write fails with EINVAL and O_DIRECT cannot be turned off again, the
    error is raised (not retried forever)."""
    import errno
    import os
    if not hasattr(os, "O_DIRECT"):
        return
    with weights_file._BlockFile(tmp_path / "c.bin") as f:
        if not f.direct:
            return                      # a file system without O_DIRECT: nothing to test
        monkeypatch.setattr(weights_file, "_set_direct", lambda fd, on: True)

        def refuse(fd, data, offset):
            raise OSError(errno.EINVAL, "direct write refused")
        monkeypatch.setattr(os, "pwrite", refuse)
        block = weights_file._page_aligned(4096)
        try:
            f.write_at(0, block)
        except OSError as e:
            assert e.errno == errno.EINVAL
        else:
            raise AssertionError("the refused write was not reported")


def _constant(name, host_size, dtype, order, pad=None, seed=0):
    """A constant buffer in a stick layout with its value (zero-padded by `pad`)."""
    from types import SimpleNamespace

    from spyrec.ir.values import PaddedConstant
    from spyrec.layout import stick_layout
    from spyrec.layout.device_layout import contiguous_strides

    layout = stick_layout(host_size, contiguous_strides(host_size), dtype, order)
    real = tuple(n - p for n, p in zip(host_size, pad or (0,) * len(host_size)))
    value = (np.random.default_rng(seed).standard_normal(real) * 50).astype(dtype)
    buf = SimpleNamespace(name=name, host_size=tuple(host_size), host_dtype=dtype,
                          layout=layout, source=None)
    return buf, (PaddedConstant(value, tuple(pad)) if pad else value)


def _blob(constants):
    entries, offset = [], 0
    for buf, value in constants:
        entries.append((buf, offset, buf.layout.device_bytes, value))
        end = offset + buf.layout.device_bytes
        offset = weights_file._round_up(end, weights_file.WEIGHTS_ALIGNMENT)
    return weights_file.WeightsBlob(entries, end, {}, [b for b, _ in constants], ((), ()))


def test_tensors_written_in_pieces_are_the_whole_tensors_bytes(tmp_path, monkeypatch):
    """Big tensors are made and written a few device rows at a time, through two buffers,
    whole pages per write: rows of 4,736 bytes (an embedding's [K/64, 37, 64] layout) end
    inside pages, a zero-padded weight and a small one follow. With pieces of ~10 KB (several
    per tensor, ending at other places in a page) the file is byte for byte the one written
    a tensor at a time, and still direct where the file system allows. Layouts: embed
    [10, 37, 64] fp16 (rows of 4,736 bytes, two per 10 KB piece); w [7, 96, 32] fp32 (rows of
    12,288, the last one part fill); lm [3, 64, 64] fp16 (the last row all zero padding)."""
    constants = [_constant("embed", (37, 640), "float16", (0, 1), seed=1),
                 _constant("w_npad", (200, 96), "float32", (1, 0), pad=(0, 0), seed=2),
                 _constant("lm_npad", (130, 64), "float16", (1, 0), pad=(7, 0), seed=3),
                 _constant("bias", (5,), "float16", (0,), seed=4)]
    assert [len(weights_file._pieces(b, b.layout.device_bytes)) for b, _ in constants] == [1] * 4
    whole = _blob(constants)
    whole.write(tmp_path / "whole.bin")

    directs = []

    class Recording(weights_file._BlockFile):
        def finish(self, size):
            directs.append(self.direct)
            super().finish(size)

    monkeypatch.setattr(weights_file, "PIECE_BYTES", 10_000)
    monkeypatch.setattr(weights_file, "DIRECT_MIN_BYTES", 0)
    monkeypatch.setattr(weights_file, "_BlockFile", Recording)
    pieces = [len(weights_file._pieces(b, b.layout.device_bytes)) for b, _ in constants]
    assert pieces == [5, 7, 3, 1]
    done = []
    _blob(constants).write(tmp_path / "pieces.bin", done=lambda identity, sha256: done.append(identity))
    assert (tmp_path / "pieces.bin").read_bytes() == (tmp_path / "whole.bin").read_bytes()
    assert [identity[2] for identity in done] == ["embed", "w_npad", "lm_npad", "bias"]
    with weights_file._BlockFile(tmp_path / "probe.bin") as probe:
        assert directs == [probe.direct]


def test_a_tensor_stopped_between_pieces_is_not_counted_as_written(tmp_path, monkeypatch):
    """A replan stops the writer between two pieces: the tensor it was making is not
    reported done, so the next plan writes it again (skipping only the whole ones), and the
    file ends up the one written in one go."""
    import threading

    constants = [_constant("first", (64, 64), "float16", (1, 0), seed=5),
                 _constant("embed", (37, 640), "float16", (0, 1), seed=6)]
    _blob(constants).write(tmp_path / "whole.bin")
    monkeypatch.setattr(weights_file, "PIECE_BYTES", 10_000)
    stop, done, made = threading.Event(), [], []
    real_form = weights_file._device_form

    def form(buf, host, pad, out, rows):
        made.append(buf.name)
        if made.count("embed") == 2:
            stop.set()                   # after embed's second piece of five
        return real_form(buf, host, pad, out, rows)

    monkeypatch.setattr(weights_file, "_device_form", form)
    try:
        _blob(constants).write(tmp_path / "w.bin", stop, done=lambda identity, sha256: done.append(identity))
    except weights_file.WeightsStopped:
        pass
    else:
        raise AssertionError("the writer did not stop")
    assert [identity[2] for identity in done] == ["first"]
    made.clear()
    _blob(constants).write(tmp_path / "w.bin", skip=frozenset(done), reuse=True)
    assert made == ["embed"] * 5
    assert (tmp_path / "w.bin").read_bytes() == (tmp_path / "whole.bin").read_bytes()
