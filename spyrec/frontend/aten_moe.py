"""Lowerings of top-k selection and mixture-of-experts routing."""

from __future__ import annotations
