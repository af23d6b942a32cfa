"""The stages of a run, each a function of (config, store): prompts -> answers -> battles -> ratings.

``run_stages`` runs them in their order (``arena run``, and the flywheel on each slice and on the
test set); the CLI also runs them one at a time. Each stage reads the previous stage's artifacts
from the store, so any stage can be rerun alone; the ledger makes a rerun free. The caller makes
the prompts (``stage_prompts`` for the test set) and passes them to every stage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml
from pydantic import BaseModel

from .arena.answers import answer_prompts
from .arena.battles import combine_games, plan_battles
from .arena.judges import Judge, PairTask, VerifierJudge, judge_session
from .arena.schedule import AdaptiveScheduler, run_schedule, schedule_pairs
from .config import JudgeConfig, ModelSpec, RunConfig, validate_config
from .engines import build_engine
from .engines.calls import CallStats
from .engines.spend import spending
from .errors import ArenaError
from .progress import Track, tracking
from .records import Answer, Battle, Judgment, Prompt, Rating
from .store import DEFAULT_SET, Store
from .tasks import generate_tasks

if TYPE_CHECKING:
    from .rating.gaps import GapReport
    from .rating.lengthcontrol import LCWinRate
    from .rating.prompt_board import PromptBoard
    from .rating.style import StyleResult

TEST_SET = DEFAULT_SET


class Named(Protocol):
    """A config with a name and maybe a workspace: a run's or a flywheel's."""

    name: str
    workspace: str | None


def workspace_for(cfg: Named, override: str | Path | None = None) -> Path:
    """Return the workspace directory: the CLI's, else the config's, else workspaces/<name>."""
    if override is not None:
        return Path(override)
    if cfg.workspace:
        return Path(cfg.workspace)
    return Path("workspaces") / cfg.name


def save_config(cfg: BaseModel, store: Store, key: str = "config", file_name: str = "config.resolved.yaml") -> None:
    """Save the resolved config beside the results: YAML for people (``file_name``), JSON in the store (``key``)."""
    from .cpu_isa import describe

    data = cfg.model_dump(mode="json")
    (store.root / file_name).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    store.set_meta(key, data)
    # the CPU kernels the process that runs the config computes with (cpu_isa): the manifest says them
    store.set_meta("cpu_kernels", describe())


def load_saved_config(store: Store) -> RunConfig:
    data = store.get_meta("config")
    if data is None:
        raise ArenaError(f"{store.root} holds no run: run `arena run CONFIG --workspace {store.root}` first")
    # A workspace written by another version may not validate: say so rather than crash.
    return validate_config(data, RunConfig, f"the config saved in {store.root} (rerun `arena run` to refresh it)")


def few_shot_questions(specs: Iterable[ModelSpec]) -> set[str]:
    """Return every question shown as a few-shot example in the prompt formats of ``specs``."""
    return {q for spec in specs for q, _ in spec.prompt_format.few_shot}


def run_models(cfg: RunConfig) -> list[ModelSpec]:
    """Return every model of the run: the contestants, then the judges' models."""
    return [*cfg.models, *(j.model for j in [cfg.judge, *cfg.judge.members] if j.model is not None)]


def stage_prompts(cfg: RunConfig, store: Store) -> list[Prompt]:
    """Make the test set (the built-in task suite, or the configured open prompts) and store it."""
    prompts = make_test_set(cfg, store)
    store.put_prompts(TEST_SET, prompts)
    return prompts


def make_test_set(cfg: RunConfig, store: Store | None) -> list[Prompt]:
    """Return the test set the config names, storing nothing (``store``: where ``prompts.set`` is read)."""
    src = cfg.prompts
    if src is None:
        prompts = generate_tasks(cfg.tasks.n, seed=cfg.tasks.seed, categories=cfg.tasks.categories,
                                 exclude=few_shot_questions(run_models(cfg)), suite=cfg.tasks.suite)
    elif src.set is not None:
        if store is None:
            raise ArenaError(f"prompts.set {src.set!r} is read from the workspace, and there is none yet: fill it "
                             f"with `arena ingest` or `arena testset build` first")
        prompts = store.get_prompts(src.set)
        if not prompts:
            have = ", ".join(sorted(store.prompt_sets())) or "none"
            raise ArenaError(f"prompts.set {src.set!r} is empty or missing in {store.root} (sets there: {have}); "
                             f"fill it with `arena ingest` or `arena testset build`")
    else:
        from .curate.ingest import ingest
        from .curate.settings import SourceSpec

        prompts = ingest([SourceSpec(path=src.path, format=src.format)]).prompts
        if not prompts:
            raise ArenaError(f"prompts.path {src.path} holds no prompts")
    if src is not None and src.limit is not None:
        prompts = prompts[: src.limit]
    return prompts


