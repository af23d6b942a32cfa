"""The run config: one YAML file, validated on load, saved resolved in the workspace.

Configs are pydantic models with ``extra="forbid"``, so an unknown key or a
wrong type is an error that names the key and the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from .engine_kinds import ENGINE_KINDS, EngineKind, engine_kind
from .errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _format_validation(err: ValidationError, source: str) -> str:
    lines = [f"invalid config in {source}:"]
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"  - {where}: unknown key (check its spelling and nesting)")
        else:
            got = e.get("input")
            shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
            lines.append(f"  - {where}: {e['msg']} (got {shown})")
    return "\n".join(lines)


def validate_config(data: Any, model_cls: type[M], source: str = "<config>") -> M:
    """Return ``data`` validated as ``model_cls``; a ConfigError names each bad key and ``source``."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation(err, source)) from None


def load_config_file(path: str | Path, model_cls: type[M], overrides: list[str] | None = None) -> M:
    """Return the YAML file at ``path`` validated as ``model_cls``.

    ``overrides`` are ``dotted.key=value`` strings (value parsed as YAML) applied
    before validation, so the CLI can change any field.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p} (give the path of a YAML run config)")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        raise ConfigError(f"config {where} is not valid YAML: {err}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {p} must be a mapping of keys to values, not {type(data).__name__}")
    for item in overrides or []:
        apply_override(data, item)
    return validate_config(data, model_cls, str(p))


def apply_override(data: dict[str, Any], item: str) -> None:
    """Set ``a.b.c=value`` in nested ``data`` (lists indexed by number or by an item's ``name``)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.subkey=value")
    dotted, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"override {item!r}: the value is not valid YAML ({err.__class__.__name__})") from None
    node: Any = data
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if not isinstance(node, (dict, list)):
            raise ConfigError(f"override {dotted!r}: {'.'.join(parts[:i])!r} is a value, not a section")
        if isinstance(node, list):
            idx = _list_index(node, part, dotted)
            if last:
                node[idx] = value
            else:
                node = node[idx]
        else:
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]


def _list_index(node: list[Any], part: str, dotted: str) -> int:
    if part.isdigit() and int(part) < len(node):
        return int(part)
    for i, item in enumerate(node):
        if isinstance(item, dict) and item.get("name") == part:
            return i
    raise ConfigError(f"override {dotted!r}: no list item {part!r}")


# ---- models and engines ---------------------------------------------------------


class PromptFormat(Section):
    """How a conversation becomes text for a completion-mode (base) model.

    Each turn is rendered as ``user_prefix + text + user_suffix`` and
    ``assistant_prefix + text + assistant_suffix``; ``few_shot`` examples are
    rendered the same way before the conversation; the model continues after the
    final ``assistant_prefix``.
    """

    system: str = Field("", description="text before the few-shot examples and the conversation (a model's "
                        "system_prompt replaces it)")
    user_prefix: str = Field("Question: ", description="written before each user turn")
    user_suffix: str = Field("\n", description="written after each user turn")
    assistant_prefix: str = Field("Answer:", description="written before each answer; the model continues after the "
                                  "last one")
    assistant_suffix: str = Field("\n\n", description="written after each answer of the examples and earlier turns")
    few_shot: list[tuple[str, str]] = Field(default_factory=list, description="(question, answer) pairs")
    strip_answer: bool = Field(True, description="strip whitespace around the generated answer")


class SamplingParams(Section):
    max_tokens: int = Field(256, ge=1, description="the most tokens an answer may have")
    temperature: float = Field(0.0, ge=0.0, description="sampling temperature (0: greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling: the smallest set of tokens whose "
                         "probability reaches top_p")
    seed: int = Field(0, description="the sampling seed (sent with every request; endpoints that honour it repeat "
                      "their samples)")
    stop: list[str] = Field(default_factory=list, description="strings that end an answer (not included in it)")


