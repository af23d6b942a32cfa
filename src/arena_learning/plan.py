"""The plan of a run, before it runs: the calls it will make, how many the ledger already holds, tokens and cost.

Counts follow the stages as they call the ledger: every contestant answers every prompt turn by turn
(prompts x models x turns; a model with ``vote`` makes its k samples per prompt and turn, k x the calls,
and its line says so); the judge plays each scheduled pair on each prompt, in both orders when
``both_orders`` and once per turn (pairwise judges), or grades each answer once per turn (single
judges); a panel's members each judge every game; the verifier makes no call. A call the ledger holds
(or one this plan already counted earlier in the same run) costs nothing: it is ``cached``. Where a
call's text depends on an answer not made yet, it cannot be in the ledger and counts as to send.

The plan assumes every call succeeds and every verdict parses: a judge re-asks an unparsable verdict
up to ``retries`` times (new calls), and the adaptive schedule's calls are its budget (which pairs it
picks depends on the verdicts, so what the ledger holds of them is not known in advance).

Tokens are estimated, not counted: characters / 4 of the text each call sends (the rendered
completion prompt, or the chat messages), with answers not made yet as ``max_tokens`` each; output
tokens are ``max_tokens`` per call, an upper bound. Cost is ``price_in`` / ``price_out`` per 1M tokens
of each model, for the calls to send; ``cost_batch`` is the same calls at the model's batch price
(``price_batch``: half, for engines whose hosted APIs sell batches), None for an engine without one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

from . import pipeline
from .arena.answers import conversation, pick, turn_requests
from .arena.schedule import schedule_pairs
from .arena.vote import cost_note
from .config import JudgeConfig, ModelSpec, RunConfig
from .engines import build_engine
from .engines.base import CallFailed, Completion, Engine, Request
from .engines.calls import is_empty, request_key
from .engines.spend import CHARS_PER_TOKEN, call_cost, estimate_tokens, request_chars
from .errors import ArenaError
from .records import Answer, Prompt
from .store import Store

if TYPE_CHECKING:
    from .arena.llm_judges import JudgeSpec
    from .engines.speed import Timing

TOKEN_METHOD = ("estimated: characters / 4 of the text each call sends (answers not made yet counted at "
                "max_tokens); output at max_tokens per call (an upper bound)")


@dataclass
class PlanLine:
    """One row of the plan: a model's calls in one step of one stage."""

    stage: str  # "test set", "r0.0-sft (slice D0)", "evaluate after round 0"
    step: str  # answer, judge, train
    model: str
    calls: int = 0  # calls the step makes (cached ones included)
    cached: int | None = 0  # of them, held by the ledger or made earlier in this run (None: not known in advance)
    tokens_in: int = 0  # estimated, of the calls to send
    tokens_out: int = 0  # at most, of the calls to send
    cost: float = 0.0  # of the calls to send
    cost_batch: float | None = None  # of the calls to send at the batch price (None: its engine sells no batches)
    note: str = ""
    seconds: float | None = None  # predicted for the calls to send (None: not timed; ``timing`` says why)
    timing: str = ""  # how ``seconds`` was predicted, or why not

    @property
    def to_send(self) -> int:
        return self.calls - (self.cached or 0)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "to_send": self.to_send, "cost": round(self.cost, 6),
                "cost_batch": None if self.cost_batch is None else round(self.cost_batch, 6),
                "seconds": None if self.seconds is None else round(self.seconds, 1)}


@dataclass
class Plan:
    """Every line of a run's plan, with what it assumes."""

    kind: str  # run or flywheel
    lines: list[PlanLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        calls = [x for x in self.lines if x.step != "train"]
        return {"calls": sum(x.calls for x in calls), "cached": sum(x.cached or 0 for x in calls),
                "to_send": sum(x.to_send for x in calls), "tokens_in": sum(x.tokens_in for x in calls),
                "tokens_out": sum(x.tokens_out for x in calls), "cost": round(sum(x.cost for x in calls), 6),
                # every call that a batch API can take at its batch price, the others at theirs
                "cost_batch": round(sum(x.cost if x.cost_batch is None else x.cost_batch for x in calls), 6),
                "minutes": self.minutes()}

    def minutes(self) -> dict[str, Any]:
        """Return the predicted minutes per step (answer, judge, canaries, train) and in all, and the lines that are
        not timed (their calls to send make every total a lower bound)."""
        steps: dict[str, float] = {}
        untimed = 0
        for x in self.lines:
            if x.seconds is None:
                untimed += x.to_send if x.step != "train" else 1
                continue
            steps[x.step] = steps.get(x.step, 0.0) + x.seconds / 60
        return {**{k: round(v, 2) for k, v in steps.items()}, "total": round(sum(steps.values()), 2),
                "untimed": untimed}

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "tokens": TOKEN_METHOD, "lines": [x.as_dict() for x in self.lines],
                "totals": self.totals(), "notes": self.notes}