@dataclass
class AnswerReport:
    stats: dict[str, CallStats] = field(default_factory=dict)
    incomplete: dict[str, int] = field(default_factory=dict)


def stage_answer(cfg: RunConfig, store: Store, *, prompts: list[Prompt], show_progress: bool = True,
                 set_name: str = TEST_SET, skip: Collection[str] = (), fill_empty: bool = False) -> AnswerReport:
    """Have every contestant (but those named in ``skip``) answer ``prompts``; return call stats per model.

    Answers are stored under ``set_name`` (the test set by default; a training slice's name in the flywheel).
    ``fill_empty``: a prompt a model gave no answer to (its calls failed) gets an empty answer, which the
    judge scores as such (the flywheel: a model that says nothing loses the prompt).
    """
    report = AnswerReport()
    todo = [spec for spec in cfg.models if spec.name not in skip]
    if not todo:
        return report

    async def go(progress: Track | None) -> None:
        for spec in todo:
            if not spec.engine_kind.makes_calls:  # imported: its answers are in the store already
                have = {a.prompt_id for a in store.get_answers(spec.name, set_name)}
                missing = sum(1 for p in prompts if p.id not in have)
                report.incomplete[spec.name] = missing
                report.stats[spec.name] = CallStats(cached=len(prompts) - missing)
                continue
            engine = build_engine(spec)
            result = await answer_prompts(store, spec.name, engine, prompts, progress=progress, set_name=set_name)
            report.stats[spec.name] = result.stats
            report.incomplete[spec.name] = len(result.incomplete)
            if fill_empty:
                _fill_empty(store, spec.name, prompts, set_name)

    with spending(store, stage_name("answers", set_name), spend_limit(cfg)), tracking(show_progress) as progress:
        asyncio.run(go(progress if show_progress else None))
    # Kept for reports and for checking that a rerun sent only what the ledger lacked.
    store.set_meta(
        "answer_stats",
        {name: {**vars(s), "errors": s.errors[:5], "incomplete": report.incomplete[name]}
         for name, s in report.stats.items()},
    )
    return report


def stage_name(stage: str, set_name: str) -> str:
    """Return the ledger's name of ``stage`` on ``set_name``: the stage alone on the test set, else
    ``stage/set`` (a flywheel slice)."""
    return stage if set_name == TEST_SET else f"{stage}/{set_name}"


def spend_limit(cfg: RunConfig) -> float | None:
    """Return the USD the run may spend (its workspace's ledger, every run together), or None: no limit."""
    return cfg.spend_limit.usd if cfg.spend_limit is not None else None


def _fill_empty(store: Store, model: str, prompts: list[Prompt], set_name: str) -> None:
    have = {a.prompt_id for a in store.get_answers(model, set_name)}
    empty = [Answer(prompt_id=p.id, model=model, turns=[""] * len(p.turns)) for p in prompts if p.id not in have]
    if empty:
        store.put_answers(empty, set_name)


@dataclass
class BattleReport:
    battles: list[Battle]
    judged: int
    missing: dict[str, int]
    failed: int = 0
    stats: dict | None = None  # an LLM judge's parsed / retried / failed counts and tokens
    self_preference: list = field(default_factory=list)  # arena.self_judging.SelfPreference per judge of a family
    canaries: Any = None  # arena.canaries.CanaryReport (None: no canaries, e.g. the verifier)


def make_judge(cfg: RunConfig) -> Judge:
    """Return the judge the config names."""
    if cfg.judge.kind == "verifier":
        return VerifierJudge(cfg.judge.name, cfg.judge.tie_threshold)
    from .arena.llm_judges import build_judge

    return build_judge(cfg.judge)


