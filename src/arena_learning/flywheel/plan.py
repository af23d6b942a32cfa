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
from .rounds import (
    SERVED_GGUF,
    answering_as,
    base_export_path,
    export_key,
    served_spec,
    slice_prompts,
    slice_set,
    stage_folder,
    stage_key,
    template_gguf,
    yield_key,
)
from .settings import FlywheelConfig, TrainSettings
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
        settings = {"sft": s.sft, "dpo": s.dpo, "rm": s.rm, "rl": s.rl}[kind]
        launch = s.launch
        how = launch.launcher if launch.launcher == "inprocess" else \
            f"{launch.launcher}, {launch.num_processes} processes"
        what = {"sft": "examples", "dpo": "pairs", "rm": "pairs", "rl": "prompts"}[kind]
        note = f"{kind} on <= {rows} {what} (slice {slice_name}), <= {_steps(settings, rows)} optimizer steps ({how})"
        if kind == "rl":
            note += f"; {s.rl.num_generations} completions sampled per prompt inside the trainer (no ledger calls)"
        line = PlanLine(stage=stage, step="train", model=model, note=note)
        self.time_training(line, kind, s.settings(kind, changes), rows if expected is None else expected,
                           expected is not None or kind == "rl")
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
            and kind != "rm" else None
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

    def stage_model(self, name: str, root: Path | None, r: int, i: int, kind: str,
                    variant: str | None = None) -> ModelSpec:
        """Return the model a stage makes; one not trained yet is fresh (nothing of it in the ledger)."""
        where = stage_folder(root if root is not None else Path("flywheel"), r, i, kind, variant)
        if root is None or not stage_done(where):
            self.trained.add(name)
        spec = self.cfg.target.model_copy(update={"name": name, "model": str(where / MODEL_DIR)})
        self.gguf_at[spec.model] = where / SERVED_GGUF
        return spec

    def run(self) -> Plan:
        cfg = self.cfg
        refs = list(cfg.references)
        test = pipeline.make_test_set(cfg.arena_config([cfg.target, *refs]), self.store)
        slices = {name: prompts for name, (prompts, _) in slice_prompts(cfg, test, self.store).items()}
        current = cfg.target.model_copy(update={"name": f"{cfg.target.name}-base"})
        self.find_base_export(current)
        if self.measure:
            base = self.serving(current)[0]
            samples = cfg.harvest.samples.variants(base) if cfg.harvest.samples is not None else []
            measure_models([base, *refs, *samples, *judge_models(cfg.judge)], test, force=True, say=self.say)
            if self.ledger.timing is not None:
                from ..engines.speed import load_table

                self.ledger.timing.table = load_table()  # with what was just measured
        rated = [current] if cfg.evaluate_base else []
        harvested: dict[str, int] = {}  # kind -> rows harvested so far (replay)
        expected_h: dict[str, float | None] = {}  # kind -> rows expected so far (recorded yields; None: unknown)
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
                new_rows = self.expected_rows(st.kind, st.selection, len(prompts)) if need_pairs else None
                before_rows = expected_h.get(data_kind, 0.0) if cfg.harvest.replay and need_pairs else 0.0
                expected = None if new_rows is None or before_rows is None else new_rows + before_rows
                same = [s for s in rnd.stages if s.kind == st.kind]
                tag = f"r{r}-{st.kind}" if len(same) == 1 else f"r{r}.{i}-{st.kind}"
                new = self.stage_model(f"{cfg.target.name}-{tag}", root, r, i, st.kind)
                folder = stage_folder(root, r, i, st.kind) if root is not None else None
                if st.kind == "rl" and cfg.training.rl.reward == "model":
                    self.train(label, "rm", f"{new.name} (reward model)", rows, st.slice,
                               folder / "rm" if folder is not None else None, expected)
                self.train(label, st.kind, new.name, len(prompts) if st.kind == "rl" else rows, st.slice, folder,
                           expected if st.kind != "rl" else None)
                variants = []
                if st.kind in ("sft", "dpo"):
                    for b in cfg.harvest.baselines:
                        v = self.stage_model(f"{new.name}-{b}", root, r, i, st.kind, b)
                        self.train(f"{stage_key(r, i, st.kind, b)} ({st.slice})", st.kind, v.name, rows, st.slice,
                                   stage_folder(root, r, i, st.kind, b) if root is not None else None, expected)
                        variants.append(v)
                for name in st.sweep:  # the same data and start, other settings
                    v = self.stage_model(f"{new.name}-{name}", root, r, i, st.kind, name)
                    vfolder = stage_folder(root, r, i, st.kind, name) if root is not None else None
                    # (an rl variant uses the main stage's reward model: no training of its own)
                    self.train(f"{stage_key(r, i, st.kind, name)} ({st.slice})", st.kind, v.name,
                               len(prompts) if st.kind == "rl" else rows, st.slice, vfolder,
                               expected if st.kind != "rl" else None, st.sweep[name])
                    variants.append(v)
                if need_pairs:
                    harvested[data_kind] = harvested.get(data_kind, 0) + len(prompts)
                    expected_h[data_kind] = expected
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
        timing_notes(self.plan, self.ledger)
        return self.plan


def plan_flywheel(cfg: FlywheelConfig, store: Store | None, *, timed: bool = False, measure: bool = False,
                  say: Callable[[str], None] = print) -> Plan:
    """Return the plan of ``arena flywheel`` for ``cfg``, per round and stage (``store``: its workspace, if any);
    ``timed``: with minutes from this machine's rates (``measure``: measured first)."""
    return _Walk(cfg, store, timed=timed, measure=measure, say=say).run()
