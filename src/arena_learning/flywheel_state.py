"""The flywheel's state: typed records written and read whole (``WORKSPACE/flywheel/state.json``), versioned.

As TRL's ``TrainerState`` is to ``trainer_state.json``: the round runner, ``arena flywheel`` and the
report read and write these records, never a dict of string keys. One record per stage (what it
harvested, how it trained, its rating), one per evaluation on the test set, and the round table of
the last run. ``load_state`` reads every layout written so far: a file without ``version`` (the
layout before records) is migrated on read; one from a newer version is refused with a message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_serializer

from .errors import ArenaError
from .files import write_json
from .records import ExactAnswers, Rating, Record

STATE_VERSION = 2
"""1: the dict of string keys before records (no ``version`` key); 2: these records. Fields added to them since
(paired deltas, exact answers, verbosity) are optional: a version-2 file without them loads as it is."""

STATE_FILE = "state.json"


def state_path(workspace: str | Path) -> Path:
    """Return the state file of the flywheel in ``workspace``."""
    return Path(workspace) / "flywheel" / STATE_FILE


def rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


class PhaseSeconds(Record):
    """Seconds a stage spent in each phase (None: not run, or run in an earlier process that did not finish it)."""

    answer_battle: float | None = Field(None, description="answering and judging the slice")
    harvest: float | None = Field(None, description="selecting and exporting the training data")
    train: float | None = None

    def spent(self) -> dict[str, float]:
        """Return the phases that ran, by name (the layout of ``arena flywheel --json``)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class TrainSummary(Record):
    """What one trainer run did: what the training functions (``flywheel.train``) return, what the flywheel
    state keeps of a stage's training, and what a finished stage's done file holds.

    ``reused`` and ``log`` are of the run in this process only: they are never written (the log is in the
    stage's ``losses.json``), so the state and done files hold the same fields as ever.
    """

    kind: str
    model_dir: Path = Field(description="the trained model's folder (written as a string)")
    examples: int = 0
    steps: int = 0
    seconds: float = 0.0
    train_loss: float | None = None
    s_per_step: float | None = None
    peak_rss_mb: float = 0.0
    resumed_from: str | None = None
    reused: bool = Field(False, exclude=True, description="read back from a stage that had finished, not trained")
    log: list[dict[str, Any]] = Field(default_factory=list, exclude=True,
                                      description="the trainer's log history (kept in the stage's losses.json)")

    @field_serializer("model_dir")
    def _model_dir(self, value: Path) -> str:
        return str(value)


class Delta(Record):
    """A model's rating minus that of the model ``vs``, with the 95% CI of the difference over shared resamples.

    Paired (``rating.paired``): each bootstrap round resampled the test prompts once and rated both models on
    it, so the interval is of the difference itself, not two separate intervals compared.
    """

    vs: str = Field(description="the model compared against")
    rating: float
    ci_low: float | None = None
    ci_high: float | None = None
    p_better: float | None = Field(None, description="share of bootstrap rounds rating the model above vs")


class Measured(Record):
    """What the last evaluation measured of a model besides its rating: exact answers and verbosity."""

    exact: ExactAnswers | None = Field(None, description="against the model before (delta_prev's vs), if any")
    mean_chars: float | None = Field(None, description="mean answer length on the test set, characters")
    mean_tokens: float | None = Field(None, description="mean answer length on the test set, tokens the engine "
                                      "counted (None where it counted none)")
    style_rating: float | None = Field(None, description="the rating with answer style (length, markdown) "
                                       "controlled, beside the plain one")
    style_ci_low: float | None = None
    style_ci_high: float | None = None
    shortcuts: list[str] | None = Field(None, description="categories where the model's answers follow a surface "
                                        "rule (tasks.shortcuts): what it gets right there, the rule gets right too")

    def dump(self) -> dict[str, Any]:
        """Return ``model_dump()`` with the record's own fields first and these measurements after them."""
        d = self.model_dump()
        tail = [k for k in EVIDENCE_KEYS if k in d]
        return {**{k: v for k, v in d.items() if k not in tail}, **{k: d[k] for k in tail}}


class Compared(Measured):
    """The paired deltas of a stage's or round's model at the last evaluation (None where either is not rated)."""

    delta_prev: Delta | None = Field(None, description="against the model the stage or round started from")
    delta_base: Delta | None = Field(None, description="against the untrained base")
    delta_best_ref: Delta | None = Field(None, description="against the best-rated reference")


EVIDENCE_KEYS = (*(k for k in Compared.model_fields if k not in Measured.model_fields), *Measured.model_fields)
"""The keys the paired statistics and verbosity add to a stage's and a round's row of ``arena flywheel --json``."""