def stage_battle(cfg: RunConfig, store: Store, *, prompts: list[Prompt], show_progress: bool = True,
                 set_name: str = TEST_SET) -> BattleReport:
    """Judge the scheduled pairs on the ``prompts`` both answered; store judgments and battles under ``set_name``."""
    names = [m.name for m in cfg.models]
    ids = {p.id for p in prompts}
    answers = [a for a in store.get_answers(set_name=set_name) if a.model in set(names) and a.prompt_id in ids]
    if not prompts or not answers:
        raise ArenaError(f"{store.root} has no answers yet: run `arena answer` (or `arena run`) first")
    from .arena.self_judging import check_self_judging, warn_self_preference

    # a judge that is a contestant is refused before any call
    kin = check_self_judging(cfg.judge, cfg.models, allow=cfg.audit.allow_self_judging)
    judge = make_judge(cfg)
    sched = cfg.battles
    judge_names = {cfg.judge.name, *(m.name for m in cfg.judge.members)}

    # One event loop and one session per judge engine for the whole stage: every batch, canaries included.
    with judge_session(judge) as run:
        with spending(store, stage_name("battles", set_name), spend_limit(cfg)), tracking(show_progress) as track:
            progress = track if show_progress else None

            def judge_tasks(tasks: list[PairTask]) -> list[Judgment]:
                return run(judge.judge_pairs(store, tasks, progress))

            if sched.schedule == "adaptive":
                judgments, missing = _adaptive(cfg, prompts, answers, judge_tasks)
            else:
                pairs = schedule_pairs(sched.schedule, names, baseline=sched.baseline, target=sched.target)
                plan = plan_battles(prompts, answers, pairs)
                judgments, missing = judge_tasks(plan.tasks), plan.missing
        # Judgments of earlier runs (other models, prompts or judge settings) must not mix into audits.
        store.replace_judgments(judge_names, judgments, set_name)
        mine = [j for j in judgments if j.judge == cfg.judge.name]
        with spending(store, stage_name("canaries", set_name), spend_limit(cfg)):
            canaries = _canaries(cfg, store, judge, run, judge_names, prompts, answers, mine, set_name) \
                if cfg.audit.enabled(cfg.judge) else None
    costs = judge.call_stats()
    for name, judge_stats in costs.items():
        store.set_meta(f"judge_stats/{name}", judge_stats)
    stats = costs.get(judge.name)
    battles = combine_games(mine, cfg.judge.tie_threshold, mode=cfg.judge.combine,
                            strong_weight=cfg.judge.strong_weight)
    store.replace_battles(cfg.judge.name, battles, set_name)
    failed = sum(1 for j in mine if j.status == "failed")
    preference = warn_self_preference(cfg.judge, kin, battles)
    store.set_meta(f"self_preference/{cfg.judge.name}/{set_name}", [asdict(sp) for sp in preference])
    return BattleReport(battles=battles, judged=len(judgments), missing=missing, failed=failed, stats=stats,
                        self_preference=preference, canaries=canaries)


def _canaries(cfg: RunConfig, store: Store, judge: Judge, run: Callable[[Any], list[Judgment]], judge_names: set[str],
              prompts: list[Prompt], answers: list, games: list[Judgment], set_name: str):
    """Plant the canaries (arena.canaries) beside ``games``, judge them with ``run`` (the stage's judge_session),
    store them apart (their own prompt set) and their report in the store; warn when the judge failed one.
    Return the ``CanaryReport``."""
    import warnings

    from .arena import canaries as cn

    audit = cfg.audit
    run_games = len({(j.prompt_id, frozenset((j.model_a, j.model_b))) for j in games})
    tasks = cn.plant(prompts, answers, [m.name for m in cfg.models], run_games, audit.share, audit.seed)
    planted = run(judge.judge_pairs(store, tasks)) if tasks else []
    where = f"{cn.CANARY_SET}/{set_name}"
    store.replace_judgments(judge_names, planted, where)
    report = cn.evaluate(cfg.judge.name, set_name, [j for j in planted if j.judge == cfg.judge.name], games,
                         audit.thresholds())
    store.set_meta(f"canaries/{cfg.judge.name}/{set_name}", report.as_dict())
    line = report.warning()
    if line is not None:
        warnings.warn(cn.CanaryWarning(line), stacklevel=2)
    return report


