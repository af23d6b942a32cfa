"""Judgments in and out: arena-hard-auto's and FastChat's (MT-Bench) judgment files as Judgment records.

Published verdicts come in three layouts; each reads into our games and makes battles by its
own tool's rules, so they can be re-rated, audited and set beside another judge's:

- ``arena-hard`` (arena-hard-auto ``data/<bench>/model_judgment/<judge>/<model>.jsonl``):
  ``{"uid" | "question_id", "model", "judge", "games": [{"user_prompt", "judgment", "score"}, x2]}``.
  The baseline is not in the file (it is the judge config's ``baseline_model``; v0.1: gpt-4-0314).
  gen_judgment.py shows the baseline as assistant A in game 1 and swaps the order in game 2;
  ``score`` is the label (``A>>B`` ... ``B>>A``, or the mirrored ``A<B`` / ``B=A`` spellings). As
  v0.1's show_result.py: each game is a battle, a strong label counting ``strong_weight`` (3)
  times, and a game with a null score is left out alone (the other game of its record stays).
  The export writes both ``question_id`` (what v0.1's scripts read) and ``uid`` (v2.0's).
- ``fastchat-pair`` (FastChat ``llm_judge`` ``<judge>_pair.jsonl``): ``{"question_id", "model_1",
  "model_2", "g1_winner", "g2_winner", "judge": [model, prompt], "g1_judgment", "g2_judgment",
  "turn", "tstamp"}``; game 1 shows model_1 as A, game 2 model_2; winners are named
  ``model_1``/``model_2``/``tie``/``error`` (gen_judgment.py ``play_a_match_pair``). As
  show_result.py ``display_result_pairwise``: a record with an ``error`` game is left out, and
  it is one battle, a tie unless both games name the same winner (our ``consistent`` combine).
- ``fastchat-single`` (``<judge>_single.jsonl``): ``{"question_id", "model", "judge", "user_prompt",
  "judgment", "score", "turn", "tstamp"}``, score 1-10, -1 (or null) a failed grading. Each pair
  of models graded on the same question and turn is one game, the higher score winning and equal
  scores a tie (how MT-Bench turns single grades into pairwise votes). The grades are what is
  stored (``Grade``, each with its text, once); the pairwise games and battles are derived from
  them (``store.grade_games``). A failed grading is kept: its games are failed games (no battle,
  as show_result.py leaves it out) that still carry the other model's grade, so ``arena scores``
  counts the failure and keeps the other grade.

Skipped records are counted by reason (:meth:`JudgmentImport.skip_table`): the reason, how many,
the first file:line.

FastChat judges each turn separately; a turn after the first becomes its own prompt id,
``<question_id>#turn<N>``, so both turns' battles live side by side as show_result.py counts them.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ArenaError
from ..readers import bad_bytes, iter_rows
from ..records import Battle, Grade, Judgment
from ..store import grade_games
from .battles import combine_games
from .judges import verdict
from .parse import label_scores, normalize_label

FORMATS = ("arena-hard", "fastchat-pair", "fastchat-single")
COMBINE = {"arena-hard": "both", "fastchat-pair": "consistent", "fastchat-single": "mean"}
"""How each peer makes battles of its games (see combine_games)."""
ARENA_HARD_BASELINE = "gpt-4-0314"  # arena-hard-v0.1's baseline_model (config/judge_config.yaml)


class RecordError(ValueError):
    """A record that cannot be imported; ``kind`` is its reason without the record's own values."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class Skip:
    """One record left out: where (``file:line``), why, and the kind of reason it is counted under."""

    where: str
    reason: str
    kind: str


_VALUES = re.compile(r"'[^']*'|\"[^\"]*\"|-?\b\d+(?:\.\d+)?\b")


def _skip_kind(err: Exception) -> str:
    """Return the kind of ``err``: its ``kind``, else its text with quoted values and numbers as ``...``."""
    kind = getattr(err, "kind", None)
    return kind if isinstance(kind, str) else _VALUES.sub("...", str(err))


