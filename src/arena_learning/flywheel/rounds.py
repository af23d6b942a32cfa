"""Rounds: the flywheel run, stage by stage, with its state kept in the workspace.

WizardArena's loop: each round, on a fresh slice, the current target battles the references;
battles become training data (SFT: what it lost; DPO / reward-model pairs: most vs fewest wins);
the target is trained (SFT -> DPO -> RL, each stage on its own slice, or fewer stages); the new
model answers the test set and is rated with every earlier model and the references; the next
round starts from it.

Layout of the workspace (besides ``arena.db``, which holds the slices as prompt sets
``flywheel/<slice>``, their answers, judgments and battles under the same set names, the test set
as ``test``, and the ledger)::

    flywheel/state.json                    the records of ``flywheel_state``: stages done, their data counts,
                                           losses and times; evaluations; the last round table
    flywheel/round-R/I-KIND/               one stage: harvested data (sft.jsonl, dpo.jsonl, rm.jsonl),
                                           model/ (the trained model), losses.json, work/ (checkpoints)
    flywheel/round-R/I-KIND-BASELINE/      an ablation variant of the stage (--baselines)
    flywheel/round-R/I-KIND-NAME/          a sweep variant of the stage (its ``sweep``: other settings)

Resume: a stage whose model is saved is never redone (unless its inputs in the config changed: a
stage's fingerprint covers its spec, slice, settings, the models and the stage before it); a stage
whose data was harvested goes straight to training; training resumes from its last checkpoint.
Answers and verdicts come from the ledger, so nothing that succeeded is asked twice.

Answers with no text (the engines count an empty completion as a failed call) enter the
flywheel's battles as empty answers, which the judge scores as such: a model that says nothing on
a prompt loses it, rather than the prompt silently leaving its battles.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from .. import pipeline
from ..arena.canaries import judge_risk_error
from ..config import ModelSpec
from ..engines import speed
from ..engines.gguf_export import export_current, export_gguf
from ..engines.transformers_engine import release_models, resolve_hf_folder
from ..errors import ArenaError
from ..flywheel_state import (
    STATE_FILE,
    Evaluation,
    FlywheelState,
    SliceRecord,
    StageRecord,
    TrainSummary,
    load_state,
    save_state,
)
from ..rating.bt import RateOptions
from ..rating.gaps import group_gaps
from ..records import Prompt, Rating
from ..scale.launch import LaunchError, check_launchable, launch_command, run_launch
from ..store import Store
from . import train as training
from .aim import aim, group_by, moved
from .evidence import Evidence
from .export import export_items, read_items
from .fingerprint import stage_fingerprint
from .harvest import (
    RipFilter,
    SFTItem,
    balance_items,
    own_right_sft,
    per_model_counts,
    select_pairs,
    select_sft,
    with_own_right,
)
from .kinds import REWARD_MODEL, train_kind
from .round_table import FlywheelReport, build_report, evidence_of
from .schedule import Evaluate, StageStep, base_model, schedule
from .serving import (
    SERVED_GGUF,
    answering_as,
    base_export_path,
    export_key,
    model_identity,
    served_spec,
    template_gguf,
    yield_key,
)
from .settings import BASELINES, FlywheelConfig, SFTSettings, first_stage_on
from .slices import slice_prompts, slice_set
from .tracking import TRACKING_DIR, check_tracker, log_rounds, tracking
from .train_stage import JOB_FILE, StageJob, write_job, write_prompts

TEST_SET = pipeline.TEST_SET
LAUNCH_LOG = "launch.log"


# ---- the run ---------------------------------------------------------------------------------


class Flywheel:
    """Runs a FlywheelConfig in a workspace, resuming whatever an earlier run left."""

    def __init__(self, cfg: FlywheelConfig, store: Store, *, show_progress: bool = True,
                 baselines: Sequence[str] | None = None, say: Callable[[str], None] | None = None,
                 accept_judge_risk: bool = False):
        self.cfg = cfg
        self.accept_judge_risk = accept_judge_risk  # harvest even from a judge that failed its canaries
        self.store = store
        self.show_progress = show_progress
        self.say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.root = store.root / "flywheel"
        self.root.mkdir(parents=True, exist_ok=True)
        self.state: FlywheelState = load_state(self.root / STATE_FILE)
        self.baselines = list(cfg.harvest.baselines if baselines is None else baselines)
        if baselines is None:
            # A plain rerun keeps the ablations this workspace trained (`--baselines` once) in its table: rating
            # without them would drop their battles from the test set. `--baselines` chooses exactly ('': none).
            trained = {rec.ablation for rec in self.state.stages.values() if rec.status == "done"}
            self.baselines += [b for b in BASELINES if b in trained and b not in self.baselines]
        self.refs = list(cfg.references)
        self._slices: dict[str, list[Prompt]] = {}
        self._candidates: dict[str, list[Prompt]] = {}  # aimed slices: what they are drawn from
        self._sizes: dict[str, int] = {}
        self._test: list[Prompt] | None = None
        self.started_from: dict[str, str] = {}  # stage key -> the model it trained from (for its paired delta)
        self.worked = False  # whether this run answered for, harvested or trained a stage
        # serve_as llamacpp: a trained (or the base) model's ``model`` -> where its GGUF export goes, and the
        # served specs made so far
        self._gguf_at: dict[str, Path] = {}
        self._served: dict[str, ModelSpec] = {}

    def _save_state(self) -> None:
        save_state(self.state, self.root / STATE_FILE)

    # ---- sets ---------------------------------------------------------------------------
    def test_prompts(self) -> list[Prompt]:
        if self._test is None:
            self._test = pipeline.stage_prompts(self.cfg.arena_config([self.cfg.target, *self.refs]), self.store)
        return self._test

    def make_slices(self) -> None:
        """Make every slice in pool order (disjoint, decontaminated) and store it as a prompt set."""
        near: dict[str, Counter[str]] = {}
        made = slice_prompts(self.cfg, self.test_prompts(), self.store, near, self._candidates)
        for name, (prompts, dropped) in made.items():
            drawn = self.state.slices[name].allocation if name in self.state.slices else None
            self._sizes[name] = len(prompts)
            if name in self._candidates and drawn is not None:
                prompts = self.store.get_prompts(slice_set(name))  # drawn before: a resume draws nothing again
            elif name not in self._candidates:  # an aimed slice is stored when it is drawn (Flywheel.aim)
                self.store.put_prompts(slice_set(name), prompts)
            self._slices[name] = prompts
            self.state.slices[name] = SliceRecord(prompts=len(prompts), dropped_as_test=dropped,
                                                  dropped_near_test=dict(near.get(name, {})), allocation=drawn)
            if near.get(name):
                self.say(f"[flywheel] slice {name}: {sum(near[name].values())} prompts dropped as near-copies of "
                         f"test prompts ({self.state.slices[name].near_line()}); they are never answered, harvested "
                         "or trained on")
        self._save_state()

    # ---- answering and judging -------------------------------------------------------------
    def arena(self, models: Sequence[ModelSpec], prompts: list[Prompt], set_name: str,
              schedule: Literal["all", "target"] = "all", target: str | None = None, *,
              rate: bool = False) -> pipeline.RunResult:
        """Run the arena's stages (``pipeline.run_stages``) for ``models`` on ``prompts``, stored under ``set_name``.

        A model whose identity (spec and weights' content) already answered every prompt of the set in
        an earlier step is not asked again: its empty answers (failed calls) would be re-sent otherwise.
        A prompt a model gave no answer to gets an empty one, which loses its battles.
        """
        models = [self.served(m) for m in models]
        answered = self.state.answered.setdefault(set_name, {})
        ids = [p.id for p in prompts]
        idents = {spec.name: model_identity(spec) for spec in models}
        skip = set()
        for spec in models:
            have = {a.prompt_id for a in self.store.get_answers(spec.name, set_name)}
            if answered.get(spec.name) == idents[spec.name] and all(i in have for i in ids):
                skip.add(spec.name)

        def keep(report: pipeline.AnswerReport) -> None:
            if report.stats:
                answered.update({name: idents[name] for name in report.stats})
                self._save_state()

        rc = self.cfg.arena_config(models, schedule, target, rating=set_name == TEST_SET)
        return pipeline.run_stages(rc, self.store, prompts,
                                   set_name=set_name, show_progress=self.show_progress, rate=rate, skip=skip,
                                   fill_empty=True, on_answers=keep)

    def evaluate(self, label: str, models: Sequence[ModelSpec]) -> list[Rating]:
        """Every rated model (``models``: the references and every model rated so far) answers the test set; battles
        among all of them; ratings with CIs."""
        self.say(f"[flywheel] rating {len(models)} models on the test set ({label})")
        started = time.perf_counter()
        ratings = self.arena(models, self.test_prompts(), TEST_SET, rate=True).ratings or []
        release_models()
        entry = Evaluation(after=label, seconds=round(time.perf_counter() - started, 1), ratings=ratings)
        old = [e for e in self.state.evaluations if e.after == label]
        if not (old and old[0].ratings == entry.ratings):  # a rerun that changes nothing keeps its timing
            self.state.evaluations = [*(e for e in self.state.evaluations if e.after != label), entry]
        self._save_state()
        return ratings

    def served(self, spec: ModelSpec) -> ModelSpec:
        """Return the spec that answers for ``spec``: itself, or (``training.serve_as: llamacpp``, a model of the
        target's lineage) its GGUF export through llama.cpp, exported on first use."""
        t = self.cfg.training
        if t.serve_as == "transformers" or spec.engine != "transformers" or spec.model not in self._gguf_at:
            return spec
        if spec.model not in self._served:
            out, folder = self._gguf_at[spec.model], resolve_hf_folder(spec.model)
            template = self.template_gguf()
            # A finished export (its marker names this folder's content) is reused, on resume too; say which, so
            # a resumed run's log never reads as if the file were written again.
            if export_current(folder, out, template_gguf=template, quantize=t.serve_quantize):
                self.say(f"[flywheel] {spec.name}: serving through llama.cpp from its GGUF export at {out} "
                         f"(made before; reused)")
            else:
                self.say(f"[flywheel] {spec.name}: serving through llama.cpp; exporting {spec.model} to GGUF "
                         f"({t.serve_quantize}) at {out}")
            t0 = time.perf_counter()
            made = not export_current(folder, out, template_gguf=template, quantize=t.serve_quantize)
            path = export_gguf(folder, out, template_gguf=template, quantize=t.serve_quantize,
                               threads=spec.n_threads)
            if made:  # how long an export takes here (arena plan's minutes)
                speed.record_export(export_key(self.cfg), time.perf_counter() - t0)
            self._served[spec.model] = served_spec(spec, path)
        return answering_as(self._served[spec.model], spec)

    def template_gguf(self) -> Path | None:
        """Return the GGUF the target starts from (a registry name or a .gguf path), whose metadata and tokenizer
        every export of its lineage copies; None (the bundled model) for a target given as a folder."""
        return template_gguf(self.cfg)

    def serve_from(self, spec: ModelSpec, gguf: Path | None) -> None:
        """Mark ``spec`` as the target's (its answers go through ``served``), its GGUF export at ``gguf``
        (None: in the arena cache, by the folder's content: the base model)."""
        if gguf is None:
            folder = resolve_hf_folder(spec.model) if self.cfg.training.serve_as == "llamacpp" else None
            if folder is None:
                return
            gguf = base_export_path(self.cfg, folder)
        self._gguf_at[spec.model] = gguf

    # ---- stages ------------------------------------------------------------------------------
    def run_stage(self, step: StageStep) -> StageRecord:
        """Run one stage (or its ablation variant: a selection baseline, or a variant of the stage's sweep) from
        ``step.start``: harvest, then train. Set ``step.made`` (it made its model), its fingerprint and examples."""
        rec = self._run_stage(step)
        step.made, step.fingerprint, step.examples = rec.status == "done", rec.fingerprint, rec.examples
        return rec

    def _run_stage(self, step: StageStep) -> StageRecord:
        current, folder, key, variant = step.start, step.folder, step.key, step.variant
        self.started_from[key] = current.name
        fp = stage_fingerprint(self.cfg, step, step.follows.fingerprint if step.follows is not None else "base")
        rec = self.state.stages.get(key)
        if rec is not None and rec.fingerprint != fp:
            self.say(f"[flywheel] {key}: its inputs changed since the last run; redoing it")
            shutil.rmtree(folder, ignore_errors=True)
            rec = None
        if rec is None:
            rec = StageRecord(key=key, round=step.round, stage=step.index, kind=step.spec.kind, slice=step.slice,
                              selection=step.selection, ablation=variant, sweep=step.changes, model=step.model.name,
                              fingerprint=fp)
            self.state.stages[key] = rec
        self.serve_from(step.model, folder / SERVED_GGUF)
        if rec.status == "done" and training.stage_done(folder):
            self.say(f"[flywheel] {key}: done in an earlier run ({rec.examples} examples); skipped")
            return rec
        if rec.status == "skipped":
            return rec
        folder.mkdir(parents=True, exist_ok=True)
        self.worked = True
        self.say(f"[flywheel] round {step.round} stage {step.index}: {step.spec.kind} on slice {step.slice} from "
                 f"{current.name}" + (f" (sweep {variant}: {rec.sweep})" if rec.sweep is not None else
                                      f" (ablation: {variant})" if variant else ""))
        # a selection baseline (but all) is cut to the size of its stage's harvest
        main = step.main
        size = main.examples if main is not None and step.baseline and variant != "all" else None
        if variant is None:
            self.aim(step)
        items = self.harvest_step(rec, step, size)
        return self.train_step(rec, step, items)

    def aim(self, step: StageStep) -> None:
        """Draw the aimed slice of ``step`` (``allocate: weakness`` or ``learnable``; ``flywheel.aim``) and store it,
        unless it was drawn on the same basis before: only the first stage on the slice draws it, before its first
        answer."""
        name = step.slice
        if name not in self._candidates or first_stage_on(self.cfg, name) != (step.round, step.index):
            return
        basis = step.follows.fingerprint if step.follows is not None else "base"
        rec = self.state.slices[name]
        if rec.allocation is not None and rec.allocation.basis == basis:
            return
        model = step.start.name
        gaps, why = None, ""
        movement, before = None, None
        refs = {m.name for m in self.refs}
        every = self.store.get_battles(self.cfg.rating_judge.name, TEST_SET)
        battles = [b for b in every if {b.model_a, b.model_b} <= refs | {model}]
        if not any(model in (b.model_a, b.model_b) for b in battles):
            why = f"{model} has no battles on the test set yet (no evaluation before this stage)"
        else:
            by = group_by(self._candidates[name])
            test = self.test_prompts()
            try:
                options = RateOptions(**self.cfg.ratings.model_dump())
                gaps = group_gaps(battles, test, by, model, options, bootstrap=max(options.bootstrap, 100),
                                  labels=pipeline.group_labels(test, by))
            except ArenaError as err:
                why = str(err)
            if step.spec.allocate == "learnable" and step.follows is not None:
                # how the training that made the start moved it: against the model that training started from
                before = step.follows.start.name
                movement = moved(every, test, by, model, before, sorted(refs))
        prompts, alloc = aim(self._candidates[name], self._sizes[name], gaps, model=model, basis=basis,
                             stage=step.key, rule=step.spec.allocate, why_none=why, movement=movement,
                             before=before)
        self.store.put_prompts(slice_set(name), prompts)
        self._slices[name] = prompts
        rec.prompts, rec.allocation = len(prompts), alloc
        self._save_state()
        self.say(f"[flywheel] slice {name} aimed at {model}'s gaps ({alloc.why}): {alloc.line()}")

    def harvest_step(self, rec: StageRecord, step: StageStep, size: int | None) -> list[Any]:
        """Return the stage's training data: its harvest (made now from the slice's battles, or read back), replay.
        A sweep variant trains on its stage's harvest."""
        data_file = step.folder / step.kind.data.file
        items: list[Any] = []
        if step.harvests:
            if step.data_from is not None:
                main = step.data_from.folder / step.kind.data.file
                items = read_items(main) if main.is_file() else []
                rec.harvested, rec.by_model = True, per_model_counts(items)
            elif rec.harvested and data_file.is_file():
                items = read_items(data_file)
            else:
                items = self._harvest(rec, step, data_file, size)
        rec.examples = len(items)
        if self.cfg.harvest.replay and step.harvests:
            items = self._replayed(rec.round, rec.kind, data_file.name) + list(items)
            rec.trained_on = len(items)
        return items

    def _harvest(self, rec: StageRecord, step: StageStep, data_file: Path, size: int | None) -> list[Any]:
        """Battle the stage's start against the references on its slice; select, export and return the data."""
        h = self.cfg.harvest
        kind, current = step.kind, step.start
        rip = RipFilter(**h.rip.model_dump()) if h.rip is not None else None
        t0 = time.perf_counter()
        prompts = self._slices[step.slice]
        models = step.answerers
        teachers = [m.name for m in models[1:]]
        names = {m.name for m in models}
        result = self.arena(models, prompts, slice_set(step.slice), *step.battles())
        answers = [a for a in self.store.get_answers(set_name=slice_set(step.slice)) if a.model in names]
        battles = result.battles.battles
        risk = None if self.accept_judge_risk else judge_risk_error(self.store, self.cfg.judge.name)
        if risk is not None:
            raise ArenaError(f"{rec.key}: {risk}")
        rec.seconds.answer_battle = round(time.perf_counter() - t0, 1)
        t1 = time.perf_counter()
        if kind.data.pairs:
            items: list[Any] = select_pairs(kind.selection(rec.selection), prompts, answers, battles,
                                            models=[m.name for m in models], k=kind.k(h), rip=rip, seed=h.seed,
                                            slice_name=step.slice, round_index=rec.round, size=size)
        else:
            items = select_sft(rec.selection, prompts, answers, battles, target=current.name, references=teachers,
                               threshold=h.sft_threshold, min_score=h.sft_min_score, seed=h.seed,
                               slice_name=step.slice, round_index=rec.round, size=size)
        right: list[SFTItem] = []  # the target's own right answers: SFT data (own_right) or fillers (balance_fill)
        if (not kind.data.pairs and rec.selection == "pair_judge" and h.sft_min_score is not None
                and (h.own_right or h.balance_fill)):
            right = own_right_sft(prompts, answers, battles, target=current.name, min_score=h.sft_min_score,
                                  slice_name=step.slice, round_index=rec.round,
                                  selection="own_right" if h.own_right else "balance_fill")
            if h.own_right:
                items = with_own_right(items, right)
        if h.balance:
            fill = right if h.balance_fill else []
            items = balance_items(items, prompts, seed=h.seed, fill=fill)
        release_models()
        speed.record_yield(yield_key(self.cfg, step.spec.kind, rec.selection, size), len(items), len(prompts))
        export_items(items, data_file, kind=kind.data.export)
        rec.seconds.harvest = round(time.perf_counter() - t1, 2)
        rec.harvested = True
        rec.by_model = per_model_counts(items)
        self._save_state()
        return items

    def train_step(self, rec: StageRecord, step: StageStep, items: list[Any]) -> StageRecord:
        """Train the stage's model on ``items`` (a stage trained on prompts: on the slice's); mark it done, or
        skipped where there is nothing to train on."""
        t2 = time.perf_counter()
        s = self.cfg.training
        kind, current, folder = step.training, step.start, step.folder
        try:
            if kind.on_prompts:
                reward_model = None
                if step.kind.reward_model(s):
                    # a sweep variant changes the RL settings only: the main stage's reward model serves it too
                    home = step.data_from.folder if step.data_from is not None else folder
                    rm = self.train_one(REWARD_MODEL.name, current.model, home / "rm", items=items)
                    rec.rm = rm
                    self._record_training(REWARD_MODEL.name, rm, None)
                    reward_model = rm.model_dir
                res = self.train_one(kind.name, current.model, folder, prompts=self._slices[step.slice],
                                     reward_model=reward_model, changes=rec.sweep)
            else:
                start, settings = current.model, s.settings(kind.name, rec.sweep)
                if isinstance(settings, SFTSettings) and settings.start == "base":
                    start = self.cfg.target.model  # ReST-EM: the untrained target, on every round's data so far
                    self.say(f"[flywheel] {rec.key}: training the untrained target ({start}) on {len(items)} "
                             f"examples (training.sft.start: base); {current.name} made the data")
                res = self.train_one(kind.name, start, folder, items=items, changes=rec.sweep)
        except training.NoTrainingData as err:
            self.say(f"[flywheel] {rec.key}: {err}; the stage is skipped and the model stays {current.name}")
            rec.status = "skipped"
            self._save_state()
            return rec
        rec.seconds.train = round(time.perf_counter() - t2, 1)
        rec.train = res
        self._record_training(kind.name, res, rec.sweep)
        rec.train_loss = res.train_loss
        rec.status = "done"
        self._save_state()
        self.say(f"[flywheel] {rec.key}: {len(items)} examples, {res.steps} steps, loss {res.train_loss}, "
                 f"{res.seconds:.0f} s" + (f" (resumed from {res.resumed_from})" if res.resumed_from else ""))
        return rec

    def _record_training(self, kind: str, res: TrainSummary, changes: dict[str, Any] | None) -> None:
        """Add a training run that ran whole here to the machine's record (``arena plan``'s minutes)."""
        summary = res
        if summary.resumed_from is None and summary.steps > 0:
            key = speed.training_key(self.cfg.target.model, kind, self.cfg.training.settings(kind, changes),
                                     self.cfg.training.launch)
            speed.record_training(key, summary.steps, summary.seconds, summary.s_per_step)

    def train_one(self, kind: str, base: str, folder: Path, *, items: Sequence[Any] = (),
                  prompts: Sequence[Prompt] = (), reward_model: Path | None = None,
                  changes: dict[str, Any] | None = None) -> TrainSummary:
        """Train ``kind`` (a training kind: sft, dpo, rm or rl) from ``base`` into ``folder``, in process or launched
        (``launch``), with a sweep variant's ``changes`` to ``training.KIND``."""
        tk = train_kind(kind)
        settings: Any = self.cfg.training.settings(kind, changes)
        launch = self.cfg.training.launch
        spec = self.cfg.target
        report_to = self.cfg.training.report_to
        check_tracker(report_to)
        tracked = self.store.root / TRACKING_DIR
        run_name = folder.resolve().relative_to(self.root.resolve()).as_posix() \
            if folder.resolve().is_relative_to(self.root.resolve()) else folder.name  # round-0/0-sft
        if launch.launcher == "inprocess":
            trainer: Callable[..., TrainSummary] = tk.trainer_fn()
            run = training.RunOptions(report_to=report_to, run_name=run_name)
            with tracking(report_to, tracked, run_name, self.cfg.name):
                if tk.on_prompts:
                    return trainer(base, prompts, folder, settings, spec=spec, reward_model=reward_model, run=run)
                return trainer(base, items, folder, settings, spec=spec, run=run)
        done_kind = tk.result_kind(settings)
        if (done := training.done_result(folder, done_kind)) is not None:
            return done
        if not (prompts if tk.on_prompts else items):
            raise training.NoTrainingData(f"no {kind} data to train on")
        folder.mkdir(parents=True, exist_ok=True)
        job = StageJob(kind=kind, base=str(resolve_hf_folder(str(base))), stage=str(folder),
                       settings=settings.model_dump(mode="json"), target=spec,
                       reward_model=str(reward_model) if reward_model is not None else None,
                       mixed_precision=launch.mixed_precision, cpu=launch.cpu, report_to=report_to,
                       run_name=run_name, tracking_dir=str(tracked.resolve()),
                       project=self.cfg.name)
        if tk.data is None:
            job.prompts = str(write_prompts(list(prompts), folder / "prompts.jsonl"))
        else:
            job.data = str(export_items(items, folder / "train.jsonl", kind=tk.data.export))
        check_launchable(launch)
        argv = launch_command(launch, write_job(job, folder / JOB_FILE))
        self.say(f"[flywheel] training {kind} with {launch.launcher} ({launch.num_processes} processes); log in "
                 f"{folder / LAUNCH_LOG}")
        run_launch(argv, folder / LAUNCH_LOG)
        done = training.done_result(folder, done_kind)
        if done is None:
            raise LaunchError(f"the {kind} launch exited without a finished model in {folder / training.MODEL_DIR}; "
                              f"see {folder / LAUNCH_LOG}")
        return done

    def _replayed(self, r: int, kind: str, data_name: str) -> list[Any]:
        """Return the harvests of ``kind`` of the main stages of rounds before ``r`` (replay)."""
        out: list[Any] = []
        for rec in self.state.stages.values():
            if rec.kind == kind and rec.round < r and not rec.ablation and rec.harvested:
                path = self.root / f"round-{rec.round}" / f"{rec.stage}-{kind}" / data_name
                if path.is_file():
                    out.extend(read_items(path))
        return out

    def run(self) -> FlywheelReport:
        """Run the schedule (``schedule.schedule``): each stage, its variants, each evaluation; return the table."""
        started = time.perf_counter()
        cfg = self.cfg
        self.make_slices()
        base = base_model(cfg)
        self.serve_from(base, None)
        models = [*self.refs, *([base] if cfg.evaluate_base else [])]  # the last evaluation's
        recs: dict[str, StageRecord] = {}
        round_models: list[tuple[int, ModelSpec, list[StageRecord]]] = []
        last_eval: list[Rating] | None = None
        pending = False  # an evaluation skipped on resume (its models unchanged): the final one must run
        label = "start"
        for step in schedule(cfg, self.root, self.baselines):
            if isinstance(step, StageStep):
                recs[step.key] = self.run_stage(step)
            elif isinstance(step, Evaluate):
                label, models = step.label, step.models
                if not self.worked and any(e.after == label for e in self.state.evaluations):
                    pending = True  # resumed past it: nothing new to rate yet
                else:
                    last_eval, pending = self.evaluate(label, models), False
            else:
                round_models.append((step.round, step.model, [recs[s.key] for s in step.stages]))
        if last_eval is None or pending:
            last_eval = self.evaluate(label, models)
        rep = self.report(last_eval, round_models, list(recs.values()), time.perf_counter() - started)
        log_rounds(self.cfg.training.report_to, self.store.root / TRACKING_DIR, rep.rounds)
        return rep

    def evidence(self) -> Evidence | None:
        """Return the paired deltas, exact answers and verbosity of the test set's battles (None: nothing to rate)."""
        return evidence_of(self)

    def report(self, ratings: list[Rating], round_models: list[tuple[int, ModelSpec, list[StageRecord]]],
               stage_recs: list[StageRecord], seconds: float) -> FlywheelReport:
        """Return the round table of ``ratings`` (the last evaluation's); keep it and the stage ratings in the state."""
        return build_report(self, ratings, round_models, stage_recs, seconds)


def launch_plan(cfg: FlywheelConfig, workspace: str | Path,
                baselines: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Return the command that trains each stage of ``cfg`` and each of its variants (in run order), with its job
    file and kind.

    The job files are written by the round runner when the stage's data is harvested; the commands
    are exactly what it runs then (``training.launch``).
    """
    chosen = list(cfg.harvest.baselines if baselines is None else baselines)
    launch = cfg.training.launch
    out = []
    for step in schedule(cfg, Path(workspace) / "flywheel", chosen):
        if not isinstance(step, StageStep):
            continue
        step.made = True  # as planned: every stage makes its model (and its sweep runs)
        jobs = [(REWARD_MODEL.name, step.folder / "rm")] if step.reward_model else []
        for kind, where in [*jobs, (step.training.name, step.folder)]:
            job = where / JOB_FILE
            out.append({"stage": step.key, "round": step.round, "kind": kind, "launcher": launch.launcher,
                        "job": str(job), "command": launch_command(launch, job)})
    return out


def run_flywheel(cfg: FlywheelConfig, store: Store, *, show_progress: bool = True,
                 baselines: Sequence[str] | None = None, accept_judge_risk: bool = False) -> FlywheelReport:
    """Run (or resume) the flywheel ``cfg`` in ``store``'s workspace; return the round table. A judge that
    failed its canaries stops it before its first harvest, unless ``accept_judge_risk``."""
    # A launch that cannot work here (DeepSpeed not installed) is said before the first round's battles.
    check_launchable(cfg.training.launch)
    return Flywheel(cfg, store, show_progress=show_progress, baselines=baselines,
                    accept_judge_risk=accept_judge_risk).run()


def save_flywheel_config(cfg: FlywheelConfig, store: Store) -> None:
    """Save the resolved flywheel config beside the results (YAML, and meta ``flywheel_config`` in the store)."""
    pipeline.save_config(cfg, store, "flywheel_config", "flywheel.resolved.yaml")