class CategoryParams(Section):
    """Sampling settings that replace a model's own for the prompts of one category (unset: kept)."""

    max_tokens: int | None = Field(None, ge=1, description="replaces params.max_tokens for the category")
    temperature: float | None = Field(None, ge=0.0, description="replaces params.temperature for the category")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="replaces params.top_p for the category")
    seed: int | None = Field(None, description="replaces params.seed for the category")
    stop: list[str] | None = Field(None, description="replaces params.stop for the category")


CATEGORY_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # FastChat's MT-Bench answers (fastchat/llm_judge/common.py, temperature_config).
    "mt-bench": {
        "writing": {"temperature": 0.7},
        "roleplay": {"temperature": 0.7},
        "extraction": {"temperature": 0.0},
        "math": {"temperature": 0.0},
        "coding": {"temperature": 0.0},
        "reasoning": {"temperature": 0.0},
        "stem": {"temperature": 0.1},
        "humanities": {"temperature": 0.1},
    },
}
"""Named ``params_by_category`` tables a config can give by name."""


class VoteSpec(Section):
    """A stronger answer from the same weights: k seeded samples per turn, one kept (``arena/vote.py``).

    Sample i is drawn at ``temperature`` with seed ``seed + i`` (over the model's params and its category's);
    each is a call through the ledger, so k samples cost k times one answer and a resumed run asks only the
    samples it lacks.
    """

    k: int = Field(ge=1, description="samples per turn (k x the calls of one answer)")
    temperature: float = Field(0.7, ge=0.0, description="the samples' temperature (over params and "
                               "params_by_category)")
    seed: int = Field(0, description="sample i is drawn with seed + i")
    method: Literal["majority", "best_of_k"] = Field(
        "majority", description="majority: the most common answer (self-consistency; normalised: whitespace and "
        "case, or the first number of a numeric answer; a tie goes to the earliest sample); best_of_k: the sample "
        "the verifier scores best against the prompt's reference answer, an oracle teacher for harvesting, not a "
        "fair contestant")

    @model_validator(mode="after")
    def _check(self) -> VoteSpec:
        if self.k > 1 and self.temperature == 0.0:
            raise ValueError(f"vote: k={self.k} samples at temperature 0 are k copies of one greedy answer; give "
                             f"vote.temperature > 0 (e.g. 0.7) or k: 1")
        return self


class BatchSpec(Section):
    """Batch mode of an endpoint model (``engine: openai`` or ``anthropic``): a stage's calls as batch jobs
    (``engines/batch.py``).

    The calls the ledger lacks are written as JSONL in the Batch API's format, uploaded through the Files API and
    run as batch jobs (Anthropic: sent as Message Batches), polled until done; their replies fill the same ledger
    keys a synchronous call would (a rerun with batch mode on or off asks nothing again). A run stopped while a job
    is open finds it again and waits for it.
    """

    enabled: bool = Field(False, description="send the model's calls as batch jobs instead of one request each")
    window: str = Field("24h", pattern=r"^[1-9][0-9]*h$", description="the completion window of each job (OpenAI "
                        "accepts 24h only; Anthropic's is always 24h, not sent); a job not done in it expires, and "
                        "what it finished is kept")
    max_requests: int = Field(50_000, ge=1, description="calls per job at most (OpenAI: 50,000; Anthropic: "
                              "100,000); a stage with more is split into several jobs")
    max_bytes: int = Field(100_000_000, ge=1_000, description="bytes of one job's input at most (OpenAI: 100 MB on "
                           "older accounts, 200 MB now; Anthropic: 256 MB)")
    poll_s: float = Field(30.0, gt=0, description="seconds between two looks at the open jobs")
    failed: Literal["retry_batch", "sync"] = Field(
        "retry_batch", description="what becomes of the calls that failed inside a job (an error line, an expired "
        "or cancelled job): retry_batch, asked again in a new job (up to `retries` times); sync, asked again at once "
        "one request each, as without batch mode")
    retries: int = Field(1, ge=0, le=10, description="retry_batch: new jobs for the calls still failing; then they "
                         "are failed calls in the ledger, retried on the next run")


_ENGINE_HELP = " or ".join(
    [", ".join(f"{k.name} ({k.summary})" for k in list(ENGINE_KINDS.values())[:-1]),
     *(f"{k.name} ({k.summary})" for k in list(ENGINE_KINDS.values())[-1:])])


