"""Symbolic lengths: dims a `.pt2` exported with `torch.export.Dim` leaves open (issue 30).

A length can also be a value an input holds (`ValueSource`): a decode step over a static cache
attends to the slots up to its cache position, and its key loop runs only over those.

A program compiled with symbols is planned at each symbol's maximum (allocations, layouts, LX
plans, address proofs all take that instance) and runs at any admissible length: every op
that touches a symbolic dim sits in a counted loop over it with a fixed tile, and the loop's
trip count is the length over the tile (`graph.LoopBound`). The tile divides every admissible
length, so no trip reads or writes past the length (nothing depends on the padding up to the
maximum).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ValueSource:
    """Where a length read at run time comes from: element `index` (flat) of program input
    `input`, plus `offset` (the keys a decode step attends to: its cache position + 1)."""

    input: str
    index: int
    offset: int

    def describe(self) -> str:
        sign = "+" if self.offset >= 0 else "-"
        return f"{self.input}[{self.index}] {sign} {abs(self.offset)}"


@dataclass(frozen=True)
class SymLength:
    """A dim length the export left symbolic: every multiple of `granularity` from `minimum`
    to `maximum` (torch's `c * Dim(min=a, max=b)` gives granularity c, minimum c*a, maximum
    c*b). `name` is torch's symbol (s81); `where` names it for messages ("input x dim 1")."""

    name: str
    granularity: int
    minimum: int
    maximum: int
    where: str = field(default="", compare=False)
    # None: a dim of an input's shape. Else a length read from an input's value at run time
    # and clamped to minimum..maximum (granularity 1): loops over it round up, the mask
    # that made it covers the last tile's rest
    value_of: ValueSource | None = None
    # the fewest values each busy core of a sized op runs, by length: (up to length, share)
    # steps, ascending; a length uses the first step that reaches it (none: no floor). At a
    # short length a var split k ways then runs on fewer cores, each `share(length, k)`
    # values, the rest idle: a weight reaches a few cores, not every one. Chosen per length
    # by the cost model (`plan/length_shares.py`); before that, one step at the maximum
    # plans the split (`symbolic_lengths.mode`)
    min_shares: tuple[tuple[int, int], ...] = ()

    def values(self) -> range:
        """Every admissible length, smallest first."""
        return range(self.minimum, self.maximum + 1, self.granularity)

    def min_share(self, length: int) -> int:
        """The fewest values a busy core of a sized op runs at `length` (0: no floor)."""
        return next((m for upto, m in self.min_shares if length <= upto), 0)

    def share(self, length: int, cores: int) -> int:
        """Values each busy core of a var of this length split `cores` ways runs: length /
        cores, or `min_share(length)` when that is more (cores past the length then idle)."""
        return length if cores <= 1 else max(length // cores, self.min_share(length))

    def splits(self, cores: int, unit: int = 1, reduced: bool = False) -> bool:
        """Can a var of this length be split `cores` ways at every admissible length: each
        busy core whole `unit`s (a stick var: its elements per stick) within the slice it
        holds at the maximum, and for a `reduced` var no idle core (it would hold a partial
        sum)? Length / cores is whole units when the granularity is; a floor that binds (a
        length below cores x floor) must be whole units itself (the last busy slice, cut at
        the length, is then whole units too: every length is)."""
        if cores <= 1:
            return True
        if self.granularity % (cores * unit):
            return False
        low = self.minimum          # the shortest admissible length the step reaches
        for upto, m in self.min_shares:
            if low <= min(upto, self.maximum) and \
                    not self.floor_allows(low, m, cores, unit, reduced):
                return False        # (binding at `low`, the floor binds at its shortest)
            low = max(low, upto + 1 + (self.minimum - upto - 1) % self.granularity)
        return True

    def floor_allows(self, length: int, floor: int, cores: int, unit: int = 1,
                     reduced: bool = False) -> bool:
        """Does a minimum share of `floor` at `length` keep a var of this length split
        `cores` ways valid: where it binds (above length / cores), whole `unit`s, within
        the slice a core holds at the maximum, and not on a `reduced` var (an idle core
        would hold a partial sum)? (`splits` at every length; plan/length_shares.py per
        length.)"""
        if cores <= 1 or length // cores >= floor:
            return True
        return not reduced and floor % unit == 0 and cores * floor <= self.maximum

    def floors(self) -> frozenset[int]:
        """Every minimum share some length uses."""
        return frozenset(m for _, m in self.min_shares if m)

    def admits(self, length: int) -> bool:
        return self.minimum <= length <= self.maximum and \
            (length - self.minimum) % self.granularity == 0

    def describe(self) -> str:
        """`128..2048 by 64` — the admissible lengths, for messages."""
        return f"{self.minimum}..{self.maximum} by {self.granularity}"