def _adaptive(cfg: RunConfig, prompts: list[Prompt], answers: list,
              judge_tasks: Callable[[list[PairTask]], list[Judgment]]) -> tuple[list[Judgment], dict]:
    """Judge in batches chosen by the adaptive scheduler, refitting ratings between batches."""
    names = [m.name for m in cfg.models]
    by_key = {(a.prompt_id, a.model): a for a in answers}
    by_id = {p.id: p for p in prompts}
    # Only prompts every model answered: the scheduler may pair any two models on any of them.
    usable = [p.id for p in prompts if all((p.id, m) in by_key for m in names)]
    missing = {m: sum(1 for p in prompts if (p.id, m) not in by_key) for m in names}
    scheduler = AdaptiveScheduler(names, usable, batch_size=cfg.battles.batch_size, budget=cfg.battles.budget,
                                  seed=cfg.battles.seed)
    judgments: list[Judgment] = []

    def judge_batch(batch: list) -> list[Battle]:
        tasks = [PairTask(by_id[pid], by_key[(pid, a)], by_key[(pid, b)]) for pid, a, b in batch]
        got = judge_tasks(tasks)
        judgments.extend(got)
        mine = [j for j in got if j.judge == cfg.judge.name]
        return combine_games(mine, cfg.judge.tie_threshold, mode=cfg.judge.combine,
                             strong_weight=cfg.judge.strong_weight)

    run_schedule(scheduler, judge_batch)
    return judgments, {m: n for m, n in missing.items() if n}


@dataclass
class RunResult:
    answers: AnswerReport
    battles: BattleReport
    ratings: list[Rating] | None = None


def run_stages(cfg: RunConfig, store: Store, prompts: list[Prompt], *, set_name: str = TEST_SET,
               show_progress: bool = True, rate: bool = True, skip: Collection[str] = (), fill_empty: bool = False,
               on_answers: Callable[[AnswerReport], None] | None = None,
               on_battles: Callable[[BattleReport], None] | None = None) -> RunResult:
    """Run the stages of a run on ``prompts`` in their order: answers, battles, then (``rate``) the leaderboard.

    ``on_answers`` / ``on_battles`` get each stage's report as soon as it is done (the CLI prints it,
    the flywheel keeps which models answered). ``skip`` and ``fill_empty`` are ``stage_answer``'s.
    """
    answers = stage_answer(cfg, store, prompts=prompts, show_progress=show_progress, set_name=set_name, skip=skip,
                           fill_empty=fill_empty)
    if on_answers is not None:
        on_answers(answers)
    battles = stage_battle(cfg, store, prompts=prompts, show_progress=show_progress, set_name=set_name)
    if on_battles is not None:
        on_battles(battles)
    ratings = stage_ratings(cfg, store, set_name) if rate else None
    return RunResult(answers=answers, battles=battles, ratings=ratings)


def stage_usage(cfg: RunConfig, store: Store) -> list[dict]:
    """Return ``usage`` and keep it in the store (meta ``usage``)."""
    rows = usage(cfg, store)
    store.set_meta("usage", rows)
    return rows


def usage(cfg: RunConfig, store: Store) -> list[dict]:
    """Return calls, tokens in/out and cost of each contestant and judge behind the stored results.

    Tokens count every call behind an answer or verdict, served from the ledger or not (what
    the results cost when they were made), and only those: answers to prompts of the current
    test set (not of an earlier, larger one, nor of training slices). Cost uses the model's
    price_in / price_out per 1M tokens.
    """
    current = {p.id for p in store.get_prompts(TEST_SET)}
    rows = []

    def row(role: str, name: str, spec: ModelSpec | None, calls: int, tin: int, tout: int) -> None:
        cost = (tin * spec.price_in + tout * spec.price_out) / 1e6 if spec is not None else 0.0
        rows.append({"role": role, "name": name, "calls": calls, "tokens_in": tin, "tokens_out": tout, "cost": cost})

    for spec in cfg.models:
        answers = [a for a in store.get_answers(spec.name) if a.prompt_id in current]
        row("contestant", spec.name, spec, sum(len(a.turns) for a in answers),
            sum(a.tokens_in for a in answers), sum(a.tokens_out for a in answers))
    for j in [cfg.judge, *cfg.judge.members]:
        s = store.get_meta(f"judge_stats/{j.name}")
        if s is not None and j.model is not None:
            row("judge", j.name, j.model, s.get("calls", 0), s.get("tokens_in", 0), s.get("tokens_out", 0))
    return rows