class ModelSpec(Section):
    """A contestant (or judge) model: which engine runs it and how it is prompted."""

    name: str = Field(min_length=1, description="the model's name in the arena (leaderboards, the store, --set "
                      "models.NAME....); unique in a config")
    engine: str = Field(description=_ENGINE_HELP)
    model: str = Field("bundled", description="llamacpp: 'bundled' or another registered model name, a GGUF path, a "
                       "Hugging Face repo and file (ORG/NAME/FILE.gguf, ORG/NAME:Q4_K_M, ORG/NAME@REVISION/...) or an "
                       "Ollama tag (NAME:TAG); transformers: the same, a model folder, or a repo id (ORG/NAME: its "
                       "snapshot); openai: the served model id. docs/models.md: Naming a model")
    mode: Literal["chat", "completion"] = Field("chat", description="chat: messages through the chat template (an "
                                                "instruction-tuned model); completion: a text prompt from "
                                                "prompt_format (a base model, few-shot)")
    # exclude_if: written only when set, so identities and fingerprints of models without one stay as they were
    family: str | None = Field(None, exclude_if=lambda v: v is None, description="the model family (e.g. 'llama'), "
                               "for the self-preference check of a judge of the same family; default: the name "
                               "stem of model (Meta-Llama-3-8B-Instruct: llama)")
    chat_format: str | None = Field(None, description="llama.cpp chat format name, e.g. 'gemma' or 'chatml'")
    chat_template: str | None = Field(
        None, description="a Jinja chat template (overrides chat_format); like Hugging Face templates it writes "
        "{{ bos_token }} itself"
    )
    prompt_format: PromptFormat = Field(default_factory=PromptFormat, description="completion mode: how a "
                                        "conversation becomes text")
    params: SamplingParams = Field(default_factory=SamplingParams, description="sampling settings of every request")
    system_prompt: str | None = Field(
        None, description="a system message put before every conversation the model answers as a contestant (chat "
        "mode; in completion mode it replaces prompt_format.system)"
    )
    params_by_category: dict[str, CategoryParams] = Field(
        default_factory=dict, description="sampling per prompt category, over `params`: a mapping category -> "
        "settings, or a preset name ('mt-bench': FastChat's temperature per MT-Bench category)"
    )
    # llamacpp
    n_ctx: int = Field(2048, description="llamacpp: the context window in tokens (prompt and answer together)")
    n_threads: int | None = Field(None, description="llamacpp: CPU threads (default: the cores this process may run "
                                  "on; in a Ray engine actor, the CPUs it reserved: scale num_cpus)")
    # exclude=True: in no identity (flywheel fingerprints and model identities stay what they were); the ledger keys
    # a batched call with its decoding and row count (engines/llamacpp.py: key_params)
    parallel: int = Field(8, ge=1, exclude=True, description="llamacpp: completion-mode requests, greedy or seeded "
                          "samples, decoded this many together in one context (continuous batching, like llama.cpp "
                          "server's --parallel), every step with this many rows, so an answer is a function of its "
                          "request alone (never of what is decoded beside it, the order, or what ran before); 1: one "
                          "at a time (another computation: answers can differ from batched ones in near-ties, and "
                          "are keyed apart in the ledger). docs/models.md: Batched decoding in llama.cpp")
    # empty replies, any engine (exclude=True as parallel: how failures are handled, not what the model answers)
    empty_retries: int = Field(2, ge=0, le=10, exclude=True, description="an empty reply that asking again could "
                               "change (an endpoint, an unseeded sample) is asked again this many times within the "
                               "run, with backoff (0.5 s, then doubling), before empty_replies decides")
    empty_replies: Literal["answer", "fail"] = Field(
        "answer", exclude=True, description="a reply still empty after empty_retries: 'answer' (the model's "
        "answer: judged, it loses, counted under empty in the run summary, as an in-process model's empty answer "
        "is), or 'fail' (a failed call, retried on the next run: for an endpoint known to drop replies)")
    # transformers
    batch_size: int = Field(16, ge=1, description="transformers: prompts generated together in one batch")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="transformers: weights' dtype")
    # vllm
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="vllm: more arguments of vllm.LLM(...), e.g. tensor_parallel_size, "
        "gpu_memory_utilization, quantization (they load the model; they are not part of the ledger key)"
    )
    # openai-compatible
    base_url: str | list[str] | None = Field(None, description="openai: the endpoint's URL (.../v1), or a list of "
                                             "URLs that share the load (each request goes to the one with the fewest "
                                             "in flight); anthropic: the API's URL (default: Anthropic's own)")
    api_key_env: str | None = Field(None, description="name of the environment variable that holds the API key "
                                    "(anthropic: default ANTHROPIC_API_KEY)")
    revision: str | None = Field(
        None, description="the served weights' version (e.g. a checkpoint hash); it enters the ledger key, so "
        "changing it asks the endpoint again instead of reusing answers of the old weights (llamacpp and "
        "transformers know a model by its content: a hub revision goes in model:, ORG/NAME@REVISION/...)"
    )
    concurrency: int = Field(16, ge=1, description="requests in flight per endpoint")
    timeout_s: float = Field(120.0, gt=0, description="openai, anthropic: seconds before a request is abandoned and "
                             "retried")
    max_retries: int = Field(6, ge=0, description="openai, anthropic: retries of a request after 429, 5xx, a timeout "
                             "or a connection error (exponential backoff with full jitter) before the call is recorded "
                             "as failed")
    price_in: float = Field(0.0, ge=0, description="price per 1M input tokens")
    price_out: float = Field(0.0, ge=0, description="price per 1M output tokens")
    # exclude_if: written only when set, so identities and fingerprints of models without one stay as they were
    price_batch: float | None = Field(
        None, ge=0, le=1, exclude_if=lambda v: v is None, description="a batch call's price as a share of "
        "price_in / price_out: OpenAI's Batch API and Anthropic's Message Batches charge half the synchronous "
        "price, so the default is 0.5 for engines openai and anthropic (none for local engines); set it where a "
        "provider's discount differs (arena plan and arena info price batch calls with it)")
    rpm: int | None = Field(None, ge=1, description="openai: requests per minute per endpoint (besides concurrency)")
    tpm: int | None = Field(
        None, ge=1, description="openai: tokens per minute per endpoint; a request counts its prompt (estimated) "
        "plus max_tokens until its usage comes back"
    )
    # exclude=True as parallel: how the calls are sent, not what the model answers (keys and identities unchanged)
    batch: BatchSpec = Field(default_factory=BatchSpec, exclude=True, description="openai, anthropic: send the calls "
                             "as batch jobs (half the price on hosted APIs, within a window of hours): "
                             "docs/guides/batch.md")
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens", description="openai: the request field params.max_tokens is sent as; reasoning models "
        "(o1-style) take max_completion_tokens, which bounds reasoning and answer together"
    )
    vote: VoteSpec | None = Field(
        None, description="answer each turn with k seeded samples and keep one (majority, or best_of_k by the "
        "verifier): a stronger reference at k times the cost; unset: one answer per turn"
    )

    @model_serializer(mode="wrap")
    def _drop_unset_vote(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A model without vote dumps as before the field existed: its flywheel identity, stage fingerprints
        # and saved configs stay the same, so an old workspace resumes with nothing redone.
        data: dict[str, Any] = handler(self)
        if data.get("vote", ...) is None:
            del data["vote"]
        return data

    @field_validator("params_by_category", mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value not in CATEGORY_PRESETS:
                raise ValueError(f"unknown preset {value!r}; presets: {', '.join(CATEGORY_PRESETS)} "
                                 f"(or give a mapping category -> settings)")
            return CATEGORY_PRESETS[value]
        if isinstance(value, dict):
            # Categories match case-insensitively: 'Writing' in a config, 'writing' in the data.
            return {str(k).lower(): v for k, v in value.items()}
        return value

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in ENGINE_KINDS:
            raise ValueError(f"unknown engine {value!r}; engines: {', '.join(ENGINE_KINDS)}")
        return value

    @property
    def engine_kind(self) -> EngineKind:
        """The registry's entry of this model's engine (what it runs on, whether it makes calls)."""
        return engine_kind(self.engine)

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.engine == "openai" and not self.base_url:
            raise ValueError(f"model {self.name!r}: engine 'openai' needs base_url")
        endpoint_only = [k for k in ("rpm", "tpm") if getattr(self, k)]
        endpoint_only += ["max_tokens_field"] if self.max_tokens_field != "max_tokens" else []
        endpoint_only += ["batch"] if self.batch.enabled and self.engine != "anthropic" else []
        if self.system_prompt and self.engine == "llamacpp" and self.mode == "chat" and self.chat_format == "gemma":
            raise ValueError(f"model {self.name!r}: llama.cpp's 'gemma' chat format drops system messages, so "
                             f"system_prompt would be lost; give a chat_template that places it (Gemma's own puts it "
                             f"in the first user turn)")
        if self.engine == "anthropic" and (self.mode != "chat" or len(self.base_urls) > 1):
            raise ValueError(f"model {self.name!r}: engine 'anthropic' takes chat messages (mode: chat) from one "
                             f"base_url (default: Anthropic's API)")
        if self.engine != "openai" and endpoint_only:
            raise ValueError(f"model {self.name!r}: {', '.join(endpoint_only)} apply to engine 'openai' only "
                             f"(this model's engine is {self.engine!r}); remove them")
        for url in self.base_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"model {self.name!r}: base_url {url!r} must start with http:// or https://")
        if self.revision is not None and self.engine_kind.weights is not None:
            raise ValueError(f"model {self.name!r}: revision labels an endpoint's weights, and engine {self.engine!r} "
                             f"knows a model by its content; to pin a Hugging Face revision put it in the name "
                             f"(model: ORG/NAME@REVISION/FILE.gguf, or ORG/NAME@REVISION for a folder) and remove "
                             f"revision")
        if self.vote is not None and not self.engine_kind.makes_calls:
            raise ValueError(f"model {self.name!r}: vote samples the model k times, and engine {self.engine!r} "
                             f"has no model to ask (its answers are imported); remove vote")
        return self

    @property
    def batch_price(self) -> float | None:
        """A batch call's price as a share of a synchronous one's (price_batch, else the engine's default)."""
        return self.price_batch if self.price_batch is not None else self.engine_kind.batch_price

    @property
    def oracle(self) -> bool:
        """Whether this model's answers were picked against the reference answers (``vote.method: best_of_k``)."""
        return self.vote is not None and self.vote.method == "best_of_k"

    @property
    def base_urls(self) -> list[str]:
        if self.base_url is None:
            return []
        return [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)


# ---- the run ---------------------------------------------------------------------


class TasksConfig(Section):
    """The built-in task suite as the test set."""

    n: int = Field(270, ge=1, description="number of prompts, spread evenly over the categories")
    seed: int = Field(0, description="the seed the prompts are generated with (slices of a flywheel need other seeds)")
    categories: list[str] | None = Field(None, description="subset of the suite's categories (default: all)")
    suite: Literal[1, 2] = Field(
        1, description="the suite's version: 1, the original nine categories (the default, so a workspace made "
        "before keeps its prompts), or 2, the balanced world of twelve categories with difficulty tiers and no "
        "shortcuts (the quickstarts use it)")


class PromptsConfig(Section):
    """Open prompts as the test set, instead of the task suite: a set in the workspace or a file to ingest."""

    set: str | None = Field(None, description="a prompt set stored in the workspace, e.g. 'ingested' or 'testset/mix'")
    path: str | None = Field(None, description="a file or dataset folder in any layout `arena ingest` reads")
    format: str = Field("auto", description="record layout of path (auto-detected by default)")
    limit: int | None = Field(None, ge=1, description="keep only the first N prompts")

    @model_validator(mode="after")
    def _one(self) -> PromptsConfig:
        if (self.set is None) == (self.path is None):
            raise ValueError("prompts: give exactly one of set or path")
        return self


class JudgeConfig(Section):
    """Who scores the battles.

    ``verifier`` checks answers against the task suite's references (no model).
    ``llm`` runs a judge folder (``template``: a built-in judge, ``pairwise``,
    ``single`` or ``reference``, or the path of your own folder) on ``model``.
    ``panel`` combines several judges (``members``) by ``rule``.
    """

    kind: Literal["verifier", "llm", "panel"] = Field("verifier", description="verifier: task-suite answers checked "
                                                      "against their references; llm: a judge model and a template; "
                                                      "panel: several judges combined")
    name: str = Field("verifier", description="the judge's name: battles, audits and boards are stored under it")
    tie_threshold: float = Field(0.0, ge=0.0, description="score gap at or under which a battle is a tie")
    # llm
    template: str = Field("pairwise", description="built-in judge name or path of a judge folder / judge.yaml")
    model: ModelSpec | None = Field(None, description="the judge model (kind: llm)")
    both_orders: bool = Field(True, description="play each pair twice, once in each order (pairwise judges)")
    combine: Literal["mean", "both", "consistent"] = Field(
        "mean",
        description="how a pair's games make battles: mean of scores over both orders; both (each game a battle); "
        "consistent (a tie unless both orders name the same winner)",
    )
    strong_weight: int = Field(
        3, ge=1, description="combine: both, label judges (arena-hard): battles a game with a strong verdict "
        "([[A>>B]], [[B>>A]]) counts as; arena-hard-auto uses 3")
    structured: bool = Field(True, description="constrain the judge's output to the judge's JSON schema")
    sampling: dict[str, Any] = Field(default_factory=dict, description="overrides of the judge folder's sampling")
    retries: int = Field(2, ge=0, description="re-asks of a verdict that does not parse")
    retry_temperature: float = Field(0.7, ge=0.0, description="temperature of those re-asks")
    # panel
    members: list[JudgeConfig] = Field(default_factory=list, description="panel: the member judges")
    rule: Literal["mean", "majority"] = Field("mean", description="panel: mean of the members' scores, or majority of "
                                              "their verdicts")

    @model_validator(mode="after")
    def _check(self) -> JudgeConfig:
        if self.kind == "llm" and self.model is None:
            raise ValueError(f"judge {self.name!r}: kind 'llm' needs model (the judge model's spec)")
        if self.kind == "panel" and len(self.members) < 2:
            raise ValueError(f"judge {self.name!r}: kind 'panel' needs at least two members")
        if self.model is not None and not self.model.engine_kind.makes_calls:
            runs = ", ".join(k.name for k in ENGINE_KINDS.values() if k.makes_calls)
            raise ValueError(f"judge {self.name!r}: its model's engine {self.model.engine!r} has no model to run; "
                             f"give the judge a model it can ask (engine: one of {runs})")
        if self.model is not None and self.model.vote is not None:
            raise ValueError(f"judge {self.name!r}: vote applies to contestants (their answers), not to a judge's "
                             f"model; remove vote from model {self.model.name!r}")
        return self


def oracle_judge_error(models: list[ModelSpec], judge: JudgeConfig) -> str | None:
    """Return why ``models`` cannot be judged by ``judge`` (best_of_k picks samples with the verifier), or None."""
    oracles = [m.name for m in models if m.oracle]
    if oracles and judge.kind != "verifier":
        return (f"model {oracles[0]!r}: vote.method best_of_k scores its samples with the verifier (against the "
                f"reference answers), and this judge is {judge.kind!r}; use judge kind 'verifier' (the task suite) "
                f"or vote.method 'majority'")
    return None


class BattleConfig(Section):
    """Which pairs meet on which prompts."""

    schedule: Literal["all", "baseline", "target", "adaptive"] = Field(
        "all",
        description="all: every pair on every prompt; baseline: every model against `baseline` (arena-hard style); "
        "target: `target` against every other model (the flywheel); adaptive: judge calls spent on the pairs "
        "whose order is still uncertain",
    )
    baseline: str | None = Field(None, description="schedule baseline: the model every other model battles (e.g. "
                                 "gpt-4-0314)")
    target: str | None = Field(None, description="schedule target: the model that battles every other model")
    budget: int | None = Field(None, ge=1, description="adaptive: battles to judge (default: half the round robin)")
    batch_size: int = Field(64, ge=1, description="adaptive: battles judged between two refits")
    seed: int = Field(0, description="seed of the adaptive schedule's choices")


class RatingConfig(Section):
    """Bradley-Terry ratings (scale 400, base 10, initial 1000)."""

    anchor: str | None = Field(None, description="model fixed at anchor_rating (default: mean 1000)")
    anchor_rating: float = Field(1000.0, description="the rating the anchor model is fixed at")
    bootstrap: int = Field(100, ge=0, description="bootstrap rounds for 95% CIs (0: none)")
    resample: Literal["prompt", "battle"] = Field("prompt", description="what the bootstrap resamples: whole prompts "
                                                  "(every battle of a drawn prompt comes along) or single battles")
    seed: int = Field(0, description="seed of the bootstrap resamples")


class ScaleResources(Section):
    """What one engine actor of a model needs on the Ray cluster, and how many of them run."""

    replicas: int = Field(1, ge=1, description="engine actors of the model (each loads the model once)")
    num_cpus: float = Field(1.0, ge=0, description="CPUs Ray reserves for each engine actor; a local model "
                            "(llamacpp, transformers) in it runs on that many threads (at least one) unless its "
                            "n_threads is set")
    num_gpus: float = Field(0.0, ge=0, description="GPUs Ray reserves for each engine actor")


class ScaleConfig(Section):
    """Where the model calls run: in this process (local) or in engine actors on a Ray cluster (ray).

    The ledger stays in the driver (this process): every result is written there as its batch
    returns, so resume and no-double-calls hold exactly as in a local run.
    """

    backend: Literal["local", "ray"] = Field("local", description="local: engines run in this process; ray: in engine "
                                             "actors on a Ray cluster (the ledger stays here)")
    address: str | None = Field(None, description="ray: the cluster ('auto', 'ray://host:10001'); "
                                "none starts a Ray instance on this machine")
    batch_size: int = Field(32, ge=1, description="ray: requests sent to an actor in one task")
    defaults: ScaleResources = Field(default_factory=ScaleResources, description="ray: each model's actors")
    models: dict[str, ScaleResources] = Field(default_factory=dict, description="ray: per-model overrides, by name")
    max_restarts: int = Field(3, ge=-1, description="ray: restarts of a dead engine actor (its batch is retried)")


class AuditConfig(Section):
    """Canaries planted beside an LLM judge's games (arena/canaries.py) and the thresholds they are held to."""

    canaries: bool | None = Field(None, description="plant canaries: a null model, identical pairs, truncated "
                                  "copies (and the flip rate of the run's own games in both orders); default: on "
                                  "for LLM judges, off for the verifier (its checkers need none)")
    share: float = Field(0.05, gt=0.0, le=0.5, description="canary games as a share of the run's games, at most")
    seed: int = Field(0, description="which prompts and contestants the canaries are planted on")
    max_null_win: float = Field(10.0, ge=0, le=100, description="percent: the null model may win at most this")
    min_identical_tie: float = Field(80.0, ge=0, le=100, description="percent: identical pairs tied at least")
    max_flip: float = Field(25.0, ge=0, le=100, description="percent: pairs whose winner flips with the order")
    min_truncated_loss: float = Field(50.0, ge=0, le=100, description="percent: a truncated copy loses at least")
    allow_self_judging: bool = Field(False, description="let a judge grade a contestant that is its own model (the "
                                     "same endpoint model or weights), with a warning: for a machine with one model "
                                     "only; its verdicts on that contestant are self-judged")

    def enabled(self, judge: JudgeConfig) -> bool:
        return self.canaries if self.canaries is not None else judge.kind != "verifier"

    def thresholds(self) -> dict[str, float]:
        return {"max_null_win": self.max_null_win, "min_identical_tie": self.min_identical_tie,
                "max_flip": self.max_flip, "min_truncated_loss": self.min_truncated_loss}


class SpendLimit(Section):
    """The most a run may spend on model calls."""

    usd: float = Field(gt=0, description="USD: the workspace's ledger spend (every run into it together) that no "
                       "call may take the run past; each call counts at its max_tokens until its usage comes back")


class RunConfig(Section):
    """One arena run: a test set, contestants, a judge, ratings."""

    name: str = Field("arena", min_length=1, description="the run's name (its default workspace is workspaces/<name>)")
    workspace: str | None = Field(None, description="workspace directory (default: workspaces/<name>)")
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="the built-in task suite as the test set "
                               "(when prompts is not given)")
    prompts: PromptsConfig | None = Field(None, description="open prompts instead of the task suite")
    models: list[ModelSpec] = Field(min_length=2, description="the contestants")
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="who judges the battles")
    battles: BattleConfig = Field(default_factory=BattleConfig, description="which pairs meet on which prompts")
    ratings: RatingConfig = Field(default_factory=RatingConfig, description="Bradley-Terry ratings and their bootstrap")
    scale: ScaleConfig = Field(default_factory=ScaleConfig, description="where the model calls run (this process or "
                               "Ray engine actors)")
    audit: AuditConfig = Field(default_factory=AuditConfig, description="canaries that check an LLM judge")
    spend_limit: SpendLimit | None = Field(
        None, exclude_if=lambda v: v is None, description="stop before a model call would take the workspace's "
        "spend past usd (not battles.budget, which counts battles); a rerun with a higher limit resumes")

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"model names must be unique; repeated: {', '.join(dupes)}")
        # The ledger keys calls on the model id, not the URL (so several URLs can share one model's
        # load); two different servers under one id would be served each other's answers.
        seen: dict[tuple[str, str], ModelSpec] = {}
        for m in self.models:
            if m.engine != "openai":
                continue
            ident = (m.model, m.params.model_dump_json())
            other = seen.setdefault(ident, m)
            if other is not m and set(other.base_urls) != set(m.base_urls):
                raise ValueError(
                    f"models {other.name!r} and {m.name!r} call different servers under one model id {m.model!r} with "
                    f"the same params; the ledger would mix their answers: give each a distinct `model` "
                    f"(llama.cpp server and Ollama accept any name)"
                )
        for key in ("baseline", "target"):
            value = getattr(self.battles, key)
            if value is not None and value not in names:
                raise ValueError(f"battles.{key} {value!r} is not one of the models: {', '.join(names)}")
        if self.battles.schedule in ("baseline", "target") and getattr(self.battles, self.battles.schedule) is None:
            raise ValueError(f"battles.schedule {self.battles.schedule!r} needs battles.{self.battles.schedule}")
        known = {*names, *(j.model.name for j in [self.judge, *self.judge.members] if j.model is not None)}
        unknown = sorted(set(self.scale.models) - known)
        if unknown:
            raise ValueError(f"scale.models names {', '.join(unknown)}, not a contestant or judge model: "
                             f"{', '.join(sorted(known))}")
        if self.ratings.anchor is not None and self.ratings.anchor not in names:
            raise ValueError(f"ratings.anchor {self.ratings.anchor!r} is not one of the models: {', '.join(names)}")
        why = oracle_judge_error(self.models, self.judge)
        if why is not None:
            raise ValueError(why)
        return self

    def model(self, name: str) -> ModelSpec:
        for m in self.models:
            if m.name == name:
                return m
        raise ConfigError(f"no model named {name!r} in the config; models: {', '.join(m.name for m in self.models)}")


class ModelsFile(BaseModel):
    """The models of a config file, whatever else it holds (for `arena serve`)."""

    model_config = ConfigDict(extra="ignore")

    models: list[ModelSpec] = Field(min_length=1, description="the models of the file")

    def model(self, name: str) -> ModelSpec:
        for m in self.models:
            if m.name == name:
                return m
        raise ConfigError(f"no model named {name!r} in the config; models: {', '.join(m.name for m in self.models)}")
