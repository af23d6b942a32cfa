"""Judge audit: how far a judge's verdicts can be trusted, measured on its own games.

A pairwise judge plays every pair twice per prompt, once in each order, so its games
show its biases directly (MT-Bench, AlpacaEval):

* position bias: the share of decisive games won by the answer shown first (0.5 = none);
* order consistency: the share of (prompt, pair) played in both orders whose two verdicts
  name the same winner. A tie is a verdict of its own: two ties agree, a tie against a
  win does not. An inconsistent pair *favours the first position* when the first-shown
  answer did better over its two games (e.g. it won in both orders, or won one and tied
  the other), the second position the other way round;
* length bias: the share of decisive games won by the longer answer (characters over
  all assistant turns; games with equal lengths or a missing answer are left out). It is
  raw: a judge that prefers better answers also prefers longer ones if the better models
  write more; compare it across judges on the same battles;
* tie rate, parse failure rate (``status == "failed"``) and the judge's flags (e.g. a
  prompt-injection attempt it detected).

And agreement, over the battles two sources both judged: two judges, or a judge and
human labels (MT-Bench human judgments, Chatbot Arena votes). A judge's battle outcome is
the majority of its verdicts over the orders shown (a split is a tie); ``Battle`` records
can be given instead and their outcome is used as it is.

Every function takes records and returns numbers; only ``read_human_labels`` reads a file.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ArenaError
from ..readers import iter_rows
from ..records import A_WINS, B_WINS, TIE, Answer, Battle, Judgment, Outcome

# Outcome codes of a pair oriented by name (the alphabetically first model as model_a): the records' codes.
"""Outcome codes of a battle within its pair, models in name order (lo < hi)."""

OUTCOME_NAMES = ("first model of the pair (name order) wins", "second model wins", "tie")

WINNER_LABELS: dict[str, Outcome] = {
    "model_a": "model_a",
    "model_b": "model_b",
    "tie": "tie",
    "tie (bothbad)": "tie",
}
"""Accepted ``winner`` values of a human label file (case and surrounding space ignored)."""

LABEL_COLUMNS = ("prompt_id", "model_a", "model_b", "winner")
PROMPT_ALIASES = ("prompt_id", "question_id")  # Chatbot Arena and MT-Bench files say question_id

MAX_ERRORS_KEPT = 20

BattleKey = tuple[str, str, str]
"""(prompt_id, lo, hi): a battle of an unordered pair, models in name order."""


# --------------------------------------------------------------------------- judge audit


@dataclass
class JudgeAudit:
    """The bias figures of one judge over its games.

    Shares are None when their denominator is 0. Counts say what each share is over.

    Attributes:
        judge: the judge's name.
        games: judgments, failed ones included.
        failed: judgments with ``status == "failed"``; ``parse_failure_rate`` = failed / games.
        no_verdict: ok judgments without a verdict; left out of every share below.
        scored: ok judgments with a verdict; ``tie_rate`` = ties / scored.
        decisive: scored games that are not ties.
        first_wins: decisive games won by the answer shown first;
            ``position_bias`` = first_wins / decisive, with a 95% Wilson interval.
        pairs_both_orders: (prompt, pair) with a scored game in each order;
            ``order_consistency`` = consistent / pairs_both_orders.
        favour_first, favour_second: inconsistent pairs favouring each position.
        pairs_one_order: (prompt, pair) with a scored game in one order only.
        length_games: decisive games with both answers' lengths known and different;
            ``length_bias`` = longer_wins / length_games (None without answers).
        flags: how many games carry each flag.
        injection_flags: games with an answer the judge flagged as addressing it (any flag:
            ``instructions-to-judge`` or ``fence-markers``, see ``arena.fence``).
    """

    judge: str
    games: int
    failed: int
    parse_failure_rate: float | None
    no_verdict: int
    scored: int
    ties: int
    tie_rate: float | None
    decisive: int
    first_wins: int
    position_bias: float | None
    position_bias_ci: tuple[float, float] | None
    pairs_both_orders: int
    consistent: int
    order_consistency: float | None
    favour_first: int
    favour_second: int
    pairs_one_order: int
    length_games: int
    longer_wins: int
    length_bias: float | None
    length_bias_ci: tuple[float, float] | None
    flags: dict[str, int] = field(default_factory=dict)
    injection_flags: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the audit as a JSON-ready dict (intervals as [low, high])."""
        out = asdict(self)
        for key in ("position_bias_ci", "length_bias_ci"):
            out[key] = None if out[key] is None else list(out[key])
        return out


