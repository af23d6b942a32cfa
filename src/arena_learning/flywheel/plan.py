"""The plan of a flywheel run, per round and stage: answer and judge calls, what is cached, tokens, cost, training.

It prices the steps of the run's schedule (``schedule.schedule``, which ``rounds.Flywheel.run``
executes): a stage's current model and the references answer the stage's slice (as its kind schedules
the battles: sft, the current model against each reference; dpo and an rl stage with a reward model,
the round robin), the stage trains a new model (and its ablation variants), and after each stage
(``evaluate: stages``) or round every model rated so far answers the test set and all of them are
judged in a round robin. Every stage is planned as making its model. A model the flywheel already had answer a set
is not asked again; a model trained in the run has nothing in the ledger. Training lines give upper
bounds: at most one example (or pair) per slice prompt, plus earlier rounds' harvests with replay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from .. import pipeline
from ..config import ModelSpec
from ..plan import (
    Known,
    LedgerView,
    Plan,
    PlanLine,
    judge_models,
    measure_models,
    plan_answers,
    plan_battles,
    timing_notes,
)
from ..records import Prompt
from ..store import Store
from .kinds import REWARD_MODEL, train_kind
from .schedule import Evaluate, StageStep, base_model, schedule
from .serving import (
    SERVED_GGUF,
    answering_as,
    base_export_path,
    export_key,
    served_spec,
    template_gguf,
    yield_key,
)
from .settings import FlywheelConfig, TrainSettings, first_stage_on
from .slices import slice_prompts, slice_set
from .train import MODEL_DIR, stage_done


def _steps(settings: TrainSettings, rows: float) -> int:
    if settings.max_steps > 0:
        return settings.max_steps
    return math.ceil(math.ceil(rows / settings.batch_size) * settings.epochs)  # whole batches each epoch


class _Walk:
    """The flywheel's calls, stage by stage, counted into a Plan."""

    def __init__(self, cfg: FlywheelConfig, store: Store | None, *, timed: bool = False, measure: bool = False,
                 say: Callable[[str], None] = print):
        from ..engines.speed import Timing

        self.cfg = cfg
        self.store = store
        self.ledger = LedgerView(store, Timing(store) if timed or measure else None)
        self.measure = measure
        self.say = say
        self.plan = Plan(kind="flywheel")
        self.known: dict[str, Known] = {}
        self.answered: set[tuple[str, str]] = set()  # (model identity, set): Flywheel.arena skips these
        self.trained: set[str] = set()  # names of models the run trains
        # serve_as llamacpp: a target-lineage model's ``model`` -> its GGUF export (Flywheel.serve_from)
        self.gguf_at: dict[str, Path] = {}
        self.base_gguf: Path | None = None  # the untrained target's export, where it exists
        self.root = store.root / "flywheel" if store is not None else None
        self.rows: dict[str, tuple[int, float | None]] = {}  # stage key -> (rows at most, rows expected; None: unknown)
        self.harvested: dict[str, int] = {}  # data kind -> rows harvested so far (replay)
        self.expected_h: dict[str, float | None] = {}  # data kind -> rows expected so far (recorded yields)

    def serving(self, spec: ModelSpec) -> tuple[ModelSpec, ModelSpec | None, str]:
        """Return how ``spec`` answers, as ``Flywheel.served`` serves it: (the spec whose calls the ledger holds,
        the spec that times a model the run makes first, why it is fresh ('': it is not)).

        With ``serve_as: llamacpp`` a model of the target's lineage answers through llama.cpp from its GGUF
        export: its calls are keyed by that file, so only an export that exists can be looked up; one made in
        the run times as the exported base model (the same shape and tokenizer)."""
        gguf = self.gguf_at.get(spec.model)
        fresh = "trained in this run" if spec.name in self.trained else ""
        if self.cfg.training.serve_as != "llamacpp" or spec.engine != "transformers" or gguf is None:
            return spec, None, fresh
        if not fresh and gguf.is_file():
            return self._served(spec, gguf), None, ""
        proxy = self._served(spec, self.base_gguf) if self.base_gguf is not None and self.base_gguf.is_file() \
            else None
        return spec, proxy, fresh or "its GGUF export is made in the run"

    @staticmethod
    def _served(spec: ModelSpec, gguf: Path) -> ModelSpec:
        return answering_as(served_spec(spec, gguf), spec)

    def find_base_export(self, base: ModelSpec) -> None:
        """Note where the untrained target's GGUF export goes (serve_as llamacpp); with ``measure``, make it (and
        the Hugging Face folder it comes from) if missing, as the run would, so its rates can be measured."""
        from ..engines.gguf_export import export_gguf
        from ..engines.transformers_engine import converted_hf_folder, resolve_hf_folder

        if self.cfg.training.serve_as != "llamacpp" or base.engine != "transformers":
            return
        folder = resolve_hf_folder(base.model) if self.measure else converted_hf_folder(base.model)
        if folder is None:
            return
        self.base_gguf = base_export_path(self.cfg, folder)
        if self.measure and not self.base_gguf.is_file():
            self.say(f"[plan] exporting {base.model} to GGUF ({self.cfg.training.serve_quantize}) at {self.base_gguf}")
            export_gguf(folder, self.base_gguf, template_gguf=template_gguf(self.cfg),
                        quantize=self.cfg.training.serve_quantize, threads=base.n_threads)
        self.gguf_at[base.model] = self.base_gguf

    def answer_and_battle(self, models: Sequence[ModelSpec], prompts: list[Prompt], set_name: str, stage: str,
                          schedule: Literal["all", "target"] = "all", target: str | None = None) -> None:
        known = self.known.setdefault(set_name, Known())
        for spec in models:
            ident = (spec.model_dump_json(exclude={"name"}), set_name)
            if not spec.engine_kind.makes_calls or ident in self.answered:
                continue
            self.answered.add(ident)
            answering, timed_as, fresh = self.serving(spec)
            line = plan_answers(answering, prompts, self.ledger, stage, known, self.store, set_name,
                                fresh=bool(fresh), timed_as=timed_as)
            if fresh and line.note.startswith("trained in this run"):
                line.note = fresh + line.note.removeprefix("trained in this run")
            self.plan.lines.append(line)
        rc = self.cfg.arena_config(models, schedule, target, rating=set_name == pipeline.TEST_SET)
        self.plan.lines.extend(plan_battles(rc, prompts, known, self.ledger, stage))

    def train(self, stage: str, kind: str, model: str, rows: int, slice_name: str, folder: Path | None,
              expected: float | None = None, changes: dict | None = None) -> None:
        """Add the line of a stage's training: at most ``rows`` examples (``expected``: the rows the recorded
        yields predict; None: unknown), timed from this machine's record of the same training."""
        if folder is not None and stage_done(folder):
            self.plan.lines.append(PlanLine(stage=stage, step="train", model=model, seconds=0.0,
                                            note=f"done in an earlier run ({folder / MODEL_DIR}): not trained again"))
            return
        s = self.cfg.training
        tk = train_kind(kind)
        settings = s.settings(kind)
        launch = s.launch
        how = launch.launcher if launch.launcher == "inprocess" else \
            f"{launch.launcher}, {launch.num_processes} processes"
        note = (f"{kind} on <= {rows} {tk.rows} (slice {slice_name}), <= {_steps(settings, rows)} optimizer steps "
                f"({how})")
        if tk.on_prompts:
            note += f"; {s.rl.num_generations} completions sampled per prompt inside the trainer (no ledger calls)"
        line = PlanLine(stage=stage, step="train", model=model, note=note)
        self.time_training(line, kind, s.settings(kind, changes), rows if expected is None else expected,
                           expected is not None or tk.on_prompts)
        self.plan.lines.append(line)

    def time_training(self, line: PlanLine, kind: str, settings: TrainSettings, rows: float, known: bool) -> None:
        """Set ``line``'s seconds from this machine's record of the same training (model, kind, the settings that
        cost): its fixed seconds, plus the steps ``rows`` make at its seconds a step, plus a GGUF export."""
        from ..engines import speed

        timing = self.ledger.timing
        if timing is None:
            return
        cfg = self.cfg
        rates = speed.training_rates(timing.table, speed.training_key(cfg.target.model, kind, settings,
                                                                      cfg.training.launch))
        if rates is None:
            line.timing = (f"not timed: no {kind} training with these settings recorded on this machine (the first "
                           "run records it)")
            return
        fixed, per_step = rates
        steps = _steps(settings, rows)
        export = speed.export_seconds(timing.table, export_key(cfg)) if cfg.training.serve_as == "llamacpp" \
            and train_kind(kind).answers else None
        line.seconds = fixed + steps * per_step + (export or 0.0)
        line.timing = (f"{steps} steps of {per_step:.2f} s + {fixed:.0f} s loading and saving"
                       + (f" + {export:.0f} s GGUF export" if export else "")
                       + ("" if known else f" (at most: {rows:.0f} rows, no harvest yield recorded here yet)"))

    def expected_rows(self, kind: str, selection: str, prompts: int) -> float | None:
        """Return the rows a harvest of ``prompts`` slice prompts is expected to give (recorded yields)."""
        from ..engines import speed

        if self.ledger.timing is None:
            return None
        y = speed.harvest_yield(self.ledger.timing.table, yield_key(self.cfg, kind, selection))
        return None if y is None else y * prompts

    def stage(self, step: StageStep, prompts: list[Prompt]) -> None:
        """Add the lines of a stage step: its slice's answers and battles (a stage that harvests), then its training
        (a reward model's first): at most one row per slice prompt, plus earlier rounds' harvests with replay."""
        root = self.root
        cfg = self.cfg
        if root is None or not stage_done(step.folder):
            self.trained.add(step.model.name)  # a model not trained yet is fresh: nothing of it in the ledger
        self.gguf_at[step.model.model] = step.folder / SERVED_GGUF
        data = step.kind.data.name
        main = step.main
        if main is not None:  # a variant: trains on as many rows as its stage
            rows, expected = self.rows[main.key]
        else:
            if step.harvests:
                if step.start.name in self.trained:  # a fresh model's samples are fresh too
                    self.trained |= {m.name for m in step.samples}
                self.answer_and_battle(step.answerers, prompts, slice_set(step.slice), step.label, *step.battles())
            replay = cfg.harvest.replay and step.harvests
            rows = len(prompts) + (self.harvested.get(data, 0) if replay else 0)
            new_rows = self.expected_rows(step.spec.kind, step.selection, len(prompts)) if step.harvests else None
            before_rows = self.expected_h.get(data, 0.0) if replay else 0.0
            expected = None if new_rows is None or before_rows is None else new_rows + before_rows
            self.rows[step.key] = rows, expected
            if step.harvests:
                self.harvested[data] = self.harvested.get(data, 0) + len(prompts)
                self.expected_h[data] = expected
        folder = step.folder if root is not None else None
        if step.reward_model:
            self.train(step.label, REWARD_MODEL.name, f"{step.model.name} (reward model)", rows, step.slice,
                       folder / "rm" if folder is not None else None, expected)
        # (an rl sweep variant uses its stage's reward model: no training of its own)
        on_prompts = step.training.on_prompts
        self.train(step.label, step.training.name, step.model.name, len(prompts) if on_prompts else rows, step.slice,
                   folder, None if on_prompts else expected, step.changes)

    def run(self) -> Plan:
        cfg = self.cfg
        refs = list(cfg.references)
        test = pipeline.make_test_set(cfg.arena_config([cfg.target, *refs]), self.store)
        slices = {name: prompts for name, (prompts, _) in slice_prompts(cfg, test, self.store).items()}
        if self.store is not None:  # an aimed slice drawn already is priced as it was drawn
            drawn = cfg.aimed_slices() & set(self.store.prompt_sets())
            slices.update({name: self.store.get_prompts(slice_set(name)) for name in drawn})
        current = base_model(cfg)
        self.find_base_export(current)
        if self.measure:
            base = self.serving(current)[0]
            samples = cfg.harvest.samples.variants(base) if cfg.harvest.samples is not None else []
            measure_models([base, *refs, *samples, *judge_models(cfg.judge)], test, force=True, say=self.say)
            if self.ledger.timing is not None:
                from ..engines.speed import load_table

                self.ledger.timing.table = load_table()  # with what was just measured
        for step in schedule(cfg, self.root if self.root is not None else Path("flywheel"),
                             list(cfg.harvest.baselines)):
            if isinstance(step, StageStep):
                self.stage(step, slices[step.slice])
                step.made = True  # as planned: every stage makes its model
            elif isinstance(step, Evaluate):
                self.answer_and_battle(step.models, test, pipeline.TEST_SET, f"evaluate after {step.after.key}")
        turns = sum(len(p.turns) for p in test)
        self.plan.notes.append(f"test set: {len(test)} prompts ({turns} user turns); slices: "
                               + ", ".join(f"{n} {len(p)}" for n, p in slices.items()))
        for name in sorted(cfg.aimed_slices()):
            self.plan.notes.append(aimed_note(cfg, name, len(slices[name])))
        if cfg.harvest.samples is not None:
            s = cfg.harvest.samples
            self.plan.notes.append(f"harvest.samples: the target answers each slice {s.k} more times (temperature "
                                   f"{s.temperature}, seeds {s.seed}..{s.seed + s.k - 1}): {s.k} x its answering "
                                   f"cost, and its samples battle like references")
        self.plan.notes.append("answers of models trained in the run are not known yet: the judge calls on them "
                               "are counted as new, and as cached when the same games are judged again")
        timing_notes(self.plan, self.ledger)
        return self.plan


