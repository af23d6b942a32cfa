"""The plan of a flywheel run, per round and stage: answer and judge calls, what is cached, tokens, cost, training.

It walks the rounds as ``rounds.Flywheel.run`` does: a stage's current model and the references answer
the stage's slice (sft: the target schedule, the current model against each reference; dpo and an
rl stage with a reward model: the round robin), the stage trains a new model (and its ablation
variants), and after each stage (``evaluate: stages``) or round every model rated so far answers the
test set and all of them are judged in a round robin. A model the flywheel already had answer a set
is not asked again; a model trained in the run has nothing in the ledger. Training lines give upper
bounds: at most one example (or pair) per slice prompt, plus earlier rounds' harvests with replay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from .. import pipeline
from ..config import ModelSpec
from ..plan import Known, LedgerView, Plan, PlanLine, plan_answers, plan_battles
from ..records import Prompt
from ..store import Store
from .rounds import slice_prompts, slice_set, stage_folder, stage_key
from .settings import FlywheelConfig, TrainSettings
from .train import MODEL_DIR, stage_done


def _steps(settings: TrainSettings, rows: int) -> int:
    if settings.max_steps > 0:
        return settings.max_steps
    return math.ceil(rows / settings.batch_size * settings.epochs)


class _Walk:
    """The flywheel's calls, stage by stage, counted into a Plan."""

    def __init__(self, cfg: FlywheelConfig, store: Store | None):
        self.cfg = cfg
        self.store = store
        self.ledger = LedgerView(store)
        self.plan = Plan(kind="flywheel")
        self.known: dict[str, Known] = {}
        self.answered: set[tuple[str, str]] = set()  # (model identity, set): Flywheel.arena skips these
        self.trained: set[str] = set()  # names of models the run trains

    def answer_and_battle(self, models: Sequence[ModelSpec], prompts: list[Prompt], set_name: str, stage: str,
                          schedule: Literal["all", "target"] = "all", target: str | None = None) -> None:
        known = self.known.setdefault(set_name, Known())
        for spec in models:
            ident = (spec.model_dump_json(exclude={"name"}), set_name)
            if not spec.engine_kind.makes_calls or ident in self.answered:
                continue
            self.answered.add(ident)
            self.plan.lines.append(plan_answers(spec, prompts, self.ledger, stage, known, self.store, set_name,
                                                fresh=spec.name in self.trained))
        rc = self.cfg.arena_config(models, schedule, target, rating=set_name == pipeline.TEST_SET)
        self.plan.lines.extend(plan_battles(rc, prompts, known, self.ledger, stage))

    def train(self, stage: str, kind: str, model: str, rows: int, slice_name: str, folder: Path | None) -> None:
        if folder is not None and stage_done(folder):
            self.plan.lines.append(PlanLine(stage=stage, step="train", model=model,
                                            note=f"done in an earlier run ({folder / MODEL_DIR}): not trained again"))
            return
        s = self.cfg.training
        settings = {"sft": s.sft, "dpo": s.dpo, "rm": s.rm, "rl": s.rl}[kind]
        launch = s.launch
        how = launch.launcher if launch.launcher == "inprocess" else \
            f"{launch.launcher}, {launch.num_processes} processes"
        what = {"sft": "examples", "dpo": "pairs", "rm": "pairs", "rl": "prompts"}[kind]
        note = f"{kind} on <= {rows} {what} (slice {slice_name}), <= {_steps(settings, rows)} optimizer steps ({how})"
        if kind == "rl":
            note += f"; {s.rl.num_generations} completions sampled per prompt inside the trainer (no ledger calls)"
        self.plan.lines.append(PlanLine(stage=stage, step="train", model=model, note=note))

    def stage_model(self, name: str, root: Path | None, r: int, i: int, kind: str,
                    variant: str | None = None) -> ModelSpec:
        """Return the model a stage makes; one not trained yet is fresh (nothing of it in the ledger)."""
        where = stage_folder(root if root is not None else Path("flywheel"), r, i, kind, variant)
        if root is None or not stage_done(where):
            self.trained.add(name)
        return self.cfg.target.model_copy(update={"name": name, "model": str(where / MODEL_DIR)})

    def run(self) -> Plan:
        cfg = self.cfg
        refs = list(cfg.references)
        test = pipeline.make_test_set(cfg.arena_config([cfg.target, *refs]), self.store)
        slices = {name: prompts for name, (prompts, _) in slice_prompts(cfg, test, self.store).items()}
        current = cfg.target.model_copy(update={"name": f"{cfg.target.name}-base"})
        rated = [current] if cfg.evaluate_base else []
        harvested: dict[str, int] = {}  # kind -> rows harvested so far (replay)
        root = self.store.root / "flywheel" if self.store is not None else None
        for r, rnd in enumerate(cfg.rounds):
            for i, st in enumerate(rnd.stages):
                key = stage_key(r, i, st.kind)
                label = f"{key} ({st.slice})"
                prompts = slices[st.slice]
                data_kind = {"sft": "sft", "dpo": "dpo", "rl": "rm"}[st.kind]
                need_pairs = st.kind != "rl" or cfg.training.rl.reward == "model"
                if need_pairs:
                    schedule = ("target", current.name) if st.kind == "sft" else ("all", None)
                    samples = cfg.harvest.samples.variants(current) if cfg.harvest.samples is not None else []
                    if current.name in self.trained:  # a fresh model's samples are fresh too
                        self.trained |= {m.name for m in samples}
                    self.answer_and_battle([current, *refs, *samples], prompts, slice_set(st.slice), label,
                                           *schedule)
                rows = len(prompts) + (harvested.get(data_kind, 0) if cfg.harvest.replay and need_pairs else 0)
                same = [s for s in rnd.stages if s.kind == st.kind]
                tag = f"r{r}-{st.kind}" if len(same) == 1 else f"r{r}.{i}-{st.kind}"
                new = self.stage_model(f"{cfg.target.name}-{tag}", root, r, i, st.kind)
                folder = stage_folder(root, r, i, st.kind) if root is not None else None
                if st.kind == "rl" and cfg.training.rl.reward == "model":
                    self.train(label, "rm", f"{new.name} (reward model)", rows, st.slice,
                               folder / "rm" if folder is not None else None)
                self.train(label, st.kind, new.name, len(prompts) if st.kind == "rl" else rows, st.slice, folder)
                variants = []
                if st.kind in ("sft", "dpo"):
                    for b in cfg.harvest.baselines:
                        v = self.stage_model(f"{new.name}-{b}", root, r, i, st.kind, b)
                        self.train(f"{stage_key(r, i, st.kind, b)} ({st.slice})", st.kind, v.name, rows, st.slice,
                                   stage_folder(root, r, i, st.kind, b) if root is not None else None)
                        variants.append(v)
                for name in st.sweep:  # the same data and start, other settings
                    v = self.stage_model(f"{new.name}-{name}", root, r, i, st.kind, name)
                    vfolder = stage_folder(root, r, i, st.kind, name) if root is not None else None
                    # (an rl variant uses the main stage's reward model: no training of its own)
                    self.train(f"{stage_key(r, i, st.kind, name)} ({st.slice})", st.kind, v.name,
                               len(prompts) if st.kind == "rl" else rows, st.slice, vfolder)
                    variants.append(v)
                if need_pairs:
                    harvested[data_kind] = harvested.get(data_kind, 0) + len(prompts)
                current = new
                rated += [new, *variants]
                if cfg.evaluate == "stages" or i == len(rnd.stages) - 1:
                    self.answer_and_battle([*refs, *rated], test, pipeline.TEST_SET, f"evaluate after {key}")
        turns = sum(len(p.turns) for p in test)
        self.plan.notes.append(f"test set: {len(test)} prompts ({turns} user turns); slices: "
                               + ", ".join(f"{n} {len(p)}" for n, p in slices.items()))
        if cfg.harvest.samples is not None:
            s = cfg.harvest.samples
            self.plan.notes.append(f"harvest.samples: the target answers each slice {s.k} more times (temperature "
                                   f"{s.temperature}, seeds {s.seed}..{s.seed + s.k - 1}): {s.k} x its answering "
                                   f"cost, and its samples battle like references")
        self.plan.notes.append("answers of models trained in the run are not known yet: the judge calls on them "
                               "are counted as new, and as cached when the same games are judged again")
        return self.plan


def plan_flywheel(cfg: FlywheelConfig, store: Store | None) -> Plan:
    """Return the plan of ``arena flywheel`` for ``cfg``, per round and stage (``store``: its workspace, if any)."""
    return _Walk(cfg, store).run()
