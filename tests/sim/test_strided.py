"""Strided accesses (`spyrec.sim.strided`) read and write exactly the elements their offset
terms name: randomized against `np.take` / fancy assignment on the same offsets."""

import numpy as np
from hypothesis import given, settings, strategies as st

from spyrec.sim.strided import Strided, digits


@st.composite
def stick_terms(draw):
    """Per axis an offset term: a mixed-radix number (up to 3 digits, random strides, some
    negative or 0) over a length that may stop inside the outer block (a partial stick)."""
    rank = draw(st.integers(1, 3))
    terms, shape = [], []
    for axis in range(rank):
        depth = draw(st.integers(0, 3))
        extents = [draw(st.integers(1, 5)) for _ in range(depth)]
        strides = [draw(st.integers(-40, 40)) for _ in range(depth)]
        total = int(np.prod(extents)) if depth else 1
        n = draw(st.integers(max(1, total - (int(np.prod(extents[1:])) if depth else 1) + 1),
                             total)) if depth else 1
        i = np.arange(n, dtype=np.int64)
        f = np.zeros(n, dtype=np.int64)
        inner = 1
        for e, s in zip(reversed(extents), reversed(strides)):
            f += ((i // inner) % e) * s
            inner *= e
        shape.append(n)
        term = f.reshape([n if a == axis else 1 for a in range(rank)])
        terms.append(term)
    return terms, tuple(shape)


def offsets(terms, shape):
    total = np.zeros(shape, dtype=np.int64)
    for t in terms:
        total = total + t
    return total


@settings(max_examples=300, deadline=None)
@given(stick_terms(), st.integers(0, 200))
def test_reads_and_writes_equal_the_offset_path(case, base):
    terms, shape = case
    rel = offsets(terms, shape)
    shift = base - min(0, int(rel.min()))          # keep every offset inside the arena
    terms = terms + [np.full([1] * len(shape), shift, dtype=np.int64)]
    rel = rel + shift
    arena = np.arange(int(rel.max()) + 50, dtype=np.float32)
    form = Strided.from_terms(terms, shape, len(arena))
    if form is None:       # a term whose digits repeat an element: no one-to-one form needed
        return
    assert np.array_equal(np.broadcast_to(form.read(arena, arena.dtype), shape),
                          np.take(arena, rel))
    if len(np.unique(rel)) != rel.size:
        return
    values = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    by_offsets, by_view = arena.copy(), arena.copy()
    by_offsets[rel] = values
    form.write(by_view, values)
    assert np.array_equal(by_view, by_offsets)


def test_a_stick_layout_term_has_two_digits_and_a_partial_stick_is_padded():
    i = np.arange(49155, dtype=np.int64)              # Granite's vocab in sticks of 64
    f = (i // 64) * 8192 + i % 64
    assert digits(f) == ((769, 8192), (64, 1))
    form = Strided.from_terms([f.reshape(-1, 1)], (49155, 1), 769 * 8192)
    assert form.padded and form.lengths == (49155, 1)


def test_no_digit_form_or_a_box_past_the_arena_keeps_the_offset_path():
    assert digits(np.array([0, 1, 3, 4, 9])) == ((2, 9), (2, 3), (2, 1))  # 5 of 8
    assert digits(np.array([0, 1, 2, 4, 5, 7])) is None
    f = np.arange(100, dtype=np.int64)
    assert Strided.from_terms([f], (100,), 100) is not None
    assert Strided.from_terms([f + 1], (100,), 100) is None
    two_axes = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert Strided.from_terms([two_axes], (2, 3), 10) is None


def test_an_lx_core_grid_splits_into_per_axis_terms_only_when_it_is_a_sum():
    """Cores numbered row-major over two split vars are i * 4 + j: a constant plus a term per
    axis, so the LX arg's core offset is part of its strided view; a grid that is not such a
    sum keeps the offset path."""
    from spyrec.sim.core_map import separable

    cores = (np.arange(3)[:, None, None] * 4 + np.arange(4)[None, None, :]).astype(np.int64)
    terms = separable(cores)
    total = sum(np.broadcast_to(t, cores.shape) for t in terms)
    assert np.array_equal(total, cores) and all(sum(n > 1 for n in t.shape) <= 1 for t in terms)
    assert separable(np.array([[0, 1], [2, 5]])) is None
    assert [t.tolist() for t in separable(np.array(7))] == [7]


def test_read_follows_the_arena_order():
    """An lm_head-like weight, sticks along N (device (N/64, K, 64)), read over (N, K): the
    values are the offset path's, and the copy lies in the arena's order (N innermost), so
    the (K, N) operand a matmul wants is a plain C-contiguous transpose."""
    n, k = 192, 8
    device = np.arange(n // 64 * k * 64, dtype=np.float16)
    i_n = np.arange(n).reshape(n, 1)
    i_k = np.arange(k).reshape(1, k)
    terms = [(i_n // 64) * (k * 64) + i_n % 64, i_k * 64]
    form = Strided.from_terms(terms, (n, k), len(device))
    got = form.read(device, np.dtype(np.float32), arena_order=True)
    assert np.array_equal(got, np.take(device, terms[0] + terms[1]).astype(np.float32))
    assert got.strides == (4, n * 4)          # N innermost, like the sticks
    assert got.T.flags.c_contiguous
    plain = form.read(device, np.dtype(np.float32))    # other kernels: the chunk's order
    assert np.array_equal(plain, got) and plain.flags.c_contiguous


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 60_000), st.integers(1, 5_000))
def test_chunk_cuts_cover_the_var_in_an_even_count_of_aligned_near_equal_ranges(extent, step):
    """`chunking._cuts`: the ranges tile [0, extent) in order, none longer than `step`; where a
    step holds a whole `CHUNK_ALIGN` they start at its multiples, are an even number unless
    the var has a single aligned unit to split (so two threads finish together) and differ
    by at most one unit (12,800 columns at 1,024: 14 ranges of 896 or 1,024, not 12 x 1,024
    and 512)."""
    from spyrec.sim.chunking import CHUNK_ALIGN, _cuts

    cuts = _cuts(extent, step)
    assert cuts[0][0] == 0 and cuts[-1][1] == extent
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    assert all(0 < hi - lo <= step for lo, hi in cuts)
    if step >= CHUNK_ALIGN:
        units = -(-extent // CHUNK_ALIGN)
        assert all(lo % CHUNK_ALIGN == 0 for lo, _ in cuts)
        assert len(cuts) % 2 == 0 or len(cuts) == units
        full = [hi - lo for lo, hi in cuts[:-1]]
        assert not full or max(full) - min(full) <= CHUNK_ALIGN
    assert _cuts(12_800, 1_024) == [(i * 100 // 14 * 128, (i + 1) * 100 // 14 * 128)
                                    for i in range(14)]


def test_one_strided_form_serves_every_arg_accessed_alike():
    """`access._hbm_form` is cached on the access alone (coordinates, device size, tile base,
    chunk): the same form comes back for a second op's arg, the bounds check stays per arg
    (`fits`: a view too short for the box has no form), and a coordinate out of its dim is
    reported by the uncached path (`_OUT_OF_RANGE`)."""
    from spyrec.indexing import FloorDiv, Lin, Mod, Var
    from spyrec.layout import DeviceLayout
    from spyrec.sim.access import _OUT_OF_RANGE, _hbm_form
    from spyrec.sim.chunking import Chunk

    n = Var("n")
    coords = (Lin({FloorDiv(Lin({n: 1}), 64): 1}), Lin(), Lin({Mod(Lin({n: 1}), 64): 1}))
    chunk = Chunk(("n",), (128,), (320,))       # sticks 2-4 of a (5, 2, 64) device layout
    layout = DeviceLayout((5, 2, 64), (0, 1, 2), "fp16")
    form = _hbm_form(coords, layout, (0, 0, 0), chunk)
    assert form == Strided(256, (((3, 128), (64, 1)),), (192,))
    assert _hbm_form(tuple(coords), DeviceLayout((5, 2, 64), (0, 1, 2), "fp16"), (0, 0, 0),
                     Chunk(("n",), (128,), (320,))) is form
    assert form.fits(576) and not form.fits(575)
    assert _hbm_form(coords, DeviceLayout((4, 2, 64), (0, 1, 2), "fp16"), (0, 0, 0),
                     chunk) is _OUT_OF_RANGE
    assert _hbm_form(coords, layout, (1, 0, 0), chunk) is _OUT_OF_RANGE


def test_the_lx_memo_is_bounded_in_bytes_least_recently_used_out_first():
    """`access._Memo`: an entry is made once while it stays; past the byte limit the least
    recently used entries go (a hit counts as a use), whatever their count."""
    from spyrec.sim.access import _Memo

    made = []
    memo = _Memo(3 * (_Memo.ENTRY_BYTES + 800))

    def get(key):
        return memo.get(key, lambda: made.append(key) or (np.zeros(100), {"n": np.zeros(0)}))

    for key in "abc":
        get(key)
    get("a")                    # a is now the most recent: b goes first
    get("d")
    assert made == list("abcd")
    get("a"), get("c"), get("d")
    assert made == list("abcd")
    get("b")
    assert made == list("abcdb")
    get("a")                    # a was least recent when b came back
    assert made == list("abcdba")