def aimed_note(cfg: FlywheelConfig, name: str, n: int) -> str:
    """Say how the aimed slice ``name`` of ``n`` prompts is drawn (``allocate: weakness``; priced at its size)."""
    r, i = first_stage_on(cfg, name)
    rule = cfg.rounds[r].stages[i].allocate
    groups = "categories" if cfg.pool[name].set is None else "categories (else clusters)"
    how = {"weakness": f"spread over the {groups} by how far the model is behind the best reference on the test set, "
                       "each at least half its uniform share",
           "learnable": f"spread over the {groups} by how far the model is behind the best reference on the test "
                        "set times how far its last training moved it there, each at least half its uniform share",
           }.get(rule, f"spread evenly over the {groups} (the control arm of an aimed run)")
    return (f"slice {name}: allocate: {rule}: drawn when stage r{r}.{i} starts: its {n} prompts {how} "
            "(flywheel.aim); priced at its size")


def plan_flywheel(cfg: FlywheelConfig, store: Store | None, *, timed: bool = False, measure: bool = False,
                  say: Callable[[str], None] = print) -> Plan:
    """Return the plan of ``arena flywheel`` for ``cfg``, per round and stage (``store``: its workspace, if any);
    ``timed``: with minutes from this machine's rates (``measure``: measured first)."""
    return _Walk(cfg, store, timed=timed, measure=measure, say=say).run()
