"""LLM judges: a judge is a folder (judge.yaml, system prompt, template), run on any engine.

Modes:

- ``pairwise``: per turn, the judge sees the conversation so far and both
  answers and scores each 1-10; each pair is played in both orders (two games).
- ``single`` (MT-Bench style): each answer is scored alone, once, and the
  score is shared by every pair it plays in; with ``reference: true`` the
  prompt's reference answer is shown (reference-guided grading); with
  ``reference: judge`` the judge model first answers each request itself, alone
  (one call per prompt and turn, shared by every answer it grades), and that
  answer is the reference (MT-Bench's reference-guided grading with the
  judge's own reference; a small judge that sees the answers before it answers
  copies them).
- a panel of several judges: mean of their scores or majority of verdicts.

Every call goes through the ledger, by the structured-rating component
(:mod:`arena_learning.engines.structured`) that the difficulty and moderation
judges share: answers are fenced; the verdict is asked for as JSON and, where
the engine supports it, constrained to the judge's JSON schema; the parser
falls back to tolerant reading; an unparsable answer is retried with a new
seed and a warmer temperature (new calls, so new ledger keys), then recorded
as a failed judgment with its raw text. Nothing is dropped silently. A verdict
cut off at max_tokens is counted and marked (``Judgment.truncated``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from ..config import JudgeConfig
from ..engines import build_engine
from ..engines.base import Engine
from ..engines.structured import Rated, RatingStats, StructuredRater, fence, fence_id, injection_flags
from ..errors import ConfigError
from ..records import Answer, Judgment, Outcome, Prompt
from ..store import Store
from .judges import PairTask, verdict
from .parse import Parsed, ParseError, parse_verdict

if TYPE_CHECKING:
    from ..progress import Track

# ---- the judge as data -------------------------------------------------------------


class JudgeSpec(BaseModel):
    """A judge folder's judge.yaml, with the system prompt and template read in."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: int = 1
    mode: Literal["pairwise", "single"]
    # True: the prompt's reference answer; "judge": the judge model's own answer, asked first with reference_system
    reference: bool | Literal["judge"] = False
    system: str
    template: str
    parser: Literal["pair", "single", "label", "yesno"]
    schema_: dict[str, Any] | None = None
    sampling: dict[str, Any] = {}
    reference_system: str | None = None  # reference: judge: the system prompt of the judge's own answer
    # how the request, answers and reference are set apart from the judge's instructions: between <<<NAME id>>>
    # markers, or each as a JSON string (quotes and newlines escaped: no text can end it early), which a small
    # judge reads better (measured: own-reference-v1)
    fence: Literal["markers", "json"] = "markers"
    reference_sampling: dict[str, Any] = {}

    @property
    def id(self) -> str:
        return f"{self.name}-v{self.version}"

    @model_validator(mode="after")
    def _parser_fits_mode(self) -> JudgeSpec:
        if (self.mode == "single") != (self.parser in ("single", "yesno")):
            raise ValueError(f"parser {self.parser!r} does not read a {self.mode} judge's verdict: use "
                             f"{'single or yesno' if self.mode == 'single' else 'pair or label'}")
        if self.reference == "judge" and (self.mode != "single" or not self.reference_system):
            raise ValueError("reference: judge (the judge answers each request first) needs mode: single and a "
                             "reference_system prompt")
        return self


def builtin_judges() -> list[str]:
    """Return the names of the judges that ship with the package."""
    root = resources.files("arena_learning") / "judges"
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "judge.yaml").is_file())


def load_judge_spec(ref: str) -> JudgeSpec:
    """Return the judge named ``ref``: a built-in ("pairwise", "single-v1", ...) or a folder / judge.yaml path."""
    path = Path(ref)
    if path.is_dir():
        path = path / "judge.yaml"
    if not path.is_file():
        names = builtin_judges()
        match = [n for n in names if n == ref or n.rsplit("-v", 1)[0] == ref]
        if not match:
            raise ConfigError(
                f"judge template {ref!r} is neither a built-in judge ({', '.join(names)}) nor a folder with judge.yaml"
            )
        path = Path(str(resources.files("arena_learning") / "judges" / sorted(match)[-1] / "judge.yaml"))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"judge file {path} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"judge file {path} must be a mapping")
    for key in ("system", "template", "reference_system"):
        value = data.get(key)
        if isinstance(value, str) and (path.parent / value).is_file():
            data[key] = (path.parent / value).read_text(encoding="utf-8")
    if "schema" in data:
        data["schema_"] = data.pop("schema")
    try:
        return JudgeSpec.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"judge file {path}: {err.errors()[0]['loc']}: {err.errors()[0]['msg']}") from None


