"""Lowerings of convolutions, pooling and inference batch norm (vision and audio front ends)."""

from __future__ import annotations