def audit_judge(judgments: Sequence[Judgment], answers: Sequence[Answer] | None = None) -> JudgeAudit:
    """Return the audit of one judge's ``judgments``.

    Args:
        judgments: the games of one judge (both orders of each pair, as the judge played them).
        answers: the answers judged, for the length bias; None leaves it out.
    """
    judge = _single_judge(judgments)
    _check_no_repeats(judgments)
    failed = sum(j.status == "failed" for j in judgments)
    ok = [j for j in judgments if j.status == "ok"]
    scored = [j for j in ok if j.verdict is not None]
    ties = sum(j.verdict == "tie" for j in scored)
    decisive = [j for j in scored if j.verdict != "tie"]
    first_wins = sum(j.verdict == "model_a" for j in decisive)

    # order consistency: the first-shown answer's result r in {+1, 0, -1} per game;
    # the two orders agree exactly when r1 + r2 == 0 (X won both, or two ties)
    by_pair: dict[BattleKey, dict[str, int]] = defaultdict(dict)
    for j in scored:
        by_pair[_key(j.prompt_id, j.model_a, j.model_b)][j.model_a] = _first_result(j.verdict)
    consistent = favour_first = favour_second = one_order = 0
    for results in by_pair.values():
        if len(results) < 2:
            one_order += 1
            continue
        total = sum(results.values())
        consistent += total == 0
        favour_first += total > 0
        favour_second += total < 0
    both = consistent + favour_first + favour_second

    length_games = longer_wins = 0
    if answers is not None:
        length = {(a.prompt_id, a.model): sum(len(t) for t in a.turns) for a in answers}
        for j in decisive:
            la, lb = length.get((j.prompt_id, j.model_a)), length.get((j.prompt_id, j.model_b))
            if la is None or lb is None or la == lb:
                continue
            length_games += 1
            longer_wins += (la > lb) == (j.verdict == "model_a")

    flags = Counter(f for j in judgments for f in set(j.flags))
    injection = sum(bool(j.flags) for j in judgments)
    return JudgeAudit(
        judge=judge,
        games=len(judgments),
        failed=failed,
        parse_failure_rate=_share(failed, len(judgments)),
        no_verdict=len(ok) - len(scored),
        scored=len(scored),
        ties=ties,
        tie_rate=_share(ties, len(scored)),
        decisive=len(decisive),
        first_wins=first_wins,
        position_bias=_share(first_wins, len(decisive)),
        position_bias_ci=wilson_interval(first_wins, len(decisive)),
        pairs_both_orders=both,
        consistent=consistent,
        order_consistency=_share(consistent, both),
        favour_first=favour_first,
        favour_second=favour_second,
        pairs_one_order=one_order,
        length_games=length_games,
        longer_wins=longer_wins,
        length_bias=_share(longer_wins, length_games) if answers is not None else None,
        length_bias_ci=wilson_interval(longer_wins, length_games) if answers is not None else None,
        flags=dict(sorted(flags.items())),
        injection_flags=injection,
    )


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float] | None:
    """Return the Wilson score interval (low, high) of a share; 95% by default; None for n == 0."""
    if n == 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


# --------------------------------------------------------------------------- agreement