def render(template: str, fields: dict[str, str]) -> str:
    """Fill ``{name}`` slots of ``template`` in one pass, so text inside a value is never re-read as a slot."""
    import re

    return re.sub(r"\{(\w+)\}", lambda m: fields.get(m.group(1), m.group(0)), template)


# ---- running a judge ---------------------------------------------------------------


@dataclass
class JudgeStats(RatingStats):
    """What judging did: verdicts parsed at first try, after a retry, failures, flagged games, tokens, calls."""

    flagged: int = 0  # judgments with an answer that addresses the judge

    def add(self, other: RatingStats) -> None:
        super().add(other)
        if isinstance(other, JudgeStats):
            self.flagged += other.flagged

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "parsed": self.parsed, "retried": self.retried, "failed": self.failed,
                "truncated": self.truncated, "flagged": self.flagged, "calls": self.calls.cached + self.calls.sent,
                "tokens_in": self.tokens_in, "tokens_out": self.tokens_out, "cached": self.calls.cached,
                "sent": self.calls.sent, "new_tokens_in": self.calls.tokens_in, "new_tokens_out": self.calls.tokens_out}


def _history(prompt: Prompt, answers: Sequence[tuple[str, Answer]], turn: int, fid: str) -> str:
    if turn == 0:
        return ""
    parts = ["Here is the conversation so far, as each assistant had it:\n"]
    for label, ans in answers:
        lines = []
        for t in range(turn):
            lines.append(f"User: {prompt.turns[t]}\n\nAssistant {label}: {ans.turns[t]}".rstrip())
        name = f"HISTORY {label}".strip()
        parts.append(fence(name, "\n\n".join(lines), fid) + "\n")
    return "\n".join(parts) + "\n"