def cost(spec: ModelSpec | None, tokens_in: int, tokens_out: int) -> float:
    """Return the price of the tokens at ``spec``'s price_in / price_out per 1M tokens."""
    return 0.0 if spec is None else call_cost(spec, tokens_in, tokens_out)


def price(line: PlanLine, spec: ModelSpec | None) -> None:
    """Set ``line``'s cost of its tokens at ``spec``'s prices, synchronous and (where it has one) batch."""
    line.cost = cost(spec, line.tokens_in, line.tokens_out)
    factor = spec.batch_price if spec is not None else None
    line.cost_batch = None if factor is None else line.cost * factor


class LedgerView:
    """The ledger as a plan sees it: read-only, plus the keys the plan already counted (made earlier in the run)."""

    def __init__(self, store: Store | None, timing: Timing | None = None):
        self.store = store
        self.planned: set[str] = set()
        self.timing = timing  # the minutes of each line (None: not predicted)
        self.last_todo: list[int] = []  # the requests of the last ``count`` to send (first of each key)

    def count(self, engine: Engine, requests: Sequence[Request]) -> tuple[int, int, list[Completion | None]]:
        """Return (cached, to send, the cached completion or None per request) as ``arun_requests`` counts a batch.

        A repeat of a held call counts as cached each time; a repeat of a call to send is sent once.
        """
        keys = [request_key(engine, r) for r in requests]
        known = self.store.lookup_calls(list(dict.fromkeys(keys))) if self.store is not None else {}
        got: dict[str, Completion] = {}
        todo: set[str] = set()
        cached = 0
        out: list[Completion | None] = []
        self.last_todo = []
        for i, (key, req) in enumerate(zip(keys, requests)):
            if key in got:
                cached += 1
                out.append(got[key])
                continue
            if key in todo:
                out.append(None)
                continue
            rec = known.get(key)
            comp = Completion.model_validate(rec.response) if rec is not None and rec.status == "ok" and \
                rec.response is not None else None
            if comp is not None and (not is_empty(comp) or engine.repeatable(req)):
                got[key] = comp
                cached += 1
            elif key in self.planned:
                cached += 1  # asked earlier in this run: its text is not known yet, but it is not paid twice
                comp = None
            else:
                todo.add(key)
                self.last_todo.append(i)
                comp = None
            out.append(comp)
        self.planned |= todo
        return cached, len(todo), out

    def first_time(self, token: str) -> bool:
        """Return whether a call whose key is not known yet (its text waits on an answer) is new to this plan.

        ``token`` names the call by what makes it (judge, prompt, models, turn), so the same game on
        the same answers, judged again later in the run, counts as cached.
        """
        if token in self.planned:
            return False
        self.planned.add(token)
        return True


def _engine(spec: ModelSpec) -> tuple[Engine | None, str]:
    """Return the engine of ``spec`` (to compute ledger keys), or None and why it cannot be built here."""
    if spec.engine_kind.loads_on_build:
        return None, f"ledger not checked: a {spec.engine} engine loads its model when it starts"
    try:
        return build_engine(spec), ""
    except ArenaError as err:
        return None, f"ledger not checked: {err}"


@dataclass
class Known:
    """The answers a plan can see: turns the ledger (or the workspace, for imported models) holds; imported
    answers that are not there (those prompts have no games)."""

    turns: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (prompt id, model) -> turns
    absent: set[tuple[str, str]] = field(default_factory=set)

    def answered(self, p: Prompt, model: str) -> bool:
        return (p.id, model) not in self.absent

    def answer(self, p: Prompt, model: str, spec: ModelSpec | None) -> tuple[Answer, bool]:
        """Return the answer the judge will see and whether it is known (else a stand-in of max_tokens per turn)."""
        got = self.turns.get((p.id, model))
        if got is not None:
            return Answer(prompt_id=p.id, model=model, turns=list(got)), True
        filler = "x" * ((spec.params.max_tokens if spec is not None else 256) * CHARS_PER_TOKEN)
        return Answer(prompt_id=p.id, model=model, turns=[filler] * len(p.turns)), False


