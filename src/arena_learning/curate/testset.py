"""The test set: a diverse half (k-means clusters of embeddings) and a hard half (judged difficulty).

- :func:`cluster_embeddings` and :func:`select_diverse`: k prompts per cluster,
  nearest to the centroid or a seeded random draw.
- :func:`score_difficulty` and :func:`select_hard`: a judge rates each user turn
  1-10, the conversation's difficulty is the mean, the top N are kept. The LLM
  judge (:class:`DifficultyJudge`) runs on the structured-rating component of
  ``engines.structured``: fenced requests, tolerant parsing, retries, counts.
- :func:`mix`: diverse + hard without duplicates; each prompt keeps its cluster,
  difficulty and source.
- :func:`project_2d`: t-SNE (as in the paper) or PCA coordinates for the cluster map.

Everything here takes records and arrays and returns records and arrays; the judge
is a ``score_turns`` callable, so the judge machinery (engine, ledger, cache) stays
outside and tests can pass any function.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from threadpoolctl import threadpool_limits

from ..engines.structured import TextJudge
from ..errors import ArenaError
from ..records import Prompt
from .difficulty import DIFFICULTY_SCHEMA, difficulty_messages, difficulty_text, parse_difficulty

# the difficulty judge's prompt, read from here by callers of the test-set code
from .difficulty import DIFFICULTY_SYSTEM as DIFFICULTY_SYSTEM
from .difficulty import default_difficulty_judge as default_difficulty_judge
from .filters import Step
from .labels import LABEL_KEY, cluster_labels
from .settings import DiverseSettings, HardSettings

if TYPE_CHECKING:
    from ..config import ModelSpec
    from ..store import Store

ScoreTurns = Callable[[list[str]], list["float | None"]]
"""Difficulty judge: texts to rate in, one score 1-10 (None: the judge failed) per text out."""


# ---- clusters --------------------------------------------------------------------------


def cluster_names(k: int) -> list[str]:
    """Return the names of k clusters: c00, c01, ... (zero-padded so they sort)."""
    width = max(2, len(str(k - 1)))
    return [f"c{i:0{width}d}" for i in range(k)]


def cluster_embeddings(
    emb: np.ndarray,
    n_clusters: int,
    seed: int = 0,
    minibatch_above: int = 20_000,
    n_init: int = 4,
    threads: int | None = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Return k-means labels and centroids of ``emb``: int32 (N,), float32 (k, D).

    Clusters are renumbered by size, largest first (ties: the earliest member first),
    so cluster 0 is the biggest topic. Above ``minibatch_above`` points MiniBatchKMeans
    is used: full k-means costs O(N k D) per iteration over all points.

    ``threads`` caps scikit-learn's OpenMP/BLAS threads (None: its default, one per
    core). One is the default because idle OpenMP threads spin while they wait for a
    busy core: on two cores shared with other work, k-means ran 2-6x faster on one
    thread (500 points and 86,000 alike); an idle machine loses at most the second core.
    One thread also makes the result independent of the machine's core count.
    """
    from sklearn.cluster import KMeans, MiniBatchKMeans

    n = len(emb)
    if n_clusters > n:
        raise ArenaError(
            f"cannot make {n_clusters} clusters of {n} prompts: lower diverse.n_clusters or give more prompts"
        )
    if n > minibatch_above:
        km: Any = MiniBatchKMeans(
            n_clusters=n_clusters, random_state=seed, n_init=n_init, batch_size=4096, max_no_improvement=20
        )
    else:
        km = KMeans(n_clusters=n_clusters, random_state=seed, n_init=n_init)
    with threadpool_limits(limits=threads):
        labels = km.fit_predict(emb).astype(np.int32)
    centroids = km.cluster_centers_.astype(np.float32)
    sizes = np.bincount(labels, minlength=n_clusters)
    first = np.full(n_clusters, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    order = np.lexsort((first, -sizes))  # new cluster i = old cluster order[i]
    remap = np.empty(n_clusters, dtype=np.int32)
    remap[order] = np.arange(n_clusters, dtype=np.int32)
    return remap[labels], centroids[order]


def select_diverse(
    emb: np.ndarray,
    labels: np.ndarray,
    centroids: np.ndarray,
    per_cluster: int,
    pick: str = "nearest",
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Return the chosen rows (int64 (M,), cluster by cluster) and every row's distance to its centroid (float32 (N,)).

    ``nearest`` takes the ``per_cluster`` members closest to the centroid (ties: the
    earlier row); ``random`` draws them with a generator seeded by ``seed``. A cluster
    smaller than ``per_cluster`` gives all its members.
    """
    dist = np.linalg.norm(emb - centroids[labels], axis=1).astype(np.float32)
    rng = np.random.default_rng(seed)
    chosen: list[np.ndarray] = []
    for c in range(len(centroids)):
        members = np.flatnonzero(labels == c)
        take = min(per_cluster, len(members))
        if pick == "nearest":
            picked = members[np.lexsort((members, dist[members]))[:take]]
        else:
            picked = np.sort(rng.choice(members, size=take, replace=False))
        chosen.append(picked)
    return (np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)), dist


def label_prompts(prompts: Sequence[Prompt], labels: np.ndarray, names: Sequence[str]) -> list[Prompt]:
    """Return copies of ``prompts`` with ``cluster`` set from ``labels``, and each cluster's readable label."""
    clusters = [names[int(c)] for c in labels]
    readable = cluster_labels([p.turns[0] for p in prompts], clusters)
    return [p.model_copy(update={"cluster": c, "meta": {**p.meta, LABEL_KEY: readable[c]}})
            for p, c in zip(prompts, clusters)]


def project_2d(
    emb: np.ndarray,
    method: str = "tsne",
    seed: int = 0,
    max_points: int = 5000,
    keep: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return the projected row indices (int64 (M,)) and their 2-D coordinates (float32 (M, 2)).

    Beyond ``max_points`` a seeded sample is projected (t-SNE is quadratic in memory
    and minutes long on 10^5 points); the rows in ``keep`` (the selected prompts) are
    always in the sample.
    """
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE

    n = len(emb)
    idx = np.arange(n)
    if n > max_points:
        rng = np.random.default_rng(seed)
        must = np.unique(keep) if keep is not None else np.zeros(0, dtype=np.int64)
        rest = np.setdiff1d(idx, must)
        extra = rng.choice(rest, size=max(0, max_points - len(must)), replace=False)
        idx = np.sort(np.concatenate([must, extra]))
    x = emb[idx]
    if len(idx) < 3:
        return idx, np.zeros((len(idx), 2), dtype=np.float32)
    # One thread, as for k-means: at <= max_points rows threads cost more than they give.
    with threadpool_limits(limits=1):
        if method == "pca":
            coords = PCA(n_components=2, random_state=seed).fit_transform(x)
        else:
            perplexity = float(min(30.0, (len(idx) - 1) / 3))
            tsne = TSNE(n_components=2, random_state=seed, init="pca", perplexity=perplexity, n_jobs=1)
            coords = tsne.fit_transform(x)
    return idx, coords.astype(np.float32)


# ---- difficulty ------------------------------------------------------------------------

def score_difficulty(prompts: Sequence[Prompt], score_turns: ScoreTurns) -> tuple[list[Prompt], Counter[str]]:
    """Return ``prompts`` with ``difficulty`` (mean of the turn scores) and notes counts.

    All turns of all prompts go to ``score_turns`` in one call so the engine can
    run them concurrently. A prompt with a turn the judge failed on gets
    ``difficulty=None`` and counts as ``difficulty_failed``; it is never given a
    default score. The turn scores are kept in ``meta["difficulty_turns"]``.
    """
    texts = [difficulty_text(p.turns, i) for p in prompts for i in range(len(p.turns))]
    scores = score_turns(texts)
    if len(scores) != len(texts):
        raise ValueError(f"the difficulty judge returned {len(scores)} scores for {len(texts)} turns")
    out: list[Prompt] = []
    counts: Counter[str] = Counter()
    pos = 0
    for p in prompts:
        mine = scores[pos : pos + len(p.turns)]
        pos += len(p.turns)
        meta = {**p.meta, "difficulty_turns": list(mine)}
        if any(s is None for s in mine):
            counts["difficulty_failed"] += 1
            out.append(p.model_copy(update={"difficulty": None, "meta": meta}))
        else:
            counts["difficulty_scored"] += 1
            out.append(p.model_copy(update={"difficulty": float(np.mean([s for s in mine if s is not None])),
                                            "meta": meta}))
    return out, counts


def select_hard(prompts: Sequence[Prompt], top_n: int, exclude: set[str] | None = None) -> list[Prompt]:
    """Return the ``top_n`` prompts of highest difficulty (ties: by id), skipping unscored ones and ``exclude``."""
    exclude = exclude or set()
    scored = [p for p in prompts if p.difficulty is not None and p.id not in exclude]
    scored.sort(key=lambda p: (-float(p.difficulty or 0.0), p.id))
    return scored[:top_n]


class DifficultyJudge(TextJudge[float]):
    """A ``score_turns`` that asks a model through the engine and the ledger (cached, resumable).

    It runs on the structured-rating component shared with the arena's verdicts and
    the moderation judge (:class:`~arena_learning.engines.structured.StructuredRater`):
    each request is fenced, the reply is read tolerantly (:func:`parse_difficulty`),
    a reply without a 1-10 score is asked again ``retries`` times with a new seed and
    ``retry_temperature``, and ``stats`` counts parsed, retried, failed and cut-off
    replies (the hard step of :func:`build_testset` reports them).

    ``constrain`` passes :data:`DIFFICULTY_SCHEMA` for the engine to enforce (a llama.cpp
    grammar, an OpenAI ``json_schema`` response format). Off by default: over Gemma's
    262k-token vocabulary the grammar doubled llama.cpp's time per call, and not every
    OpenAI-compatible server accepts ``json_schema``; the tolerant parser copes without.
    """

    def __init__(self, store: Store, spec: ModelSpec, label: str = "difficulty", constrain: bool = False,
                 retries: int = 1, retry_temperature: float = 0.7, show_progress: bool = True):
        super().__init__(store, spec, messages=difficulty_messages, parse=parse_difficulty,
                         expects="difficulty score 1-10", schema=DIFFICULTY_SCHEMA, what="difficulty judge",
                         label=label, constrain=constrain, retries=retries, retry_temperature=retry_temperature,
                         show_progress=show_progress)


def judge_difficulty_scorer(
    store: Store, spec: ModelSpec, label: str = "difficulty", constrain: bool = False, retries: int = 1
) -> DifficultyJudge:
    """Return a ``score_turns`` that asks ``spec`` through the engine and the ledger: a :class:`DifficultyJudge`."""
    return DifficultyJudge(store, spec, label=label, constrain=constrain, retries=retries)


# ---- mix and the whole build ------------------------------------------------------------


def mix(diverse: Sequence[Prompt], hard: Sequence[Prompt]) -> list[Prompt]:
    """Return diverse then hard prompts without duplicate ids; ``meta["testset"]`` lists the halves each is in."""
    in_hard = {p.id for p in hard}
    out: list[Prompt] = []
    seen: set[str] = set()
    for p in diverse:
        halves = ["diverse", "hard"] if p.id in in_hard else ["diverse"]
        out.append(p.model_copy(update={"meta": {**p.meta, "testset": halves}}))
        seen.add(p.id)
    for p in hard:
        if p.id not in seen:
            out.append(p.model_copy(update={"meta": {**p.meta, "testset": ["hard"]}}))
            seen.add(p.id)
    return out


@dataclass
class TestsetResult:
    """Everything a test-set build gives: the sets, the steps, the map, the per-cluster counts."""

    __test__ = False  # pytest: not a test class

    clustered: list[Prompt]
    diverse: list[Prompt]
    hard: list[Prompt]
    mix: list[Prompt]
    steps: list[Step] = field(default_factory=list)
    cluster_map: dict[str, Any] = field(default_factory=dict)
    per_cluster: list[dict[str, Any]] = field(default_factory=list)


def build_testset(
    prompts: Sequence[Prompt],
    emb: np.ndarray,
    diverse: DiverseSettings,
    hard: HardSettings,
    seed: int = 0,
    score_turns: ScoreTurns | None = None,
) -> TestsetResult:
    """Return the diverse, hard and mixed sets built from clean ``prompts`` and their embeddings (float32 (N, D))."""
    if len(prompts) != len(emb):
        raise ValueError(f"{len(prompts)} prompts but {len(emb)} embeddings")
    steps: list[Step] = []
    labels, centroids = cluster_embeddings(emb, diverse.n_clusters, seed, diverse.minibatch_above, diverse.n_init)
    names = cluster_names(diverse.n_clusters)
    chosen, dist = select_diverse(emb, labels, centroids, diverse.per_cluster, diverse.pick, seed)
    readable = cluster_labels([p.turns[0] for p in prompts], [names[int(c)] for c in labels])
    clustered = [
        p.model_copy(update={"cluster": names[int(c)], "meta": {**p.meta, "centroid_distance": round(float(d), 4),
                                                                LABEL_KEY: readable[names[int(c)]]}})
        for p, c, d in zip(prompts, labels, dist)
    ]
    steps.append(Step("cluster", len(prompts), len(clustered), notes={"clusters": diverse.n_clusters}))
    short = int(np.sum(np.bincount(labels, minlength=diverse.n_clusters) < diverse.per_cluster))
    diverse_notes: dict[str, Any] = {"per_cluster": diverse.per_cluster, "pick": diverse.pick}
    if short:
        diverse_notes["clusters_smaller_than_per_cluster"] = short
    steps.append(Step("diverse", len(clustered), len(chosen), notes=diverse_notes))

    if hard.top_n > 0:
        if score_turns is None:
            raise ArenaError("hard.top_n > 0 needs a difficulty judge (score_turns); set hard.top_n: 0 to skip")
        candidates = list(range(len(clustered)))
        if hard.candidates is not None and hard.candidates < len(clustered):
            rng = np.random.default_rng(seed)
            candidates = sorted(rng.choice(len(clustered), size=hard.candidates, replace=False).tolist())
        scored, counts = score_difficulty([clustered[i] for i in candidates], score_turns)
        for i, p in zip(candidates, scored):
            clustered[i] = p
        exclude = {clustered[int(i)].id for i in chosen} if hard.exclude_diverse else set()
        hard_set = select_hard(clustered, hard.top_n, exclude)
        notes: dict[str, Any] = {"scored": counts["difficulty_scored"], "top_n": hard.top_n}
        judge_stats = getattr(score_turns, "stats", None)
        if judge_stats is not None:  # an LLM judge: its parsed / retried / failed / cut-off replies
            notes.update({f"judge_{k}": v for k, v in judge_stats.counts().items()})
        steps.append(
            Step(
                "hard",
                len(candidates),
                len(hard_set),
                dropped={"difficulty_failed": counts["difficulty_failed"]} if counts["difficulty_failed"] else {},
                notes=notes,
            )
        )
    else:
        hard_set = []
    diverse_set = [clustered[int(i)] for i in chosen]
    mixed = mix(diverse_set, hard_set)
    steps.append(Step("mix", len(diverse_set) + len(hard_set), len(mixed)))

    per_cluster = []
    sizes = Counter(p.cluster for p in clustered)
    n_div = Counter(p.cluster for p in diverse_set)
    n_hard = Counter(p.cluster for p in hard_set)
    n_mix = Counter(p.cluster for p in mixed)
    groups: dict[str, list[Prompt]] = {name: [] for name in names}
    for p in clustered:
        groups[str(p.cluster)].append(p)
    for name in names:
        members = groups[name]
        diffs = [p.difficulty for p in members if p.difficulty is not None]
        nearest = min(members, key=lambda p: p.meta["centroid_distance"]) if members else None
        per_cluster.append(
            {
                "cluster": name,
                "size": sizes[name],
                "diverse": n_div[name],
                "hard": n_hard[name],
                "mix": n_mix[name],
                "difficulty": round(float(np.mean(diffs)), 2) if diffs else None,
                "example": nearest.turns[0][:80].replace("\n", " ") if nearest else "",
            }
        )
    return TestsetResult(clustered, diverse_set, hard_set, mixed, steps, {}, per_cluster)


def cluster_map(
    prompts: Sequence[Prompt], emb: np.ndarray, selected_ids: set[str], method: str, seed: int, max_points: int
) -> dict[str, Any]:
    """Return the 2-D cluster map for the report: method and one point per projected prompt."""
    keep = np.array([i for i, p in enumerate(prompts) if p.id in selected_ids], dtype=np.int64)
    idx, coords = project_2d(emb, method, seed, max_points, keep)
    points = [
        {
            "id": prompts[int(i)].id,
            "x": round(float(x), 3),
            "y": round(float(y), 3),
            "cluster": prompts[int(i)].cluster,
            "selected": prompts[int(i)].id in selected_ids,
        }
        for i, (x, y) in zip(idx, coords)
    ]
    return {"method": method, "n_total": len(prompts), "points": points}
