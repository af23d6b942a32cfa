"""Settings of the flywheel's training stages (validated config sections).

Defaults are the paper's documented hyperparameters (WizardArena / Arena Learning, NeurIPS 2024,
appendix: SFT lr 5e-6, 3 epochs, batch 128; DPO lr 5e-7, beta 0.3, 2 epochs; reward model lr
1e-6, 1 epoch; PPO lr 1e-7, KL 0.4), meant for 7B-70B models on GPUs. ``examples/flywheel.yaml``
overrides them with values chosen so that a 270M model moves on a 2-core CPU in minutes (LoRA,
higher learning rates, small batches, short sequences).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ..config import (
    BattleConfig,
    JudgeConfig,
    ModelSpec,
    PromptsConfig,
    RatingConfig,
    RunConfig,
    ScaleConfig,
    Section,
    SpendLimit,
    TasksConfig,
    oracle_judge_error,
)
from ..curate.settings import EmbedSettings, NearCopySettings
from ..scale.launch import LaunchSettings
from ..tasks import SUITES, suite_categories
from ..tasks.shortcuts import CHANCE_FLOOR
from .kinds import stage_kind

PAPER = {
    "sft": {"learning_rate": 5e-6, "epochs": 3, "batch_size": 128},
    "dpo": {"learning_rate": 5e-7, "beta": 0.3, "epochs": 2},
    "rm": {"learning_rate": 1e-6, "epochs": 1},
    "rl": {"learning_rate": 1e-7, "beta": 0.4},
}
"""The paper's hyperparameters (the defaults below)."""

DPO_LOSSES = {
    "sigmoid": "DPO (Rafailov et al. 2023, arXiv 2305.18290)",
    "ipo": "IPO, identity preference optimisation (Azar et al. 2023, arXiv 2310.12036); beta is its tau",
    "sigmoid_norm": "length-normalised DPO: mean instead of summed log-ratios (the length normalisation of SimPO, "
                    "Meng et al. 2024, arXiv 2405.14734, kept with a reference model; Tulu 3, arXiv 2411.15124)",
    "hinge": "SLiC hinge loss (Zhao et al. 2023, arXiv 2305.10425)",
    "robust": "robust DPO for noisy labels (Chowdhury et al. 2024, arXiv 2403.00409); set label_smoothing",
    "apo_zero": "anchored preference optimisation (D'Oosterlinck et al. 2024, arXiv 2408.06266)",
    "exo_pair": "EXO (Ji et al. 2024, arXiv 2402.00856)",
    "nca_pair": "NCA (Chen et al. 2024, arXiv 2402.05369)",
    "bco_pair": "BCO (Jung et al. 2024, arXiv 2404.04656)",
    "sppo_hard": "SPPO (Wu et al. 2024, arXiv 2405.00675)",
    "discopop": "DiscoPOP (Chris Lu et al. 2024, arXiv 2406.08414)",
    "aot": "alignment via optimal transport (Melnyk et al. 2024, arXiv 2406.05882)",
    "aot_unpaired": "AOT, unpaired (Melnyk et al. 2024)",
    "apo_down": "APO-down (D'Oosterlinck et al. 2024)",
    "sft": "negative log-likelihood on the chosen answers; ['sigmoid', 'sft'] with loss_weights is RPO "
           "(Pang et al. 2024, arXiv 2404.19733)",
}
"""The DPO losses TRL 1.16's DPOConfig offers (``loss_type``), with their sources."""


class LoraSettings(Section):
    """LoRA adapters (PEFT); merged into the weights after training, so the model serves as a plain folder."""

    r: int = Field(16, ge=1, description="LoRA rank")
    alpha: int = Field(32, ge=1, description="LoRA scaling (the update is scaled by alpha / r)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the LoRA layers")
    target_modules: str | list[str] = Field("all-linear", description="PEFT target modules ('all-linear': every "
                                            "projection of every layer)")