def plan_answers(spec: ModelSpec, prompts: Sequence[Prompt], ledger: LedgerView, stage: str, known: Known,
                 store: Store | None = None, set_name: str = pipeline.TEST_SET, *, fresh: bool = False,
                 timed_as: ModelSpec | None = None) -> PlanLine:
    """Return the plan of ``spec`` answering ``prompts`` turn by turn; the answers the ledger holds go to ``known``.

    ``fresh``: a model the run trains first (nothing of it can be in the ledger). ``timed_as``: the spec whose
    engine times (and tokenises) its calls, for a fresh model that will answer as it does (a flywheel's student
    served from its GGUF export: the exported base model's shape and tokenizer).
    """
    line = PlanLine(stage=stage, step="answer", model=spec.name)
    if not spec.engine_kind.makes_calls:
        have = {a.prompt_id: a for a in store.get_answers(spec.name, set_name)} if store is not None else {}
        for p in prompts:
            if p.id in have:
                known.turns[(p.id, spec.name)] = list(have[p.id].turns)
            else:
                known.absent.add((p.id, spec.name))
        line.note = f"imported: {sum(p.id in have for p in prompts)} of {len(prompts)} answers in the workspace"
        line.seconds = 0.0
        return line
    if fresh:
        engine, why = (None, "trained in this run")
        timer = _engine(timed_as)[0] if timed_as is not None and ledger.timing is not None else None
    else:
        engine, why = _engine(spec)
        timer = engine if ledger.timing is not None else None
    timer_spec = timed_as if fresh and timed_as is not None else spec
    jobs: list[tuple[list[int] | None, int, int]] = []  # the calls to send, as the timing reads them
    filler = "x" * (spec.params.max_tokens * CHARS_PER_TOKEN)
    replies: dict[str, list[str] | None] = {p.id: [] for p in prompts}
    turn = 0
    samples = spec.vote.k if spec.vote is not None else 1  # calls per prompt and turn
    while batch := [p for p in prompts if len(p.turns) > turn]:
        held = [p for p in batch if replies[p.id] is not None] if engine is not None else []
        per_prompt = [turn_requests(spec, p, replies[p.id], turn) for p in held]  # type: ignore[arg-type]  # held: replies not None
        requests = [r for rs in per_prompt for r in rs]
        cached, sent, comps = ledger.count(engine, requests) if held else (0, 0, [])  # type: ignore[arg-type]  # held: engine
        if timer is not None:
            jobs += _jobs(timer, [requests[i] for i in ledger.last_todo] if held else [])
            if fresh and turn == 0:  # a fresh model's first turns are known texts, only not in the ledger
                jobs += _jobs(timer, [r for p in batch for r in turn_requests(spec, p, [], 0)])
        line.calls += cached + sent + (len(batch) - len(held)) * samples
        line.cached = (line.cached or 0) + cached
        got: dict[str, list[Completion | None]] = {}
        at = 0
        for p, rs in zip(held, per_prompt):
            got[p.id], at = comps[at: at + len(rs)], at + len(rs)
        for p in batch:
            sampled = got.get(p.id, [None] * samples)
            if all(c is not None for c in sampled):  # every sample held: the answer is known
                comp = pick(spec, p, replies[p.id], turn, sampled)  # type: ignore[arg-type]  # held: replies
                replies[p.id].append(comp.text)  # type: ignore[union-attr]  # comp: held
                continue
            chars = request_chars(spec, conversation(p, replies[p.id] or [filler] * turn, turn, spec.system_prompt))
            line.tokens_in += estimate_tokens(chars) * sum(c is None for c in sampled)
            if timer is not None and p not in held and not (fresh and turn == 0):
                jobs += [(None, estimate_tokens(chars), spec.params.max_tokens)] * samples
            replies[p.id] = None
        turn += 1
    line.tokens_out = line.to_send * spec.params.max_tokens
    price(line, spec)
    line.note = "; ".join(x for x in (why, cost_note(spec.vote) if spec.vote is not None else "") if x)
    _time(line, ledger, timer, timer_spec, spec, jobs)
    for p in prompts:
        if replies[p.id] is not None:
            known.turns[(p.id, spec.name)] = replies[p.id]  # type: ignore[assignment]  # not None: answered
    return line


