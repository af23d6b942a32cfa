"""The flywheel's kinds, registered once: what a harvest makes, how a model trains, what a stage of a round does.

The round runner, the planner, the schedule, the stage launcher and ``arena harvest`` read these
tables instead of testing ``kind == "rl"`` (as ``engine_kinds`` does for engines). A stage kind
(``rounds[].stages[].kind``: sft, dpo, rl) names the data its harvest makes (a data kind: sft, dpo,
rm) and the training that follows (a training kind: sft, dpo, rl; an rl stage with ``reward: model``
trains the training kind rm first). Trainers are named as ``function`` in ``flywheel.train``, not
imported, so that the config loads no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError

if TYPE_CHECKING:
    from .settings import HarvestConfig, TrainingConfig, TrainSettings


def _one_of(kind: str, names: list[str]) -> str:
    return f"{kind!r}: use {', '.join(names[:-1])} or {names[-1]}"


@dataclass(frozen=True)
class DataKind:
    """What a harvest makes from a slice's battles (a stage's data file; ``arena harvest --kind``)."""

    name: str
    rows: str
    """What one row is called: examples or pairs."""
    pairs: bool
    """Preference pairs (``harvest.select_pairs``), not SFT examples (``harvest.select_sft``)."""

    @property
    def file(self) -> str:
        """The stage folder's file that holds the harvest."""
        return f"{self.name}.jsonl"

    @property
    def export(self) -> Literal["sft", "pairs"]:
        """The rows' format (``export.export_items``)."""
        return "pairs" if self.pairs else "sft"


@dataclass(frozen=True)
class TrainKind:
    """One kind of training (``training.KIND``'s settings): what it trains on and which trainer runs it."""

    name: str
    rows: str
    """What it trains on: examples, pairs or prompts (the plan's training lines)."""
    trainer: str
    """The function in ``flywheel.train`` that runs it."""
    data: DataKind | None = None
    """The harvested rows it trains on; None: the slice's prompts, sampled and scored inside the trainer."""
    answers: bool = True
    """Its model answers prompts (with ``serve_as: llamacpp`` it is exported to GGUF); False: a reward model,
    a sequence classifier with one score."""

    @property
    def on_prompts(self) -> bool:
        """It trains on the slice's prompts, not on harvested rows."""
        return self.data is None

    def trainer_fn(self) -> Any:
        """Return the trainer (imports ``flywheel.train``, and so torch)."""
        return getattr(import_module("arena_learning.flywheel.train"), self.trainer)

    def result_kind(self, settings: TrainSettings) -> str:
        """Return the kind its finished model's losses file records: the RL algorithm for rl, else its name."""
        return str(getattr(settings, "algorithm", self.name)) if self.on_prompts else self.name


@dataclass(frozen=True)
class StageKind:
    """One kind of stage of a round: its harvest (how the slice battles, how data is selected), its training and
    its column in the round table."""

    name: str
    data: DataKind
    train: TrainKind
    battles: Literal["target", "all"]
    """How the slice's battles are scheduled: the current model against each reference, or a round robin."""
    selects: bool
    """The stage's ``selection`` picks its data, and the selection baselines (``--baselines``) are its ablations;
    False: its pairs are always the judge's (pair_judge)."""
    column: str
    """The round table's count of its harvest (a ``RoundRow`` field)."""
    rewarded: bool = False
    """It trains on the slice's prompts with a reward (``training.rl.reward``): it harvests pairs only to train a
    reward model (``reward: model``)."""

    def harvests(self, training: TrainingConfig) -> bool:
        """Whether the stage battles its slice and harvests data."""
        return not self.rewarded or self.reward_model(training)

    def reward_model(self, training: TrainingConfig) -> bool:
        """Whether the stage trains a reward model on its harvest first."""
        return self.rewarded and training.rl.reward == "model"

    def verified(self, training: TrainingConfig) -> bool:
        """Whether the task suite's checkers score the stage's training (a verifier reward)."""
        return self.rewarded and training.rl.reward == "verifier"

    def selection(self, chosen: str) -> str:
        """Return the selection that picks the stage's data, ``chosen`` being the stage's (or its baseline's)."""
        return chosen if self.selects else "pair_judge"

    def k(self, harvest: HarvestConfig) -> float:
        """Return the score gap at or under which a pair is dropped."""
        return harvest.k if self.selects or harvest.rm_k is None else harvest.rm_k


DATA_KINDS: dict[str, DataKind] = {k.name: k for k in (
    DataKind("sft", "examples", pairs=False),
    DataKind("dpo", "pairs", pairs=True),
    DataKind("rm", "pairs", pairs=True),
)}
"""Every data kind by name."""

TRAIN_KINDS: dict[str, TrainKind] = {k.name: k for k in (
    TrainKind("sft", "examples", "train_sft", DATA_KINDS["sft"]),
    TrainKind("dpo", "pairs", "train_dpo", DATA_KINDS["dpo"]),
    TrainKind("rm", "pairs", "train_reward", DATA_KINDS["rm"], answers=False),
    TrainKind("rl", "prompts", "train_rl"),
)}
"""Every training kind by name (the sections of ``training``)."""

STAGE_KINDS: dict[str, StageKind] = {k.name: k for k in (
    StageKind("sft", DATA_KINDS["sft"], TRAIN_KINDS["sft"], "target", selects=True, column="sft_examples"),
    StageKind("dpo", DATA_KINDS["dpo"], TRAIN_KINDS["dpo"], "all", selects=True, column="dpo_pairs"),
    StageKind("rl", DATA_KINDS["rm"], TRAIN_KINDS["rl"], "all", selects=False, column="rm_pairs", rewarded=True),
)}
"""Every stage kind by name (``rounds[].stages[].kind``)."""

REWARD_MODEL = TRAIN_KINDS["rm"]
"""The training of a rewarded stage's reward model."""


def data_kind(name: str) -> DataKind:
    """Return the data kind ``name``; a ConfigError names the known ones."""
    if name not in DATA_KINDS:
        raise ConfigError(_one_of(name, list(DATA_KINDS)))
    return DATA_KINDS[name]


def train_kind(name: str) -> TrainKind:
    """Return the training kind ``name``; a ConfigError names the known ones."""
    if name not in TRAIN_KINDS:
        raise ConfigError(_one_of(name, list(TRAIN_KINDS)))
    return TRAIN_KINDS[name]


def stage_kind(name: str) -> StageKind:
    """Return the stage kind ``name``; a ConfigError names the known ones."""
    if name not in STAGE_KINDS:
        raise ConfigError(_one_of(name, list(STAGE_KINDS)))
    return STAGE_KINDS[name]


def is_reward_model(kind: str) -> bool:
    """Whether a model trained as ``kind`` (a training kind, or an RL algorithm) is a reward model."""
    known = TRAIN_KINDS.get(kind)
    return known is not None and not known.answers
