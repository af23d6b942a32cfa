"""LLM judges: a judge is a folder (judge.yaml, system prompt, template), run on any engine.

Modes:

- ``pairwise``: per turn, the judge sees the conversation so far and both
  answers and scores each 1-10; each pair is played in both orders (two games).
- ``single`` (MT-Bench style): each answer is scored alone, once, and the
  score is shared by every pair it plays in; with ``reference: true`` the
  prompt's reference answer is shown (reference-guided grading).
- a panel of several judges: mean of their scores or majority of verdicts.

Every call goes through the ledger. The verdict is asked for as JSON and, where
the engine supports it, constrained to the judge's JSON schema; the parser
falls back to tolerant reading; an unparsable answer is retried with a new
seed and a warmer temperature (new calls, so new ledger keys), then recorded
as a failed judgment with its raw text. Nothing is dropped silently.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from ..config import JudgeConfig
from ..engines import build_engine
from ..engines.base import Engine, Request
from ..errors import ConfigError
from ..records import Answer, Judgment, Prompt
from ..store import Store
from ..engines.calls import CallStats, arun_requests
from .fence import fence, fence_id, injection_flags
from .judges import PairTask, verdict
from .parse import ParseError, parse_verdict

# ---- the judge as data -------------------------------------------------------------


class JudgeSpec(BaseModel):
    """A judge folder's judge.yaml, with the system prompt and template read in."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: int = 1
    mode: Literal["pairwise", "single"]
    reference: bool = False
    system: str
    template: str
    parser: Literal["pair", "single"]
    schema_: dict[str, Any] | None = None
    sampling: dict[str, Any] = {}

    @property
    def id(self) -> str:
        return f"{self.name}-v{self.version}"


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
    for key in ("system", "template"):
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
class JudgeStats:
    """What judging did: verdicts parsed at first try, after a retry, and failures."""

    requests: int = 0
    parsed: int = 0
    retried: int = 0  # parsed only after at least one retry
    failed: int = 0
    flagged: int = 0  # judgments with an answer that addresses the judge
    tokens_in: int = 0  # over every verdict behind the judgments, served from the ledger or not
    tokens_out: int = 0
    calls: CallStats = field(default_factory=CallStats)  # this run's calls: tokens of the new ones only

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "parsed": self.parsed, "retried": self.retried, "failed": self.failed,
                "flagged": self.flagged, "calls": self.calls.cached + self.calls.sent,
                "tokens_in": self.tokens_in, "tokens_out": self.tokens_out, "cached": self.calls.cached,
                "sent": self.calls.sent, "new_tokens_in": self.calls.tokens_in, "new_tokens_out": self.calls.tokens_out}