class StageRecord(Compared):
    """One training stage of a round (or its ablation variant): its data, its training, its rating."""

    key: str = Field(description="rR.I-KIND[-VARIANT]")
    round: int
    stage: int = Field(0, description="position in the round")
    kind: Literal["sft", "dpo", "rl"]
    slice: str = ""
    selection: str = "pair_judge"
    ablation: str | None = Field(None, description="the selection baseline this variant trains on, or its sweep "
                                 "variant's name")
    sweep: dict[str, Any] | None = Field(None, description="a sweep variant: its changes to training.KIND")
    model: str = Field("", description="the name of the model the stage makes")
    fingerprint: str = Field("", description="hash of the stage's inputs: a change redoes the stage")
    status: Literal["started", "done", "skipped"] = "started"
    seconds: PhaseSeconds = Field(default_factory=PhaseSeconds)
    harvested: bool = Field(False, description="the data file is written (a rerun reads it back)")
    examples: int = Field(0, description="harvested SFT examples or pairs (RL with a verifier: 0)")
    trained_on: int | None = Field(None, description="with replay: this stage's data plus earlier rounds'")
    by_model: dict[str, int] = Field(default_factory=dict, description="data supplied per model")
    train: TrainSummary | None = None
    rm: TrainSummary | None = Field(None, description="rl with reward: model: the reward model's training")
    train_loss: float | None = None
    rating: float | None = Field(None, description="at the last run's final evaluation (done stages only)")
    ci_low: float | None = None
    ci_high: float | None = None

    def row(self) -> dict[str, Any]:
        """Return the stage as a row of ``arena flywheel --json`` (``stages`` and ``ablations``)."""
        tr = self.train
        return {"key": self.key, "round": self.round, "kind": self.kind, "slice": self.slice,
                "selection": self.selection, **({"sweep": self.sweep} if self.sweep is not None else {}),
                "model": self.model, "status": self.status, "examples": self.examples,
                "trained_on": self.examples if self.trained_on is None else self.trained_on,
                "by_model": self.by_model, "train_loss": self.train_loss, "steps": tr.steps if tr else None,
                "s_per_step": tr.s_per_step if tr else None, "seconds": self.seconds.spent(),
                "peak_rss_mb": tr.peak_rss_mb if tr else None,
                "rating": self.rating, "ci_low": self.ci_low, "ci_high": self.ci_high,
                **{k: v for k, v in self.dump().items() if k in EVIDENCE_KEYS}}


class RatedModel(Measured):
    """A model's rating with its 95% CI, rounded to 2 digits (None: not rated)."""

    model: str
    rating: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None

    @classmethod
    def of(cls, model: str, r: Rating | None) -> RatedModel:
        if r is None:
            return cls(model=model)
        return cls(model=model, rating=round(r.rating, 2), ci_low=rounded(r.ci_low), ci_high=rounded(r.ci_high))


class RoundRow(Compared):
    """One round of the round table: the model it left and the data its stages harvested."""

    round: int
    model: str
    rating: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    sft_examples: int = 0
    dpo_pairs: int = 0
    rm_pairs: int = 0
    train_loss: float | None = None
    stages: list[str] = Field(default_factory=list, description="the kinds of the round's stages, in order")
    by_model: dict[str, dict[str, int]] = Field(default_factory=dict, description="stage key -> data per model")


class RoundTable(Record):
    """The round table of the last run: each round's model, the untrained base and the references, rated together."""

    rounds: list[RoundRow] = Field(default_factory=list)
    references: list[RatedModel] = Field(default_factory=list)
    base: RatedModel | None = None


class Evaluation(Record):
    """The models rated so far, rated together on the test set after a stage or round."""

    after: str = Field(description="e.g. 'round 0 stage 1 (dpo)'")
    seconds: float = 0.0
    ratings: list[Rating] = Field(default_factory=list)


class GroupShare(Record):
    """One group of an aimed slice: the prompts it got, what a uniform slice would give it, and why."""

    group: str
    label: str | None = Field(None, description="a cluster's readable label")
    prompts: int = Field(description="prompts drawn for it")
    uniform: int = Field(description="what a uniform slice of the same size gives it")
    candidates: int = Field(description="the pool's unused prompts of the group it could draw from")
    gap: float | None = Field(None, description="the model's rating minus the best reference's on the group's test "
                              "prompts (None: too few test prompts, or none)")
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str = Field("", description="behind / ahead beyond chance after Holm's correction, '' within chance, "
                         "'too small', or 'not on the test set'")
    # exclude_if: written only when measured, so that the allocations of earlier runs keep their form
    moved: float | None = Field(None, exclude_if=lambda v: v is None, description="allocate: learnable: how far "
                                "the training that made the model moved it on the group's test prompts (its mean "
                                "score against the references minus the model's before; None: not measured)")


class Allocation(Record):
    """How an aimed slice (``allocate: weakness``) spent its prompts, drawn once before its first answer."""

    rule: str = "weakness"
    by: str = Field(description="the groups: category or cluster")
    stage: str = Field(description="the stage that drew it (the first on the slice)")
    model: str = Field(description="the model whose gaps aimed it (the stage's start)")
    best: str | None = Field(None, description="the best reference on the test set, whom the gaps are to")
    floor: int = Field(description="the fewest prompts any group gets (half its uniform share)")
    basis: str = Field(description="the fingerprint of the stage before: a change there draws the slice again")
    why: str = Field(description="one line: how the prompts were spread")
    groups: list[GroupShare] = Field(default_factory=list)

    def line(self) -> str:
        """Say the spend per group against uniform ("yes_no 31 (17), ...")."""
        return ", ".join(f"{g.label or g.group} {g.prompts} ({g.uniform})" for g in self.groups)


