"""Schedules: which pairs of models meet on which prompts."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations


def all_pairs(models: Sequence[str]) -> list[tuple[str, str]]:
    """Return every unordered pair of ``models`` once, in config order."""
    return list(combinations(models, 2))