def _jobs(engine: Engine, requests: Sequence[Request]) -> list[tuple[list[int] | None, int, int]]:
    """Return the timing's view of ``requests`` on ``engine``: prompt tokens (a batched llama.cpp engine tokenises
    them as it would send them) and max_tokens; other engines' calls are not timed (an empty list)."""
    from .engines.llamacpp import LlamaCppEngine

    if not isinstance(engine, LlamaCppEngine):
        return []
    out: list[tuple[list[int] | None, int, int]] = []
    for r in requests:
        try:
            job = engine._job(r)
        except (CallFailed, ValueError):  # a call that cannot be made (too long) fails in the run, not the plan
            continue
        out.append((job.tokens, len(job.tokens), job.max_tokens))
    return out


def _time(line: PlanLine, ledger: LedgerView, engine: Engine | None, spec: ModelSpec | None, named: ModelSpec,
          jobs: Sequence[tuple[list[int] | None, int, int]]) -> None:
    """Set ``line``'s predicted seconds from ``jobs`` on ``engine`` (``named``: whose output history counts)."""
    if ledger.timing is None:
        return
    if line.to_send == 0:
        line.seconds = 0.0
        return
    if engine is None or spec is None:
        line.timing = ("not timed: its engine cannot be built here" if not line.note.startswith(("trained", "its GGUF"))
                       else "not timed: no model of its shape to time it with yet (arena plan --measure makes and "
                            "measures the target's GGUF export)")
        return
    line.seconds, line.timing = ledger.timing.seconds(engine, named, jobs)


def _judge_spec(jcfg: JudgeConfig) -> JudgeSpec:
    from .arena.llm_judges import load_judge_spec

    return load_judge_spec(jcfg.template)


def _max_out(jcfg: JudgeConfig, spec: Any) -> int:
    assert jcfg.model is not None
    return int({**jcfg.model.params.model_dump(), **spec.sampling, **jcfg.sampling}["max_tokens"])


