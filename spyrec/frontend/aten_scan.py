"""Lowerings of scans (cumulative sums) over runtime data."""

from __future__ import annotations