@dataclass
class _Item:
    """One judge request to get parsed: a turn of a game (pairwise) or of an answer (single)."""

    messages: list[dict[str, str]]
    scores: tuple[float, ...] | None = None
    explanation: str = ""
    raw: str = ""
    error: str = ""
    attempts: int = 0


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

    # -- prompts
    def _messages(self, user: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.spec.system}, {"role": "user", "content": user}]

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

    def single_messages(self, prompt: Prompt, answer: Answer, turn: int) -> list[dict[str, str]]:
        """Return the judge messages grading ``turn`` of ``answer`` alone (with the reference if the judge uses it)."""
        texts = [prompt.id, *prompt.turns[: turn + 1], *answer.turns[: turn + 1]]
        ref = ""
        if self.spec.reference:
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
            "question": fence("USER REQUEST", prompt.turns[turn], fid),
            "answer": fence("ANSWER", answer.turns[turn], fid),
            "reference": fence("REFERENCE", ref, fid) if ref else "",
            "turn_note": self._turn_note(turn),
        }
        return self._messages(render(self.spec.template, fields))

    @staticmethod
    def _turn_note(turn: int) -> str:
        if turn == 0:
            return ""
        return f" (turn {turn + 1} of the conversation: judge only the answers to this last request, in the light of the earlier turns)"

    # -- calls
    def _params(self, attempt: int) -> dict[str, Any]:
        params = {**self.spec.sampling, **self.cfg.sampling}
        if self.cfg.structured and self.spec.schema_ is not None:
            params["json_schema"] = self.spec.schema_
        if attempt > 0:
            # A retry must be a different call (else the ledger answers it with the same text).
            base = params.get("seed", self.engine.default_params()["seed"])
            params["seed"] = int(base) + attempt
            params["temperature"] = self.cfg.retry_temperature
        return params

    async def _resolve(self, store: Store, items: list[_Item], progress: Any, label: str) -> None:
        """Call the judge for every item, retrying parse failures, until parsed or out of retries."""
        pending = list(items)
        failed_calls: list[_Item] = []
        self.stats.requests += len(items)
        for attempt in range(self.cfg.retries + 1):
            if not pending:
                break
            params = self._params(attempt)
            requests = [Request(messages=it.messages, params=params) for it in pending]
            tag = label if attempt == 0 else f"{label} (retry {attempt})"
            results = await arun_requests(store, self.engine, requests, label=tag, stats=self.stats.calls,
                                          progress=progress)
            still = []
            for it, comp in zip(pending, results):
                it.attempts = attempt + 1
                if comp is not None:
                    self.stats.tokens_in += comp.tokens_in
                    self.stats.tokens_out += comp.tokens_out
                if comp is None:
                    # A failed call is not re-asked now with retry settings (that would swap the
                    # verdict for a warmer sample); the ledger retries the same call on the next run.
                    it.error = "the judge call failed (see the ledger); retried on the next run"
                    failed_calls.append(it)
                    continue
                it.raw = comp.text
                try:
                    parsed = parse_verdict(comp.text, self.spec.parser)
                except ParseError as err:
                    it.error = str(err)
                    still.append(it)
                    continue
                it.scores, it.explanation, it.error = parsed.scores, parsed.explanation, ""
                if attempt == 0:
                    self.stats.parsed += 1
                else:
                    self.stats.retried += 1
            pending = still
        self.stats.failed += len(pending) + len(failed_calls)

    async def judge_pairs(self, store: Store, tasks: Sequence[PairTask], progress: Any = None) -> list[Judgment]:
        """Return the judgments of ``tasks``: two games per task (both orders) or one from single grades."""
        if self.spec.mode == "single":
            return await self._judge_single(store, tasks, progress)
        games: list[tuple[Prompt, Answer, Answer]] = []
        for t in tasks:
            games.append((t.prompt, t.answer_a, t.answer_b))
            if self.cfg.both_orders:
                games.append((t.prompt, t.answer_b, t.answer_a))
        items: list[list[_Item]] = []
        for prompt, first, second in games:
            turns = min(len(prompt.turns), len(first.turns), len(second.turns))
            items.append([_Item(self.pair_messages(prompt, first, second, k)) for k in range(turns)])
        await self._resolve(store, [i for row in items for i in row], progress, f"judge {self.name}")
        out = []
        for (prompt, first, second), row in zip(games, items):
            flags = [f"A: {f}" for t in first.turns for f in injection_flags(t)]
            flags += [f"B: {f}" for t in second.turns for f in injection_flags(t)]
            out.append(self._judgment(prompt.id, first.model, second.model, row, row, flags))
        return out

    async def _judge_single(self, store: Store, tasks: Sequence[PairTask], progress: Any) -> list[Judgment]:
        answers: dict[tuple[str, str], tuple[Prompt, Answer]] = {}
        for t in tasks:
            for a in (t.answer_a, t.answer_b):
                answers.setdefault((t.prompt.id, a.model), (t.prompt, a))
        graded: dict[tuple[str, str], list[_Item]] = {}
        for key, (prompt, ans) in answers.items():
            turns = min(len(prompt.turns), len(ans.turns))
            graded[key] = [_Item(self.single_messages(prompt, ans, k)) for k in range(turns)]
        await self._resolve(store, [i for row in graded.values() for i in row], progress, f"judge {self.name}")
        out = []
        for t in tasks:
            row_a, row_b = graded[(t.prompt.id, t.answer_a.model)], graded[(t.prompt.id, t.answer_b.model)]
            flags = [f"A: {f}" for x in t.answer_a.turns for f in injection_flags(x)]
            flags += [f"B: {f}" for x in t.answer_b.turns for f in injection_flags(x)]
            out.append(self._judgment(t.prompt.id, t.answer_a.model, t.answer_b.model, row_a, row_b, flags))
        return out

    def _judgment(self, pid: str, model_a: str, model_b: str, row_a: list[_Item], row_b: list[_Item],
                  flags: list[str]) -> Judgment:
        pair = row_a is row_b
        failed = [it for it in (row_a if pair else row_a + row_b) if it.scores is None]
        raw = "\n---\n".join(it.raw for it in (row_a if pair else row_a + row_b))
        if flags:
            self.stats.flagged += 1
        if failed:
            return Judgment(prompt_id=pid, model_a=model_a, model_b=model_b, judge=self.name, raw=raw,
                            status="failed", explanation="; ".join(it.error for it in failed)[:2000], flags=flags)
        scores_a = [it.scores[0] for it in row_a]  # type: ignore[index]
        scores_b = [it.scores[1] for it in row_b] if pair else [it.scores[0] for it in row_b]  # type: ignore[index]
        mean_a, mean_b = sum(scores_a) / len(scores_a), sum(scores_b) / len(scores_b)
        explanation = "\n---\n".join(it.explanation for it in (row_a if pair else row_a + row_b))
        return Judgment(prompt_id=pid, model_a=model_a, model_b=model_b, judge=self.name, scores_a=scores_a,
                        scores_b=scores_b, score_a=mean_a, score_b=mean_b,
                        verdict=verdict(mean_a, mean_b, self.cfg.tie_threshold), explanation=explanation,
                        raw=raw, flags=flags)


