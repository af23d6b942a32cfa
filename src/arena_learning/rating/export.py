"""Leaderboards out: the JSON rows of ``--json`` and the CSV export."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..records import Rating

LEADERBOARD_FIELDS = ("model", "rating", "ci_low", "ci_high", "rank", "rank_ci", "wins", "losses", "ties", "battles")
"""Columns of the JSON rows and of the CSV, in order."""


def ratings_to_json(ratings: Sequence[Rating]) -> list[dict[str, Any]]:
    """Return one dict per rating with the ``LEADERBOARD_FIELDS`` keys, in the given order.

    Values are plain JSON types; an interval is null when there was no bootstrap, and any
    NaN or infinite number is null too (JSON has neither).
    """
    return [{name: _json_value(getattr(r, name)) for name in LEADERBOARD_FIELDS} for r in ratings]


def _json_value(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_leaderboard_csv(ratings: Sequence[Rating], path: str | Path) -> Path:
    """Write ``ratings`` as CSV with the ``LEADERBOARD_FIELDS`` header; return the path.

    Missing intervals are empty cells. ``arena compare`` reads this file back.
    """
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=LEADERBOARD_FIELDS)
        writer.writeheader()
        for row in ratings_to_json(ratings):
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return p