class SliceRecord(Record):
    prompts: int
    dropped_as_test: int = Field(0, description="prompts of a stored set left out as test prompts")
    dropped_near_test: dict[str, int] = Field(default_factory=dict, description="of them, near-copies of a prompt of "
                                              "a test set in the workspace, by reason (contaminated_minhash, "
                                              "contaminated_ngram, contaminated_embedding)")
    # exclude_if: written only when set, so that the state of a run without aiming keeps its form
    allocation: Allocation | None = Field(None, exclude_if=lambda v: v is None,
                                          description="allocate: weakness: how the slice spent its prompts")

    def near_line(self) -> str:
        """Say the near-copies dropped by reason ("minhash 1, embedding 2"), or "-" when none was."""
        return ", ".join(f"{k.removeprefix('contaminated_')} {v}" for k, v in sorted(self.dropped_near_test.items())
                         if v) or "-"


class RunRecord(Record):
    """One `arena flywheel` process that finished."""

    seconds: float
    trained: bool = Field(description="whether it trained anything (False: resumed with nothing left to train)")
    finished: str


class FlywheelState(Record):
    """Everything the flywheel keeps between runs (besides the store and the stage folders)."""

    version: int = STATE_VERSION
    slices: dict[str, SliceRecord] = Field(default_factory=dict)
    stages: dict[str, StageRecord] = Field(default_factory=dict, description="by key, in run order")
    evaluations: list[Evaluation] = Field(default_factory=list)
    answered: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="set -> model -> the identity (spec and weights) that answered all of it")
    last_report: RoundTable | None = None
    runs: list[RunRecord] = Field(default_factory=list)


# ---- reading and writing ----------------------------------------------------------------------

_V1_KEYS = {"stages", "evaluations", "slices", "answered", "last_report", "runs"}
_V1_COUNT_KEYS = ("sft_examples", "dpo_pairs", "rm_pairs")  # each a copy of `examples` for its kind


def _from_v1(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Return a state of the layout before records (version 1) in the layout of version 2."""
    unknown = sorted(set(data) - _V1_KEYS)
    if unknown:
        raise ArenaError(f"{path} has no version and unknown keys ({', '.join(unknown)}): it is not a flywheel state; "
                         f"move it away to start the flywheel's bookkeeping afresh (trained stages are reused)")
    last = data.get("last_report") or {}
    # v1 kept each stage's rating only in the last report's rows; v2 keeps it in the stage's record
    rated = {row["key"]: row for row in [*(last.get("stages") or []), *(last.get("ablations") or [])]
             if isinstance(row, dict) and "key" in row}
    stages = {}
    for key, rec in (data.get("stages") or {}).items():
        rec = {k: v for k, v in rec.items() if k not in _V1_COUNT_KEYS} if isinstance(rec, dict) else rec
        row = rated.get(key)
        if isinstance(rec, dict) and row is not None:
            rec.update({k: row.get(k) for k in ("rating", "ci_low", "ci_high")})
        stages[key] = rec
    report = None
    if last:
        report = {"rounds": last.get("rounds") or [], "references": last.get("references") or [],
                  "base": last.get("base")}
    return {"version": 2, "slices": data.get("slices") or {}, "stages": stages,
            "evaluations": data.get("evaluations") or [], "answered": data.get("answered") or {},
            "last_report": report, "runs": data.get("runs") or []}


def load_state(path: str | Path) -> FlywheelState:
    """Return the flywheel state in ``path`` (a fresh one when there is no file); an older layout is migrated."""
    path = Path(path)
    if not path.is_file():
        return FlywheelState()
    afresh = "move it away to start the flywheel's bookkeeping afresh (trained stages are reused)"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ArenaError(f"{path} cannot be read as JSON ({err}); {afresh}") from None
    if not isinstance(data, dict):
        raise ArenaError(f"{path} holds a {type(data).__name__}, not a flywheel state; {afresh}")
    version = data.get("version", 1)
    if not isinstance(version, int) or version < 1:
        raise ArenaError(f"{path}: version {version!r} is not a flywheel state version; {afresh}")
    if version > STATE_VERSION:
        raise ArenaError(f"{path} was written by a newer arena-learning (state version {version}; this one reads up "
                         f"to {STATE_VERSION}): upgrade arena-learning to resume this flywheel")
    if version == 1:
        data = _from_v1(data, path)
    try:
        return FlywheelState.model_validate(data)
    except ValidationError as err:
        first = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:3])
        raise ArenaError(f"{path} is not a valid flywheel state ({first}); {afresh}") from None


def save_state(state: FlywheelState, path: str | Path) -> None:
    """Write ``state`` to ``path`` whole (a reader never sees half a file)."""
    write_json(path, state.model_dump(mode="json"))