def stored_battles(cfg: RunConfig, store: Store, set_name: str = TEST_SET) -> list[Battle]:
    """Return the battles of the run's judge on ``set_name``; none is an error that says which command makes them."""
    battles = store.get_battles(cfg.judge.name, set_name)
    if not battles:
        raise ArenaError(f"{store.root} has no battles yet: run `arena battle` (or `arena run`) first")
    return battles


def stage_ratings(cfg: RunConfig, store: Store, set_name: str = TEST_SET) -> list[Rating]:
    """Return the leaderboard of the stored battles (of the test set, or of ``set_name``)."""
    from .rating.bt import leaderboard

    battles = stored_battles(cfg, store, set_name)
    r = cfg.ratings
    return leaderboard(
        battles, anchor=r.anchor, anchor_rating=r.anchor_rating, bootstrap=r.bootstrap, resample=r.resample, seed=r.seed
    )


def stage_style_control(cfg: RunConfig, store: Store) -> StyleResult:
    """Return ratings with and without style control (length, headers, lists, bold of the answers)."""
    from .rating.style import style_control, style_features

    battles = stored_battles(cfg, store)
    text = {(a.prompt_id, a.model): "\n\n".join(a.turns) for a in store.get_answers()}
    features_a = style_features([text.get((b.prompt_id, b.model_a), "") for b in battles])
    features_b = style_features([text.get((b.prompt_id, b.model_b), "") for b in battles])
    r = cfg.ratings
    return style_control(battles, features_a, features_b, anchor=r.anchor, anchor_rating=r.anchor_rating,
                         bootstrap=r.bootstrap, resample=r.resample, seed=r.seed)


REANCHOR_SET = "reanchor/" + TEST_SET
"""Where ``stage_reanchor`` keeps the new judge's games and battles (never rated as the run's board)."""


def stage_reanchor(cfg: RunConfig, store: Store, new_judge: JudgeConfig, *, anchors: int = 200, seed: int = 0,
                   bootstrap: int = 200):
    """Have ``new_judge`` judge ``anchors`` battles drawn from the run's, and return rating.reanchor.Reanchor: the
    map from the run's judge's ratings to the new one's, and the models whose rank it moves."""
    from .arena.self_judging import check_self_judging
    from .rating.reanchor import reanchor, sample_anchors

    if new_judge.name == cfg.judge.name:
        raise ArenaError(f"the new judge is named {new_judge.name!r}, as the run's: give it a name of its own")
    old = stored_battles(cfg, store)
    picked = sample_anchors(old, anchors, seed)
    check_self_judging(new_judge, cfg.models, allow=cfg.audit.allow_self_judging)
    by_key = {(a.prompt_id, a.model): a for a in store.get_answers(set_name=TEST_SET)}
    prompts = {p.id: p for p in store.get_prompts(TEST_SET)}
    tasks = [PairTask(prompt=prompts[p], answer_a=by_key[(p, a)], answer_b=by_key[(p, b)]) for p, a, b in picked
             if p in prompts and (p, a) in by_key and (p, b) in by_key]
    if not tasks:
        raise ArenaError(f"{store.root}: no battle of {cfg.judge.name!r} has both answers stored to judge again")
    new_cfg = cfg.model_copy(update={"judge": new_judge})
    judge = make_judge(new_cfg)
    with judge_session(judge) as run:
        judgments = run(judge.judge_pairs(store, tasks))
    names = {new_judge.name, *(m.name for m in new_judge.members)}
    store.replace_judgments(names, judgments, REANCHOR_SET)
    mine = [j for j in judgments if j.judge == new_judge.name]
    new = combine_games(mine, new_judge.tie_threshold, mode=new_judge.combine, strong_weight=new_judge.strong_weight)
    store.replace_battles(new_judge.name, new, REANCHOR_SET)
    keys = {(t.prompt.id, *sorted((t.answer_a.model, t.answer_b.model))) for t in tasks}
    old_anchors = [b for b in old if (b.prompt_id, *sorted((b.model_a, b.model_b))) in keys]
    return reanchor(cfg.judge.name, new_judge.name, old_anchors, new, stage_ratings(cfg, store),
                    bootstrap=bootstrap, seed=seed)