class PanelJudge:
    """Several judges on the same games: the mean of their scores or the majority of their verdicts."""

    def __init__(self, cfg: JudgeConfig):
        names = [m.name for m in cfg.members]
        if len(set(names)) != len(names) or cfg.name in names:
            raise ConfigError(f"judge {cfg.name!r}: panel members need distinct names, unlike the panel's")
        self.cfg = cfg
        self.name = cfg.name
        self.members = [build_judge(m) for m in cfg.members]

    async def judge_pairs(self, store: Store, tasks: Sequence[PairTask], progress: Any = None) -> list[Judgment]:
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
                                      explanation="every member's judgment failed", flags=flags))
                continue
            mean_a = sum(j.score_a for j in ok) / len(ok)  # type: ignore[misc]
            mean_b = sum(j.score_b for j in ok) / len(ok)  # type: ignore[misc]
            if self.cfg.rule == "mean":
                v = verdict(mean_a, mean_b, self.cfg.tie_threshold)
            else:
                votes = [j.verdict for j in ok]
                top = max(("model_a", "model_b", "tie"), key=votes.count)
                v = top if votes.count(top) * 2 > len(votes) else "tie"
            panel.append(Judgment(prompt_id=pid, model_a=a, model_b=b, judge=self.name, score_a=mean_a,
                                  score_b=mean_b, scores_a=[mean_a], scores_b=[mean_b], verdict=v,  # type: ignore[arg-type]
                                  explanation=f"{self.cfg.rule} of {len(ok)}/{len(js)} judges", flags=flags))
        return [j for js in member_judgments for j in js] + panel

    @property
    def stats(self) -> JudgeStats:
        total = JudgeStats()
        for m in self.members:
            s = m.stats
            total.requests += s.requests
            total.parsed += s.parsed
            total.retried += s.retried
            total.failed += s.failed
            total.flagged += s.flagged
            total.tokens_in += s.tokens_in
            total.tokens_out += s.tokens_out
            total.calls.add(s.calls)
        return total


def build_judge(cfg: JudgeConfig) -> LLMJudge | PanelJudge:
    """Return the LLM judge or panel that ``cfg`` describes."""
    if cfg.kind == "panel":
        return PanelJudge(cfg)
    if cfg.kind == "llm":
        return LLMJudge(cfg)
    raise ConfigError(f"judge {cfg.name!r}: kind {cfg.kind!r} is not an LLM judge")
