"""weights.bin is written in whole page-aligned blocks at the tensors' offsets: the file is
cut to its exact size and every tensor's gap is zeros."""

import hashlib
from pathlib import Path

import numpy as np

from spyrec.codegen import writer


def _blocks(path):
    sizes = [(0, 5000), (8192, 4096), (12288, 130)]
    with writer._BlockFile(path) as f:
        for offset, n in sizes:
            block = writer._page_aligned(writer._round_up(n, 4096))
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
    buf = writer._page_aligned(3 * 4096)
    assert buf.ctypes.data % 4096 == 0 and not buf.any()


def test_source_sha256_from_the_map_equals_hashlib(tmp_path, monkeypatch):
    """The manifest's source digest is hashed from maps of the file, a window at a time, in
    blocks (both shrunk here so a small file spans several, the last ones partial); an empty
    file and a device are read instead and give hashlib's digest too."""
    monkeypatch.setattr(writer, "HASH_BLOCK", 4096)
    monkeypatch.setattr(writer, "HASH_WINDOW", 8192)
    data = bytes(range(256)) * 97 + b"tail"     # 24,836 bytes: 3 windows and a part
    cases = {"blocks": data, "empty": b""}
    for name, payload in cases.items():
        (tmp_path / name).write_bytes(payload)
        assert writer.sha256_of(tmp_path / name) == hashlib.sha256(payload).hexdigest(), name
    assert writer.sha256_of(Path("/dev/null")) == hashlib.sha256(b"").hexdigest()