@dataclass
class JudgmentImport:
    """What a judgment file held: the games, what was skipped and why, the format."""

    judgments: list[Judgment] = field(default_factory=list)  # single grades' games included (derived)
    grades: list[Grade] = field(default_factory=list)  # fastchat-single: the grades themselves
    skips: list[Skip] = field(default_factory=list)
    formats: set[str] = field(default_factory=set)
    failed_grades: int = 0  # FastChat single grades marked failed (score -1 or null), kept as failed games

    @property
    def judges(self) -> list[str]:
        return sorted({j.judge for j in self.judgments})

    @property
    def skipped(self) -> list[str]:
        """Every skipped record as ``file:line: reason``, in file order."""
        return [f"{s.where}: {s.reason}" for s in self.skips]

    def skip_table(self) -> list[tuple[str, int, str]]:
        """Return (reason, count, first file:line) per kind of skip, the most frequent first."""
        counts: dict[str, int] = {}
        first: dict[str, str] = {}
        for s in self.skips:
            counts[s.kind] = counts.get(s.kind, 0) + 1
            first.setdefault(s.kind, s.where)
        return sorted(((k, n, first[k]) for k, n in counts.items()), key=lambda r: -r[1])


# ---- ids ----------------------------------------------------------------------------------------


def turn_prompt_id(question_id: Any, turn: int) -> str:
    """Return our prompt id of FastChat's (question_id, turn): the question id itself for turn 1."""
    return str(question_id) if turn == 1 else f"{question_id}#turn{turn}"


def split_turn(prompt_id: str) -> tuple[str, int]:
    """Return (question id, turn) of a prompt id made by :func:`turn_prompt_id`."""
    base, sep, turn = prompt_id.rpartition("#turn")
    if sep and turn.isdigit() and int(turn) > 1:
        return base, int(turn)
    return prompt_id, 1


def _turn(rec: dict[str, Any]) -> int:
    """Return a FastChat record's turn (1 when absent); ValueError for anything but a whole number from 1.

    An integral float (``1.0``, as pandas writes an integer column with gaps) is that integer.
    """
    turn = rec.get("turn", 1)
    if isinstance(turn, float) and turn.is_integer():
        turn = int(turn)
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise RecordError("turn is not a turn number (1, 2, ...)", f"turn {turn!r} is not a turn number (1, 2, ...)")
    return turn


def judge_name(value: Any) -> str:
    """Return a judge's name from FastChat's ``[model, prompt name]`` pair or a plain string."""
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    if isinstance(value, str) and value:
        return value
    raise RecordError("no judge name in the record: pass --judge NAME",
                      f"judge is {value!r}: the record names no judge (a name or FastChat's [model, prompt] "
                      "pair); pass --judge NAME to import it under that name")


def detect_format(rec: dict[str, Any]) -> str:
    """Return the layout of one judgment record; ValueError names what it lacks."""
    if "games" in rec:
        return "arena-hard"
    if "g1_winner" in rec:
        return "fastchat-pair"
    if "score" in rec and "model" in rec:
        return "fastchat-single"
    raise ValueError("not a judgment record (expected arena-hard 'games', FastChat 'g1_winner', or "
                     "FastChat single 'model' and 'score')")


# ---- import -------------------------------------------------------------------------------------


def _game(pid: str, first: str, second: str, judge: str, outcome: str | None, raw: str, error: str = "",
          label: str | None = None) -> Judgment:
    """Return one game: ``outcome`` model_a/model_b/tie (scores 1/0, 0.5 each), a label's strengths, or failed."""
    if outcome is None:
        return Judgment(prompt_id=pid, model_a=first, model_b=second, judge=judge, raw=raw, status="failed",
                        explanation=error)
    if label is not None:
        sa, sb = label_scores(label)
    else:
        sa, sb = {"model_a": (1.0, 0.0), "model_b": (0.0, 1.0), "tie": (0.5, 0.5)}[outcome]
    return Judgment(prompt_id=pid, model_a=first, model_b=second, judge=judge, scores_a=[sa], scores_b=[sb],
                    score_a=sa, score_b=sb, verdict=outcome, labels=[label] if label else [], raw=raw)