class LLMJudge:
    """A judge folder run on a judge model."""

    def __init__(self, cfg: JudgeConfig, engine: Engine | None = None):
        assert cfg.model is not None, "JudgeConfig validation requires a model for kind 'llm'"
        self.cfg = cfg
        self.name = cfg.name
        self.spec = load_judge_spec(cfg.template)
        self.engine = engine or build_engine(cfg.model)
        self.stats = JudgeStats()
        parser = self.spec.parser
        self.rater: StructuredRater[Parsed] = StructuredRater(
            self.engine,
            lambda text: parse_verdict(text, parser),
            params={**self.spec.sampling, **cfg.sampling},
            schema=self.spec.schema_ if cfg.structured else None,
            retries=cfg.retries,
            retry_temperature=cfg.retry_temperature,
            what="judge",
            stats=self.stats,
        )
        # reference: judge: the judge's own answer to each (prompt id, turn), asked alone before any grading
        self.own_refs: dict[tuple[str, int], str] = {}
        self.ref_rater: StructuredRater[str] | None = None
        if self.spec.reference == "judge":
            self.ref_rater = StructuredRater(self.engine, _own_answer, params={**self.spec.reference_sampling},
                                             retries=cfg.retries, retry_temperature=cfg.retry_temperature,
                                             what="judge's own answer", stats=self.stats)

    # -- prompts
    def _messages(self, user: str) -> list[dict[str, str]]:
        if not self.spec.system.strip():  # no system prompt (the model's chat template puts its default)
            return [{"role": "user", "content": user}]
        return [{"role": "system", "content": self.spec.system}, {"role": "user", "content": user}]

    def _fence(self, name: str, text: str, fid: str) -> str:
        """Return ``text`` set apart as the judge folder says: between markers, or as a JSON string."""
        if self.spec.fence == "json":
            return json.dumps(text, ensure_ascii=False)
        return fence(name, text, fid)

    def pair_messages(self, prompt: Prompt, first: Answer, second: Answer, turn: int) -> list[dict[str, str]]:
        """Return the judge messages for ``turn`` of the game with ``first`` shown as assistant A."""
        texts = [prompt.id, *prompt.turns[: turn + 1], *first.turns[: turn + 1], *second.turns[: turn + 1]]
        fid = fence_id(*texts)
        fields = {
            "history": _history(prompt, [("A", first), ("B", second)], turn, fid),
            "question": fence("USER REQUEST", prompt.turns[turn], fid),
            "answer_a": fence("ANSWER A", first.turns[turn], fid),
            "answer_b": fence("ANSWER B", second.turns[turn], fid),
            "turn_note": self._turn_note(turn),
        }
        return self._messages(render(self.spec.template, fields))

    def single_messages(self, prompt: Prompt, answer: Answer, turn: int,
                        own_reference: str | None = None) -> list[dict[str, str]]:
        """Return the judge messages grading ``turn`` of ``answer`` alone (with the reference if the judge uses it).

        A ``reference: judge`` judge shows its own answer (:meth:`own_references` asks it); ``own_reference``
        stands in for one not asked yet (``arena plan`` sizes the prompt before any call).
        """
        texts = [prompt.id, *prompt.turns[: turn + 1], *answer.turns[: turn + 1]]
        ref = ""
        if self.spec.reference == "judge":
            ref = self.own_refs.get((prompt.id, turn), own_reference or "")
            if not ref:
                raise RuntimeError(f"judge {self.name!r}: its own answer to prompt {prompt.id} turn {turn + 1} was "
                                   f"not asked before grading (own_references first)")
            texts.append(ref)
        elif self.spec.reference:
            if not prompt.reference or turn >= len(prompt.reference) or not prompt.reference[turn]:
                raise ConfigError(
                    f"judge {self.name!r} ({self.spec.id}) is reference-guided but prompt {prompt.id} has no "
                    f"reference answer for turn {turn + 1}; give references or choose another judge"
                )
            ref = prompt.reference[turn]
            texts.append(ref)
        fid = fence_id(*texts)
        fields = {
            "history": _history(prompt, [("", answer)], turn, fid),
            "question": self._fence("USER REQUEST", prompt.turns[turn], fid),
            "answer": self._fence("ANSWER", answer.turns[turn], fid),
            "reference": self._fence("REFERENCE", ref, fid) if ref else "",
            "turn_note": self._turn_note(turn),
        }
        return self._messages(render(self.spec.template, fields))

    @staticmethod
    def _turn_note(turn: int) -> str:
        if turn == 0:
            return ""
        return (f" (turn {turn + 1} of the conversation: judge only the answers to this last request, in the light "
                f"of the earlier turns)")

    # -- calls
    def _params(self, attempt: int) -> dict[str, Any]:
        """Return the request params of try ``attempt`` (0: the first; later: a new seed, retry temperature)."""
        return self.rater.params_for(attempt)

    async def _resolve(self, store: Store, prompts: list[list[dict[str, str]]],
                       progress: Track | None) -> list[Rated]:
        """Return the rated verdict of every judge prompt: parsed, retried with new seeds, or failed."""
        return await self.rater.arate(store, prompts, label=f"judge {self.name}", progress=progress)

    async def judge_pairs(self, store: Store, tasks: Sequence[PairTask],
                          progress: Track | None = None) -> list[Judgment]:
        """Return the judgments of ``tasks``: two games per task (both orders) or one from single grades."""
        if self.spec.mode == "single":
            return await self._judge_single(store, tasks, progress)
        games: list[tuple[Prompt, Answer, Answer]] = []
        for t in tasks:
            games.append((t.prompt, t.answer_a, t.answer_b))
            if self.cfg.both_orders:
                games.append((t.prompt, t.answer_b, t.answer_a))
        prompts: list[list[dict[str, str]]] = []
        spans: list[tuple[int, int]] = []
        for prompt, first, second in games:
            turns = min(len(prompt.turns), len(first.turns), len(second.turns))
            spans.append((len(prompts), len(prompts) + turns))
            prompts.extend(self.pair_messages(prompt, first, second, k) for k in range(turns))
        rated = await self._resolve(store, prompts, progress)
        out = []
        for (prompt, first, second), (lo, hi) in zip(games, spans):
            row = rated[lo:hi]
            flags = _answer_flags("A", first) + _answer_flags("B", second)
            out.append(self._judgment(prompt.id, first.model, second.model, row, row, flags))
        return out

    def own_reference_messages(self, prompt: Prompt, turn: int) -> list[dict[str, str]]:
        """Return the messages asking the judge model its own answer to ``turn`` of ``prompt`` (earlier turns with
        its own earlier answers): the request as a user sends it, no answer of a contestant in sight."""
        assert self.spec.reference_system is not None
        msgs = [{"role": "system", "content": self.spec.reference_system}]
        for k in range(turn):
            msgs += [{"role": "user", "content": prompt.turns[k]},
                     {"role": "assistant", "content": self.own_refs.get((prompt.id, k), "")}]
        return [*msgs, {"role": "user", "content": prompt.turns[turn]}]

    async def own_references(self, store: Store, prompts: Sequence[Prompt], progress: Track | None = None) -> None:
        """Ask the judge model's own answer to every turn of ``prompts`` not asked yet (through the ledger, turn by
        turn: a later turn's request holds the earlier answers); a failed call leaves its turn out, and the answers
        graded against it fail (retried on the next run)."""
        if self.ref_rater is None:
            return
        unique = list({p.id: p for p in prompts}.values())
        for turn in range(max((len(p.turns) for p in unique), default=0)):
            todo = [p for p in unique if len(p.turns) > turn and (p.id, turn) not in self.own_refs
                    and (turn == 0 or (p.id, turn - 1) in self.own_refs)]
            if not todo:
                continue
            rated = await self.ref_rater.arate(store, [self.own_reference_messages(p, turn) for p in todo],
                                               label=f"judge {self.name}: its own answers", progress=progress)
            for p, item in zip(todo, rated):
                if item.ok and item.value:
                    self.own_refs[(p.id, turn)] = item.value

    async def _judge_single(self, store: Store, tasks: Sequence[PairTask], progress: Track | None) -> list[Judgment]:
        answers: dict[tuple[str, str], tuple[Prompt, Answer]] = {}
        for t in tasks:
            for a in (t.answer_a, t.answer_b):
                answers.setdefault((t.prompt.id, a.model), (t.prompt, a))
        await self.own_references(store, [p for p, _ in answers.values()], progress)
        prompts: list[list[dict[str, str]]] = []
        slots: list[int | None] = []  # per answer turn: its index in prompts, or None where no own answer exists
        spans: dict[tuple[str, str], tuple[int, int]] = {}
        for key, (prompt, ans) in answers.items():
            turns = min(len(prompt.turns), len(ans.turns))
            spans[key] = (len(slots), len(slots) + turns)
            for k in range(turns):
                if self.spec.reference == "judge" and (prompt.id, k) not in self.own_refs:
                    slots.append(None)
                    continue
                slots.append(len(prompts))
                prompts.append(self.single_messages(prompt, ans, k))
        asked = await self._resolve(store, prompts, progress)
        no_ref: Rated[Parsed] = Rated(error="the judge's own answer to this turn failed (see the ledger); "
                                            "retried on the next run")
        rated = [asked[i] if i is not None else no_ref for i in slots]
        graded = {key: rated[lo:hi] for key, (lo, hi) in spans.items()}
        out = []
        for t in tasks:
            row_a, row_b = graded[(t.prompt.id, t.answer_a.model)], graded[(t.prompt.id, t.answer_b.model)]
            flags = _answer_flags("A", t.answer_a) + _answer_flags("B", t.answer_b)
            out.append(self._judgment(t.prompt.id, t.answer_a.model, t.answer_b.model, row_a, row_b, flags,
                                      pair=False))
        return out

    def call_stats(self) -> dict[str, dict[str, Any]]:
        """Return {this judge's name: its calls, tokens and parse counts so far}."""
        return {self.name: self.stats.as_dict()}

    def engines(self) -> list[Engine]:
        """Return [the judge model's engine]."""
        return [self.rater.engine]

    def _judgment(self, pid: str, model_a: str, model_b: str, row_a: list[Rated], row_b: list[Rated],
                  flags: list[str], pair: bool = True) -> Judgment:
        items = row_a if pair else row_a + row_b
        failed = [it for it in items if not it.ok]
        raw = "\n---\n".join(it.raw for it in items)
        truncated = sum(1 for it in items if it.truncated)
        if flags:
            self.stats.flagged += 1
        if failed:
            return Judgment(prompt_id=pid, model_a=model_a, model_b=model_b, judge=self.name, raw=raw,
                            status="failed", explanation="; ".join(it.error for it in failed)[:2000], flags=flags,
                            truncated=truncated)
        scores_a = [_parsed(it).scores[0] for it in row_a]
        scores_b = [_parsed(it).scores[1] for it in row_b] if pair else [_parsed(it).scores[0] for it in row_b]
        mean_a, mean_b = sum(scores_a) / len(scores_a), sum(scores_b) / len(scores_b)
        explanation = "\n---\n".join(_parsed(it).explanation for it in items)
        labels = [label for it in row_a if (label := _parsed(it).label) is not None] if pair else []
        return Judgment(prompt_id=pid, model_a=model_a, model_b=model_b, judge=self.name, scores_a=scores_a,
                        scores_b=scores_b, score_a=mean_a, score_b=mean_b, labels=labels,
                        verdict=verdict(mean_a, mean_b, self.cfg.tie_threshold), explanation=explanation,
                        raw=raw, flags=flags, truncated=truncated)