@dataclass
class Agreement:
    """How often two sources give a battle the same outcome.

    Attributes:
        name_x, name_y: the two sources (judge names, or "human").
        n: battles (or, against human labels, labels) compared; ``agreement`` = agree / n,
            over the three outcomes (ties count).
        n_without_ties: compared items where neither side is a tie;
            ``agreement_without_ties`` = agree_without_ties / n_without_ties.
        kappa: Cohen's kappa over the three outcomes, from the table made symmetric in the
            two models (each item counted once per model's point of view), so it does not
            depend on which model a pair names first; None when chance agreement is 1.
        confusion: int 3 x 3, rows x's outcome, columns y's, outcomes in pair-name order:
            ``OUTCOME_NAMES``.
        only_x, only_y: battles (labels for y = human) one side has and the other lacks.
    """

    name_x: str
    name_y: str
    n: int
    agree: int
    agreement: float | None
    n_without_ties: int
    agree_without_ties: int
    agreement_without_ties: float | None
    kappa: float | None
    confusion: list[list[int]]
    only_x: int
    only_y: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def battle_outcomes(records: Sequence[Judgment] | Sequence[Battle]) -> dict[BattleKey, int]:
    """Return the outcome code (A_WINS, B_WINS, TIE) of each battle of one judge.

    Judgments: the majority of the scored games' verdicts, orders shown pooled (each win a
    point, a tie half a point each; equal points is a tie); failed games are left out.
    Battles: their outcome. Keys are (prompt_id, lo, hi), models in name order.
    """
    if not records:
        return {}
    _single_judge(records)
    battles = [r for r in records if isinstance(r, Battle)]
    judgments = [r for r in records if isinstance(r, Judgment)]
    if len(battles) == len(records):
        out: dict[BattleKey, int] = {}
        for b in battles:
            key = _key(b.prompt_id, b.model_a, b.model_b)
            if key in out:
                raise ArenaError(
                    f"battle of {b.model_a!r} and {b.model_b!r} on prompt {b.prompt_id!r} is listed twice: "
                    "give one battle per prompt and pair"
                )
            out[key] = _oriented(b.outcome, b.model_a, key)
        return out
    if len(judgments) != len(records):
        raise ArenaError("give either judgments or battles, not a mix")
    _check_no_repeats(judgments)
    points: dict[BattleKey, list[float]] = defaultdict(lambda: [0.0, 0.0])  # lo's points, games
    for j in judgments:
        if j.status != "ok" or j.verdict is None:
            continue
        key = _key(j.prompt_id, j.model_a, j.model_b)
        code = _oriented(j.verdict, j.model_a, key)
        points[key][0] += 1.0 if code == A_WINS else 0.5 if code == TIE else 0.0
        points[key][1] += 1.0
    return {
        key: A_WINS if lo_points * 2 > games else B_WINS if lo_points * 2 < games else TIE
        for key, (lo_points, games) in points.items()
    }


def judge_agreement(
    records_x: Sequence[Judgment] | Sequence[Battle], records_y: Sequence[Judgment] | Sequence[Battle]
) -> Agreement:
    """Return the agreement of two judges over the battles both judged (see ``battle_outcomes``)."""
    x, y = battle_outcomes(records_x), battle_outcomes(records_y)
    name_x, name_y = _name(records_x), _name(records_y)
    if name_x == name_y:
        name_y = f"{name_y} (2)"
    common = [k for k in x if k in y]
    return _agreement(name_x, name_y, [(x[k], y[k]) for k in common], len(x) - len(common), len(y) - len(common))


@dataclass(frozen=True)
class HumanLabel:
    """One human vote: which of two answers to a prompt was better."""

    prompt_id: str
    model_a: str
    model_b: str
    winner: Outcome
    where: str = ""  # file:line, for messages


@dataclass
class HumanLabels:
    """Labels read from a file, and the rows that could not be read.

    Attributes:
        path: the file.
        labels: the good rows.
        rows: rows read (good and bad).
        bad: rows left out; ``errors`` says why for the first ``MAX_ERRORS_KEPT``, as
            "file:line: reason".
    """

    path: str
    labels: list[HumanLabel]
    rows: int
    bad: int
    errors: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "rows": self.rows, "labels": len(self.labels), "bad": self.bad, "errors": self.errors
        }


