"""The curation runs behind ``arena ingest``, ``arena testset build`` and ``arena pool build``.

The pipelines here are the edge: they read configs and sources, open the
workspace, call the stage functions (records in, records out) and store each
set with ``Store.put_prompts`` plus a JSONL copy under ``WORKSPACE/sets/`` that a
person can open. Each returns its counts per step and per cluster, which the
command line prints (``cli/curate.py``); nothing here prints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import ArenaError
from ..progress import Track, tracking
from ..readers import ReadError, missing_file
from ..records import Prompt
from ..store import Store
from . import INGESTED
from .filters import Step, build_moderator, clean
from .ingest import IngestError, Ingestor, IngestReport, source_label
from .settings import PoolConfig, SourceSpec, TestsetConfig

if TYPE_CHECKING:
    from .embed import TextEmbedder

BAD_KINDS = ("bad_json", "not_utf8", "wrong_format", "bad_record", "empty_file")
"""Count keys of skipped inputs (see ingest.Problem.kind)."""

OnSkipped = Callable[[IngestReport], None]
"""Hears each ingest of a build that skipped bad inputs (the CLI prints them)."""


# ---- small edges ------------------------------------------------------------------------


def set_path(store: Store, set_name: str) -> Path:
    """Return where the JSONL copy of a prompt set lies: ``WORKSPACE/sets/<set name>.jsonl``."""
    return store.root / "sets" / f"{set_name}.jsonl"


def save_set(store: Store, set_name: str, prompts: Sequence[Prompt]) -> None:
    """Store ``prompts`` as ``set_name`` and write its JSONL copy for people to open."""
    store.put_prompts(set_name, prompts)
    path = set_path(store, set_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for p in prompts:
            fh.write(p.model_dump_json() + "\n")
    # Write then rename: a reader never sees half a file.
    tmp.replace(path)


def save_resolved_config(store: Store, name: str, cfg: Any) -> None:
    """Keep the resolved config beside the results: ``WORKSPACE/<name>.config.yaml`` and the store's meta."""
    data = cfg.model_dump(mode="json")
    store.set_meta(f"{name}/config", data)
    (store.root / f"{name}.config.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


# ---- ingest -----------------------------------------------------------------------------


def run_ingest(
    store: Store,
    sources: Sequence[SourceSpec],
    set_name: str = INGESTED,
    strict: bool = False,
    replace: bool = False,
    track: Track | None = None,
) -> IngestReport:
    """Ingest ``sources`` into the set ``set_name`` and return the report.

    The set is merged with what it already holds (``replace`` starts it afresh), and
    it is saved after every source and before a strict-mode error is raised, so
    nothing already ingested is lost.
    """
    existing = [] if replace else store.get_prompts(set_name)
    acc = Ingestor(existing, strict=strict)
    try:
        for spec in sources:
            advance = track(f"ingest {spec.name or source_label(spec.path)}", None) if track is not None else None
            acc.add_source(spec, advance)
            if advance is not None:
                advance(0)
            save_set(store, set_name, acc.prompts)
    except IngestError:
        save_set(store, set_name, acc.prompts)
        raise
    return acc.report


# ---- test set ---------------------------------------------------------------------------


def _input_prompts(
    store: Store, sources: Sequence[SourceSpec], input_set: str, prefix: str, strict: bool, track: Track,
    on_skipped: OnSkipped | None,
) -> tuple[list[Prompt], Step]:
    """Return the prompts a build starts from (sources ingested into ``prefix/ingested``, or ``input_set``)."""
    if sources:
        report = run_ingest(store, sources, f"{prefix}/ingested", strict=strict, replace=True, track=track)
        if on_skipped is not None and report.problems:
            on_skipped(report)
        dropped = {
            k: v
            for k, v in report.counts.items()
            if k in (*BAD_KINDS, "already_present")
        }
        return report.prompts, Step("ingest", report.counts.get("read", 0), len(report.prompts), dropped)
    prompts = store.get_prompts(input_set)
    if not prompts:
        raise ArenaError(
            f"workspace {store.root} has no prompt set {input_set!r}: run `arena ingest SOURCE... --out {store.root}` "
            "first, or list the files under 'sources' in the config"
        )
    return prompts, Step(f"input set {input_set}", len(prompts), len(prompts))


def _clean(
    store: Store, prompts: list[Prompt], cfg: TestsetConfig | PoolConfig, track: Track
) -> tuple[list[Prompt], list[Step]]:
    moderator = build_moderator(cfg.clean.moderation, store)
    return clean(prompts, cfg.clean, moderator=moderator, track=track)


def _embed(prompts: Sequence[Prompt], cfg: TestsetConfig | PoolConfig, track: Track,
           embedder: TextEmbedder | None = None) -> Any:
    """Embed ``prompts`` by ``cfg.embed``; through ``embedder`` when given (it returns a list it embedded before)."""
    from .embed import embedding_texts, text_embedder

    embed = embedder if embedder is not None else text_embedder(cfg.embed)
    advance = track(f"embed ({cfg.embed.model})", len(prompts))
    return embed(embedding_texts(prompts, cfg.embed.text), advance)


def _difficulty_scorer(store: Store, cfg: TestsetConfig) -> Any:
    from .testset import judge_difficulty_scorer

    try:
        return judge_difficulty_scorer(store, cfg.hard.judge, constrain=cfg.hard.constrain)
    except ImportError as err:
        raise ArenaError(
            f"the hard set needs the engines ({err}); set hard.top_n: 0 to build the diverse set alone"
        ) from None


def check_sources(sources: Sequence[SourceSpec]) -> None:
    """Raise ReadError naming every source that does not exist (before a build opens its workspace)."""
    missing = [missing_file(s.path) for s in sources if not Path(s.path).exists()]
    if missing:
        raise ReadError("input data not found:\n  " + "\n  ".join(missing))


def run_testset(
    cfg: TestsetConfig,
    workspace: Path | None = None,
    score_turns: Callable[[list[str]], list[float | None]] | None = None,
    progress: bool = True,
    embeddings: Callable[[Sequence[Prompt]], Any] | None = None,
    on_skipped: OnSkipped | None = None,
) -> tuple[Path, Any]:
    """Build the test set of ``cfg`` into its workspace; return the workspace folder and the TestsetResult.

    ``progress`` draws on the installed progress display (``arena_learning.progress``); ``on_skipped``
    hears an ingest that skipped bad inputs (they are counted in the steps either way).

    ``score_turns`` replaces the configured difficulty judge; ``embeddings`` (prompts ->
    float32 (N, D)) replaces the configured embedding model. Both exist for tests and
    benchmarks; the CLI uses the config.
    """
    from .testset import build_testset, cluster_map

    check_sources(cfg.sources)
    with Store(workspace if workspace is not None else cfg.workspace) as store:
        save_resolved_config(store, "testset", cfg.model_copy(update={"workspace": str(store.root)}))
        with tracking(progress) as track:
            prompts, first = _input_prompts(store, cfg.sources, cfg.input_set, "testset", cfg.strict, track,
                                           on_skipped)
            cleaned, steps = _clean(store, prompts, cfg, track)
            steps.insert(0, first)
            emb = embeddings(cleaned) if embeddings is not None else _embed(cleaned, cfg, track)
            if cfg.hard.top_n > 0 and score_turns is None:
                score_turns = _difficulty_scorer(store, cfg)
            result = build_testset(cleaned, emb, cfg.diverse, cfg.hard, cfg.seed, score_turns)
        result.steps = steps + result.steps
        if cfg.diverse.projection != "none":
            selected = {p.id for p in result.mix}
            result.cluster_map = cluster_map(
                result.clustered, emb, selected, cfg.diverse.projection, cfg.seed, cfg.diverse.projection_max_points
            )
            store.set_meta("testset/cluster_map", result.cluster_map)
        save_set(store, "testset/clean", result.clustered)
        save_set(store, "testset/diverse", result.diverse)
        save_set(store, "testset/hard", result.hard)
        save_set(store, "testset/mix", result.mix)
        store.set_meta("testset/steps", [asdict(s) for s in result.steps])
        store.set_meta("testset/per_cluster", result.per_cluster)
        return store.root, result


# ---- pool -------------------------------------------------------------------------------


@dataclass
class PoolResult:
    """What a pool build gives: the decontaminated pool, its slices, the steps, per-cluster counts."""

    pool: list[Prompt]
    slices: list[list[Prompt]]
    steps: list[Step] = field(default_factory=list)
    matches: dict[str, str] = field(default_factory=dict)
    per_cluster: list[dict[str, Any]] = field(default_factory=list)


def run_pool(
    cfg: PoolConfig,
    workspace: Path | None = None,
    progress: bool = True,
    embeddings: Callable[[Sequence[Prompt]], Any] | None = None,
    on_skipped: OnSkipped | None = None,
) -> tuple[Path, PoolResult]:
    """Return the workspace folder and the training pool of ``cfg``, built and stored there.

    ``progress`` and ``on_skipped`` are those of ``run_testset``.

    The build cleans the sources, decontaminates them against the test sets and cuts D0..D{n-1}.
    """
    from .decontam import CHECKED_META, checked_record, decontaminate, near_copy_fingerprint
    from .embed import text_embedder
    from .ingest import ingest
    from .slices import cut_slices, slice_names
    from .testset import cluster_embeddings, cluster_names, label_prompts

    check_sources([*cfg.sources, *cfg.decontam.test_sources])
    with Store(workspace if workspace is not None else cfg.workspace) as store:
        save_resolved_config(store, "pool", cfg.model_copy(update={"workspace": str(store.root)}))
        dc = cfg.decontam
        tests: list[Prompt] = []
        for name in dc.test_sets:
            found = store.get_prompts(name)
            if not found:
                raise ArenaError(
                    f"decontam.test_sets names {name!r}, which workspace {store.root} does not hold: "
                    "build the test set there first (arena testset build), "
                    "or list other sets (or none: decontam.test_sets: [])"
                )
            tests.extend(found)
        notes: dict[str, Any] = {}
        if dc.test_sources:
            report = ingest(dc.test_sources, strict=cfg.strict)
            if on_skipped is not None and report.problems:
                on_skipped(report)
            for path, counts in report.per_source.items():
                if not counts.get("ingested") and not counts.get("already_present"):
                    bad = ", ".join(f"{k} {counts[k]}" for k in BAD_KINDS if counts.get(k)) or "no records"
                    raise ArenaError(
                        f"decontam.test_sources: {path} gave no test prompts ({bad}), so nothing would be "
                        "decontaminated against it: fix the file, or give its layout with 'format:'"
                    )
            tests.extend(report.prompts)
            notes["test inputs skipped"] = sum(report.counts.get(k, 0) for k in BAD_KINDS)

        with tracking(progress) as track:
            prompts, first = _input_prompts(store, cfg.sources, cfg.input_set, "pool", cfg.strict, track, on_skipped)
            cleaned, steps = _clean(store, prompts, cfg, track)
            steps.insert(0, first)
            advance = track("decontaminate", len(cleaned))
            # one embedder for decontamination and clustering: the texts decontamination embedded (single-turn
            # prompts, whatever it dropped) are not embedded again for the clusters
            embedder = text_embedder(cfg.embed)
            pool, dropped, matches = decontaminate(
                cleaned,
                tests,
                dc.threshold,
                dc.num_perm,
                dc.shingle,
                dc.shingle_ngram,
                dc.ngram,
                dc.ngram_coverage,
                dc.seed,
                advance,
                embed=embedder if tests else None,
                embedding_threshold=dc.embedding_threshold,
            )
            notes = {"test items": len(tests), **notes}
            steps.append(Step("decontaminate", len(cleaned), len(pool), dict(dropped), notes))
            sl = cfg.slices
            if sl.n_clusters > 0 and not all(p.cluster is not None for p in pool):
                if len(pool) < sl.n_clusters:
                    raise ArenaError(
                        f"the pool holds {len(pool)} prompts after cleaning, "
                        f"fewer than slices.n_clusters={sl.n_clusters}: lower it (0: no stratification)"
                    )
                emb = embeddings(pool) if embeddings is not None else _embed(pool, cfg, track, embedder)
                labels, _ = cluster_embeddings(emb, sl.n_clusters, cfg.seed, sl.minibatch_above, sl.n_init)
                pool = label_prompts(pool, labels, cluster_names(sl.n_clusters))
                steps.append(Step("cluster", len(pool), len(pool), notes={"clusters": sl.n_clusters}))
        slices = cut_slices(pool, sl.n_slices, cfg.seed, sl.d0_size)
        names = slice_names(sl.n_slices)
        steps.append(Step("slices", len(pool), sum(map(len, slices)), notes={n: len(s) for n, s in zip(names, slices)}))

        save_set(store, "pool/clean", pool)
        for name, part in zip(names, slices):
            save_set(store, f"pool/{name}", part)
        # Slices of an earlier build with more slices would otherwise linger beside the new ones.
        for stale in sorted(store.prompt_sets()):
            if stale.startswith("pool/D") and stale[len("pool/") :] not in names:
                save_set(store, stale, [])
        per_cluster = _slice_counts(pool, slices, names)
        store.set_meta("pool/steps", [asdict(s) for s in steps])
        store.set_meta("pool/per_cluster", per_cluster)
        store.set_meta("pool/decontam_matches", matches)
        # what was checked: the flywheel checks these sets only against test items added since (curate.decontam)
        store.set_meta(CHECKED_META, checked_record(near_copy_fingerprint(dc, cfg.embed), tests, {
            "pool/clean": pool, **{f"pool/{name}": part for name, part in zip(names, slices)}}))
        return store.root, PoolResult(pool, slices, steps, matches, per_cluster)


def _slice_counts(
    pool: Sequence[Prompt], slices: Sequence[Sequence[Prompt]], names: Sequence[str]
) -> list[dict[str, Any]]:
    sizes = Counter(p.cluster for p in pool)
    per_slice = [Counter(p.cluster for p in s) for s in slices]
    rows = []
    for cluster in sorted(sizes, key=lambda c: (c is None, c or "")):
        row: dict[str, Any] = {"cluster": cluster if cluster is not None else "(none)", "pool": sizes[cluster]}
        for name, counts in zip(names, per_slice):
            row[name] = counts[cluster]
        rows.append(row)
    return rows