def _own_answer(text: str) -> str:
    """Return the judge's own answer (its reply, stripped); an empty one is a failure (ParseError)."""
    if not text.strip():
        raise ParseError("the judge's own answer is empty")
    return text.strip()


def _parsed(item: Rated[Parsed]) -> Parsed:
    """Return the verdict of a rating that succeeded."""
    assert item.value is not None, "a rating marked ok holds its parsed verdict"
    return item.value


def _answer_flags(side: str, answer: Answer) -> list[str]:
    """Return the injection flags of every turn of ``answer``, each prefixed with the side it is shown on."""
    return [f"{side}: {f}" for t in answer.turns for f in injection_flags(t)]


class PanelJudge:
    """Several judges on the same games: the mean of their scores or the majority of their verdicts."""

    def __init__(self, cfg: JudgeConfig):
        names = [m.name for m in cfg.members]
        if len(set(names)) != len(names) or cfg.name in names:
            raise ConfigError(f"judge {cfg.name!r}: panel members need distinct names, unlike the panel's")
        self.cfg = cfg
        self.name = cfg.name
        self.members = [build_judge(m) for m in cfg.members]

    async def judge_pairs(self, store: Store, tasks: Sequence[PairTask],
                          progress: Track | None = None) -> list[Judgment]:
        """Return every member's judgments followed by the panel's own."""
        member_judgments = []
        for m in self.members:
            member_judgments.append(await m.judge_pairs(store, tasks, progress))
        games: dict[tuple[str, str, str], list[Judgment]] = defaultdict(list)
        for js in member_judgments:
            for j in js:
                games[(j.prompt_id, j.model_a, j.model_b)].append(j)
        panel = []
        for (pid, a, b), js in games.items():
            ok = [j for j in js if j.status == "ok"]
            flags = sorted({f for j in js for f in j.flags})
            if not ok:
                panel.append(Judgment(prompt_id=pid, model_a=a, model_b=b, judge=self.name, status="failed",
                                      explanation="every member's judgment failed", flags=flags,
                                      truncated=sum(j.truncated for j in js)))
                continue
            mean_a = sum(j.score_a for j in ok) / len(ok)  # type: ignore[misc]  # a judgment with status ok has scores
            mean_b = sum(j.score_b for j in ok) / len(ok)  # type: ignore[misc]  # (as above)
            v: Outcome
            if self.cfg.rule == "mean":
                v = verdict(mean_a, mean_b, self.cfg.tie_threshold)
            else:
                votes = [j.verdict for j in ok]
                outcomes: tuple[Outcome, ...] = ("model_a", "model_b", "tie")
                top = max(outcomes, key=votes.count)
                v = top if votes.count(top) * 2 > len(votes) else "tie"
            panel.append(Judgment(prompt_id=pid, model_a=a, model_b=b, judge=self.name, score_a=mean_a,
                                  score_b=mean_b, scores_a=[mean_a], scores_b=[mean_b], verdict=v,
                                  explanation=f"{self.cfg.rule} of {len(ok)}/{len(js)} judges", flags=flags,
                                  truncated=sum(j.truncated for j in js)))
        return [j for js in member_judgments for j in js] + panel

    @property
    def stats(self) -> JudgeStats:
        total = JudgeStats()
        for m in self.members:
            total.add(m.stats)
        return total

    def engines(self) -> list[Engine]:
        """Return every member's engines."""
        return [e for m in self.members for e in m.engines()]

    def call_stats(self) -> dict[str, dict[str, Any]]:
        """Return the panel's totals under its name, then each member's own under the member's name."""
        return {self.name: self.stats.as_dict(), **{m.name: m.stats.as_dict() for m in self.members}}


def build_judge(cfg: JudgeConfig) -> LLMJudge | PanelJudge:
    """Return the LLM judge or panel that ``cfg`` describes."""
    if cfg.kind == "panel":
        return PanelJudge(cfg)
    if cfg.kind == "llm":
        return LLMJudge(cfg)
    raise ConfigError(f"judge {cfg.name!r}: kind {cfg.kind!r} is not an LLM judge")