def human_agreement(records: Sequence[Judgment] | Sequence[Battle], labels: Sequence[HumanLabel]) -> Agreement:
    """Return the agreement of one judge with human labels.

    Every label is compared with the judge's outcome of its battle (several voters on one
    battle give several comparisons, as MT-Bench counts them); labels of battles the
    judge has not judged are counted in ``only_y``, judged battles without a label in
    ``only_x``.
    """
    judged = battle_outcomes(records)
    pairs: list[tuple[int, int]] = []
    labelled: set[BattleKey] = set()
    unmatched = 0
    for lab in labels:
        key = _key(lab.prompt_id, lab.model_a, lab.model_b)
        if key not in judged:
            unmatched += 1
            continue
        labelled.add(key)
        pairs.append((judged[key], _oriented(lab.winner, lab.model_a, key)))
    return _agreement(_name(records), "human", pairs, len(judged) - len(labelled), unmatched)


def read_human_labels(path: str | Path) -> HumanLabels:
    """Return the human labels of a CSV/TSV or JSONL file (a JSON array also works).

    Columns: prompt_id (or question_id), model_a, model_b, winner in model_a, model_b,
    tie, tie (bothbad); other columns are ignored. A row with an empty field, an unknown
    winner or a model against itself is counted bad and named by file:line; a file
    without a needed column, or with no good row, is an ``ArenaError``.
    """
    p = Path(path)
    if not p.is_file():
        raise ArenaError(f"human label file {p} does not exist: give a CSV or JSONL file of labels")
    if p.suffix.lower() not in (".csv", ".tsv", ".jsonl", ".ndjson", ".json", ".parquet"):
        raise ArenaError(f"{p}: unknown label file type {p.suffix!r}: use .csv, .tsv, .jsonl, .json or .parquet")
    labels: list[HumanLabel] = []
    errors: list[str] = []
    n_rows = bad = 0
    checked = False
    for row in iter_rows(p):
        if row.kind == "empty_file":
            raise ArenaError(f"{p} is empty: it needs a header (or records) with {', '.join(LABEL_COLUMNS)}")
        n_rows += 1
        reason = row.reason if row.kind is not None else ("" if isinstance(row.data, dict) else "not a JSON object")
        if not reason and not checked and p.suffix.lower() in (".csv", ".tsv"):
            _check_columns(p, row.data)  # a CSV's header names the columns of every row
            checked = True
        if reason:
            bad += 1
            _keep(errors, f"{row.where}: {reason}")
            continue
        label, reason = _label(row.data, row.where)
        if label is None:
            bad += 1
            _keep(errors, f"{row.where}: {reason}")
        else:
            labels.append(label)
    if not labels:
        detail = f"; first problem: {errors[0]}" if errors else ""
        raise ArenaError(f"{p} holds no usable label ({n_rows} rows){detail}")
    return HumanLabels(str(p), labels, n_rows, bad, errors)


# --------------------------------------------------------------------------- internals


def _share(k: int, n: int) -> float | None:
    return k / n if n else None


def _key(prompt_id: str, a: str, b: str) -> BattleKey:
    lo, hi = (a, b) if a <= b else (b, a)
    return (str(prompt_id), lo, hi)


def _oriented(outcome: str, model_a: str, key: BattleKey) -> int:
    """Return the outcome code within the pair of ``key`` for an outcome named for model_a/model_b."""
    if outcome == "tie":
        return TIE
    a_won = outcome == "model_a"
    return A_WINS if a_won == (model_a == key[1]) else B_WINS


_FIRST_RESULT: dict[str | None, int] = {"model_a": 1, "tie": 0, "model_b": -1}


def _first_result(verdict: str | None) -> int:
    """Return +1, 0, -1: the result of the answer shown first (a verdict there is; KeyError for None)."""
    return _FIRST_RESULT[verdict]


def _name(records: Sequence[Judgment] | Sequence[Battle]) -> str:
    return records[0].judge if records else ""


def _single_judge(records: Sequence[Judgment] | Sequence[Battle]) -> str:
    """Return the one judge of ``records``; raise ArenaError on none or several."""
    if not records:
        raise ArenaError("no judgments to audit: run the battles first (or check the judge name)")
    names = sorted({r.judge for r in records})
    if len(names) > 1:
        raise ArenaError(
            f"the records come from {len(names)} judges ({', '.join(names)}): audit one judge at a time"
        )
    return names[0]


