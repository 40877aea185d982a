"""flash_site's one-pass placement of unshared mask copies (`_with_copies`) is the per-copy
`insert` after the original it replaced (which was quadratic in the program's ops)."""

from hypothesis import given, settings, strategies as st

from spyrec.passes.flash_attention.sites import _with_copies


class Op:
    """A stand-in: only identity matters."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


@settings(deadline=None)     # hypothesis's default 200 ms per example is wall time
@given(st.integers(1, 8), st.lists(st.integers(0, 7), max_size=12))
def test_copies_land_as_inserting_each_after_its_original(n, originals):
    ops = [Op(f"op{i}") for i in range(n)]
    added = [(ops[k % n], Op(f"copy{j}_of_{k % n}")) for j, k in enumerate(originals)]
    inserted = list(ops)
    for original, copy in added:
        inserted.insert(inserted.index(original) + 1, copy)
    assert _with_copies(ops, added) == inserted
