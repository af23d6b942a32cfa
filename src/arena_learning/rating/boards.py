"""Read leaderboards to compare: CSV or JSON files, or an arena workspace.

A board is a list of ``Rating`` records whose ``rating`` is the board's score (Elo, win
rate, ...; higher is better) and ``ci_low``/``ci_high`` its 95% interval when known.
Known layouts are recognised by their columns:

* ours (``arena ratings --csv`` / ``write_leaderboard_csv``): model, rating, ci_low, ci_high;
* arena-hard ``leaderboard_*.csv``: model, score, rating_q025, rating_q975;
* AlpacaEval ``*_leaderboard.csv``: the model is the unnamed first column, the score is
  length_controlled_winrate and the interval is +- 1.96 * lc_standard_error (no interval
  where the standard error is missing);
* Chatbot Arena's human leaderboard as its table is saved: Model, Arena Elo (or Arena Score)
  and 95% CI written ``+5/-4``;
* the JSON that ``arena leaderboard --json`` (a list of rows), ``arena scores --json``
  (``{"judge", "models": [...]}``, the mean grade) and ``arena leaderboard --baseline --json``
  (``{"rows": [...]}``, the win rate) print;
* otherwise model, score, lower, upper (lower/upper optional), or the columns given.

Where a board has no bounds but a standard error column for its score (``<score>_standard_error``,
``<score>_se``, AlpacaEval's ``standard_error`` of ``win_rate``, or ``se_col``), the 95% interval
is +- 1.96 SE, and the board's ``notes`` say so. Files may be gzipped (``.csv.gz``, ``.json.gz``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArenaError
from ..records import Rating

if TYPE_CHECKING:
    import pandas as pd

Z95 = 1.959963984540054
"""Normal quantile of a two-sided 95% interval (AlpacaEval publishes standard errors)."""


_SE_OF = {"win_rate": "standard_error", "length_controlled_winrate": "lc_standard_error"}
"""AlpacaEval's standard-error column of each score column."""
_ARENA_SCORES = ("Arena Elo", "Arena Score", "arena_elo", "arena_score", "elo", "Elo")
_CI_TEXT = re.compile(r"^\s*\+\s*([\d.]+)\s*/\s*-\s*([\d.]+)\s*$")


@dataclass
class Board:
    """A leaderboard read from ``source``; ``layout`` says which format was recognised."""

    source: str
    layout: str
    entries: list[Rating]
    notes: list[str] = field(default_factory=list)  # how intervals were made, for the reader of the comparison


def read_board(
    source: str | Path,
    *,
    model_col: str | None = None,
    score_col: str | None = None,
    lower_col: str | None = None,
    upper_col: str | None = None,
    se_col: str | None = None,
    options: str = "--model-col, --score-col, --lower-col, --upper-col",
) -> Board:
    """Return the board at ``source``: a CSV/JSON/JSONL file (gzipped or not) or a workspace directory.

    The ``*_col`` options name the columns of a CSV or JSON file; given any of them, the
    layout is not guessed and the rest default to model, score, lower, upper. ``options``:
    the command's options that name these columns, for the message when one is missing.
    """
    path = Path(source)
    if path.is_dir():
        return _read_workspace(path)
    if not path.is_file():
        raise ArenaError(f"leaderboard not found: {path} (give a CSV/JSON file or a workspace directory)")
    import pandas as pd

    gz = path.suffix.lower() == ".gz"
    suffix = Path(path.stem).suffix.lower() if gz else path.suffix.lower()
    compression = "gzip" if gz else None
    try:
        if suffix == ".json":
            frame = _json_frame(path, compression)
        elif suffix in (".jsonl", ".ndjson"):
            frame = pd.read_json(path, lines=True, compression=compression)
        else:
            frame = pd.read_csv(path, compression=compression)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError, OSError, EOFError) as err:
        raise ArenaError(f"cannot read leaderboard {path}: {err}") from None
    explicit = any(c is not None for c in (model_col, score_col, lower_col, upper_col))
    where = partial(_row_location, str(path), suffix)
    return _from_frame(frame, str(path), explicit, model_col, score_col, lower_col, upper_col, where, se_col, options)


