"""Read leaderboards to compare: CSV or JSON files, or an arena workspace.

A board is a list of ``Rating`` records whose ``rating`` is the board's score (Elo, win
rate, ...; higher is better) and ``ci_low``/``ci_high`` its 95% interval when known.
Known layouts are recognised by their columns:

* ours (``arena ratings --csv`` / ``write_leaderboard_csv``): model, rating, ci_low, ci_high;
* arena-hard ``leaderboard_*.csv``: model, score, rating_q025, rating_q975;
* AlpacaEval ``*_leaderboard.csv``: the model is the unnamed first column, the score is
  length_controlled_winrate and the interval is +- 1.96 * lc_standard_error (no interval
  where the standard error is missing);
* otherwise model, score, lower, upper (lower/upper optional), or the columns given.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArenaError
from ..records import Rating

if TYPE_CHECKING:
    import pandas as pd

Z95 = 1.959963984540054
"""Normal quantile of a two-sided 95% interval (AlpacaEval publishes standard errors)."""


@dataclass
class Board:
    """A leaderboard read from ``source``; ``layout`` says which format was recognised."""

    source: str
    layout: str
    entries: list[Rating]


def read_board(
    source: str | Path,
    *,
    model_col: str | None = None,
    score_col: str | None = None,
    lower_col: str | None = None,
    upper_col: str | None = None,
) -> Board:
    """Return the board at ``source``: a CSV/JSON/JSONL file or a workspace directory.

    The ``*_col`` options name the columns of a CSV or JSON file; given any of them, the
    layout is not guessed and the rest default to model, score, lower, upper.
    """
    path = Path(source)
    if path.is_dir():
        return _read_workspace(path)
    if not path.is_file():
        raise ArenaError(f"leaderboard not found: {path} (give a CSV/JSON file or a workspace directory)")
    import pandas as pd

    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            frame = pd.read_json(path)
        elif suffix in (".jsonl", ".ndjson"):
            frame = pd.read_json(path, lines=True)
        else:
            frame = pd.read_csv(path)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ArenaError(f"cannot read leaderboard {path}: {err}") from None
    explicit = any(c is not None for c in (model_col, score_col, lower_col, upper_col))
    where = partial(_row_location, str(path), suffix)
    return _from_frame(frame, str(path), explicit, model_col, score_col, lower_col, upper_col, where)


def _row_location(source: str, suffix: str, n: int) -> str:
    """Return where the ``n``-th row (from 1) of a board file is: ``file:line``, or ``file: record n`` for JSON."""
    if suffix == ".json":
        return f"{source}: record {n}"
    # A CSV's first line is its header; a JSONL file has none.
    return f"{source}:{n if suffix in ('.jsonl', '.ndjson') else n + 1}"


def _from_frame(frame: pd.DataFrame, source: str, explicit: bool, model_col: str | None, score_col: str | None,
                lower_col: str | None, upper_col: str | None, where: Callable[[int], str]) -> Board:
    """Return the board of ``frame``; ``where(n)`` locates its n-th row (from 1) in the file."""
    cols = [str(c) for c in frame.columns]
    frame.columns = cols
    half_width = None
    if explicit:
        layout = "columns"
        model_col = model_col or "model"
        score_col = score_col or "score"
        lower_col = lower_col or ("lower" if "lower" in cols else None)
        upper_col = upper_col or ("upper" if "upper" in cols else None)
    elif {"rating_q025", "rating_q975"} <= set(cols):
        layout, model_col, score_col = "arena-hard", "model", "score"
        lower_col, upper_col = "rating_q025", "rating_q975"
    elif "length_controlled_winrate" in cols:
        layout, score_col = "alpaca-eval", "length_controlled_winrate"
        model_col = "model" if "model" in cols else cols[0]
        half_width = "lc_standard_error" if "lc_standard_error" in cols else None
    elif {"model", "rating"} <= set(cols):
        layout, model_col, score_col = "arena-learning", "model", "rating"
        lower_col = "ci_low" if "ci_low" in cols else None
        upper_col = "ci_high" if "ci_high" in cols else None
    else:
        layout, model_col, score_col = "columns", "model", "score"
        lower_col = "lower" if "lower" in cols else None
        upper_col = "upper" if "upper" in cols else None
    for name in (model_col, score_col, lower_col, upper_col):
        if name is not None and name not in cols:
            raise ArenaError(
                f"leaderboard {source} has no column {name!r} (columns: {', '.join(cols)}); "
                "name the columns with --model-col, --score-col, --lower-col, --upper-col"
            )
    entries: list[Rating] = []
    for n, row in enumerate(frame.to_dict("records"), start=1):
        at = where(n)
        model = row[model_col]
        if model is None or (isinstance(model, float) and math.isnan(model)) or str(model).strip() == "":
            raise ArenaError(f"{at}: the model name is empty")
        score = _number(row[score_col], at, score_col)
        if score is None:
            raise ArenaError(f"{at}: model {model!r} has no {score_col}")
        lo = hi = None
        if half_width is not None:
            se = _number(row[half_width], at, half_width)
            if se is not None:
                lo, hi = score - Z95 * se, score + Z95 * se
        else:
            lo = _number(row[lower_col], at, lower_col) if lower_col else None
            hi = _number(row[upper_col], at, upper_col) if upper_col else None
        if (lo is None) != (hi is None):
            lo = hi = None  # half an interval is no interval
        if lo is not None and hi is not None and lo > hi:
            raise ArenaError(f"{at}: model {model!r} has lower bound {lo} above upper bound {hi}")
        entries.append(Rating(model=str(model), rating=score, ci_low=lo, ci_high=hi))
    if not entries:
        raise ArenaError(f"leaderboard {source} has no rows")
    return Board(source, layout, entries)


def _number(value: Any, at: str, column: str) -> float | None:  # Any: a cell of any type; float() decides
    if value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ArenaError(f"{at}: column {column!r} holds {value!r}, not a number") from None
    return None if math.isnan(x) else x


def _read_workspace(path: Path) -> Board:
    # imported here: the workspace belongs to the pipeline, which rating must not need
    try:
        from arena_learning import workspace_board

        entries = list(workspace_board(path))
    except ImportError as err:
        raise ArenaError(
            f"{path} is a directory, but reading workspaces is not available in this install ({err}); "
            "export its leaderboard with `arena leaderboard WORKSPACE --csv FILE` and compare the file"
        ) from None
    if not entries:
        raise ArenaError(f"workspace {path} has no leaderboard yet: run the battles first")
    return Board(str(path), "workspace", entries)
