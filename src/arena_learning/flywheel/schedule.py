"""The flywheel's schedule: the steps of a run, in order, made once from the config for the runner and the planner.

``schedule`` yields a ``StageStep`` for every stage of every round (and after it its ablation
variants: the selection baselines, then the sweep's variants), an ``Evaluate`` step after each stage
(``evaluate: stages``) or the last stage of a round, and a ``RoundEnd`` after each round. The round
runner (``rounds.Flywheel.run``) executes each step; the planner (``plan.plan_flywheel``) prices it.
A stage step says which slice it battles, which models answer it and how their battles are
scheduled, what it trains from and into, and which stage's record its inputs follow; the one who
executes it sets ``made`` (whether it made its model: a stage with no data is skipped and the model
stays the one before) and the stage's ``fingerprint`` and ``examples`` before asking for the next
step, which the schedule reads: whether the stage's model is rated and continues, and whether its
sweep runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..config import ModelSpec
from .kinds import StageKind, TrainKind, stage_kind
from .settings import FlywheelConfig, StageSpec
from .train import MODEL_DIR


def stage_folder(root: Path, r: int, i: int, kind: str, variant: str | None = None) -> Path:
    """Return the folder of stage ``i`` of round ``r`` (or of its ablation ``variant``) under the flywheel root."""
    return root / f"round-{r}" / (f"{i}-{kind}" + (f"-{variant}" if variant else ""))


def stage_key(r: int, i: int, kind: str, variant: str | None = None) -> str:
    """Return a stage's key in the state and the tables: ``rR.I-KIND[-VARIANT]``."""
    return f"r{r}.{i}-{kind}" + (f"-{variant}" if variant else "")


@dataclass(eq=False)
class StageStep:
    """One stage of a round, or one of its ablation variants: harvest, then train."""

    round: int
    index: int
    spec: StageSpec
    kind: StageKind
    variant: str | None
    """None: the stage itself; a selection baseline's name; a sweep variant's name (``changes`` set)."""
    changes: dict[str, Any] | None
    """A sweep variant's changes to ``training.KIND``."""
    start: ModelSpec
    """The model it trains from (and that answers the slice)."""
    model: ModelSpec
    """The model it makes, in ``folder``/model."""
    folder: Path
    follows: StageStep | None
    """The stage whose record its inputs include (the stage before; a variant's: its stage); None: the base."""
    answerers: list[ModelSpec]
    """The models that answer the slice for its harvest (none: the stage harvests nothing): ``start``, the
    references, the start's samples (``harvest.samples``)."""
    samples: list[ModelSpec]
    """The start's samples among them."""
    reward_model: bool
    """It trains a reward model on its harvest first."""
    # set by whoever executes the step
    made: bool = False
    fingerprint: str = ""
    examples: int = 0

    @property
    def main(self) -> StageStep | None:
        """A variant's stage (None for a stage itself)."""
        return self.follows if self.variant is not None else None

    @property
    def key(self) -> str:
        return stage_key(self.round, self.index, self.spec.kind, self.variant)

    @property
    def label(self) -> str:
        """The step's name in the plan: its key and slice."""
        return f"{self.key} ({self.spec.slice})"

    @property
    def slice(self) -> str:
        return self.spec.slice

    @property
    def harvests(self) -> bool:
        """Whether the stage battles its slice and harvests data."""
        return bool(self.answerers)

    @property
    def training(self) -> TrainKind:
        return self.kind.train

    @property
    def baseline(self) -> bool:
        """A selection baseline: its own harvest, selected otherwise."""
        return self.variant is not None and self.changes is None

    @property
    def selection(self) -> str:
        """The selection that picks its harvest: a baseline's own, else the stage's."""
        return self.variant if self.baseline and self.variant is not None else self.spec.selection

    @property
    def data_from(self) -> StageStep | None:
        """A sweep variant trains on its stage's harvest (None: on its own)."""
        return self.follows if self.changes is not None else None

    def battles(self) -> tuple[Literal["target", "all"], str | None]:
        """How the slice's battles are scheduled: (schedule, target)."""
        return self.kind.battles, self.start.name if self.kind.battles == "target" else None


