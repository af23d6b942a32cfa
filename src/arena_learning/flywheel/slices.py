"""The flywheel's slices: disjoint, decontaminated prompt sets from the pool, one per stage's battles and harvest.

A slice is task-suite prompts made with its own seed, or a prompt set stored in the workspace, minus
every test prompt, few-shot example and prompt of an earlier slice; a stored set also loses its
near-copies of every test set in the workspace (``curate.decontam``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .. import pipeline
from ..errors import ArenaError
from ..records import Prompt
from ..store import Store
from ..tasks import generate_tasks, suite_categories
from .aim import draw, floor_of, groups_of, uniform
from .settings import FlywheelConfig, SliceDecontam, SliceSpec

TEST_SET = pipeline.TEST_SET


def slice_set(name: str) -> str:
    """Return the workspace prompt set that holds the slice ``name``."""
    return f"flywheel/{name}"


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
                  near: dict[str, Counter[str]] | None = None,
                  candidates: dict[str, list[Prompt]] | None = None) -> dict[str, tuple[list[Prompt], int]]:
    """Return every slice of ``cfg``'s pool, in pool order: its prompts and how many were dropped as test prompts.

    Slices are disjoint and decontaminated: no test prompt, no few-shot example, no prompt of an
    earlier slice. A stored set is read from ``store``; an empty or missing one is an ArenaError.
    A stored slice is also checked against every test set in the workspace with the tests ``arena
    pool build`` uses (MinHash near-copies, long shared n-grams; curate.decontam), since a test set
    may come after the pool was built: what it drops is counted in ``near`` (slice -> reason -> n)
    and in the dropped count. The test items the build already checked this very set against, with the same
    settings, are not checked again (curate.decontam.unchecked_tests). Task-suite slices are exact-disjoint by
    construction; their items share templates by design, so near-copy tests do not apply to them.

    A slice drawn by ``allocate: weakness`` (``cfg.aimed_slices()``) is drawn later, from its candidates
    (``aimed_candidates``), which go into ``candidates``; what is returned for it is the uniform draw of its
    size (what ``arena plan`` prices), and its candidates are kept out of every later slice.
    """
    aimed = cfg.aimed_slices()
    tests = test_sets(store, test)
    banned = {_norm(t) for p in test for t in p.turns}
    banned |= {_norm(q) for q in pipeline.few_shot_questions([cfg.target, *cfg.references])}
    if cfg.harvest.samples is not None:
        banned |= {_norm(q) for q in cfg.harvest.samples.questions()}
    out: dict[str, tuple[list[Prompt], int]] = {}
    embed = None  # one embedder for every stored slice: the test set's embeddings are made once
    record: Any = None  # what `arena pool build` checked (curate.decontam.CHECKED_META)
    fingerprint = ""
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
                from ..curate.decontam import CHECKED_META, near_copy_fingerprint, unchecked_tests
                from ..curate.embed import text_embedder

                embed = text_embedder(cfg.decontam.embed)
                record = store.get_meta(CHECKED_META) if store is not None else None
                fingerprint = near_copy_fingerprint(cfg.decontam, cfg.decontam.embed)
            # only against the test items that `arena pool build` did not check this very set against
            rest = unchecked_tests(record, spec.set, got, tests, fingerprint)
            prompts, why, _ = near_copies_dropped(prompts, rest, cfg.decontam, embed)
            if near is not None and why:
                near[name] = why
            pool = prompts
            if spec.limit is not None:
                prompts = prompts[: spec.limit]
            dropped = len(got) - len(prompts) if name not in aimed else len(got) - len(pool)
        else:
            # FlywheelConfig refuses a slice seed equal to tasks.seed
            seed = cfg.slice_seed(pos, spec)
            pool = aimed_candidates(spec, seed, banned, cfg.tasks.suite) if name in aimed else []
            prompts = (draw(pool, "category", uniform(spec.n, list(groups_of(pool, "category")))) if name in aimed
                       else task_slice(spec, seed, banned, cfg.tasks.suite))
            dropped = 0
        overlap = [p.id for p in [*prompts, *pool] if any(_norm(t) in banned for t in p.turns)]
        assert not overlap, f"slice {name} overlaps the test set or few-shot examples: {overlap[:3]}"
        banned |= {_norm(t) for p in (pool if name in aimed else prompts) for t in p.turns}
        if name in aimed and candidates is not None:
            candidates[name] = pool
        out[name] = (prompts, dropped)
    return out


def aimed_candidates(spec: SliceSpec, seed: int, exclude: set[str], suite: int = 1) -> list[Prompt]:
    """Return the task prompts an aimed slice of ``spec.n`` draws from: per category as many as the most any
    category can get (``n`` less the floors of the others), made with the slice's seed, none in ``exclude``."""
    k = len(spec.categories or suite_categories(suite))
    most = spec.n - floor_of(spec.n, k) * (k - 1)
    return task_slice(spec.model_copy(update={"n": most * k}), seed, exclude, suite)


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