def workspace_manifest(path: str | Path, judge: str | None = None) -> dict | None:
    """Return the manifest of the board of ``judge`` (default: the run's) in the workspace at ``path``
    (arena.manifest); None when the workspace holds no run and no ``judge`` is named. A judge that is not the
    run's (imported judgments) is named alone: its settings are not in the workspace."""
    from .arena.canaries import stored_reports
    from .arena.manifest import board_manifest, imported_manifest

    with Store(path, readonly=True) as store:
        has_run = store.get_meta("config") is not None
        if not has_run and judge is None:
            return None
        prompts = store.get_prompts(TEST_SET)
        if has_run:
            cfg = load_saved_config(store)
            if judge is None or judge == cfg.judge.name:
                reports = [r.as_dict() for r in stored_reports(store, cfg.judge.name)]
                kernels = store.get_meta("cpu_kernels")
                return {**board_manifest(cfg, prompts, reports), **({"cpu_kernels": kernels} if kernels else {})}
        assert judge is not None
        return imported_manifest(judge, prompts, [r.as_dict() for r in stored_reports(store, judge)])


def workspace_board(path: str | Path) -> list[Rating]:
    """Return the leaderboard of the run stored in the workspace at ``path``."""
    with Store(path, readonly=True) as store:
        return stage_ratings(load_saved_config(store), store)


def scoring_judge(cfg: RunConfig, name: str | None = None) -> JudgeConfig:
    """Return the config of the judge named ``name`` (default: the run's) if it grades answers alone.

    Absolute scores need grades of single answers: a ``single``-mode judge folder (MT-Bench
    grading) or the verifier. A pairwise judge's scores are relative to the other answer.
    """
    from .arena.llm_judges import load_judge_spec

    judges = {j.name: j for j in [cfg.judge, *cfg.judge.members]}
    j = judges.get(name or cfg.judge.name)
    if j is None:
        raise ArenaError(f"judge {name!r} is not in this run; its judges are {', '.join(judges)}")
    if j.kind == "panel":
        singles = [m.name for m in j.members if m.kind == "verifier"
                   or (m.kind == "llm" and load_judge_spec(m.template).mode == "single")]
        hint = f"choose a member that grades alone with --judge ({', '.join(singles)})" if singles else \
            "none of its members grades answers alone"
        raise ArenaError(f"judge {j.name!r} is a panel; its scores are means over judges, not grades: {hint}")
    if j.kind == "llm" and load_judge_spec(j.template).mode != "single":
        raise ArenaError(f"judge {j.name!r} grades pairs (template {j.template!r}): absolute scores need a "
                         "single-answer judge; run one with `judge: {kind: llm, template: single, ...}`")
    return j


def stage_scores(cfg: RunConfig | None, store: Store, judge: str | None = None, *, bootstrap: int = 1000,
                 seed: int = 0):
    """Return (judge name, rating.scores.ModelScores rows): MT-Bench-style absolute scores of the test set.

    ``cfg`` None: a workspace with no run of its own (judgments from `arena import-judgments`);
    ``judge`` must then be named.
    """
    from .arena.peers import split_turn
    from .rating.scores import score_table

    known = {j.name for j in [cfg.judge, *cfg.judge.members]} if cfg is not None else set()
    have = store.judgment_judges()
    if judge is None and cfg is None:
        raise ArenaError(f"{store.root} holds no run config: name the judge with --judge (judges with judgments "
                         f"here: {', '.join(have) or 'none'})")
    # a judge outside the config (judgments imported with `arena import-judgments`) is taken as it
    # is; score_table refuses grades that differ between the pairs of one answer
    if judge is not None and judge not in known:
        name = judge
    else:
        assert cfg is not None  # without a config a judge was named (refused above otherwise), and known is empty
        name = scoring_judge(cfg, judge).name
    judgments = store.get_judgments(name)
    if not judgments:
        raise ArenaError(f"{store.root} has no judgments by {name!r}: run `arena battle` (or `arena run`) first, "
                         f"or name a judge that has some (here: {', '.join(have) or 'none'})")
    prompts = store.get_prompts(TEST_SET) or [p for s in store.prompt_sets() for p in store.get_prompts(s)]
    return name, score_table(judgments, prompts, bootstrap=bootstrap, seed=seed, turn_of=split_turn)