def _check_no_repeats(judgments: Sequence[Judgment]) -> None:
    """Raise ArenaError when a game (prompt, order shown) appears twice."""
    seen: set[tuple[str, str, str]] = set()
    for j in judgments:
        key = (j.prompt_id, j.model_a, j.model_b)
        if key in seen:
            raise ArenaError(
                f"judge {j.judge!r} has two games of {j.model_a!r} (shown first) and {j.model_b!r} "
                f"on prompt {j.prompt_id!r}: give one judgment per prompt and order"
            )
        seen.add(key)


def _agreement(name_x: str, name_y: str, pairs: Sequence[tuple[int, int]], only_x: int, only_y: int) -> Agreement:
    """Return the Agreement of outcome code pairs (x, y)."""
    confusion = [[0] * 3 for _ in range(3)]
    for a, b in pairs:
        confusion[a][b] += 1
    n = len(pairs)
    agree = sum(confusion[k][k] for k in range(3))
    no_ties = [(a, b) for a, b in pairs if a != TIE and b != TIE]
    agree_nt = sum(a == b for a, b in no_ties)
    return Agreement(
        name_x=name_x,
        name_y=name_y,
        n=n,
        agree=agree,
        agreement=_share(agree, n),
        n_without_ties=len(no_ties),
        agree_without_ties=agree_nt,
        agreement_without_ties=_share(agree_nt, len(no_ties)),
        kappa=_kappa(confusion),
        confusion=confusion,
        only_x=only_x,
        only_y=only_y,
    )


battle_key = _key
"""Public name of ``_key``: the (prompt_id, lo, hi) key of a battle, models in name order."""
oriented_code = _oriented
"""Public name of ``_oriented``: an outcome named for model_a/model_b as a code within a battle key's pair."""
agreement_of_codes = _agreement
"""Public name of ``_agreement``: the Agreement of outcome code pairs (x, y)."""


def _kappa(confusion: list[list[int]]) -> float | None:
    """Return Cohen's kappa of a 3 x 3 table made symmetric in the pair's two models.

    Swapping the models maps A_WINS <-> B_WINS on both sides; adding the swapped table
    makes the win/loss marginals equal, so kappa does not depend on name order.
    """
    swap = (B_WINS, A_WINS, TIE)
    table = [[confusion[i][j] + confusion[swap[i]][swap[j]] for j in range(3)] for i in range(3)]
    total = sum(map(sum, table))
    if total == 0:
        return None
    observed = sum(table[k][k] for k in range(3)) / total
    rows = [sum(table[i]) / total for i in range(3)]
    cols = [sum(table[i][j] for i in range(3)) / total for j in range(3)]
    chance = sum(r * c for r, c in zip(rows, cols))
    if chance >= 1.0 - 1e-12:
        return None
    return (observed - chance) / (1.0 - chance)


def _keep(errors: list[str], message: str) -> None:
    if len(errors) < MAX_ERRORS_KEPT:
        errors.append(message)


def _check_columns(path: Path, row: Mapping[str, Any]) -> None:
    """Raise ArenaError when the header lacks a needed column."""
    prompt_col = next((c for c in PROMPT_ALIASES if c in row), None)
    missing = [c for c in LABEL_COLUMNS[1:] if c not in row]
    if prompt_col is None:
        missing.insert(0, "prompt_id (or question_id)")
    if missing:
        raise ArenaError(
            f"{path}: the labels lack column(s) {', '.join(missing)}; found: {', '.join(map(str, row)) or 'none'}. "
            f"A label file needs {', '.join(LABEL_COLUMNS)}"
        )


