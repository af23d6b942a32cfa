"""The flywheel's round table: each round's model rated with the references, its paired deltas, exact answers and
verbosity on the test set (``flywheel.evidence``), kept in the state and returned as ``FlywheelReport``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import ModelSpec
from ..flywheel_state import EVIDENCE_KEYS, RatedModel, RoundRow, RoundTable, RunRecord, StageRecord
from ..pipeline import TEST_SET
from ..rating.bt import RateOptions
from ..records import Rating
from .evidence import Evidence, gather
from .kinds import STAGE_KINDS, stage_kind

if TYPE_CHECKING:
    from .rounds import Flywheel


@dataclass
class FlywheelReport:
    """What the run produced: the round table (ratings of each round's model), stages, references."""

    rounds: list[RoundRow] = field(default_factory=list)
    stages: list[StageRecord] = field(default_factory=list)
    references: list[RatedModel] = field(default_factory=list)
    base: RatedModel | None = None
    ablations: list[StageRecord] = field(default_factory=list)
    ratings: list[Rating] = field(default_factory=list)
    seconds: float = 0.0
    judges: str = ""  # which judge harvested the data and which rated the rounds (FlywheelConfig.judges_line)
    slices: dict[str, Any] = field(default_factory=dict)  # per slice: prompts, dropped as test, near-copies by reason

    def table(self) -> RoundTable:
        return RoundTable(rounds=self.rounds, references=self.references, base=self.base)

    def as_json(self) -> dict[str, Any]:
        """Return what ``arena flywheel --json`` prints."""
        return {"rounds": [r.dump() for r in self.rounds],
                "references": [r.dump() for r in self.references],
                "base": None if self.base is None else self.base.dump(),
                "stages": [s.row() for s in self.stages], "ablations": [s.row() for s in self.ablations],
                "judges": self.judges, "slices": self.slices}


def evidence_of(fw: Flywheel) -> Evidence | None:
    """Return the paired deltas, exact answers and verbosity of the test set's battles (None: nothing to rate)."""
    battles = fw.store.get_battles(fw.cfg.rating_judge.name, TEST_SET)
    if not battles:
        return None
    answers = fw.store.get_answers(set_name=TEST_SET)
    ev = gather(battles, answers, fw.test_prompts(), RateOptions(**fw.cfg.ratings.model_dump()))
    if ev.style_note:
        fw.say(f"[flywheel] no style-controlled ratings: {ev.style_note}")
    return ev



def build_report(fw: Flywheel, ratings: list[Rating], round_models: list[tuple[int, ModelSpec, list[StageRecord]]],
                 stage_recs: list[StageRecord], seconds: float) -> FlywheelReport:
    """Return the round table of ``ratings`` (the last evaluation's); keep it and the stage ratings in the state."""
    by_name = {r.model: r for r in ratings}
    rep = FlywheelReport(ratings=ratings, seconds=seconds, judges=fw.cfg.judges_line(),
                         slices={k: v.model_dump(mode="json") for k, v in fw.state.slices.items()})
    base_name = f"{fw.cfg.target.name}-base"
    ev = evidence_of(fw)
    rated_refs = [by_name[m.name] for m in fw.refs if m.name in by_name]
    best_ref = max(rated_refs, key=lambda x: x.rating).model if rated_refs else None

    def compared(model: str, prev: str | None) -> dict[str, Any]:
        """Return the ``Compared`` fields of ``model`` (empty without evidence)."""
        if ev is None:
            return {}
        return {"delta_prev": ev.delta(model, prev), "delta_base": ev.delta(model, base_name),
                "delta_best_ref": ev.delta(model, best_ref), "exact": ev.exact(model, prev), **ev.measured(model)}

    def measured(model: str) -> dict[str, Any]:
        return {} if ev is None else {"exact": ev.exact(model, None), **ev.measured(model)}

    prev_round = base_name
    for r, spec, recs in round_models:
        done = [x for x in recs if x.status == "done"]
        counts = dict.fromkeys((k.column for k in STAGE_KINDS.values()), 0)  # sft examples, dpo and rm pairs
        for x in recs:
            counts[stage_kind(x.kind).column] += x.examples
        rep.rounds.append(RoundRow(
            round=r, **RatedModel.of(spec.name, by_name.get(spec.name)).model_dump(include={
                "model", "rating", "ci_low", "ci_high"}),
            **counts,
            train_loss=done[-1].train_loss if done else None,
            stages=[x.kind for x in recs], by_model={x.key: x.by_model for x in recs},
            **compared(spec.name, prev_round)))
        prev_round = spec.name
    for x in stage_recs:
        is_rated = x.status == "done"
        rated = RatedModel.of(x.model, by_name.get(x.model) if is_rated else None)
        x.rating, x.ci_low, x.ci_high = rated.rating, rated.ci_low, rated.ci_high
        fields = compared(x.model, fw.started_from.get(x.key)) if is_rated else {}
        for name in EVIDENCE_KEYS:  # a stage not rated now keeps no figures of an earlier run
            setattr(x, name, fields.get(name))
        (rep.ablations if x.ablation else rep.stages).append(x)
    rep.references = [RatedModel.of(m.name, by_name.get(m.name)).model_copy(update=measured(m.name))
                      for m in fw.refs]
    if base_name in by_name:
        rep.base = RatedModel.of(base_name, by_name[base_name]).model_copy(update=measured(base_name))
    fw.state.last_report = rep.table()
    fw.state.runs.append(RunRecord(seconds=round(seconds, 1), trained=fw.worked,
                                     finished=time.strftime("%Y-%m-%d %H:%M:%S")))
    fw._save_state()
    return rep