def _judge_lines(jcfg: JudgeConfig, prompts: Sequence[Prompt], pairs: Sequence[tuple[str, str]], known: Known,
                 specs: dict[str, ModelSpec], ledger: LedgerView, stage: str) -> list[PlanLine]:
    """Return the judge calls of every game (each pair on each prompt) for the judge ``jcfg``."""
    games = [(p, a, b) for p in prompts for a, b in pairs if known.answered(p, a) and known.answered(p, b)]
    if jcfg.kind == "verifier":
        return [PlanLine(stage=stage, step="judge", model=jcfg.name, note=f"verifier: {len(games)} games checked "
                         f"against the references, no model calls", seconds=0.0)]
    if jcfg.kind == "panel":
        return [x for m in jcfg.members for x in _judge_lines(m, prompts, pairs, known, specs, ledger, stage)]
    from .arena.llm_judges import LLMJudge

    assert jcfg.model is not None
    engine, why = _engine(jcfg.model)
    spec = _judge_spec(jcfg)
    judge = LLMJudge(jcfg, engine=engine) if engine is not None else None
    shown: list[tuple[Prompt, tuple[str, ...]]] = []  # each game as the judge sees it: the models, in order
    if spec.mode == "single":
        by_id = {p.id: p for p in prompts}
        for pid, m in dict.fromkeys((p.id, m) for p, a, b in games for m in (a, b)):
            shown.append((by_id[pid], (m,)))
    else:
        for p, a, b in games:
            shown += [(p, (a, b)), (p, (b, a))] if jcfg.both_orders else [(p, (a, b))]
    requests: list[Request] = []  # calls whose text is known: the ledger may hold them
    unknown: list[tuple[list[int] | None, int, int]] = []  # calls whose text waits on an answer: estimated
    max_out = _max_out(jcfg, spec)
    line = PlanLine(stage=stage, step="judge", model=jcfg.name, note=why)
    lines = [line]
    if spec.reference == "judge":  # the judge's own answers first: a line of their own, and the grades' texts
        lines.insert(0, _own_reference_line(jcfg, spec, judge, [p for p, _ in shown], ledger, stage, why))
    chars_known: list[int] = []
    for p, models in shown:
        answers = [known.answer(p, m, specs.get(m)) for m in models]
        turns = min(len(p.turns), *(len(a.turns) for a, _ in answers))
        for k in range(turns):
            ans = [a for a, _ in answers]
            # a grade against the judge's own answer is known only once that answer is (in the ledger)
            own_known = spec.reference != "judge" or (judge is not None and (p.id, k) in judge.own_refs)
            if judge is not None:
                msgs = (judge.single_messages(p, ans[0], k, own_reference="(the judge's own answer)") if len(ans) == 1
                        else judge.pair_messages(p, ans[0], ans[1], k))
            else:  # no engine here (e.g. its API key is not set): the template and the texts
                msgs = [{"role": "system", "content": spec.system},
                        {"role": "user", "content": spec.template + "".join(t for a in ans for t in a.turns[: k + 1])}]
            chars = sum(len(m["content"]) for m in msgs)
            if judge is not None and own_known and all(ok for _, ok in answers):
                requests.append(Request.model_construct(messages=msgs, prompt=None, params=judge.rater.params_for(0)))
                chars_known.append(chars)
            elif ledger.first_time(f"{jcfg.name}|{p.id}|{'|'.join(models)}|{k}"):
                line.calls += 1
                line.tokens_in += estimate_tokens(chars)
                unknown.append((None, estimate_tokens(chars), max_out))
            else:  # the same game on the same (not yet made) answers, judged earlier in this run
                line.calls += 1
                line.cached = (line.cached or 0) + 1
    jobs: list[tuple[list[int] | None, int, int]] = []
    if requests:
        cached, sent, comps = ledger.count(judge.engine, requests)  # type: ignore[union-attr]  # requests: judge known
        line.calls += cached + sent
        line.cached = (line.cached or 0) + cached
        line.tokens_in += sum(estimate_tokens(c) for c, comp in zip(chars_known, comps) if comp is None)
        if ledger.timing is not None:
            jobs = _jobs(judge.engine, [requests[i] for i in ledger.last_todo])  # type: ignore[union-attr]  # requests: judge known
    line.tokens_out = line.to_send * max_out
    price(line, jcfg.model)
    _time(line, ledger, judge.engine if judge is not None else None, jcfg.model, jcfg.model, [*jobs, *unknown])
    if jcfg.retries:
        extra = f"up to {jcfg.retries} re-asks per verdict that does not parse come on top"
        line.note = f"{line.note}; {extra}" if line.note else extra
    return lines


def _own_reference_line(jcfg: JudgeConfig, spec: Any, judge: Any, prompts: Sequence[Prompt], ledger: LedgerView,
                        stage: str, why: str) -> PlanLine:
    """Return the line of a ``reference: judge`` judge's own answers: one call per prompt and turn; the first
    turn's text is known (the ledger may hold it, and then the grades' texts are known too), a later turn's holds
    the judge's earlier answers."""
    unique = list({p.id: p for p in prompts}.values())
    line = PlanLine(stage=stage, step="judge", model=f"{jcfg.name} (its own answers)", note=why)
    later = sum(len(p.turns) - 1 for p in unique)
    line.calls = len(unique) + later
    line.tokens_in = sum(estimate_tokens(len(t) + len(spec.reference_system or "")) for p in unique for t in p.turns)
    if judge is not None and unique:
        msgs = [judge.own_reference_messages(p, 0) for p in unique]
        reqs = [Request.model_construct(messages=m, prompt=None, params=judge.ref_rater.params_for(0)) for m in msgs]
        cached, _sent, comps = ledger.count(judge.engine, reqs)
        line.cached = cached
        todo = [reqs[i] for i in ledger.last_todo]
        for p, comp in zip(unique, comps):
            if comp is not None and comp.text.strip():
                judge.own_refs[(p.id, 0)] = comp.text.strip()
                line.tokens_in -= estimate_tokens(len(p.turns[0]) + len(spec.reference_system or ""))
    assert jcfg.model is not None
    max_out = int({**jcfg.model.params.model_dump(), **spec.reference_sampling}["max_tokens"])
    line.tokens_out = line.to_send * max_out
    price(line, jcfg.model)
    if judge is not None and unique and ledger.timing is not None:
        later_jobs = [(None, estimate_tokens(len(t) + len(spec.reference_system or "")), max_out)
                      for p in unique for t in p.turns[1:]]
        _time(line, ledger, judge.engine, jcfg.model, jcfg.model, [*_jobs(judge.engine, todo), *later_jobs])
    else:
        _time(line, ledger, None, None, jcfg.model, [])
    return line