def _json_frame(path: Path, compression: str | None) -> pd.DataFrame:
    """Return the rows of a JSON board: a list of rows, or an object holding one (``models``, ``rows``)."""
    import gzip

    import pandas as pd

    opener = gzip.open if compression else open
    with opener(path, "rt", encoding="utf-8-sig") as fh:
        data = json.load(fh)
    if isinstance(data, dict):
        lists = {k: v for k, v in data.items() if isinstance(v, list) and all(isinstance(x, dict) for x in v)}
        key = next((k for k in ("models", "rows", "boards") if k in lists), None)
        if key is None and len(lists) == 1:
            key = next(iter(lists))
        if key is None:
            return pd.DataFrame([data]) if data and all(not isinstance(v, (list, dict)) for v in data.values()) \
                else pd.read_json(path, compression=compression)
        data = lists[key]
    if not isinstance(data, list):
        raise ValueError("expected a list of rows (or an object holding one)")
    return pd.DataFrame.from_records(data)


def _row_location(source: str, suffix: str, n: int) -> str:
    """Return where the ``n``-th row (from 1) of a board file is: ``file:line``, or ``file: record n`` for JSON."""
    if suffix == ".json":
        return f"{source}: record {n}"
    # A CSV's first line is its header; a JSONL file has none.
    return f"{source}:{n if suffix in ('.jsonl', '.ndjson') else n + 1}"


def _from_frame(frame: pd.DataFrame, source: str, explicit: bool, model_col: str | None, score_col: str | None,
                lower_col: str | None, upper_col: str | None, where: Callable[[int], str],
                se_col: str | None = None, options: str = "--model-col, --score-col, --lower-col, --upper-col"
                ) -> Board:
    """Return the board of ``frame``; ``where(n)`` locates its n-th row (from 1) in the file."""
    cols = [str(c) for c in frame.columns]
    frame.columns = cols
    half_width = None
    ci_text = None
    if explicit:
        layout = "columns"
        # AlpacaEval's CSV names its models in an unnamed first column
        model_col = model_col or ("model" if "model" in cols or not cols[0].startswith("Unnamed: ") else cols[0])
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
    elif "model" in cols and ("mean" in cols or "win_rate" in cols) and "ci_low" in cols:
        # `arena scores --json` (mean grade) or `arena leaderboard --baseline --json` (win rate)
        layout = "arena-scores" if "mean" in cols else "arena-baseline"
        model_col, score_col = "model", "mean" if "mean" in cols else "win_rate"
        lower_col, upper_col = "ci_low", "ci_high"
    elif any(c in cols for c in _ARENA_SCORES) and ("Model" in cols or "model" in cols):
        layout, model_col = "chatbot-arena", "Model" if "Model" in cols else "model"
        score_col = next(c for c in _ARENA_SCORES if c in cols)
        ci_text = "95% CI" if "95% CI" in cols else None
    else:
        layout, model_col, score_col = "columns", "model", "score"
        lower_col = "lower" if "lower" in cols else None
        upper_col = "upper" if "upper" in cols else None
    if se_col is not None:
        half_width = se_col
    elif half_width is None and (lower_col is None or upper_col is None) and ci_text is None:
        half_width = next((c for c in (f"{score_col}_standard_error", f"{score_col}_se", _SE_OF.get(score_col or ""))
                           if c in cols), None)
    for name in (model_col, score_col, lower_col, upper_col, half_width):
        if name is not None and name not in cols:
            raise ArenaError(
                f"leaderboard {source} has no column {name!r} (columns: {', '.join(cols)}); "
                f"name the columns with {options}"
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
        if ci_text is not None:
            lo, hi = _ci_text(row[ci_text], score, at)
        elif half_width is not None:
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
    notes = []
    if half_width is not None:
        have = sum(r.ci_low is not None for r in entries)
        notes.append(f"95% intervals from standard errors: {score_col} +- 1.96 x {half_width} "
                     f"({have} of {len(entries)} models have one)")
    return Board(source, layout, entries, notes)


def _ci_text(value: Any, score: float, at: str) -> tuple[float | None, float | None]:
    """Return the bounds of Chatbot Arena's ``+5/-4`` interval around ``score`` (None, None when empty)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == "":
        return None, None
    m = _CI_TEXT.match(str(value))
    if m is None:
        raise ArenaError(f"{at}: column '95% CI' holds {value!r}, not an interval written +up/-down (e.g. +5/-4)")
    return score - float(m.group(2)), score + float(m.group(1))


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