def _arena_hard(rec: dict[str, Any], baseline: str, judge: str | None) -> list[Judgment]:
    qid = rec.get("uid", rec.get("question_id"))
    model, games = rec.get("model"), rec.get("games")
    if qid is None or not isinstance(model, str) or not model:
        raise ValueError("arena-hard judgment needs 'uid' (or 'question_id') and 'model'")
    if not isinstance(games, list) or len(games) != 2 or not all(isinstance(g, dict) or g is None for g in games):
        raise ValueError("arena-hard judgment needs 'games': a list of the two games (baseline first as A, "
                         "then swapped)")
    if model == baseline:
        raise ValueError(f"the model is the baseline {baseline!r} itself (give the right --baseline)")
    name = judge or judge_name(rec.get("judge"))
    out = []
    for n, game in enumerate(games):
        first, second = (baseline, model) if n == 0 else (model, baseline)
        raw = str((game or {}).get("judgment") or "")
        score = (game or {}).get("score")
        label = normalize_label(score) if isinstance(score, str) else None
        if label is None:
            why = "no verdict label (arena-hard recorded a null score)" if score is None else \
                f"unknown verdict label {score!r}"
            out.append(_game(str(qid), first, second, name, None, raw, why))
            continue
        sa, sb = label_scores(label)
        out.append(_game(str(qid), first, second, name, verdict(sa, sb), raw, label=label))
    return out


_FASTCHAT_WINNER = {"model_1": 0, "model_2": 1}


def _fastchat_pair(rec: dict[str, Any], judge: str | None) -> list[Judgment]:
    qid, m1, m2 = rec.get("question_id"), rec.get("model_1"), rec.get("model_2")
    if qid is None or not isinstance(m1, str) or not isinstance(m2, str) or not m1 or not m2 or m1 == m2:
        raise ValueError("FastChat pairwise judgment needs 'question_id' and two different 'model_1', 'model_2'")
    turn = _turn(rec)
    pid, name = turn_prompt_id(qid, turn), judge or judge_name(rec.get("judge"))
    out = []
    for n, (first, second) in enumerate(((m1, m2), (m2, m1)), start=1):
        winner, raw = rec.get(f"g{n}_winner"), str(rec.get(f"g{n}_judgment") or "")
        if winner == "tie":
            outcome: str | None = "tie"
        elif winner in _FASTCHAT_WINNER:  # named as model_1 / model_2 in both games
            outcome = "model_a" if (m1, m2)[_FASTCHAT_WINNER[winner]] == first else "model_b"
        else:
            outcome = None
        why = "FastChat recorded an error" if winner == "error" else f"unknown winner {winner!r}"
        out.append(_game(pid, first, second, name, outcome, raw, "" if outcome else why))
    return out


def read_judgments(paths: Sequence[Path], *, baseline: str = ARENA_HARD_BASELINE, judge: str | None = None,
                   fmt: str = "auto") -> JudgmentImport:
    """Return the games in judgment files; bad lines are listed as skipped with file:line and the reason.

    ``fmt`` is one of :data:`FORMATS` or ``auto`` (each record by its keys); ``baseline`` is the
    arena-hard baseline model; ``judge`` overrides the judge name the records give.
    """
    if fmt != "auto" and fmt not in FORMATS:
        raise ArenaError(f"unknown judgment format {fmt!r}: use auto or one of {', '.join(FORMATS)}")
    report = JudgmentImport()
    grades: dict[tuple[str, str, str], Grade] = {}  # (prompt, model, judge): a later record replaces an earlier
    for path in paths:
        if not path.is_file():
            raise ArenaError(f"judgment file not found: {path}")
        for row in iter_rows(path):
            where, rec = row.where, row.data
            if row.kind is not None:
                report.skips.append(Skip(where, row.reason, row.kind.replace("_", " ")))
                continue
            if bad_bytes(rec) or not isinstance(rec, dict):
                why = "not valid UTF-8" if bad_bytes(rec) else "not a JSON object"
                report.skips.append(Skip(where, why, why))
                continue
            try:
                kind = detect_format(rec) if fmt == "auto" else fmt
                if kind == "arena-hard":
                    report.judgments.extend(_arena_hard(rec, baseline, judge))
                elif kind == "fastchat-pair":
                    report.judgments.extend(_fastchat_pair(rec, judge))
                else:
                    qid, model, score = rec.get("question_id"), rec.get("model"), rec.get("score")
                    if qid is None or not isinstance(model, str) or not model:
                        raise ValueError("FastChat single judgment needs 'question_id' and 'model'")
                    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
                        raise RecordError("score is not a number", f"score {score!r} is not a number")
                    pid, name = turn_prompt_id(qid, _turn(rec)), judge or judge_name(rec.get("judge"))
                    # -1 (or null) is FastChat's mark of a failed grading: kept as a failure, not a grade
                    grade = None if score is None or score == -1 else float(score)
                    report.failed_grades += grade is None
                    grades[(pid, model, name)] = Grade(prompt_id=pid, model=model, judge=name, score=grade,
                                                       text=str(rec.get("judgment") or ""))
                report.formats.add(kind)
            except (ValueError, TypeError, KeyError) as err:
                report.skips.append(Skip(where, str(err), _skip_kind(err)))
    report.grades = list(grades.values())
    report.judgments.extend(grade_games(report.grades))
    return report


