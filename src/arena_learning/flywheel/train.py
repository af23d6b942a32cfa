"""Training with TRL and PEFT: SFT, DPO, a reward model, and the RL stage (RLOO or GRPO).

Each function takes harvested records, a base model folder and a stage folder, and leaves:

- ``STAGE/model/``: the trained model as a plain Hugging Face folder (LoRA merged into the
  weights), ready for the ``transformers`` engine (or vLLM); written under a temporary name and
  renamed when complete, so a folder under that name is always whole;
- ``STAGE/losses.json``: the trainer's log (loss, learning rate, ... per logging step), rewritten at
  every log, and the summary once done;
- ``STAGE/work/``: checkpoints every ``save_steps`` steps. A run killed anywhere (SIGKILL included)
  resumes from the last complete checkpoint (one with its ``trainer_state.json``, which the Trainer
  writes last); a stage whose ``model/`` exists is done and is not trained again.

The data is rendered in the form the target is asked in: a completion-mode model (a base model
with a ``prompt_format``) trains on the exact text the engine sends (``Question: ...\\nAnswer:``)
with the answer as the completion; a chat-mode model trains on conversational rows through its
chat template. Either way the loss is on the answers only.

The paper's PPO stage: TRL 1.16 has no PPOTrainer. RLOO (Ahmadian et al. 2024, "Back to Basics",
arXiv 2402.14740) is the default: REINFORCE with a leave-one-out baseline over k samples per prompt,
which that paper finds matches or beats PPO for RLHF with a reward model, and which needs no value
model (half of PPO's memory, important on a CPU); its ``beta`` is the KL coefficient against the
starting model, as PPO's. GRPO (Shao et al. 2024, arXiv 2402.03300) is the other choice.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import ModelSpec
from ..engines.base import completion_stops, render_completion_prompt
from ..engines.transformers_engine import clear_quantization, resolve_hf_folder
from ..files import write_json
from ..flywheel_state import TrainSummary
from ..records import Prompt
from ..tasks.shortcuts import CHANCE_FLOOR, SurfaceChance
from .harvest import PreferenceItem, SFTItem
from .kinds import is_reward_model
from .settings import DPOSettings, RLSettings, RMSettings, SFTSettings, TrainSettings

if TYPE_CHECKING:
    from peft import LoraConfig
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback

    from ..config import PromptFormat

MODEL_DIR = "model"
WORK_DIR = "work"
LOSSES = "losses.json"
DONE_MARK = ".arena-train.json"  # hidden: not part of the model's content identity


class NoTrainingData(ValueError):
    """A stage was given no examples."""


@dataclass(frozen=True)
class RunOptions:
    """How a trainer runs: precision, device, and whether it is a launched process (one of several ranks).

    ``launched``: the model is saved through the trainer (which gathers ZeRO-3 shards from every
    rank) and LoRA is merged from that save on the main process; in-process training merges the
    trainer's model directly. Only the main process writes the stage's files.
    """

    mixed_precision: str = "no"  # no, bf16 or fp16
    cpu: bool = False
    launched: bool = False
    report_to: str = "none"  # training.report_to: none, tensorboard, wandb or mlflow (flywheel.tracking)
    run_name: str | None = None  # the tracked run's name: its round and stage


# ---- rendering records as the target is asked ----------------------------------------


def _fmt(spec: ModelSpec | None) -> PromptFormat | None:
    return spec.prompt_format if spec is not None and spec.mode == "completion" else None


def continuation_text(spec: ModelSpec, messages: Sequence[dict[str, str]]) -> str:
    """Return assistant (and later user) turns as the completion-mode text that follows a prompt."""
    fmt = spec.prompt_format
    parts = []
    for m in messages:
        if m["role"] == "assistant":
            parts.append(f" {m['content']}{fmt.assistant_suffix}")
        elif m["role"] == "user":
            parts.append(f"{fmt.user_prefix}{m['content']}{fmt.user_suffix}{fmt.assistant_prefix}")
    return "".join(parts)


def sft_training_rows(items: Sequence[SFTItem], spec: ModelSpec | None = None) -> list[dict[str, Any]]:
    """Return prompt-completion rows: one per assistant turn, the conversation before it as the prompt.

    Completion mode: text (``render_completion_prompt`` of the earlier turns, then `` answer`` and the
    format's assistant suffix). Chat mode (or no spec): conversational messages.
    """
    fmt = _fmt(spec)
    rows: list[dict[str, Any]] = []
    for it in items:
        msgs = it.messages
        for i, m in enumerate(msgs):
            if m["role"] != "assistant" or i == 0:
                continue
            before = msgs[:i]
            if fmt is not None:
                rows.append({"prompt": render_completion_prompt(fmt, before),
                             "completion": f" {m['content']}{fmt.assistant_suffix}"})
            else:
                rows.append({"prompt": list(before), "completion": [m]})
    return rows


def pair_training_rows(items: Sequence[PreferenceItem], spec: ModelSpec | None = None,
                       with_margin: bool = False) -> list[dict[str, Any]]:
    """Return preference rows (prompt, chosen, rejected[, margin]) in the form the target is asked in."""
    fmt = _fmt(spec)
    rows = []
    for it in items:
        if fmt is not None:
            row: dict[str, Any] = {"prompt": render_completion_prompt(fmt, it.prompt),
                                   "chosen": continuation_text(spec, it.chosen),  # type: ignore[arg-type]  # fmt set: spec too
                                   "rejected": continuation_text(spec, it.rejected)}  # type: ignore[arg-type]  # as above
        else:
            row = {"prompt": list(it.prompt), "chosen": list(it.chosen), "rejected": list(it.rejected)}
        if with_margin:
            row["margin"] = float(it.margin)
        rows.append(row)
    return rows


def rl_prompt_rows(prompts: Sequence[Prompt], spec: ModelSpec | None = None) -> list[dict[str, Any]]:
    """Return RL prompts (the first user turn of each) with their ids, for the reward function."""
    fmt = _fmt(spec)
    rows = []
    for p in prompts:
        user = [{"role": "user", "content": p.turns[0]}]
        rows.append({"prompt": render_completion_prompt(fmt, user) if fmt is not None else user, "prompt_id": p.id})
    return rows


def clean_completion(spec: ModelSpec | None, text: str) -> str:
    """Return ``text`` as the engine would have returned it: cut at the stop strings, stripped."""
    if spec is None:
        return text.strip()
    stops = list(spec.params.stop)
    if spec.mode == "completion":
        stops = completion_stops(spec.prompt_format, stops)
    cuts = [text.find(s) for s in stops if s and s in text]
    if cuts:
        text = text[: min(cuts)]
    return text.strip()


def verifier_reward(prompts: Sequence[Prompt], spec: ModelSpec | None = None, *,
                    chance_corrected: bool = False, chance_floor: float = CHANCE_FLOOR) -> Callable[..., list[float]]:
    """Return a TRL reward function: the task suite's checker score of each completion, scaled to 0-1.

    ``chance_corrected``: minus what the completion would earn without reading its question
    (``tasks.shortcuts.SurfaceChance`` over ``prompts``, from ``chance_floor`` on): -1 to 1, 0 on average
    for a constant or a positional answer on a balanced category, as for an empty one.
    """
    from ..tasks import check

    by_id = {p.id: p for p in prompts}
    chance = SurfaceChance(prompts, floor=chance_floor) if chance_corrected else None

    def reward(prompts: list, completions: list, prompt_id: list[str], **_: Any) -> list[float]:
        out = []
        for pid, comp in zip(prompt_id, completions):
            text = clean_completion(spec, comp if isinstance(comp, str) else comp[-1]["content"])
            score = check(by_id[pid], [text]) / 10.0
            out.append(score - chance.of(by_id[pid], text) if chance is not None else score)
        return out

    reward.__name__ = "verifier_above_chance" if chance_corrected else "verifier"
    return reward


# ---- the shared training road ---------------------------------------------------------


def stage_done(stage: str | Path) -> bool:
    """Return whether the stage folder holds a finished model."""
    return (Path(stage) / MODEL_DIR / DONE_MARK).is_file()


def last_checkpoint(work: Path) -> Path | None:
    """Return the newest complete checkpoint in ``work`` (partial ones, from a killed save, are removed)."""
    if not work.is_dir():
        return None
    found = []
    for d in work.iterdir():
        m = re.fullmatch(r"checkpoint-(\d+)", d.name)
        if m and d.is_dir():
            if (d / "trainer_state.json").is_file():
                found.append((int(m.group(1)), d))
            else:
                shutil.rmtree(d, ignore_errors=True)
    return max(found)[1] if found else None


def _common_args(s: TrainSettings, work: Path, n_rows: int, run: RunOptions | None = None) -> dict[str, Any]:
    import torch

    run = run or RunOptions()

    if s.threads:
        torch.set_num_threads(s.threads)
    return {
        "output_dir": str(work),
        "learning_rate": s.learning_rate,
        "num_train_epochs": s.epochs,
        "max_steps": s.max_steps,
        "per_device_train_batch_size": s.micro,
        # batch_size is examples per optimizer step whatever the number of processes (WORLD_SIZE, set by the launchers)
        "gradient_accumulation_steps": max(1, s.batch_size // (s.micro * int(os.environ.get("WORLD_SIZE", "1")))),
        "ddp_find_unused_parameters": False,  # LoRA and full fine-tuning use every trainable weight
        "lr_scheduler_type": s.lr_scheduler,
        "warmup_steps": s.warmup_ratio,
        "weight_decay": s.weight_decay,
        "logging_steps": s.logging_steps,
        "save_strategy": "steps",
        "save_steps": s.save_steps,
        "save_total_limit": 2,
        "seed": s.seed,
        "data_seed": s.seed,
        "bf16": run.mixed_precision == "bf16",
        "fp16": run.mixed_precision == "fp16",
        "activation_checkpointing": False,
        "report_to": run.report_to,
        **({"run_name": run.run_name} if run.run_name is not None else {}),
        "dataloader_num_workers": 0,
        "use_cpu": run.cpu or not torch.cuda.is_available(),
        "disable_tqdm": False,
    }


def _lora(s: TrainSettings, task: str = "CAUSAL_LM") -> LoraConfig | None:
    if s.lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=s.lora.r, lora_alpha=s.lora.alpha, lora_dropout=s.lora.dropout,
                      target_modules=s.lora.target_modules, task_type=task)


def _load_causal(base: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    return clear_quantization(model), tok


def _loss_logger(path: Path, kind: str) -> TrainerCallback:
    from transformers import TrainerCallback

    class LossLog(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                write_json(path, {"kind": kind, "done": False, "log": state.log_history})

    return LossLog()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _gathered_model(trainer: Any, tok: Any, stage: Path, kind: str) -> Any:
    """Return the trained model, LoRA merged, from a save through the trainer (None on ranks other than the main).

    Every rank must call this: the save gathers the weights that ZeRO-3 spreads over the ranks.
    """
    parts = stage / f".{MODEL_DIR}.parts"
    trainer.save_model(str(parts))
    trainer.accelerator.wait_for_everyone()
    if not trainer.is_world_process_zero():
        return None
    import torch

    if (parts / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM, AutoPeftModelForSequenceClassification

        if is_reward_model(kind):
            model = AutoPeftModelForSequenceClassification.from_pretrained(str(parts), num_labels=1,
                                                                           dtype=torch.float32)
        else:
            model = AutoPeftModelForCausalLM.from_pretrained(str(parts), dtype=torch.float32)
        model = model.merge_and_unload()
    else:
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

        cls = AutoModelForSequenceClassification if is_reward_model(kind) else AutoModelForCausalLM
        model = cls.from_pretrained(str(parts), dtype=torch.float32)
    if is_reward_model(kind):
        model.config.pad_token_id = tok.pad_token_id
    shutil.rmtree(parts, ignore_errors=True)
    return model


def _finish(trainer: Any, tok: Any, stage: Path, kind: str, n_rows: int, started: float,
            resumed: Path | None, train_out: Any, run: RunOptions | None = None) -> TrainSummary:
    """Merge LoRA, save the model folder atomically, write the losses; return the result."""
    final = stage / MODEL_DIR
    if run is not None and run.launched:
        model = _gathered_model(trainer, tok, stage, kind)
        if model is None:  # another rank: the main process writes the stage's files
            return TrainSummary(kind=kind, model_dir=final, examples=n_rows, steps=int(trainer.state.global_step))
    else:
        model = trainer.model
        if hasattr(model, "merge_and_unload"):
            model = model.merge_and_unload()
    model = clear_quantization(model)
    tmp = stage / f".{MODEL_DIR}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    steps = int(trainer.state.global_step)
    seconds = time.perf_counter() - started
    loss = getattr(train_out, "training_loss", None)
    runtime = (getattr(train_out, "metrics", None) or {}).get("train_runtime")
    ran = steps - (int(resumed.name.split("-")[1]) if resumed is not None else 0)
    result = TrainSummary(kind=kind, model_dir=final, examples=n_rows, steps=steps, seconds=round(seconds, 2),
                          train_loss=float(loss) if loss is not None else None,
                          s_per_step=(runtime / ran) if runtime and ran > 0 else None,
                          peak_rss_mb=round(_peak_rss_mb(), 1), resumed_from=str(resumed) if resumed else None,
                          log=list(trainer.state.log_history))
    (tmp / DONE_MARK).write_text(json.dumps(result.model_dump()))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_json(stage / LOSSES, {**result.model_dump(), "done": True, "log": result.log})
    return result


def done_result(stage: str | Path, kind: str) -> TrainSummary | None:
    """Return what the finished training in ``stage`` did (None when it holds no finished model)."""
    stage = Path(stage)
    if not stage_done(stage):
        return None
    summary = TrainSummary.model_validate_json((stage / MODEL_DIR / DONE_MARK).read_text())
    log = []
    with contextlib.suppress(OSError, ValueError):
        log = json.loads((stage / LOSSES).read_text()).get("log", [])
    # where the stage is now, and not resumed: nothing was trained in this run
    return summary.model_copy(update={"kind": kind, "model_dir": stage / MODEL_DIR, "resumed_from": None,
                                      "reused": True, "log": log})


@contextlib.contextmanager
def answer_tokens_only_on_cpu() -> Iterator[None]:
    """Within the block, TRL's fused LM head scores only the labelled positions on the CPU too.

    TRL 1.16's trainers (SFT, DPO, RLOO, GRPO, KTO) run the LM head through ``add_fused_lm_head``,
    which projects only the positions with a label (the answer tokens) on CUDA and XPU, but every
    position of the batch elsewhere: the shapes of a compiled graph would change with each batch on
    Neuron. On the CPU nothing is compiled, and the head is most of the work: Gemma 3's 262,144-token
    vocabulary makes it 640 x 262k multiply-adds a position, more than the 18 layers below it, and a
    zero-shot task row has 3-6 answer tokens among 20-40. The per-token log-probabilities of the
    labelled positions are the same either way (the same tiles, fewer rows); the loss and gradients
    agree to float rounding (``tests/test_flywheel_train.py``). Measured on 2 cores
    (``docs/results.md``): SFT steps about 3x faster. Hand-written because TRL has no
    setting for it; ``trl==1.16.0`` is pinned, and a TRL without the hook raises here, not later.
    """
    import trl.trainer.utils as trl_utils

    if not callable(getattr(trl_utils, "_use_triton", None)):
        raise RuntimeError("trl.trainer.utils._use_triton is gone from this TRL: the training is tested with the "
                           "version constraints.txt names (PIP_CONSTRAINT=constraints.txt pip install -e '.[train]')")
    scores_compact = trl_utils._use_triton

    def compact_here(device: Any) -> bool:
        return device.type == "cpu" or bool(scores_compact(device))

    trl_utils._use_triton = compact_here  # read at each forward, only to choose the compact layout there
    try:
        yield
    finally:
        trl_utils._use_triton = scores_compact


@contextlib.contextmanager
def tokenizers_fingerprinted_by_name() -> Iterator[None]:
    """Within the block, ``datasets`` fingerprints a ``map`` whose ``fn_kwargs`` hold a tokenizer by the tokenizer's
    class, name, size and chat template, not by pickling it whole.

    TRL's SFT, DPO and reward trainers tokenize their dataset with ``Dataset.map(..., fn_kwargs={"processing_class":
    tok})``, and ``datasets`` names every map's result by hashing its arguments: it pickles the tokenizer with its
    whole vocabulary (seconds for Gemma 3's 262,144 tokens, each time a trainer is built). The datasets
    here are built in memory (``Dataset.from_list``) and never read from or written to a cache, so the name is only
    a name; the tokenized rows are the same. Hand-written because neither ``datasets`` nor TRL lets a caller name
    a map's result through the trainer; ``datasets`` computes the name in two places (the ``map`` method and the
    transform decorator), both patched and put back after the block.
    """
    import datasets.arrow_dataset as arrow_dataset
    import datasets.fingerprint as fingerprint
    from transformers import PreTrainedTokenizerBase

    full = fingerprint.update_fingerprint
    if arrow_dataset.update_fingerprint is not full:
        raise RuntimeError("datasets.arrow_dataset.update_fingerprint is not datasets.fingerprint's: this datasets "
                           "is not one the training is tested with (PIP_CONSTRAINT=constraints.txt pip install -e "
                           "'.[train]' installs that one)")

    def named(tok: PreTrainedTokenizerBase) -> str:
        return f"{type(tok).__name__} {tok.name_or_path} {len(tok)} {tok.chat_template!r}"

    def light(fp: str, transform: Any, transform_args: dict[str, Any]) -> str:
        kw = transform_args.get("fn_kwargs")
        if isinstance(kw, dict) and any(isinstance(v, PreTrainedTokenizerBase) for v in kw.values()):
            kw = {k: named(v) if isinstance(v, PreTrainedTokenizerBase) else v for k, v in kw.items()}
            transform_args = {**transform_args, "fn_kwargs": kw}
        return full(fp, transform, transform_args)

    fingerprint.update_fingerprint = arrow_dataset.update_fingerprint = light
    try:
        yield
    finally:
        fingerprint.update_fingerprint = arrow_dataset.update_fingerprint = full


def _run(trainer: Any, tok: Any, stage: Path, kind: str, n_rows: int, started: float, retrain: bool,
         run: RunOptions | None = None) -> TrainSummary:
    work = stage / WORK_DIR
    resume = None if retrain else last_checkpoint(work)
    # Trainer logs print to stdout (tqdm.write); stdout is for results (--json), so send them to stderr.
    with contextlib.redirect_stdout(sys.stderr), answer_tokens_only_on_cpu():
        out = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    result = _finish(trainer, tok, stage, kind, n_rows, started, resume, out, run)
    if trainer.is_world_process_zero():
        shutil.rmtree(work, ignore_errors=True)  # the model is saved; checkpoints are no longer needed
    return result


def _prepare(stage: str | Path, base: str | Path, retrain: bool) -> tuple[Path, Path]:
    stage = Path(stage)
    stage.mkdir(parents=True, exist_ok=True)
    if retrain:
        shutil.rmtree(stage / WORK_DIR, ignore_errors=True)
    return stage, resolve_hf_folder(str(base))


# ---- the four trainers ----------------------------------------------------------------


def train_sft(base: str | Path, items: Sequence[SFTItem], stage: str | Path, settings: SFTSettings | None = None,
              *, spec: ModelSpec | None = None, retrain: bool = False, run: RunOptions | None = None) -> TrainSummary:
    """Fine-tune ``base`` on SFT examples (TRL SFTTrainer, loss on the answers); the model lands in STAGE/model."""
    s = settings or SFTSettings()
    stage_p = Path(stage)
    if not retrain and (done := done_result(stage_p, "sft")) is not None:
        return done
    rows = sft_training_rows(items, spec)
    if not rows:
        raise NoTrainingData("no SFT examples to train on")
    started = time.perf_counter()
    stage_p, base_p = _prepare(stage, base, retrain)
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model, tok = _load_causal(base_p)
    args = SFTConfig(**_common_args(s, stage_p / WORK_DIR, len(rows), run), max_length=s.max_length,
                     completion_only_loss=s.completion_only_loss, packing=False)
    with tokenizers_fingerprinted_by_name():
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                             peft_config=_lora(s), callbacks=[_loss_logger(stage_p / LOSSES, "sft")])
    return _run(trainer, tok, stage_p, "sft", len(rows), started, retrain, run)


def train_dpo(base: str | Path, items: Sequence[PreferenceItem], stage: str | Path,
              settings: DPOSettings | None = None, *, spec: ModelSpec | None = None,
              retrain: bool = False, run: RunOptions | None = None) -> TrainSummary:
    """DPO on preference pairs (TRL DPOTrainer; with LoRA the reference is the base with adapters off)."""
    s = settings or DPOSettings()
    stage_p = Path(stage)
    if not retrain and (done := done_result(stage_p, "dpo")) is not None:
        return done
    rows = pair_training_rows(items, spec)
    if not rows:
        raise NoTrainingData("no DPO pairs to train on")
    started = time.perf_counter()
    stage_p, base_p = _prepare(stage, base, retrain)
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    model, tok = _load_causal(base_p)
    extra: dict[str, Any] = {"beta": s.beta, "loss_type": s.loss_type, "label_smoothing": s.label_smoothing,
                             "max_length": s.max_length}
    if s.loss_weights is not None:
        extra["loss_weights"] = s.loss_weights
    if s.ld_alpha is not None:
        extra["ld_alpha"] = s.ld_alpha
    args = DPOConfig(**_common_args(s, stage_p / WORK_DIR, len(rows), run), **extra)
    with tokenizers_fingerprinted_by_name():
        trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                             peft_config=_lora(s), callbacks=[_loss_logger(stage_p / LOSSES, "dpo")])
    return _run(trainer, tok, stage_p, "dpo", len(rows), started, retrain, run)


def train_reward(base: str | Path, items: Sequence[PreferenceItem], stage: str | Path,
                 settings: RMSettings | None = None, *, spec: ModelSpec | None = None,
                 retrain: bool = False, run: RunOptions | None = None) -> TrainSummary:
    """A reward model (sequence classifier, one score) on preference pairs (TRL RewardTrainer, with margins)."""
    s = settings or RMSettings()
    stage_p = Path(stage)
    if not retrain and (done := done_result(stage_p, "rm")) is not None:
        return done
    rows = pair_training_rows(items, spec, with_margin=s.use_margin)
    if not rows:
        raise NoTrainingData("no reward-model pairs to train on")
    started = time.perf_counter()
    stage_p, base_p = _prepare(stage, base, retrain)
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    tok = AutoTokenizer.from_pretrained(str(base_p))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(str(base_p), num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tok.pad_token_id
    clear_quantization(model)
    args = RewardConfig(**_common_args(s, stage_p / WORK_DIR, len(rows), run), max_length=s.max_length)
    with tokenizers_fingerprinted_by_name():
        trainer = RewardTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                                peft_config=_lora(s, "SEQ_CLS"), callbacks=[_loss_logger(stage_p / LOSSES, "rm")])
    return _run(trainer, tok, stage_p, "rm", len(rows), started, retrain, run)


def train_rl(base: str | Path, prompts: Sequence[Prompt], stage: str | Path, settings: RLSettings | None = None,
             *, spec: ModelSpec | None = None, reward_model: str | Path | None = None,
             retrain: bool = False, run: RunOptions | None = None) -> TrainSummary:
    """The RL stage: RLOO (or GRPO) on ``prompts``, rewarded by ``reward_model`` or the task verifier.

    ``settings.reward``: ``model`` needs ``reward_model`` (a folder from ``train_reward``);
    ``verifier`` scores completions with the task suite's checkers (prompts need references).
    """
    s = settings or RLSettings()
    stage_p = Path(stage)
    if not retrain and (done := done_result(stage_p, s.algorithm)) is not None:
        return done
    rows = rl_prompt_rows(prompts, spec)
    if not rows:
        raise NoTrainingData("no RL prompts to train on")
    if s.reward == "model":
        if reward_model is None:
            raise ValueError("RL with reward: model needs a reward model folder (train one with train_reward)")
        reward: Any = str(Path(reward_model))
    else:
        reward = verifier_reward(prompts, spec, chance_corrected=s.chance_corrected, chance_floor=s.chance_floor)
    started = time.perf_counter()
    stage_p, base_p = _prepare(stage, base, retrain)
    import trl
    from datasets import Dataset

    # RLOO and GRPO take the same arguments here: one code path for both, typed loosely
    trainers = {"rloo": (trl.RLOOConfig, trl.RLOOTrainer), "grpo": (trl.GRPOConfig, trl.GRPOTrainer)}
    Config, Trainer = trainers[s.algorithm]
    model, tok = _load_causal(base_p)
    tok.padding_side = "left"
    common = _common_args(s, stage_p / WORK_DIR, len(rows), run)
    # Every micro-batch holds whole groups of samples of one prompt.
    micro = max(s.num_generations, (s.micro // s.num_generations) * s.num_generations)
    common["per_device_train_batch_size"] = micro
    args = Config(**common, num_generations=s.num_generations, max_completion_length=s.max_completion_length,
                  temperature=s.temperature, beta=s.beta)
    trainer = Trainer(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
                      processing_class=tok, peft_config=_lora(s),
                      callbacks=[_loss_logger(stage_p / LOSSES, s.algorithm)])
    return _run(trainer, tok, stage_p, s.algorithm, len(rows), started, retrain, run)