def plan_battles(cfg: RunConfig, prompts: Sequence[Prompt], known: Known, ledger: LedgerView,
                 stage: str) -> list[PlanLine]:
    """Return the judge lines of ``cfg``'s schedule on ``prompts``."""
    names = [m.name for m in cfg.models]
    specs = {m.name: m for m in cfg.models}
    sched = cfg.battles
    if sched.schedule != "adaptive":
        pairs = schedule_pairs(sched.schedule, names, baseline=sched.baseline, target=sched.target)
        lines = _judge_lines(cfg.judge, prompts, pairs, known, specs, ledger, stage)
        games = sum(1 for p in prompts for a, b in pairs if known.answered(p, a) and known.answered(p, b))
        return [*lines, *_canary_lines(cfg, prompts, games, lines, stage)]
    # adaptive: its budget in battles, each a game (two with both orders) per turn; which pairs is not known
    usable = [p for p in prompts if all(known.answered(p, m) for m in names)]
    round_robin = len(list(combinations(names, 2))) * len(usable)
    budget = min(round_robin, round_robin // 2 if sched.budget is None else sched.budget)
    mean_turns = sum(len(p.turns) for p in usable) / max(1, len(usable))
    lines = []
    for jcfg in judges(cfg.judge):
        if jcfg.kind == "verifier":
            lines.append(PlanLine(stage=stage, step="judge", model=jcfg.name,
                                  note=f"verifier: {budget} battles (adaptive budget), no model calls"))
            continue
        spec = _judge_spec(jcfg)
        per_battle = (1 if spec.mode == "single" or not jcfg.both_orders else 2) * mean_turns
        calls = round(budget * per_battle)
        max_out = _max_out(jcfg, spec)
        some = [known.answer(p, m, specs.get(m))[0] for p in usable[:20] for m in names[:2]]
        answer_chars = sum(len(t) for a in some for t in a.turns) / max(1, len(some))
        chars = (len(spec.system) + len(spec.template)) + 2 * answer_chars
        tin = round(calls * chars / CHARS_PER_TOKEN)
        lines.append(PlanLine(stage=stage, step="judge", model=jcfg.name, calls=calls, cached=None, tokens_in=tin,
                              tokens_out=calls * max_out,
                              note=f"adaptive: at most {budget} battles of {round_robin}; what the ledger holds "
                              f"of them is known only as they are chosen"))
        price(lines[-1], jcfg.model)
    return lines


def _canary_lines(cfg: RunConfig, prompts: Sequence[Prompt], games: int, judge_lines: Sequence[PlanLine],
                  stage: str) -> list[PlanLine]:
    """Return the line of the canaries planted beside ``games`` (arena.canaries): at most ``audit.share`` of them,
    each costing what a game of the run costs (tokens and cost in proportion to the judge's lines)."""
    if not cfg.audit.enabled(cfg.judge):
        return []
    per_kind = math.floor(cfg.audit.share * games / 4)
    calls_per_game = sum(x.calls for x in judge_lines) / games if games else 0.0
    calls = round(4 * per_kind * calls_per_game)
    if calls == 0:
        return []
    sent = sum(x.to_send for x in judge_lines) or 1
    ratio = calls / sent
    return [PlanLine(stage=stage, step="canaries", model=cfg.judge.name, calls=calls, cached=None,
                     tokens_in=round(sum(x.tokens_in for x in judge_lines) * ratio),
                     tokens_out=round(sum(x.tokens_out for x in judge_lines) * ratio),
                     cost=sum(x.cost for x in judge_lines) * ratio,
                     cost_batch=(None if any(x.cost_batch is None for x in judge_lines)
                                 else sum(x.cost_batch or 0.0 for x in judge_lines) * ratio),
                     seconds=(None if any(x.seconds is None for x in judge_lines)
                              else sum(x.seconds or 0.0 for x in judge_lines) * ratio),
                     note=f"at most: {4 * per_kind} canary games (null model, identical pairs, truncated copies), "
                          f"{cfg.audit.share:.0%} of the {games} games; judged as the run's are, rated nowhere")]


def judges(jcfg: JudgeConfig) -> list[JudgeConfig]:
    """Return the judges that judge under ``jcfg``: a panel's members, else ``jcfg`` itself."""
    return list(jcfg.members) if jcfg.kind == "panel" else [jcfg]


def judge_models(jcfg: JudgeConfig) -> list[ModelSpec]:
    """Return the models ``jcfg``'s judges call (none for a verifier)."""
    return [j.model for j in judges(jcfg) if j.model is not None]


def measure_models(specs: Sequence[ModelSpec], prompts: Sequence[Prompt], *, force: bool = False,
                   say: Callable[[str], None] = print, n: int = 48) -> int:
    """Measure each batched llama.cpp model of ``specs`` whose rates (or output length under its prompt settings)
    this machine's rates file lacks (``force``: every one) on the first ``n`` of ``prompts``; return how many."""
    from .engines.llamacpp import LlamaCppEngine
    from .engines.speed import find, load_table, measure, output_key, save_rates

    done: set[str] = set()
    measured = 0
    for spec in specs:
        if spec.engine != "llamacpp" or spec.parallel < 2:
            continue
        engine, why = _engine(spec)
        if not isinstance(engine, LlamaCppEngine):
            say(f"[plan] {spec.name}: not measured ({why})")
            continue
        key = output_key(engine, spec)
        table = load_table()
        if key in done or (not force and find(table, engine) is not None and key in table["outputs"]):
            continue
        say(f"[plan] measuring {spec.name} ({engine.model_id}, parallel {spec.parallel}) on {min(n, len(prompts))} "
            "prompts")
        rates, out = measure(spec, [r for p in prompts[:n] for r in turn_requests(spec, p, [], 0)])
        save_rates(rates, {key: (round(out, 3), rates.prompts)})
        say(f"[plan]   prompt chunk {rates.chunk_s * 1000:.1f} ms + {rates.token_s * 1000:.2f} ms a token; decode "
            f"step of {rates.parallel} rows {rates.step_s * 1000:.1f} ms; {out:.1f} tokens written a call")
        done.add(key)
        measured += 1
    return measured


def plan_run(cfg: RunConfig, store: Store | None, *, prompts: Sequence[Prompt] | None = None,
             set_name: str = pipeline.TEST_SET, stage: str = "test set",
             ledger: LedgerView | None = None, timed: bool = False, measure: bool = False,
             say: Callable[[str], None] = print) -> Plan:
    """Return the plan of ``arena run`` for ``cfg``: answer calls per contestant, judge calls, tokens, cost, and
    (``timed``) minutes from this machine's measured rates (``measure``: measure its models first).

    ``store`` is the run's workspace if it exists (its ledger makes calls ``cached``), else None.
    """
    prompts = list(prompts) if prompts is not None else pipeline.make_test_set(cfg, store)
    if measure:
        measure_models([*cfg.models, *judge_models(cfg.judge)], prompts, force=True, say=say)
    if ledger is None:
        from .engines.speed import Timing

        ledger = LedgerView(store, Timing(store) if timed or measure else None)
    plan = Plan(kind="run")
    known = Known()
    for spec in cfg.models:
        plan.lines.append(plan_answers(spec, prompts, ledger, stage, known, store, set_name))
    plan.lines.extend(plan_battles(cfg, prompts, known, ledger, stage))
    turns = sum(len(p.turns) for p in prompts)
    plan.notes.append(f"{stage}: {len(prompts)} prompts, {turns} user turns; schedule {cfg.battles.schedule}")
    timing_notes(plan, ledger)
    return plan


def timing_notes(plan: Plan, ledger: LedgerView) -> None:
    """Add what the minutes rest on to ``plan``'s notes."""
    if ledger.timing is None:
        return
    from .engines.speed import machine_id

    plan.notes.append(f"minutes: predicted from rates measured on this machine ({machine_id()}; arena plan "
                      "--measure), prompt tokens as each model tokenises them, output lengths from the ledger or "
                      "the measurement; a quiet machine's (other work on the cores slows every figure)")
    if ledger.timing.missing:
        plan.notes.append("not timed (no rates measured here): " + ", ".join(sorted(ledger.timing.missing))
                          + ": arena plan --measure measures them")