@dataclass(eq=False)
class Evaluate:
    """Every model rated so far answers the test set; all of them battle; ratings."""

    after: StageStep
    label: str
    """The evaluation's name in the workspace's state: ``round R stage I (KIND)``."""
    models: list[ModelSpec]
    """The references, then the rated models in the order they were made."""


@dataclass(eq=False)
class RoundEnd:
    """A round is over: its model (the last stage's, or the one before where a stage was skipped) and stages."""

    round: int
    model: ModelSpec
    stages: list[StageStep] = field(default_factory=list)


Step = StageStep | Evaluate | RoundEnd


def base_model(cfg: FlywheelConfig) -> ModelSpec:
    """Return the untrained target, as rated: TARGET-base."""
    return cfg.target.model_copy(update={"name": f"{cfg.target.name}-base"})


def stage_name(cfg: FlywheelConfig, r: int, i: int, st: StageSpec) -> str:
    """Return the model a stage makes: TARGET-rR-KIND (TARGET-rR.I-KIND where a round has two stages of a kind)."""
    same = [s for s in cfg.rounds[r].stages if s.kind == st.kind]
    tag = f"r{r}-{st.kind}" if len(same) == 1 else f"r{r}.{i}-{st.kind}"
    return f"{cfg.target.name}-{tag}"


def _step(cfg: FlywheelConfig, root: Path, r: int, i: int, st: StageSpec, variant: str | None,
          follows: StageStep | None, start: ModelSpec) -> StageStep:
    kind = stage_kind(st.kind)
    folder = stage_folder(root, r, i, st.kind, variant)
    model = cfg.target.model_copy(update={"name": stage_name(cfg, r, i, st) + (f"-{variant}" if variant else ""),
                                          "model": str(folder / MODEL_DIR)})
    harvests = kind.harvests(cfg.training)
    samples = cfg.harvest.samples.variants(start) if cfg.harvest.samples is not None and harvests else []
    return StageStep(round=r, index=i, spec=st, kind=kind, variant=variant,
                     changes=st.sweep.get(variant) if variant else None, start=start, model=model, folder=folder,
                     follows=follows, answerers=[start, *cfg.references, *samples] if harvests else [],
                     samples=samples, reward_model=variant is None and kind.reward_model(cfg.training))


def schedule(cfg: FlywheelConfig, root: Path, baselines: list[str]) -> Iterator[Step]:
    """Yield the steps of ``cfg``'s run whose stage folders are under ``root``, with the selection ``baselines``
    as ablations of every stage that selects its data. Set each stage step's ``made`` (and ``fingerprint``,
    ``examples``) before asking for the next step."""
    refs = list(cfg.references)
    current = base_model(cfg)
    rated = [current] if cfg.evaluate_base else []
    before: StageStep | None = None
    for r, rnd in enumerate(cfg.rounds):
        stages = []
        for i, st in enumerate(rnd.stages):
            main = _step(cfg, root, r, i, st, None, before, current)
            yield main
            stages.append(main)
            if main.made:
                rated.append(main.model)
            variants = [*(baselines if main.kind.selects else ())]
            for name in [*variants, *(st.sweep if main.made else ())]:  # sweep: same data and start, other settings
                v = _step(cfg, root, r, i, st, name, main, main.start)
                yield v
                if v.made:
                    rated.append(v.model)
            before = main
            if main.made:
                current = main.model
            if cfg.evaluate == "stages" or i == len(rnd.stages) - 1:
                yield Evaluate(after=main, label=f"round {r} stage {i} ({st.kind})", models=[*refs, *rated])
        yield RoundEnd(round=r, model=current, stages=stages)
