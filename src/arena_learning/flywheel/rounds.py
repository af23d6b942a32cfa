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

import hashlib
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .. import pipeline
from ..arena.canaries import judge_risk_error
from ..config import ModelSpec
from ..engines import speed
from ..engines.bundled import cache_dir, resolve_model_path
from ..engines.gguf_export import export_current, export_gguf
from ..engines.identity import content_identity
from ..engines.transformers_engine import release_models, resolve_hf_folder
from ..errors import ArenaError
from ..flywheel_state import (
    EVIDENCE_KEYS,
    STATE_FILE,
    Evaluation,
    FlywheelState,
    RatedModel,
    RoundRow,
    RoundTable,
    RunRecord,
    SliceRecord,
    StageRecord,
    TrainSummary,
    load_state,
    save_state,
)
from ..rating.bt import RateOptions
from ..records import Prompt, Rating
from ..scale.launch import LaunchError, check_launchable, launch_command, run_launch
from ..store import Store
from ..tasks import generate_tasks, suite_categories
from ..tasks.checks import CHECKS_VERSION
from . import train as training
from .evidence import Evidence, gather
from .export import export_items, read_items
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
from .settings import BASELINES, FlywheelConfig, RoundSpec, SFTSettings, SliceDecontam, SliceSpec, StageSpec
from .train_stage import JOB_FILE, StageJob, write_job, write_prompts

TEST_SET = pipeline.TEST_SET
LAUNCH_LOG = "launch.log"
DATA_FILE = {"sft": "sft.jsonl", "dpo": "dpo.jsonl", "rl": "rm.jsonl"}
"""The harvested data of a stage of each kind, in its folder."""


def slice_set(name: str) -> str:
    """Return the workspace prompt set that holds the slice ``name``."""
    return f"flywheel/{name}"


# ---- slices ------------------------------------------------------------------------------


def _norm(q: str) -> str:
    return " ".join(q.lower().split())


