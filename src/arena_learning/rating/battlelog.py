"""Read battle logs from elsewhere: the Chatbot Arena / FastChat format.

Columns ``model_a``, ``model_b`` and ``winner`` (``model_a``, ``model_b``, ``tie`` or
``tie (bothbad)``), in JSON (a list of records), JSONL or Parquet; CSV too. A
``question_id`` column, when present, groups battles by prompt for the prompt bootstrap;
otherwise each battle is its own prompt. Rows that cannot be rated (an unknown winner, a
missing model, a model against itself) are counted by reason in the report, never
dropped silently.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ArenaError
from .counts import A_WINS, B_WINS, TIE, BattleTable

WINNER_CODES = {"model_a": A_WINS, "model_b": B_WINS, "tie": TIE, "tie (bothbad)": TIE}
"""FastChat's winner labels; both tie labels are ties for the ratings."""

PROMPT_COLUMNS = ("question_id", "prompt_id")


@dataclass
class BattleLogReport:
    """What reading a battle log kept and what it left out."""

    path: str
    rows: int
    rated: int
    prompt_column: str | None
    skipped: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"{self.path}: {self.rows} rows, {self.rated} rated"]
        if self.prompt_column is None:
            out.append("no question_id column: each battle is resampled on its own")
        for reason, n in sorted(self.skipped.items(), key=lambda kv: -kv[1]):
            out.append(f"skipped {n} row(s): {reason}")
        return out


def _first_bad_line(path: Path) -> str | None:
    """Return ``path:line`` of the first line of a JSONL file that is not one JSON object, or None."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except ValueError:  # invalid JSON or not UTF-8
                return f"{path}:{lineno}"
            if not isinstance(value, dict):
                return f"{path}:{lineno}"
    return None


def read_battle_log(path: str | Path) -> tuple[BattleTable, BattleLogReport]:
    """Return the rateable battles of the log at ``path`` and a report of the rest."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise ArenaError(f"battle log not found: {p} (give a .json, .jsonl or .parquet file)")
    suffix = p.suffix.lower()
    try:
        if suffix == ".parquet":
            frame = pd.read_parquet(p)
        elif suffix in (".jsonl", ".ndjson"):
            try:
                frame = pd.read_json(p, lines=True, dtype=False)
            except ValueError as err:
                raise ArenaError(f"cannot read battle log {_first_bad_line(p) or p}: {err}") from None
        elif suffix == ".json":
            try:
                frame = pd.read_json(p, dtype=False)
            except ValueError:
                frame = pd.read_json(p, lines=True, dtype=False)  # JSONL saved as .json
        elif suffix == ".csv":
            frame = pd.read_csv(p, dtype=str, keep_default_na=False, na_values=[""])
        else:
            raise ArenaError(f"battle log {p} has an unknown extension {suffix!r}: use .json, .jsonl, .parquet or .csv")
    except (ValueError, OSError) as err:
        raise ArenaError(f"cannot read battle log {p}: {err}") from None
    missing = [c for c in ("model_a", "model_b", "winner") if c not in frame.columns]
    if missing:
        raise ArenaError(
            f"battle log {p} lacks column(s) {', '.join(missing)} (columns: {', '.join(map(str, frame.columns))}); "
            "the Chatbot Arena format has model_a, model_b and winner"
        )
    n = len(frame)
    if n == 0:
        raise ArenaError(f"battle log {p} has no rows")
    # Plain objects: a categorical column (Parquet) refuses fill values outside its categories.
    frame = frame.astype({c: object for c in ("model_a", "model_b", "winner")})
    skipped: Counter[str] = Counter()
    # vectorised with pandas: public dumps have millions of rows
    win = frame["winner"]
    win_str = win.where(win.notna(), "<missing>").astype(str)
    code = win_str.map(WINNER_CODES).fillna(-1).astype(np.int8).to_numpy()
    unknown = code < 0
    if unknown.any():
        for label, count in win_str[unknown].value_counts().items():
            skipped[f"unknown winner {label!r}"] += int(count)
    name_a = frame["model_a"].where(frame["model_a"].notna(), "").astype(str).str.strip()
    name_b = frame["model_b"].where(frame["model_b"].notna(), "").astype(str).str.strip()
    no_model = ((name_a == "") | (name_b == "")).to_numpy()
    skipped["model_a or model_b missing"] += int((no_model & ~unknown).sum())
    self_battle = ~no_model & (name_a == name_b).to_numpy()
    skipped["a model against itself"] += int((self_battle & ~unknown).sum())
    keep = ~(unknown | no_model | self_battle)
    skipped = Counter({k: v for k, v in skipped.items() if v})

    prompt_col = next((c for c in PROMPT_COLUMNS if c in frame.columns), None)
    if not keep.any():
        raise ArenaError(
            f"battle log {p}: none of its {n} rows can be rated ("
            + "; ".join(f"{v} {k}" for k, v in skipped.items())
            + ")"
        )
    prompts = None
    if prompt_col:
        ids = frame[prompt_col]
        # a row without a prompt id is a prompt of its own, never lumped with the others
        own = "\x00row" + frame.index.astype(str)
        prompts = ids.astype(str).where(ids.notna(), own).to_numpy(dtype=object)[keep]
    table = BattleTable.from_arrays(
        name_a.to_numpy(dtype=object)[keep],
        name_b.to_numpy(dtype=object)[keep],
        code[keep],
        prompts,
    )
    report = BattleLogReport(str(p), n, int(keep.sum()), prompt_col, dict(skipped))
    return table, report