class TrainSettings(Section):
    """What every trainer shares. ``batch_size`` is the effective batch: micro-batches x accumulation."""

    learning_rate: float = Field(5e-6, gt=0, description="peak learning rate")
    epochs: float = Field(3, gt=0, description="passes over the stage's data (max_steps, when set, stops first)")
    max_steps: int = Field(-1, description="stop after this many optimizer steps (-1: epochs decide)")
    batch_size: int = Field(128, ge=1, description="examples per optimizer step")
    micro_batch_size: int = Field(8, ge=1, description="examples per forward pass (batch_size / this = accumulation)")
    max_length: int = Field(1024, ge=8, description="tokens per sequence (prompt + answer); longer ones are cut")
    lr_scheduler: str = Field("cosine", description="transformers' scheduler name (cosine, linear, constant, ...)")
    warmup_ratio: float = Field(0.03, ge=0.0, lt=1.0, description="share of the steps the learning rate warms up over")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    lora: LoraSettings | None = Field(default_factory=LoraSettings, description="LoRA; null: full fine-tuning")
    save_steps: int = Field(10, ge=1, description="checkpoint every N steps (a killed run resumes from the last)")
    logging_steps: int = Field(1, ge=1, description="log the loss every N steps (into losses.json)")
    seed: int = Field(0, description="the trainer's seed (data order, initialisation of LoRA and heads)")
    threads: int | None = Field(None, ge=1, description="torch threads (default: torch's choice, the cores)")

    @property
    def accumulation(self) -> int:
        return max(1, self.batch_size // self.micro_batch_size)

    @property
    def micro(self) -> int:
        return min(self.micro_batch_size, self.batch_size)


class SFTSettings(TrainSettings):
    """Supervised fine-tuning on harvested examples (TRL SFTTrainer). Loss on the answers only.

    ``start``: what an SFT stage fine-tunes: the model the flywheel has now (``previous``, the
    default), or the untrained target (``base``) on the stage's data, with ``harvest.replay`` every
    round's data so far. The battles that harvest it are still the current model's; only the weights
    training starts from change. ReST-EM (Singh et al. 2023, arXiv 2312.06585) fine-tunes the base
    model each iteration, against overfitting and drift: continuing from the last model trains the
    early rounds' examples again epoch after epoch.
    """

    completion_only_loss: bool = Field(True, description="the loss on the answer tokens only, not on the prompt")
    # exclude_if: written only when set, so that configs without it keep their fingerprints
    start: Literal["previous", "base"] = Field("previous", exclude_if=lambda v: v == "previous",
                                               description="what an SFT stage fine-tunes: the current model "
                                               "(previous) or the untrained target on all its data (base; ReST-EM)")


class DPOSettings(TrainSettings):
    """DPO on harvested pairs (TRL DPOTrainer); ``loss_type`` is any of DPOConfig's (see DPO_LOSSES)."""

    learning_rate: float = Field(5e-7, gt=0, description="peak learning rate (the paper's DPO: 5e-7)")
    epochs: float = Field(2, description="passes over the pairs")
    beta: float = Field(0.3, gt=0, description="DPO's beta: how far the policy may move from the reference model")
    loss_type: list[str] = Field(default_factory=lambda: ["sigmoid"], description="DPOConfig's loss types (sigmoid: "
                                 "DPO, ipo, sigmoid_norm, robust, hinge, apo_zero, sft for an NLL term, ...); "
                                 "several are summed with loss_weights")
    loss_weights: list[float] | None = Field(None, description="one weight per loss_type (default: 1 each)")
    label_smoothing: float = Field(0.0, ge=0.0, lt=0.5, description="conservative DPO / robust DPO: the assumed share "
                                   "of flipped preference labels")
    ld_alpha: float | None = Field(None, ge=0.0, le=1.0, description="LD-DPO length desensitisation (Liu et al. 2024, "
                                   "arXiv 2409.06411): weight of the tokens beyond the shorter answer's length")

    @model_validator(mode="after")
    def _losses(self) -> DPOSettings:
        bad = [x for x in self.loss_type if x not in DPO_LOSSES]
        if bad:
            raise ValueError(f"unknown DPO loss_type {bad}; TRL's DPOConfig offers: {', '.join(DPO_LOSSES)}")
        return self


class RMSettings(TrainSettings):
    """Reward model on harvested pairs (TRL RewardTrainer), with the pairs' margins."""

    learning_rate: float = Field(1e-6, gt=0, description="peak learning rate of the reward model")
    epochs: float = Field(1, description="passes over the pairs")
    use_margin: bool = Field(True, description="subtract each pair's score gap inside the loss (Llama 2's margin)")


class RLSettings(TrainSettings):
    """The paper's PPO stage, on TRL's RLOO (or GRPO) trainer: sample, score with a reward, update.

    ``reward: model`` scores completions with the reward model trained on the stage's pairs;
    ``reward: verifier`` with the task suite's checkers (verifiable tasks). ``beta`` is the KL
    coefficient against the starting model (the paper's PPO KL 0.4).
    """

    learning_rate: float = Field(1e-7, gt=0, description="peak learning rate of the policy")
    epochs: float = Field(1, description="passes over the stage's prompts")
    batch_size: int = Field(16, description="completions per optimizer step")
    micro_batch_size: int = Field(8, description="completions per forward pass")
    algorithm: Literal["rloo", "grpo"] = Field("rloo", description="rloo: REINFORCE with a leave-one-out baseline "
                                               "(TRL's RLOOTrainer; the paper's PPO stage); grpo: GRPO")
    reward: Literal["model", "verifier"] = Field("model", description="model: the reward model trained on the stage's "
                                                 "pairs (the paper); verifier: the task suite's checker (prompts "
                                                 "with references only)")
    beta: float = Field(0.4, ge=0.0, description="KL coefficient against the starting model (the paper's PPO: 0.4)")
    num_generations: int = Field(4, ge=2, description="completions sampled per prompt")
    max_completion_length: int = Field(64, ge=1, description="the most tokens a sampled completion may have")
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature of the completions")
    chance_corrected: bool = Field(False, exclude_if=lambda v: not v,
                                   description="reward: verifier only: each completion's reward minus what it would "
                                   "earn without reading its question (the mean score, 0-1, on its category's "
                                   "prompts of the surface policy that gives it, or of the answer itself, from "
                                   "chance_floor on: tasks.shortcuts.SurfaceChance), so a constant 'yes' earns 0 "
                                   "on average")
    chance_floor: float = Field(CHANCE_FLOOR, ge=0.0, le=1.0, exclude_if=lambda v: v == CHANCE_FLOOR,
                                description="chance_corrected: what an answer would earn without its question is "
                                "taken off only from this much on (below it, a guess: 0 there made an empty answer "
                                "the best reply to every question a model got wrong)")

    @model_validator(mode="after")
    def _chance_needs_verifier(self) -> RLSettings:
        if self.chance_corrected and self.reward != "verifier":
            raise ValueError("chance_corrected needs reward: verifier (it rescores completions with the task "
                             "checkers; a reward model's scores have no chance level to subtract)")
        return self


# ---- the flywheel run ------------------------------------------------------------------

BASELINES = ("all", "random", "longest")
SWEEP_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")


class SliceSpec(Section):
    """A training slice: task-suite prompts made with their own seed, or a prompt set in the workspace.

    Task slices are decontaminated: no test prompt, no few-shot example of any model's prompt
    format, and no prompt of an earlier slice is generated (slices are disjoint, as D0..DN in the
    paper). A stored set (e.g. ``pool/D1`` from `arena pool build`) is used as it is, minus any
    prompt whose text is a test prompt's.
    """

    n: int = Field(240, ge=1, description="task-suite prompts in the slice (spread over the categories)")
    seed: int | None = Field(None, description="task-suite seed (default: 1000 + the slice's position)")
    categories: list[str] | None = Field(None, description="task slices: only these categories of the suite (default: "
                                         "all)")
    set: str | None = Field(None, description="a prompt set stored in the workspace instead of task prompts")
    limit: int | None = Field(None, ge=1, description="keep only the first N prompts of the set")

    @field_validator("categories")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        # an unknown category would make an empty slice, and the slice's stages would train on nothing
        known = {c for cats in SUITES.values() for c in cats}   # the suite's own is checked with tasks.suite
        bad = [c for c in v or [] if c not in known]
        if bad:
            raise ValueError(f"unknown task categories {bad}; the suites have {', '.join(sorted(known))}")
        return v


class StageSpec(Section):
    """One training stage of a round: its kind, the slice it battles and trains on, how data is selected."""

    kind: Literal["sft", "dpo", "rl"] = Field(description="sft, dpo (with the reward model's pairs harvested too) or "
                                              "rl")
    slice: str = Field(description="the slice (a key of pool) the stage battles on and harvests from")
    selection: Literal["pair_judge", "all", "random", "longest"] = Field(
        "pair_judge", description="sft/dpo: pair_judge (the paper) or a baseline (all, random, longest)")
    # exclude_if: written only when set, so that stages without one keep their saved form and fingerprints
    sweep: dict[str, dict[str, Any]] = Field(
        default_factory=dict, exclude_if=lambda v: not v, description="a settings search: each entry NAME: "
        "{setting: value} is a variant of the stage that trains on the stage's own data (and replay) from the "
        "same model with training.KIND's settings changed as given; each is rated in the same table "
        "(TARGET-rR-KIND-NAME, key rR.I-KIND-NAME, among the ablations) and does not continue into later rounds")
    allocate: Literal["uniform", "weakness", "learnable", "even"] = Field(
        "uniform", exclude_if=lambda v: v == "uniform", description="how the stage's slice spends its prompts over "
        "the groups (task-suite categories; a stored set's categories, else its clusters): uniform (as the slice "
        "is made), or weakness: drawn when the stage starts, in proportion to how far the model it starts from is "
        "behind the best reference per group on the test set (rating.gaps), each group at least half its uniform "
        "share, the slice's size unchanged (flywheel.aim); learnable: as weakness, each group's gap weighed by how "
        "far the training that made the model moved it there (its score share against the references on the "
        "group's test prompts minus the model's before), so that groups where training moves nothing keep their "
        "floor; even: drawn as weakness draws, from the same candidates, but evenly (the control arm of an aimed "
        "run). Measured against even on the experiments page")

    @model_validator(mode="after")
    def _sweep_names(self) -> StageSpec:
        for name in self.sweep:
            if not SWEEP_NAME.fullmatch(name) or name in BASELINES:
                raise ValueError(f"sweep variant {name!r}: a name of lowercase letters, digits, '.', '_' and '-' "
                                 f"that is not a baseline's ({', '.join(BASELINES)})")
        return self


class RoundSpec(Section):
    stages: list[StageSpec] = Field(min_length=1, description="the round's stages, in order; each starts from the "
                                    "model the one before made")


class SliceDecontam(NearCopySettings):
    """The near-copy tests a stored slice passes against every test set of the workspace before it is answered.

    MinHash, long shared n-grams and embeddings (curate.decontam), as `arena pool build`: a test set may come
    after the pool was built. Task-suite slices are exact-disjoint from the test set by construction and share
    its templates by design ("What is 12 + 7?"), so these tests do not apply to them.
    """

    embed: EmbedSettings = Field(default_factory=EmbedSettings, description="the model that embeds prompts for the "
                                 "paraphrase test (embedding_threshold)")


class RipSettings(Section):
    """RIP filtering of preference pairs (arXiv 2501.18578); each threshold off when null."""

    min_rejected_score: float | None = Field(None, description="drop a pair whose rejected answer scores below this "
                                             "(null: off)")
    min_rejected_length: int | None = Field(None, description="drop a pair whose rejected answer is shorter than this "
                                            "many characters (null: off)")
    max_gap: float | None = Field(None, description="drop a pair whose score gap is above this (null: off)")


class SampleSettings(Section):
    """The target's own samples on each training slice: k seeded variants of the model that battles there.

    Each sample is a contestant (named ``<model>-sample<i>``, temperature ``temperature``, seed
    ``seed + i``), answered and judged through the ledger like a reference, so a rerun asks nothing
    again. Harvest then draws from references and samples alike: an SFT example may be the target's
    own best winning answer (rejection-sampling fine-tuning, RFT), and a DPO / RM pair may set one of
    its samples against another. This is what lets the student learn past its teachers.

    ``few_shot``: the first ``shots`` samples (all k when unset) see these (question, answer)
    examples before the question, as a few-shot prompt of the current model: a teacher that grows
    with the student (what the examples show in context, its right answers teach without them:
    context distillation, Snell et al. 2022, arXiv 2209.15189). The examples' questions are kept out
    of every slice, as a reference's are.
    """

    k: int = Field(4, ge=1, le=32, description="samples per prompt (k times the target's answering cost)")
    temperature: float = Field(1.0, gt=0.0, le=2.0, description="the samples' temperature")
    seed: int = Field(0, description="sample i of a prompt is drawn with seed + i")
    # exclude_if: written only when set, so that a config without them keeps its fingerprints
    few_shot: list[tuple[str, str]] | None = Field(
        None, exclude_if=lambda v: v is None, description="(question, answer) examples shown before the question "
        "to the first `shots` samples: the current model prompted few-shot as a teacher (context distillation)")
    shots: int | None = Field(None, ge=0, exclude_if=lambda v: v is None,
                              description="how many of the k samples see few_shot (unset: all k)")

    @model_validator(mode="after")
    def _shots(self) -> SampleSettings:
        if self.shots is not None and (self.few_shot is None or self.shots > self.k):
            raise ValueError("samples.shots needs few_shot, and at most k of them" if self.few_shot is None else
                             f"samples.shots ({self.shots}) is more than k ({self.k})")
        return self

    def variants(self, spec: ModelSpec) -> list[ModelSpec]:
        """Return the k sampled variants of ``spec`` (the first ``shots`` with the few-shot examples)."""
        shown = (self.k if self.shots is None else self.shots) if self.few_shot else 0
        out = []
        for i in range(self.k):
            update: dict[str, Any] = {"name": f"{spec.name}-sample{i}", "params": spec.params.model_copy(
                update={"temperature": self.temperature, "seed": self.seed + i})}
            if i < shown:
                shots = list(self.few_shot or [])
                update["prompt_format"] = spec.prompt_format.model_copy(update={"few_shot": shots})
            out.append(spec.model_copy(update=update))
        return out

    def questions(self) -> set[str]:
        """Return the few-shot examples' questions (kept out of the slices)."""
        return {q for q, _ in self.few_shot or []}


class HarvestConfig(Section):
    sft_threshold: float = Field(0.0, ge=0.0, description="SFT: the target lost by more than this score gap")
    sft_min_score: float | None = Field(
        None, description="SFT: a winning answer supplies an example only if its judge score is at least this "
        "(with the verifier, 10: exactly right; unset: any winner, even on partial credit)")
    k: float = Field(1.0, description="DPO: drop pairs whose score gap is at most K")
    rm_k: float | None = Field(None, description="reward-model pairs: K (default: k)")
    rip: RipSettings | None = Field(None, description="RIP filtering of preference pairs (null: off)")
    baselines: list[Literal["all", "random", "longest"]] = Field(
        default_factory=list, description="ablation: also train each SFT/DPO stage on these selections "
        "(side by side, from the same model; they do not continue into later stages)")
    replay: bool = Field(False, description="train each SFT / DPO / RM stage on its own harvest plus the harvests of "
                         "the same kind from earlier rounds (against forgetting what earlier rounds taught)")
    seed: int = Field(0, description="seed of the harvest's seeded choices: the random baseline's sample, the "
                      "balancing per category")
    samples: SampleSettings | None = Field(
        None, description="the target's own samples as candidates on each training slice (a harvest setting, "
        "not a target one, as it changes what is harvested)")
    balance: bool = Field(False, description="balance each category's examples and pairs by the shortcut their "
                          "answer would also fit (first or second number, yes or no, ascending or descending), so "
                          "the data cannot teach a positional or constant answer")
    balance_fill: bool = Field(False, description="with balance, SFT: a category's short side is made up with the "
                               "target's own right answers on the slice (judge score at least sft_min_score) "
                               "instead of the long side being cut (a target that always says 'yes' loses only "
                               "on 'no' items: balance alone would drop them all)")
    own_right: bool = Field(False, description="SFT (needs sft_min_score): the target's own greedy answers that are "
                            "right on the slice are examples too, beside the prompts it lost (ReST-EM trains on "
                            "every correct sample): each round, trained from the base, learns again what the "
                            "target already knew instead of only what it lost")

    def fingerprint_exclude(self) -> set[str]:
        """Fields left out of a stage's fingerprint: the ablation baselines, and new options while unset."""
        unset = {name for name in ("samples", "sft_min_score") if getattr(self, name) is None}
        off = {name for name in ("balance", "balance_fill", "own_right") if not getattr(self, name)}
        return {"baselines"} | unset | off

    @model_validator(mode="after")
    def _fill_needs(self) -> HarvestConfig:
        if self.balance_fill and (not self.balance or self.sft_min_score is None):
            raise ValueError("harvest.balance_fill fills the short side of balanced data with the target's right "
                             "answers: set harvest.balance: true and harvest.sft_min_score (which score is "
                             "right: 10 with the verifier)")
        if self.own_right and self.sft_min_score is None:
            raise ValueError("harvest.own_right adds the target's right answers to the SFT data: set "
                             "harvest.sft_min_score (which score is right: 10 with the verifier)")
        if self.own_right and self.balance_fill:
            raise ValueError("harvest.own_right already takes every right answer of the target, which is what "
                             "harvest.balance_fill draws its fillers from: set one of them")
        return self


class TrainingConfig(Section):
    sft: SFTSettings = Field(default_factory=SFTSettings, description="SFT stages' settings")
    dpo: DPOSettings = Field(default_factory=DPOSettings, description="DPO stages' settings")
    rm: RMSettings = Field(default_factory=RMSettings, description="the reward model's settings (trained in an rl "
                           "stage with reward: model)")
    rl: RLSettings = Field(default_factory=RLSettings, description="RL stages' settings")
    launch: LaunchSettings = Field(default_factory=LaunchSettings, description="how stages are launched: in "
                                   "process (default), accelerate (DeepSpeed ZeRO-2/3, multi-GPU) or torchrun")
    # exclude_if: written only when set, so that configs without them keep their saved form and fingerprints
    serve_as: Literal["transformers", "llamacpp"] = Field(
        "transformers", exclude_if=lambda v: v == "transformers", description="the engine the target's models "
        "answer through (the base and every trained stage; training is transformers either way): transformers "
        "(the trained folder itself), or llamacpp: each model's folder exported to GGUF (STAGE/model.gguf, the base "
        "in the arena cache) with the bundled model's metadata and tokenizer, answering with the target's mode, "
        "prompt_format and params, parallel = batch_size. Several times the tokens/s of transformers float32; "
        "f16 answers as float32 transformers does, q4_k_m a few answers otherwise (figures: docs/results.md)")
    report_to: Literal["none", "tensorboard", "wandb", "mlflow"] = Field(
        "none", exclude_if=lambda v: v == "none", description="where each stage's trainer reports its losses, as a "
        "run named by round and stage: tensorboard (event files in WORKSPACE/tracking/tensorboard, with the round "
        "table as the run 'rounds'; the tensorboard or tensorboardX package), wandb (offline mode, "
        "WORKSPACE/tracking; `wandb sync` uploads it) or mlflow (a file store, WORKSPACE/tracking/mlruns); none of "
        "them goes on the network; none: losses.json only")
    serve_quantize: Literal["f16", "q4_k_m", "f32"] = Field(
        "f16", exclude_if=lambda v: v == "f16", description="serve_as llamacpp: the GGUF's tensor type: f16 "
        "(answers as transformers float32 does, half f32's size), q4_k_m (llama.cpp's quantizer, the bundled file's "
        "type, a quarter of f32's size, a little faster, some answers differ) or f32 (exact)")

    def settings(self, kind: str, changes: dict[str, Any] | None = None, where: str = "") -> TrainSettings:
        """Return ``kind``'s settings (sft, dpo, rm, rl), with ``changes`` (a sweep variant's) applied and checked."""
        base: TrainSettings = getattr(self, kind)
        if not changes:
            return base
        unknown = sorted(set(changes) - set(type(base).model_fields))
        if unknown:
            raise ValueError(f"{where}: {', '.join(unknown)} not a setting of training.{kind} (it has "
                             f"{', '.join(type(base).model_fields)})")
        try:
            return type(base).model_validate({**base.model_dump(), **changes})
        except ValidationError as err:
            why = "; ".join(f"{'.'.join(map(str, e['loc'])) or kind}: {e['msg']} (got {e['input']!r})"
                            for e in err.errors())
            raise ValueError(f"{where}: {why}") from None


class FlywheelConfig(Section):
    """A flywheel run: the target, the references, the judge, the test set, the pool's slices and the rounds.

    Each round trains the model the previous round left (round 0 starts from ``target``); after
    each stage (``evaluate: stages``) or round, the new model answers the test set and is rated
    with every earlier model, the starting model and the references.
    """

    name: str = Field("flywheel", min_length=1, description="the flywheel's name (its default workspace is "
                      "workspaces/<name>)")
    workspace: str | None = Field(None, description="workspace directory (default: workspaces/<name>)")
    target: ModelSpec = Field(description="the model trained (engine: transformers)")
    references: list[ModelSpec] = Field(min_length=1, description="the models the target battles")
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="the judge of the training slices' battles: "
                               "what it prefers becomes the training data")
    # exclude_if: written only when set, so that configs without one keep their saved form and fingerprints
    eval_judge: JudgeConfig | None = Field(
        None, exclude_if=lambda v: v is None, description="the judge that rates the rounds on the test set "
        "(default: judge). Another model keeps the flywheel from grading its own homework: a judge's taste that "
        "the data taught would otherwise be measured by the same taste")
    tasks: TasksConfig = Field(default_factory=lambda: TasksConfig(n=180), description="the test set (task suite)")
    decontam: SliceDecontam = Field(
        default_factory=SliceDecontam, exclude_if=lambda v: v == SliceDecontam(), description="the near-copy tests "
        "of stored slices against the workspace's test sets (written only when changed)")
    prompts: PromptsConfig | None = Field(None, description="open prompts as the test set instead (LLM judge)")
    pool: dict[str, SliceSpec] = Field(min_length=1, description="training slices by name (D0, D1, ...)")
    rounds: list[RoundSpec] = Field(min_length=1, description="the rounds, in order: round 0 is usually the initial "
                                    "SFT on D0")
    harvest: HarvestConfig = Field(default_factory=HarvestConfig, description="how battles become training data")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="how each kind of stage trains, "
                                     "launches and serves its model")
    ratings: RatingConfig = Field(default_factory=RatingConfig, description="Bradley-Terry ratings of the rounds on "
                                  "the test set")
    evaluate: Literal["stages", "rounds"] = Field("stages", description="rate the model after every stage, or "
                                                  "only after every round")
    evaluate_base: bool = Field(True, description="rate the untrained target too")
    scale: ScaleConfig = Field(default_factory=ScaleConfig, description="where the battles' model calls run (ray: "
                               "engine actors on a Ray cluster; a trained model's folder must be on storage every "
                               "node sees); training runs as training.launch says")
    spend_limit: SpendLimit | None = Field(
        None, exclude_if=lambda v: v is None, description="stop before a model call of the arena stages (answers, "
        "battles) would take the workspace's spend past usd; a rerun with a higher limit resumes")

    @model_validator(mode="after")
    def _check(self) -> FlywheelConfig:
        if self.target.engine != "transformers":
            raise ValueError(f"target {self.target.name!r}: the flywheel trains it, so its engine must be "
                             f"'transformers' (got {self.target.engine!r})")
        names = [self.target.name, *(m.name for m in self.references)]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"model names must be unique; repeated: {', '.join(dupes)}")
        for r, rnd in enumerate(self.rounds):
            for st in rnd.stages:
                if st.slice not in self.pool:
                    raise ValueError(f"rounds.{r}: stage {st.kind} names slice {st.slice!r}, which is not in pool "
                                     f"({', '.join(self.pool)})")
                for name in st.sweep:
                    self.training.settings(st.kind, st.sweep[name], where=f"rounds.{r}: stage {st.kind}, sweep {name}")
                self._check_aim(r, st)
                if stage_kind(st.kind).verified(self.training) and self.pool[st.slice].set is not None:
                    raise ValueError(f"rounds.{r}: an rl stage with reward 'verifier' needs task-suite prompts; slice "
                                     f"{st.slice!r} is a stored set (use reward: model)")
        judges = [self.judge, *self.judge.members]
        if self.eval_judge is not None:
            judges += [self.eval_judge, *self.eval_judge.members]
            if self.eval_judge.name == self.judge.name and self.eval_judge != self.judge:
                raise ValueError(f"eval_judge is named {self.judge.name!r}, as judge, but is another judge: battles "
                                 "are stored by judge name, so give it a name of its own")
        known = {*names, *(j.model.name for j in judges if j.model is not None)}
        unknown = sorted(set(self.scale.models) - known)
        if unknown:
            raise ValueError(f"scale.models names {', '.join(unknown)}, not the target, a reference or a judge model: "
                             f"{', '.join(sorted(known))} (a trained model's actors take scale.defaults)")
        if self.rating_judge.kind == "verifier" and self.prompts is not None:
            raise ValueError("judge 'verifier' scores task-suite prompts only; open prompts need an LLM judge")
        for name, sl in self.pool.items():
            bad = [c for c in sl.categories or [] if c not in suite_categories(self.tasks.suite)]
            if bad:
                raise ValueError(f"pool.{name}.categories: {bad} are not categories of suite {self.tasks.suite} "
                                 f"(tasks.suite); it has {', '.join(suite_categories(self.tasks.suite))}")
        for judge in {id(j): j for j in (self.judge, self.rating_judge)}.values():
            why = oracle_judge_error([self.target, *self.references], judge)
            if why is not None:
                raise ValueError(why)
        for pos, (name, sl) in enumerate(self.pool.items()):
            # the test set is made with tasks.seed: a slice of the same seed would train on test prompts' kin
            if sl.set is None and self.slice_seed(pos, sl) == self.tasks.seed:
                how = "" if sl.seed is not None else f" (its default, 1000 + its position {pos})"
                raise ValueError(f"pool.{name}.seed: {self.tasks.seed}{how} is the test set's seed (tasks.seed); give "
                                 f"training slices other seeds")
        return self

    def aimed_slices(self) -> set[str]:
        """Return the slices a stage draws by ``allocate`` (weakness, learnable, even: drawn when their first stage
        starts)."""
        return {st.slice for rnd in self.rounds for st in rnd.stages if st.allocate != "uniform"}

    def _check_aim(self, r: int, st: StageSpec) -> None:
        """Refuse an aimed slice that some stage battles before it is drawn, or a stored one with no size."""
        if st.slice not in self.aimed_slices():
            return
        r0, i0 = first_stage_on(self, st.slice)
        first = self.rounds[r0].stages[i0]
        if first.allocate == "uniform":
            raise ValueError(f"rounds.{r0}: stage {first.kind} battles slice {st.slice!r} before a later stage "
                             f"draws it by allocate: {st.allocate}; set allocate on the slice's first stage")
        spec = self.pool[st.slice]
        if st.allocate != "uniform" and spec.set is not None and spec.limit is None:
            raise ValueError(f"rounds.{r}: stage {st.kind} draws slice {st.slice!r} by allocate: {st.allocate} "
                             f"from the stored set {spec.set!r}: set pool.{st.slice}.limit (the slice's size; the "
                             "rest of the set is what it draws from)")

    @staticmethod
    def slice_seed(pos: int, spec: SliceSpec) -> int:
        """Return the task-suite seed of the task slice ``spec``, at position ``pos`` of the pool."""
        return spec.seed if spec.seed is not None else 1000 + pos

    @property
    def rating_judge(self) -> JudgeConfig:
        """The judge of the test set's battles: ``eval_judge``, or ``judge`` when none is given."""
        return self.eval_judge if self.eval_judge is not None else self.judge

    def judges_line(self) -> str:
        """Say which judge harvests and which rates (the round table's header)."""
        h, r = self.judge, self.rating_judge
        if r is not h and r != h:
            return f"judges: {h.name} harvests the training data, {r.name} rates the rounds"
        why = (" (a verifier checks answers against the task suite's reference answers: no taste of its own to "
               "teach, so it may serve as both)" if h.kind == "verifier" else
               " (the same model: set eval_judge to rate with another)")
        return f"judges: {h.name} harvests the training data and rates the rounds{why}"

    def arena_config(self, models: Sequence[ModelSpec], schedule: Literal["all", "target"] = "all",
                     target: str | None = None, *, rating: bool = False) -> RunConfig:
        """Return the arena run the flywheel makes of ``models``: its judge (the rating judge for the test set:
        ``rating``), test set and ratings, ``schedule``."""
        judge = self.rating_judge if rating else self.judge
        return RunConfig(name=self.name, models=list(models), judge=judge, tasks=self.tasks, prompts=self.prompts,
                         ratings=self.ratings, battles=BattleConfig(schedule=schedule, target=target),
                         spend_limit=self.spend_limit)


def first_stage_on(cfg: FlywheelConfig, name: str) -> tuple[int, int]:
    """Return (round, index) of the first stage that battles the slice ``name`` (the one that draws an aimed one)."""
    return next((r, i) for r, rnd in enumerate(cfg.rounds) for i, st in enumerate(rnd.stages) if st.slice == name)