def task_slice(spec: SliceSpec, seed: int, exclude: set[str], suite: int = 1) -> list[Prompt]:
    """Return up to ``spec.n`` task prompts of suite version ``suite`` spread over the categories, none in ``exclude``.

    A category with too few distinct questions left (capitals, say) gives what it has.
    """
    cats = list(spec.categories or suite_categories(suite))
    quotas = {c: spec.n // len(cats) + (1 if i < spec.n % len(cats) else 0) for i, c in enumerate(cats)}
    per_cat: dict[str, list[Prompt]] = {}
    for i, cat in enumerate(cats):
        want = quotas[cat]
        got: list[Prompt] = []
        while want > 0:
            try:
                got = generate_tasks(want, seed=seed * 1000 + i, categories=[cat], exclude=exclude, suite=suite)
                break
            except ValueError:
                want = want * 3 // 4 if want > 4 else want - 1
        per_cat[cat] = got
    out: list[Prompt] = []
    for k in range(max((len(v) for v in per_cat.values()), default=0)):
        out.extend(v[k] for v in per_cat.values() if k < len(v))
    return out


def test_sets(store: Store | None, test: Sequence[Prompt]) -> list[Prompt]:
    """Return the prompts of every test set in the workspace: the run's (``test``), ``test`` and ``testset/*``."""
    out = {p.id: p for p in test}
    if store is not None:
        for name in store.prompt_sets():
            if name == TEST_SET or name.startswith("testset/"):
                out.update({p.id: p for p in store.get_prompts(name)})
    return list(out.values())


def slice_prompts(cfg: FlywheelConfig, test: Sequence[Prompt], store: Store | None,
                  near: dict[str, Counter[str]] | None = None) -> dict[str, tuple[list[Prompt], int]]:
    """Return every slice of ``cfg``'s pool, in pool order: its prompts and how many were dropped as test prompts.

    Slices are disjoint and decontaminated: no test prompt, no few-shot example, no prompt of an
    earlier slice. A stored set is read from ``store``; an empty or missing one is an ArenaError.
    A stored slice is also checked against every test set in the workspace with the tests ``arena
    pool build`` uses (MinHash near-copies, long shared n-grams; curate.decontam), since a test set
    may come after the pool was built: what it drops is counted in ``near`` (slice -> reason -> n)
    and in the dropped count. Task-suite slices are exact-disjoint by construction; their items
    share templates by design, so near-copy tests do not apply to them.
    """
    tests = test_sets(store, test)
    banned = {_norm(t) for p in test for t in p.turns}
    banned |= {_norm(q) for q in pipeline.few_shot_questions([cfg.target, *cfg.references])}
    if cfg.harvest.samples is not None:
        banned |= {_norm(q) for q in cfg.harvest.samples.questions()}
    out: dict[str, tuple[list[Prompt], int]] = {}
    embed = None  # one embedder for every stored slice: the test set's embeddings are made once
    for pos, (name, spec) in enumerate(cfg.pool.items()):
        if spec.set is not None:
            got = store.get_prompts(spec.set) if store is not None else []
            if not got:
                where = f"the workspace {store.root}" if store is not None else "the workspace (there is none yet)"
                raise ArenaError(f"pool.{name}.set: the prompt set {spec.set!r} is empty or missing in {where}: fill "
                                 "it first (`arena pool build`, `arena ingest`), or give the slice task prompts "
                                 "(n, seed)")
            prompts = [p for p in got if not any(_norm(t) in banned for t in p.turns)]
            if embed is None:
                from ..curate.embed import text_embedder

                embed = text_embedder(cfg.decontam.embed)
            prompts, why, _ = near_copies_dropped(prompts, tests, cfg.decontam, embed)
            if near is not None and why:
                near[name] = why
            if spec.limit is not None:
                prompts = prompts[: spec.limit]
            dropped = len(got) - len(prompts)
        else:
            # FlywheelConfig refuses a slice seed equal to tasks.seed
            prompts, dropped = task_slice(spec, cfg.slice_seed(pos, spec), banned, cfg.tasks.suite), 0
        overlap = [p.id for p in prompts if any(_norm(t) in banned for t in p.turns)]
        assert not overlap, f"slice {name} overlaps the test set or few-shot examples: {overlap[:3]}"
        banned |= {_norm(t) for p in prompts for t in p.turns}
        out[name] = (prompts, dropped)
    return out


def near_copies_dropped(prompts: list[Prompt], tests: Sequence[Prompt], s: SliceDecontam,
                        embed: Callable[[list[str]], Any] | None = None
                        ) -> tuple[list[Prompt], Counter[str], dict[str, str]]:
    """Return ``prompts`` without the near-copies of ``tests`` (curate.decontam), the drops by reason and matches.

    ``embed`` (``curate.embed.text_embedder``; made from ``s.embed`` when None) may be shared by several calls: the
    same list of test texts is embedded once.
    """
    from ..curate.decontam import decontaminate
    from ..curate.embed import text_embedder

    return decontaminate(prompts, tests, s.threshold, s.num_perm, s.shingle, s.shingle_ngram, s.ngram,
                         s.ngram_coverage, s.seed, embed=embed if embed is not None else text_embedder(s.embed),
                         embedding_threshold=s.embedding_threshold)


def model_identity(spec: ModelSpec) -> str:
    """Return what makes ``spec``'s answers: its settings and, for a local model, its weights' content."""
    weights = spec.engine_kind.weights_path(spec.model)
    ident = content_identity(weights) if weights is not None else ""
    blob = spec.model_dump_json(exclude={"name"}) + ident
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


SERVED_GGUF = "model.gguf"
"""A trained stage's model exported to GGUF (``training.serve_as: llamacpp``), beside its folder ``model/``."""


def template_gguf(cfg: FlywheelConfig) -> Path | None:
    """Return the GGUF ``cfg``'s target starts from (a registry name or a .gguf path), whose metadata and tokenizer
    every export of its lineage copies; None (the bundled model) for a target given as a folder."""
    model = cfg.target.model
    if Path(model).expanduser().is_dir():  # a Hugging Face folder: no GGUF of its own
        return None
    try:
        return resolve_model_path(model)
    except ArenaError:
        return None


def base_export_path(cfg: FlywheelConfig, folder: Path) -> Path:
    """Return where the untrained target (the Hugging Face ``folder``) is exported to GGUF for serving: the cache,
    by the folder's content, so every workspace shares it."""
    digest = content_identity(folder).split(":")[1][:16]
    return cache_dir() / "gguf-export" / f"{folder.name}-{digest}-{cfg.training.serve_quantize}.gguf"


def yield_key(cfg: FlywheelConfig, kind: str, selection: str, size: int | None = None) -> str:
    """Return the key of a harvest's yield (``engines.speed``: the share of slice prompts that become data): what
    decides it besides the models' answers: the target, the references, the judge, the harvest settings."""
    blob = json.dumps({"target": cfg.target.model, "kind": kind, "selection": selection, "size": size,
                       "references": [r.model_dump(mode="json") for r in cfg.references],
                       "judge": cfg.judge.model_dump(mode="json"), "harvest": cfg.harvest.model_dump(mode="json")},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def export_key(cfg: FlywheelConfig) -> str:
    """Return the key of a trained model's GGUF export time: the target it is trained from and the tensor type."""
    return f"{cfg.target.model}|{cfg.training.serve_quantize}"


def served_spec(spec: ModelSpec, gguf: str | Path) -> ModelSpec:
    """Return the llamacpp spec that answers for the transformers ``spec`` from its GGUF export ``gguf``.

    The name, ``mode``, ``prompt_format``, ``params`` (and every other contestant setting) stay the
    target's; ``parallel`` is its ``batch_size`` (llama.cpp decodes that many greedy requests
    together, as transformers batches them). In chat mode without a ``chat_template`` the folder's
    own template (tokenizer_config.json or chat_template.jinja) is carried over, as transformers
    would use it.
    """
    update: dict[str, Any] = {"engine": "llamacpp", "model": str(gguf), "parallel": spec.batch_size}
    if spec.mode == "chat" and spec.chat_template is None and spec.chat_format is None:
        template = folder_chat_template(resolve_hf_folder(spec.model))
        if template is not None:
            update["chat_template"] = template
    return ModelSpec.model_validate({**spec.model_dump(), **update})


def answering_as(served: ModelSpec, spec: ModelSpec) -> ModelSpec:
    """Return ``served`` (a lineage model's llama.cpp spec) answering as ``spec``: its name, params and prompt format
    (a sample's seed and shots, a stage's name)."""
    return served.model_copy(update={"name": spec.name, "params": spec.params, "prompt_format": spec.prompt_format})


def folder_chat_template(folder: Path) -> str | None:
    """Return the chat template a Hugging Face folder's tokenizer carries (None: it has none)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    try:
        template = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template")
    except (OSError, ValueError):
        return None
    return template if isinstance(template, str) else None


# ---- the report ----------------------------------------------------------------------------


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
        self._test: list[Prompt] | None = None
        self.rated: list[ModelSpec] = []  # the models rated on the test set so far, in order
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
        for name, (prompts, dropped) in slice_prompts(self.cfg, self.test_prompts(), self.store, near).items():
            self._slices[name] = prompts
            self.store.put_prompts(slice_set(name), prompts)
            self.state.slices[name] = SliceRecord(prompts=len(prompts), dropped_as_test=dropped,
                                                  dropped_near_test=dict(near.get(name, {})))
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

    def evaluate(self, label: str) -> list[Rating]:
        """Every rated model answers the test set; battles among all of them; ratings with CIs."""
        models = [*self.refs, *self.rated]
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
    def _fingerprint(self, r: int, i: int, stage: StageSpec, before: str, variant: str | None) -> str:
        changes = stage.sweep.get(variant) if variant else None  # a sweep variant's (names are not baselines')
        kind_settings = self.cfg.training.settings(stage.kind, changes).model_dump(mode="json")
        extra = self.cfg.training.rm.model_dump(mode="json") if stage.kind == "rl" else None
        # the sweep's other variants are not this stage's inputs: adding one redoes nothing
        blob = json.dumps({"stage": stage.model_dump(mode="json", exclude={"sweep"}), "variant": variant,
                           "slice": self.cfg.pool[stage.slice].model_dump(mode="json"), "settings": kind_settings,
                           "rm": extra,
                           "harvest": self.cfg.harvest.model_dump(mode="json",
                                                                  exclude=self.cfg.harvest.fingerprint_exclude()),
                           "target": self.cfg.target.model_dump(mode="json"),
                           "references": [m.model_dump(mode="json") for m in self.refs],
                           "judge": self.cfg.judge.model_dump(mode="json"),
                           "test": self.cfg.tasks.model_dump(mode="json"),
                           "before": before, "where": [r, i], **self._serve_fingerprint(),
                           **self._checks_fingerprint(stage)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def _checks_fingerprint(self, stage: StageSpec) -> dict[str, Any]:
        # The task suite's checkers score a verifier's harvest and a verifier reward: a stage made under
        # other checkers (a workspace of stop 30 or before) is redone. Absent for other judges and rewards.
        j = self.cfg.judge
        if not ("verifier" in {j.kind, *(m.kind for m in j.members)} or (
                stage.kind == "rl" and self.cfg.training.rl.reward == "verifier")):
            return {}
        return {"checks": CHECKS_VERSION}

    def _serve_fingerprint(self) -> dict[str, Any]:
        # How the target's models answer makes the harvest; absent while default, so fingerprints stay as they were
        t = self.cfg.training
        if t.serve_as == "transformers":
            return {}
        return {"serve": {"as": t.serve_as, "quantize": t.serve_quantize}}

    def _stage_name(self, rnd: RoundSpec, r: int, i: int, stage: StageSpec) -> str:
        same = [s for s in rnd.stages if s.kind == stage.kind]
        tag = f"r{r}-{stage.kind}" if len(same) == 1 else f"r{r}.{i}-{stage.kind}"
        return f"{self.cfg.target.name}-{tag}"

    def run_stage(self, r: int, i: int, rnd: RoundSpec, stage: StageSpec, current: ModelSpec, before: str,
                  variant: str | None = None, size: int | None = None) -> tuple[ModelSpec, StageRecord]:
        """Run one stage (or its ablation ``variant``: a selection baseline, or a variant of the stage's sweep)
        from ``current``: harvest, then train; return the new model."""
        name = self._stage_name(rnd, r, i, stage) + (f"-{variant}" if variant else "")
        folder = stage_folder(self.root, r, i, stage.kind, variant)
        key = stage_key(r, i, stage.kind, variant)
        self.started_from[key] = current.name
        changes = stage.sweep.get(variant) if variant else None
        fp = self._fingerprint(r, i, stage, before, variant)
        rec = self.state.stages.get(key)
        if rec is not None and rec.fingerprint != fp:
            self.say(f"[flywheel] {key}: its inputs changed since the last run; redoing it")
            shutil.rmtree(folder, ignore_errors=True)
            rec = None
        if rec is None:
            rec = StageRecord(key=key, round=r, stage=i, kind=stage.kind, slice=stage.slice,
                              selection=stage.selection if changes is not None else variant or stage.selection,
                              ablation=variant, sweep=changes, model=name, fingerprint=fp)
            self.state.stages[key] = rec
        out_spec = self.cfg.target.model_copy(update={"name": name, "model": str(folder / training.MODEL_DIR)})
        self.serve_from(out_spec, folder / SERVED_GGUF)
        if rec.status == "done" and training.stage_done(folder):
            self.say(f"[flywheel] {key}: done in an earlier run ({rec.examples} examples); skipped")
            return out_spec, rec
        if rec.status == "skipped":
            return current, rec
        folder.mkdir(parents=True, exist_ok=True)
        self.worked = True
        self.say(f"[flywheel] round {r} stage {i}: {stage.kind} on slice {stage.slice} from {current.name}"
                 + (f" (sweep {variant}: {rec.sweep})" if rec.sweep is not None else
                    f" (ablation: {variant})" if variant else ""))
        items = self.harvest_step(rec, stage, current, folder, size,
                                  stage_folder(self.root, r, i, stage.kind) if rec.sweep is not None else None)
        return self.train_step(rec, stage, current, out_spec, folder, items)

    def harvest_step(self, rec: StageRecord, stage: StageSpec, current: ModelSpec, folder: Path,
                     size: int | None, data_from: Path | None = None) -> list[Any]:
        """Return the stage's training data: its harvest (made now from the slice's battles, or read back), replay.
        ``data_from``: a sweep variant's, the main stage's folder, whose harvest it trains on."""
        h = self.cfg.harvest
        data_file = folder / DATA_FILE[stage.kind]
        need_pairs = stage.kind != "rl" or self.cfg.training.rl.reward == "model"
        items: list[Any] = []
        if need_pairs:
            if data_from is not None:
                main = data_from / DATA_FILE[stage.kind]
                items = read_items(main) if main.is_file() else []
                rec.harvested, rec.by_model = True, per_model_counts(items)
            elif rec.harvested and data_file.is_file():
                items = read_items(data_file)
            else:
                items = self._harvest(rec, stage, current, data_file, size)
        rec.examples = len(items)
        if h.replay and need_pairs:
            items = self._replayed(rec.round, stage.kind, data_file.name) + list(items)
            rec.trained_on = len(items)
        return items

    def _harvest(self, rec: StageRecord, stage: StageSpec, current: ModelSpec, data_file: Path,
                 size: int | None) -> list[Any]:
        """Battle ``current`` against the references on the stage's slice; select, export and return the data."""
        h = self.cfg.harvest
        rip = RipFilter(**h.rip.model_dump()) if h.rip is not None else None
        t0 = time.perf_counter()
        prompts = self._slices[stage.slice]
        samples = h.samples.variants(current) if h.samples is not None else []
        models = [current, *self.refs, *samples]
        teachers = [m.name for m in [*self.refs, *samples]]
        names = {m.name for m in models}
        if stage.kind == "sft":
            result = self.arena(models, prompts, slice_set(stage.slice), "target", current.name)
        else:
            result = self.arena(models, prompts, slice_set(stage.slice), "all")
        answers = [a for a in self.store.get_answers(set_name=slice_set(stage.slice)) if a.model in names]
        battles = result.battles.battles
        risk = None if self.accept_judge_risk else judge_risk_error(self.store, self.cfg.judge.name)
        if risk is not None:
            raise ArenaError(f"{rec.key}: {risk}")
        rec.seconds.answer_battle = round(time.perf_counter() - t0, 1)
        t1 = time.perf_counter()
        if stage.kind == "sft":
            items: list[Any] = select_sft(rec.selection, prompts, answers, battles, target=current.name,
                                          references=teachers, threshold=h.sft_threshold,
                                          min_score=h.sft_min_score, seed=h.seed, slice_name=stage.slice,
                                          round_index=rec.round, size=size)
        else:
            k = h.k if stage.kind == "dpo" else (h.rm_k if h.rm_k is not None else h.k)
            items = select_pairs(rec.selection if stage.kind == "dpo" else "pair_judge", prompts, answers, battles,
                                 models=[m.name for m in models], k=k, rip=rip, seed=h.seed, slice_name=stage.slice,
                                 round_index=rec.round, size=size)
        right: list[SFTItem] = []  # the target's own right answers: SFT data (own_right) or fillers (balance_fill)
        if (stage.kind == "sft" and rec.selection == "pair_judge" and h.sft_min_score is not None
                and (h.own_right or h.balance_fill)):
            right = own_right_sft(prompts, answers, battles, target=current.name, min_score=h.sft_min_score,
                                  slice_name=stage.slice, round_index=rec.round,
                                  selection="own_right" if h.own_right else "balance_fill")
            if h.own_right:
                items = with_own_right(items, right)
        if h.balance:
            fill = right if h.balance_fill else []
            items = balance_items(items, prompts, seed=h.seed, fill=fill)
        release_models()
        speed.record_yield(yield_key(self.cfg, stage.kind, rec.selection, size), len(items), len(prompts))
        export_items(items, data_file, kind="sft" if stage.kind == "sft" else "pairs")
        rec.seconds.harvest = round(time.perf_counter() - t1, 2)
        rec.harvested = True
        rec.by_model = per_model_counts(items)
        self._save_state()
        return items

    def train_step(self, rec: StageRecord, stage: StageSpec, current: ModelSpec, out_spec: ModelSpec, folder: Path,
                   items: list[Any]) -> tuple[ModelSpec, StageRecord]:
        """Train the stage's model on ``items`` (rl: on the slice's prompts); return it, or ``current`` if skipped."""
        t2 = time.perf_counter()
        s = self.cfg.training
        try:
            if stage.kind in ("sft", "dpo"):
                start, sft = current.model, s.settings("sft", rec.sweep)
                if stage.kind == "sft" and isinstance(sft, SFTSettings) and sft.start == "base":
                    start = self.cfg.target.model  # ReST-EM: the untrained target, on every round's data so far
                    self.say(f"[flywheel] {rec.key}: training the untrained target ({start}) on {len(items)} "
                             f"examples (training.sft.start: base); {current.name} made the data")
                res = self.train_one(stage.kind, start, folder, items=items, changes=rec.sweep)
            else:
                reward_model = None
                if s.rl.reward == "model":
                    # a sweep variant changes the RL settings only: the main stage's reward model serves it too
                    home = stage_folder(self.root, rec.round, rec.stage, "rl") if rec.sweep is not None else folder
                    rm = self.train_one("rm", current.model, home / "rm", items=items)
                    rec.rm = rm
                    self._record_training("rm", rm, None)
                    reward_model = rm.model_dir
                res = self.train_one("rl", current.model, folder, prompts=self._slices[stage.slice],
                                     reward_model=reward_model, changes=rec.sweep)
        except training.NoTrainingData as err:
            self.say(f"[flywheel] {rec.key}: {err}; the stage is skipped and the model stays {current.name}")
            rec.status = "skipped"
            self._save_state()
            return current, rec
        rec.seconds.train = round(time.perf_counter() - t2, 1)
        rec.train = res
        self._record_training(stage.kind, res, rec.sweep)
        rec.train_loss = res.train_loss
        rec.status = "done"
        self._save_state()
        self.say(f"[flywheel] {rec.key}: {len(items)} examples, {res.steps} steps, loss {res.train_loss}, "
                 f"{res.seconds:.0f} s" + (f" (resumed from {res.resumed_from})" if res.resumed_from else ""))
        return out_spec, rec

    def _record_training(self, kind: str, res: TrainSummary, changes: dict[str, Any] | None) -> None:
        """Add a training run that ran whole here to the machine's record (``arena plan``'s minutes)."""
        summary = res
        if summary.resumed_from is None and summary.steps > 0:
            key = speed.training_key(self.cfg.target.model, kind, self.cfg.training.settings(kind, changes),
                                     self.cfg.training.launch)
            speed.record_training(key, summary.steps, summary.seconds, summary.s_per_step)

    def train_one(self, kind: Literal["sft", "dpo", "rm", "rl"], base: str, folder: Path, *, items: Sequence[Any] = (),
                  prompts: Sequence[Prompt] = (), reward_model: Path | None = None,
                  changes: dict[str, Any] | None = None) -> TrainSummary:
        """Train ``kind`` (sft, dpo, rm or rl) from ``base`` into ``folder``, in process or launched (``launch``),
        with a sweep variant's ``changes`` to ``training.KIND``."""
        settings: Any = self.cfg.training.settings(kind, changes)
        launch = self.cfg.training.launch
        spec = self.cfg.target
        if launch.launcher == "inprocess":
            if kind == "rl":
                return training.train_rl(base, prompts, folder, settings, spec=spec, reward_model=reward_model)
            trainers: dict[str, Callable[..., TrainSummary]] = {
                "sft": training.train_sft, "dpo": training.train_dpo, "rm": training.train_reward}
            return trainers[kind](base, items, folder, settings, spec=spec)
        done_kind = settings.algorithm if kind == "rl" else kind
        if (done := training.done_result(folder, done_kind)) is not None:
            return done
        if not (prompts if kind == "rl" else items):
            raise training.NoTrainingData(f"no {kind} data to train on")
        folder.mkdir(parents=True, exist_ok=True)
        job = StageJob(kind=kind, base=str(resolve_hf_folder(str(base))), stage=str(folder),
                       settings=settings.model_dump(mode="json"), target=spec,
                       reward_model=str(reward_model) if reward_model is not None else None,
                       mixed_precision=launch.mixed_precision, cpu=launch.cpu)
        if kind == "rl":
            job.prompts = str(write_prompts(list(prompts), folder / "prompts.jsonl"))
        else:
            job.data = str(export_items(items, folder / "train.jsonl", kind="sft" if kind == "sft" else "pairs"))
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
        started = time.perf_counter()
        cfg = self.cfg
        self.make_slices()
        base_name = f"{cfg.target.name}-base"
        current = cfg.target.model_copy(update={"name": base_name})
        self.serve_from(current, None)
        if cfg.evaluate_base:
            self.rated.append(current)
        before = "base"
        stage_recs: list[StageRecord] = []
        round_models: list[tuple[int, ModelSpec, list[StageRecord]]] = []
        last_eval: list[Rating] | None = None
        pending = False  # an evaluation skipped on resume (its models unchanged): the final one must run
        for r, rnd in enumerate(cfg.rounds):
            recs = []
            for i, stage in enumerate(rnd.stages):
                start_spec = current
                current, rec = self.run_stage(r, i, rnd, stage, start_spec, before)
                before = rec.fingerprint
                recs.append(rec)
                if rec.status == "done":
                    self.rated.append(current)
                if stage.kind in ("sft", "dpo"):
                    for b in self.baselines:
                        size = rec.examples if b != "all" else None
                        vspec, vrec = self.run_stage(r, i, rnd, stage, start_spec, rec.fingerprint, variant=b,
                                                     size=size)
                        if vrec.status == "done":
                            self.rated.append(vspec)
                        stage_recs.append(vrec)
                for v in stage.sweep if rec.status == "done" else ():  # same data, same start, other settings
                    vspec, vrec = self.run_stage(r, i, rnd, stage, start_spec, rec.fingerprint, variant=v)
                    if vrec.status == "done":
                        self.rated.append(vspec)
                    stage_recs.append(vrec)
                stage_recs.append(rec)
                last = i == len(rnd.stages) - 1
                if cfg.evaluate == "stages" or last:
                    label = f"round {r} stage {i} ({stage.kind})"
                    if not self.worked and any(e.after == label for e in self.state.evaluations):
                        pending = True  # resumed past it: nothing new to rate yet
                    else:
                        last_eval, pending = self.evaluate(label), False
            round_models.append((r, current, recs))
        if last_eval is None or pending:
            last_eval = self.evaluate(label if cfg.rounds else "start")
        return self.report(last_eval, round_models, stage_recs, time.perf_counter() - started)

    def evidence(self) -> Evidence | None:
        """Return the paired deltas, exact answers and verbosity of the test set's battles (None: nothing to rate)."""
        battles = self.store.get_battles(self.cfg.rating_judge.name, TEST_SET)
        if not battles:
            return None
        answers = self.store.get_answers(set_name=TEST_SET)
        ev = gather(battles, answers, self.test_prompts(), RateOptions(**self.cfg.ratings.model_dump()))
        if ev.style_note:
            self.say(f"[flywheel] no style-controlled ratings: {ev.style_note}")
        return ev

    def report(self, ratings: list[Rating], round_models: list[tuple[int, ModelSpec, list[StageRecord]]],
               stage_recs: list[StageRecord], seconds: float) -> FlywheelReport:
        """Return the round table of ``ratings`` (the last evaluation's); keep it and the stage ratings in the state."""
        by_name = {r.model: r for r in ratings}
        rep = FlywheelReport(ratings=ratings, seconds=seconds, judges=self.cfg.judges_line(),
                             slices={k: v.model_dump(mode="json") for k, v in self.state.slices.items()})
        base_name = f"{self.cfg.target.name}-base"
        ev = self.evidence()
        rated_refs = [by_name[m.name] for m in self.refs if m.name in by_name]
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
            rep.rounds.append(RoundRow(
                round=r, **RatedModel.of(spec.name, by_name.get(spec.name)).model_dump(include={
                    "model", "rating", "ci_low", "ci_high"}),
                sft_examples=sum(x.examples for x in recs if x.kind == "sft"),
                dpo_pairs=sum(x.examples for x in recs if x.kind == "dpo"),
                rm_pairs=sum(x.examples for x in recs if x.kind == "rl"),
                train_loss=done[-1].train_loss if done else None,
                stages=[x.kind for x in recs], by_model={x.key: x.by_model for x in recs},
                **compared(spec.name, prev_round)))
            prev_round = spec.name
        for x in stage_recs:
            is_rated = x.status == "done"
            rated = RatedModel.of(x.model, by_name.get(x.model) if is_rated else None)
            x.rating, x.ci_low, x.ci_high = rated.rating, rated.ci_low, rated.ci_high
            fields = compared(x.model, self.started_from.get(x.key)) if is_rated else {}
            for name in EVIDENCE_KEYS:  # a stage not rated now keeps no figures of an earlier run
                setattr(x, name, fields.get(name))
            (rep.ablations if x.ablation else rep.stages).append(x)
        rep.references = [RatedModel.of(m.name, by_name.get(m.name)).model_copy(update=measured(m.name))
                          for m in self.refs]
        if base_name in by_name:
            rep.base = RatedModel.of(base_name, by_name[base_name]).model_copy(update=measured(base_name))
        self.state.last_report = rep.table()
        self.state.runs.append(RunRecord(seconds=round(seconds, 1), trained=self.worked,
                                         finished=time.strftime("%Y-%m-%d %H:%M:%S")))
        self._save_state()
        return rep


def stage_folder(root: Path, r: int, i: int, kind: str, variant: str | None = None) -> Path:
    """Return the folder of stage ``i`` of round ``r`` (or of its ablation ``variant``) under the flywheel root."""
    return root / f"round-{r}" / (f"{i}-{kind}" + (f"-{variant}" if variant else ""))


def stage_key(r: int, i: int, kind: str, variant: str | None = None) -> str:
    """Return a stage's key in the state and the tables: ``rR.I-KIND[-VARIANT]``."""
    return f"r{r}.{i}-{kind}" + (f"-{variant}" if variant else "")


def launch_plan(cfg: FlywheelConfig, workspace: str | Path,
                baselines: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Return the command that trains each stage of ``cfg`` (in run order), with its job file and kind.

    The job files are written by the round runner when the stage's data is harvested; the commands
    are exactly what it runs then (``training.launch``).
    """
    root = Path(workspace) / "flywheel"
    chosen = list(cfg.harvest.baselines if baselines is None else baselines)
    launch = cfg.training.launch
    out = []
    for r, rnd in enumerate(cfg.rounds):
        for i, stage in enumerate(rnd.stages):
            variants: list[str | None] = [None, *(chosen if stage.kind in ("sft", "dpo") else [])]
            for variant in variants:
                folder = stage_folder(root, r, i, stage.kind, variant)
                jobs = [("rm", folder / "rm")] if stage.kind == "rl" and cfg.training.rl.reward == "model" else []
                for kind, where in [*jobs, (stage.kind, folder)]:
                    job = where / JOB_FILE
                    out.append({"stage": stage_key(r, i, stage.kind, variant), "round": r, "kind": kind,
                                "launcher": launch.launcher, "job": str(job), "command": launch_command(launch, job)})
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
