"""The nouns of the arena: plain typed records, validation only, no behaviour.

Every stage takes and returns these. They serialise to JSON with ``model_dump``
so the store keeps them as they are and a person can read them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["model_a", "model_b", "tie"]
"""A battle's result, in Chatbot Arena / FastChat wording."""

A_WINS, B_WINS, TIE = 0, 1, 2
"""The same outcomes as small integer codes (int8 arrays in rating, counts in audits), the one set every
module uses: model_a (the first of the pair as the caller orders it) wins, model_b wins, tie."""
OUTCOME_CODE: dict[str, int] = {"model_a": A_WINS, "model_b": B_WINS, "tie": TIE}


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Prompt(Record):
    """One test or training item: a conversation's user turns and what we know of it."""

    id: str
    turns: list[str] = Field(min_length=1, description="user turns, in order")
    source: str = ""
    category: str | None = None
    cluster: str | None = None
    difficulty: float | None = None
    reference: list[str] | None = Field(
        default=None, description="reference answer per turn (assistant turns of the source, or a key)"
    )
    checker: str | None = Field(default=None, description="name of the verifier checker for task-suite prompts")
    meta: dict[str, Any] = Field(default_factory=dict)


class Answer(Record):
    """A model's assistant turns for one prompt (one per user turn)."""

    prompt_id: str
    model: str
    turns: list[str]
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    truncated: int = Field(0, description="turns cut off at max_tokens (kept, and counted in the run summary)")
    reasoning: list[str] = Field(
        default_factory=list, description="a reasoning model's thinking per turn, kept apart from the answer "
        "(never judged, never trained on); empty when the model gave none"
    )
    reasoning_tokens: int = Field(0, description="of tokens_out, those spent reasoning")


class Judgment(Record):
    """One judge game: the two models in the order shown and the judge's scores."""

    prompt_id: str
    model_a: str = Field(description="the model shown first")
    model_b: str = Field(description="the model shown second")
    judge: str
    scores_a: list[float] = Field(default_factory=list, description="per-turn scores of model_a")
    scores_b: list[float] = Field(default_factory=list, description="per-turn scores of model_b")
    score_a: float | None = None
    score_b: float | None = None
    verdict: Outcome | None = None
    labels: list[str] = Field(default_factory=list, description="a label judge's verdict per turn, e.g. A>>B "
                              "(arena-hard), in the order shown; scores_a/scores_b then hold each label's strength")
    explanation: str = ""
    raw: str = ""
    status: Literal["ok", "failed"] = "ok"
    flags: list[str] = Field(default_factory=list)
    truncated: int = Field(0, description="verdict replies behind this game that were cut off at max_tokens")


class Battle(Record):
    """The result of a pair of models on one prompt, combined over the judge's games."""

    prompt_id: str
    model_a: str
    model_b: str
    outcome: Outcome
    score_a: float | None = None
    score_b: float | None = None
    score_gap: float = 0.0
    judge: str = ""
    games: int = 1
    weight: int = Field(1, ge=1, description="battles this one counts as: arena-hard counts a game with a strong "
                        "verdict ([[A>>B]]) as three")


Verdict = Literal["a", "b", "tie", "both_bad"]
"""A person's vote on two answers in the order shown: the left (a) or right (b) is better, a tie, or both bad."""

ControlKind = Literal["identical", "empty", "repeat"]
"""A control item of the vote page: one answer twice, an empty answer against a real one, or a pair the voter
already voted on, shown in the other order."""


class Vote(Record):
    """One person's vote on two answers to a prompt, models in the order shown (left = model_a)."""

    vote_id: str = Field(min_length=8, max_length=64,
                         description="the nonce of the item voted on (unique): an item takes one vote, a resubmission "
                                     "is stored once")
    set_name: str = "test"
    prompt_id: str
    model_a: str = Field(description="the model shown left; '' for a control's empty answer")
    model_b: str = Field(description="the model shown right; '' for a control's empty answer")
    verdict: Verdict
    voter: str = Field(min_length=1, max_length=80)
    shown_at: float
    voted_at: float
    seconds: float = Field(ge=0, description="time from shown to voted")
    control: ControlKind | None = Field(None, description="None for a real item")
    retracted: bool = False
    session: int | None = Field(None, description="the voter's session it was cast in; its models are shown when "
                                                  "the session ends (None: cast before sessions)")


class Rating(Record):
    """A model's place on the leaderboard."""

    model: str
    rating: float
    ci_low: float | None = None
    ci_high: float | None = None
    rank: int | None = None
    rank_ci: int | None = None
    wins: int = 0
    losses: int = 0
    ties: int = 0
    battles: int = 0


class ExactCount(Record):
    """Exact answers (checker score 10) on the test set; gained / lost: prompts right here and wrong in ``vs``,
    and the reverse (None without a model to compare to)."""

    n: int = 0
    of: int = Field(0, description="test prompts of the model checked")
    gained: int | None = None
    lost: int | None = None


class ExactAnswers(ExactCount):
    """A model's exact answers, against the model ``vs`` if any, in all and per prompt category
    (``rating.paired.exact_count``; the flywheel's evaluations and ``arena leaderboard --diff``)."""

    vs: str | None = None
    per_category: dict[str, ExactCount] = Field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Return the counts as ``arena leaderboard --diff --json`` writes them (no ``vs``; categories if any)."""
        out = self.model_dump(exclude={"vs", "per_category"})
        if self.per_category:
            out["per_category"] = {c: e.model_dump() for c, e in self.per_category.items()}
        return out


class Grade(Record):
    """A single-answer grade (MT-Bench's 1-10, FastChat's single judgment): one judge's grade of one model's
    answer to one prompt (a later turn under its own prompt id), stored once; the pairwise games and battles
    it stands for are derived from it (``store.grade_games``), never copied."""

    prompt_id: str
    model: str
    judge: str
    score: float | None = Field(None, description="the grade; None: the grading failed (FastChat's -1)")
    text: str = Field("", description="the judge's judgment text")


class SFTExample(Record):
    messages: list[dict[str, str]]


class PreferencePair(Record):
    prompt: list[dict[str, str]]
    chosen: list[dict[str, str]]
    rejected: list[dict[str, str]]
    margin: float = 0.0
    chosen_model: str = ""
    rejected_model: str = ""