def _by_pair(judgments: Iterable[Judgment]) -> dict[tuple[str, str, str, str], list[Judgment]]:
    """Return the games grouped by (prompt, unordered pair, judge), in their order."""
    groups: dict[tuple[str, str, str, str], list[Judgment]] = defaultdict(list)
    for j in judgments:
        first, second = sorted((j.model_a, j.model_b))
        groups[(j.prompt_id, first, second, j.judge)].append(j)
    return groups


def peer_battles(judgments: Iterable[Judgment], fmt: str, strong_weight: int = 3) -> list[Battle]:
    """Return the battles of imported games by their tool's rules.

    arena-hard (v0.1's show_result.py): a failed game is left out alone; FastChat: a pair with a
    failed game is left out.
    """
    if fmt == "arena-hard":
        return combine_games(list(judgments), 0.0, mode=COMBINE[fmt], strong_weight=strong_weight)
    groups = _by_pair(judgments)
    complete = [j for games in groups.values() if all(g.status == "ok" for g in games) for j in games]
    return combine_games(complete, 0.0, mode=COMBINE[fmt], strong_weight=strong_weight)


# ---- export -------------------------------------------------------------------------------------


def _label(j: Judgment) -> str | None:
    """Return a game's label: the judge's own (one turn), else its verdict as a slight preference or tie."""
    if j.status != "ok" or j.verdict is None:
        return None
    if len(j.labels) == 1:
        return j.labels[0]
    return {"model_a": "A>B", "model_b": "B>A", "tie": "A=B"}[j.verdict]


def _pairs(judgments: Iterable[Judgment]) -> tuple[list[tuple[Judgment, Judgment]], int]:
    """Return the (first game, swapped game) of each (prompt, pair, judge), and how many had no second game."""
    out, lonely = [], 0
    for games in _by_pair(judgments).values():
        swapped = [g for g in games[1:] if g.model_a == games[0].model_b]
        if not swapped:
            lonely += 1
            continue
        out.append((games[0], swapped[0]))
    return out, lonely


@dataclass
class ExportReport:
    files: list[Path] = field(default_factory=list)
    records: int = 0
    left_out: int = 0  # pairs without their game in the other order (both peers need two games)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_arena_hard(judgments: Sequence[Judgment], baseline: str, out_dir: Path,
                     categories: dict[str, str] | None = None) -> ExportReport:
    """Write arena-hard ``model_judgment`` files, ``out_dir/<model>.jsonl``: the games against ``baseline``.

    Each record has ``question_id`` (arena-hard-auto v0.1's field) and ``uid`` (v2.0's); a failed game
    is written with ``"score": null``, which both versions' scripts leave out.
    """
    report = ExportReport()
    pairs, report.left_out = _pairs(j for j in judgments if baseline in (j.model_a, j.model_b))
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for g1, g2 in pairs:
        if g1.model_a != baseline:  # game 1 shows the baseline as A
            g1, g2 = g2, g1
        model = g1.model_b
        # question_id: what v0.1's show_result.py reads; uid: the v2.0 layout's name of the same id
        row: dict[str, Any] = {"question_id": g1.prompt_id, "uid": g1.prompt_id, "model": model, "judge": g1.judge}
        if categories and g1.prompt_id in categories:
            row["category"] = categories[g1.prompt_id]
        row["games"] = [{"user_prompt": "", "judgment": g.raw, "score": _label(g)} for g in (g1, g2)]
        rows[model].append(row)
    if not rows:
        raise ArenaError(f"no games against the baseline {baseline!r} in both orders: nothing to write "
                         "(give the baseline the games were played against with --baseline)")
    for model, model_rows in sorted(rows.items()):
        path = out_dir / f"{model.replace('/', '__')}.jsonl"
        _write_jsonl(path, model_rows)
        report.files.append(path)
        report.records += len(model_rows)
    return report


_G_WINNER = {"model_a": 0, "model_b": 1}