def stage_lc_winrates(cfg: RunConfig, store: Store, reference: str, *, bootstrap: int = 200,
                      length_slope: str = "pooled", alpaca_eval_exact: bool = False, gamed: Path | None = None,
                      difficulty: Path | None = None) -> list[LCWinRate]:
    """Return rating.lengthcontrol.LCWinRate rows: raw and length-controlled win rates against ``reference``;
    with ``alpaca_eval_exact``, computed as AlpacaEval computes them (rating.alpaca_exact), their gamed rows
    and instruction difficulties read from ``gamed`` / ``difficulty`` when given."""
    from .rating.lengthcontrol import lc_win_rates

    battles = stored_battles(cfg, store)
    players = {m for b in battles for m in (b.model_a, b.model_b)}
    if reference not in players:
        raise ArenaError(f"the reference {reference!r} played no battle here; the models are "
                         f"{', '.join(sorted(players))}")
    # AlpacaEval measures length in characters of the output; a multi-turn answer counts all its turns
    lengths = {(a.prompt_id, a.model): float(sum(len(t) for t in a.turns)) for a in store.get_answers()}
    if alpaca_eval_exact:
        from .rating.alpaca_exact import alpaca_eval_lc_win_rates, read_difficulty, read_gamed

        # AlpacaEval's index: the prompt's position in the test set (theirs, when it is their 805 in order)
        positions = {p.id: i for i, p in enumerate(store.get_prompts(TEST_SET))}
        return alpaca_eval_lc_win_rates(
            battles, lengths, reference, positions, gamed=read_gamed(gamed) if gamed else None,
            difficulty=read_difficulty(difficulty) if difficulty else None, bootstrap=bootstrap, seed=cfg.ratings.seed)
    if gamed is not None or difficulty is not None:
        raise ArenaError("--gamed and --instruction-difficulty are AlpacaEval's tables: add --alpaca-eval-exact")
    return lc_win_rates(battles, lengths, reference, bootstrap=bootstrap, seed=cfg.ratings.seed,
                        length_slope=length_slope)


def stage_group_boards(cfg: RunConfig, store: Store, by: str, *, bootstrap: int | None = None
                       ) -> tuple[dict[str, list[Rating]], dict[str, str]]:
    """Return (group -> leaderboard, group -> why it has none) of the test set's battles grouped ``by``."""
    from .rating.groups import group_boards

    battles = stored_battles(cfg, store)
    r = cfg.ratings
    return group_boards(battles, store.get_prompts(TEST_SET), by, anchor=r.anchor, anchor_rating=r.anchor_rating,
                        bootstrap=r.bootstrap if bootstrap is None else bootstrap, resample=r.resample, seed=r.seed)


def group_labels(prompts: Sequence[Prompt], by: str) -> dict[str, str]:
    """Return group -> its readable label (clusters: the label ``arena testset build`` stored); others: none."""
    from .curate.labels import LABEL_KEY

    if by != "cluster":
        return {}
    return {str(p.cluster): str(p.meta[LABEL_KEY]) for p in prompts if p.cluster is not None and p.meta.get(LABEL_KEY)}