def _label(row: Mapping[str, Any], where: str) -> tuple[HumanLabel | None, str]:
    """Return (label, "") for a good row, (None, reason) for a bad one."""
    prompt_col = next((c for c in PROMPT_ALIASES if c in row), "prompt_id")
    values = {}
    for col in (prompt_col, "model_a", "model_b", "winner"):
        if col not in row:
            return None, f"no {col} field"
        v = row[col]
        v = "" if v is None else str(v).strip()
        if not v:
            return None, f"empty {col}"
        values[col] = v
    winner = WINNER_LABELS.get(values["winner"].lower())
    if winner is None:
        return None, f"winner {values['winner']!r} is not one of {', '.join(WINNER_LABELS)}"
    if values["model_a"] == values["model_b"]:
        return None, f"model_a and model_b are both {values['model_a']!r}"
    return HumanLabel(values[prompt_col], values["model_a"], values["model_b"], winner, where), ""


@dataclass
class WorkspaceAudit:
    """Everything ``judge-audit`` shows: one audit per judge and the agreements asked for."""

    workspace: str
    audits: list[JudgeAudit]
    judge_agreement: list[Agreement] = field(default_factory=list)
    human_agreement: list[Agreement] = field(default_factory=list)
    human_labels: HumanLabels | None = None
    voters: list[Any] = field(default_factory=list)  # people.quality.VoterFigures, when the labels are the votes
    voter_agreement: Agreement | None = None
    voters_left_out: list[str] = field(default_factory=list)
    human_by_category: dict[str, list[Agreement]] = field(default_factory=dict)
    human_disagreements: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace,
            "judges": [a.to_dict() for a in self.audits],
            "judge_agreement": [a.to_dict() for a in self.judge_agreement],
            "human_agreement": [a.to_dict() for a in self.human_agreement],
            "human_labels": None if self.human_labels is None else self.human_labels.to_dict(),
            "voters": [v.to_dict() for v in self.voters],
            "voter_agreement": None if self.voter_agreement is None else self.voter_agreement.to_dict(),
            "voters_left_out": self.voters_left_out,
            "human_by_category": {c: [a.to_dict() for a in rows] for c, rows in self.human_by_category.items()},
            "human_disagreements": self.human_disagreements,
        }


def audit_workspace(
    workspace: str | Path,
    *,
    judge: str | None = None,
    compare_judge: str | None = None,
    human: str | Path | None = None,
    labels: HumanLabels | None = None,
) -> WorkspaceAudit:
    """Return the audit of ``judge`` (default: every judge but ``compare_judge``) in a workspace.

    Agreements use the judges' own verdicts (the majority over both orders shown), so two
    judges are compared the same way whatever their battles were combined from. ``human``: a label
    file to compare with; ``labels``: labels already read (``people.workspace.audit_with_votes`` gives
    the workspace's votes so).
    """
    from ..store import Store

    root = Path(workspace)
    with Store(root, readonly=True) as store:
        judgments = store.get_judgments()
        answers = store.get_answers()
    if not judgments:
        raise ArenaError(f"{root} has no judgments yet: run `arena battle` (or `arena run`) first")
    by_judge: dict[str, list] = {}
    for j in judgments:
        by_judge.setdefault(j.judge, []).append(j)
    for name, what in ((judge, "--judge"), (compare_judge, "--compare-judge")):
        if name is not None and name not in by_judge:
            raise ArenaError(
                f"{root} has no judgments by {name!r} ({what}); its judges are: {', '.join(sorted(by_judge))}"
            )
    if judge is not None and judge == compare_judge:
        raise ArenaError(f"--judge and --compare-judge are both {judge!r}: compare two different judges")
    names = [judge] if judge is not None else [n for n in by_judge if n != compare_judge]
    if not names:
        raise ArenaError(f"{root} has judgments by {compare_judge!r} only: there is no other judge to compare it with")
    if human is not None:
        labels = read_human_labels(human)
    result = WorkspaceAudit(str(root), [audit_judge(by_judge[n], answers) for n in names], human_labels=labels)
    for n in names:
        if compare_judge is not None:
            result.judge_agreement.append(judge_agreement(by_judge[n], by_judge[compare_judge]))
        if labels is not None:
            result.human_agreement.append(human_agreement(by_judge[n], labels.labels))
    return result