def _pair_winner(g: Judgment, model_1: str) -> str:
    """Return FastChat's g1/g2_winner of game ``g`` in a pair with ``model_1``: model_1, model_2, tie or error."""
    if g.status != "ok" or g.verdict is None:
        return "error"
    if g.verdict == "tie":
        return "tie"
    return "model_1" if (g.model_a, g.model_b)[_G_WINNER[g.verdict]] == model_1 else "model_2"


def write_fastchat_pair(judgments: Sequence[Judgment], path: Path, prompt_name: str = "pair-v2") -> ExportReport:
    """Write FastChat's pairwise judgment JSONL: one record per (prompt, pair, judge) played in both orders."""
    report = ExportReport()
    pairs, report.left_out = _pairs(judgments)
    rows = []
    for g1, g2 in pairs:
        m1, m2 = g1.model_a, g1.model_b
        qid, turn = split_turn(g1.prompt_id)
        rows.append({"question_id": _qid(qid), "model_1": m1, "model_2": m2, "g1_winner": _pair_winner(g1, m1),
                     "g2_winner": _pair_winner(g2, m1),
                     "judge": [g1.judge, prompt_name if turn == 1 else f"{prompt_name}-multi-turn"],
                     "g1_user_prompt": "", "g1_judgment": g1.raw, "g2_user_prompt": "", "g2_judgment": g2.raw,
                     "turn": turn, "tstamp": time.time()})
    _finish(rows, path, report)
    return report


def write_fastchat_single(judgments: Sequence[Judgment], path: Path, prompt_name: str = "single-v1",
                          grades: Sequence[Grade] = ()) -> ExportReport:
    """Write FastChat's single judgment JSONL: each (question, model, turn) grade once, from the stored ``grades``
    (each with its text) and from single-grade games of a run.

    An answer whose grading failed (no game carries its grade) is written with FastChat's score -1.
    """
    report = ExportReport()
    rows: dict[tuple[str, str, int, str], dict[str, Any]] = {}
    lost: dict[tuple[str, str, int, str], str] = {}

    def row(qid: str, model: str, turn: int, judge: str, text: str, score: float) -> dict[str, Any]:
        return {"question_id": _qid(qid), "model": model,
                "judge": [judge, prompt_name if turn == 1 else f"{prompt_name}-multi-turn"],
                "user_prompt": "", "judgment": text, "score": score, "turn": turn, "tstamp": time.time()}

    for g in grades:
        qid, turn = split_turn(g.prompt_id)
        rows[(qid, g.model, turn, g.judge)] = row(qid, g.model, turn, g.judge, g.text,
                                                  -1 if g.score is None else g.score)
    graded = {g.judge for g in grades}
    for j in (j for j in judgments if j.judge not in graded):  # the grades' own games hold nothing more
        qid, turn0 = split_turn(j.prompt_id)
        texts = j.raw.split("\n---\n")
        n = len(j.scores_a) + len(j.scores_b)
        for side, (model, scores) in enumerate(((j.model_a, j.scores_a), (j.model_b, j.scores_b))):
            if j.status != "ok" and not scores:
                lost.setdefault((qid, model, turn0, j.judge), texts[side] if len(texts) == 2 else "")
            for k, score in enumerate(scores):
                if len(texts) == n:
                    text = texts[side * len(j.scores_a) + k]
                else:  # a failed import game: two texts, one grade
                    text = texts[side] if len(texts) == 2 and len(scores) == 1 else ""
                rows.setdefault((qid, model, turn0 + k, j.judge), row(qid, model, turn0 + k, j.judge, text, score))
    for key, text in lost.items():
        if key not in rows:
            rows[key] = row(*key, text, -1)
    _finish(list(rows.values()), path, report)
    return report


def _qid(qid: str) -> int | str:
    """Return FastChat's question id: MT-Bench's are integers."""
    return int(qid) if qid.isdigit() else qid


def _finish(rows: list[dict[str, Any]], path: Path, report: ExportReport) -> None:
    if not rows:
        raise ArenaError(f"no judgments to write to {path}: the judge has no games in this format "
                         "(pairwise formats need each pair played in both orders)")
    _write_jsonl(path, rows)
    report.files.append(path)
    report.records = len(rows)


__all__ = ["ARENA_HARD_BASELINE", "COMBINE", "FORMATS", "JudgmentImport", "RecordError", "Skip", "detect_format",
           "judge_name", "peer_battles", "read_judgments", "split_turn", "turn_prompt_id", "write_arena_hard",
           "write_fastchat_pair", "write_fastchat_single"]