def stage_group_gaps(store: Store, by: str, target: str, judge: str, *, min_prompts: int = 10,
                     names: dict[str, str] | None = None) -> tuple[GapReport, dict[str, str]]:
    """Return the target's per-group gaps on the test set's battles of ``judge`` grouped ``by``, and the first
    turns of the prompts it lost. An arena run's workspace or a flywheel's: the rating settings are its own."""
    from .config import RatingConfig
    from .rating.gaps import group_gaps

    battles = store.get_battles(judge, TEST_SET)
    if not battles:
        raise ArenaError(f"no battles of judge {judge!r} on the test set: run `arena battle` (or `arena run`, "
                         "`arena flywheel`) first")
    prompts = store.get_prompts(TEST_SET)
    saved = store.get_meta("config") or store.get_meta("flywheel_config") or {}
    r = RatingConfig.model_validate(saved.get("ratings", {}) if isinstance(saved, dict) else {})
    report = group_gaps(battles, prompts, by, target, bootstrap=max(r.bootstrap, 100), seed=r.seed,
                        min_prompts=min_prompts, labels={**group_labels(prompts, by), **(names or {})})
    wanted = {pid for g in report.groups for pid in g.lost}
    return report, {p.id: p.turns[0] for p in prompts if p.id in wanted}


def prompt_board_judge(store: Store, judge: str | None = None) -> str:
    """Return whose test-set battles a prompt's board uses: ``judge``, else the run's judge, else the only judge
    with battles on the test set; an ArenaError naming the choices otherwise."""
    if judge is None and store.get_meta("config") is not None:
        judge = load_saved_config(store).judge.name
    have = sorted({b.judge for b in store.get_battles(None, TEST_SET)})
    if not have:
        raise ArenaError(f"{store.root} has no battles on the test set: run `arena battle` (or `arena run`) first")
    if judge is None:
        if len(have) > 1:
            raise ArenaError(f"{store.root}: battles of several judges on the test set ({', '.join(have)}): "
                             "name one with --judge")
        return have[0]
    if judge not in have:
        raise ArenaError(f"{store.root}: no test-set battles by judge {judge!r}; judges with some: {', '.join(have)}")
    return judge


def stage_prompt_board(store: Store, *, text: str | None = None, prompt_id: str | None = None, k: int | None = None,
                       judge: str | None = None, bootstrap: int | None = None,
                       embed: Callable[[list[str]], Any] | None = None) -> PromptBoard:
    """Return the leaderboard of one prompt (rating.prompt_board): Bradley-Terry on the battles of the ``k`` test
    prompts nearest to ``text``, or to the test prompt ``prompt_id`` (itself included, the nearest).

    ``embed`` (texts -> unit-length float32 (N, D)) defaults to the bundled all-MiniLM-L6-v2; every input is
    checked before it is called, so a bad id or ``k`` costs no model load.
    """
    from .curate.embed import embedding_texts, text_embedder
    from .curate.settings import EmbedSettings
    from .rating.prompt_board import check_k, prompt_board, rated_prompts

    if (text is None) == (prompt_id is None):
        raise ArenaError("give the prompt as text (--prompt) or as the id of a test prompt (--id), one of the two")
    if text is not None and not text.strip():
        raise ArenaError("the prompt text is empty: give the words of the prompt with --prompt")
    name = prompt_board_judge(store, judge)
    battles = store.get_battles(name, TEST_SET)
    prompts = rated_prompts(battles, store.get_prompts(TEST_SET))
    ids = [p.id for p in prompts]
    if prompt_id is not None and prompt_id not in ids:
        known = {p.id for p in store.get_prompts(TEST_SET)}
        why = "it has no battle" if prompt_id in known else "no test prompt has this id"
        raise ArenaError(f"prompt id {prompt_id!r}: {why} in {store.root} (`arena view` lists the prompts; or give "
                         "the text with --prompt)")
    if k is None:  # the default: 50 (measured best), or every prompt of a smaller test set
        k = min(50, max(len(prompts), 1))
    check_k(k, len(prompts))
    cfg = load_saved_config(store) if store.get_meta("config") is not None else None
    rounds = bootstrap if bootstrap is not None else max(cfg.ratings.bootstrap, 100) if cfg else 100
    embed = embed or text_embedder(EmbedSettings())
    emb = embed(embedding_texts(prompts))
    query = emb[ids.index(prompt_id)] if prompt_id is not None else embed([text or ""])[0]
    return prompt_board(battles, prompts, emb, query, k, bootstrap=rounds, seed=cfg.ratings.seed if cfg else 0)
