"""The test set: real arena-hard prompts embedded and clustered; the diverse, hard and mixed sets."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import typer
import yaml
from typer.testing import CliRunner

from arena_learning.cli.curate import register
from arena_learning.curate.embed import embed_prompts, embed_texts, load_embedder, resolve_model_path
from arena_learning.curate.filters import clean
from arena_learning.curate.ingest import ingest
from arena_learning.curate.settings import CleanSettings, DiverseSettings, HardSettings
from arena_learning.curate.testset import (
    build_testset,
    cluster_embeddings,
    default_difficulty_judge,
    difficulty_messages,
    difficulty_text,
    judge_difficulty_scorer,
    mix,
    parse_difficulty,
    project_2d,
    score_difficulty,
    select_diverse,
    select_hard,
)
from arena_learning.errors import ArenaError
from arena_learning.records import Prompt
from arena_learning.store import Store

from .conftest import shared


@pytest.fixture(scope="module")
def embedder():
    # 128 tokens instead of the model's 256 halves the CPU time on long prompts;
    # the clusters below are as good (measured: 25% vs 22% of label pairs together).
    return load_embedder(max_seq_length=128)


@pytest.fixture(scope="module")
def arena_hard(embedder):
    """The 500 arena-hard prompts, cleaned (dedupe included) and embedded once for the module."""
    prompts = ingest([shared("arena-hard-v0.1", "question.jsonl")]).prompts
    cleaned, steps = clean(prompts, CleanSettings())
    return cleaned, embed_prompts(cleaned, embedder), steps


def P(id: str, *turns: str, **kw) -> Prompt:
    return Prompt(id=id, turns=list(turns), source="test", **kw)


# ---- the diverse set on real prompts ---------------------------------------------------------


@pytest.mark.slow  # loads a model
def test_arena_hard_clusters_group_prompts_of_the_same_topic(arena_hard):
    from scipy.stats import binomtest

    prompts, emb, steps = arena_hard
    assert steps[0].n_in == 500 and len(prompts) >= 495  # dedupe finds no real duplicates among them
    assert emb.shape == (len(prompts), 384) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-4)

    settings = DiverseSettings(n_clusters=50, per_cluster=2, n_init=2)
    result = build_testset(prompts, emb, settings, HardSettings(), seed=0)
    assert len(result.diverse) == 100
    per = {}
    for p in result.diverse:
        per[p.cluster] = per.get(p.cluster, 0) + 1
    assert len(per) == 50 and set(per.values()) == {2}
    assert all(p.source == "arena-hard-v0.1/question" for p in result.mix)

    # arena-hard labels its prompts with topics, two prompts per topic: a good clustering
    # puts the two of a topic in one cluster far more often than chance does.
    label = [p.meta["source_cluster"] for p in result.clustered]
    ours = [p.cluster for p in result.clustered]
    pairs = [(i, j) for i, j in itertools.combinations(range(len(label)), 2) if label[i] == label[j]]
    together = sum(ours[i] == ours[j] for i, j in pairs)
    sizes = np.bincount([int(c[1:]) for c in ours])
    chance = float((sizes * (sizes - 1)).sum() / (len(ours) * (len(ours) - 1)))
    rate = together / len(pairs)
    p_value = binomtest(together, len(pairs), chance, alternative="greater").pvalue
    print(f"\nsame-topic pairs in one cluster: {together}/{len(pairs)} = {rate:.1%} "
          f"vs {chance:.1%} by chance ({rate / chance:.1f}x, binomial p = {p_value:.1e})")
    assert rate >= 4 * chance
    assert p_value < 1e-10


@pytest.mark.slow  # loads a model
def test_nearest_pick_takes_the_members_closest_to_each_centroid(arena_hard):
    _, emb, _ = arena_hard
    labels, centroids = cluster_embeddings(emb, 20, seed=1, n_init=1)
    chosen, dist = select_diverse(emb, labels, centroids, per_cluster=3, pick="nearest")
    for c in range(20):
        members = np.flatnonzero(labels == c)
        mine = chosen[labels[chosen] == c]
        assert len(mine) == min(3, len(members))
        assert dist[mine].max() <= np.sort(dist[members])[len(mine) - 1] + 1e-6


@pytest.mark.slow  # loads a model
def test_clusters_are_numbered_by_size_and_seeded(arena_hard):
    _, emb, _ = arena_hard
    a, _ = cluster_embeddings(emb, 20, seed=5, n_init=1)
    b, _ = cluster_embeddings(emb, 20, seed=5, n_init=1)
    assert np.array_equal(a, b)
    sizes = np.bincount(a)
    assert list(sizes) == sorted(sizes, reverse=True)
    mb, centroids = cluster_embeddings(emb, 20, seed=5, minibatch_above=100, n_init=1)
    assert mb.shape == a.shape and centroids.shape == (20, emb.shape[1]) and len(set(mb.tolist())) == 20


@pytest.mark.slow  # loads a model
def test_random_pick_is_seeded(arena_hard):
    _, emb, _ = arena_hard
    labels, centroids = cluster_embeddings(emb, 10, seed=0, n_init=1)
    one, _ = select_diverse(emb, labels, centroids, 4, pick="random", seed=11)
    two, _ = select_diverse(emb, labels, centroids, 4, pick="random", seed=11)
    three, _ = select_diverse(emb, labels, centroids, 4, pick="random", seed=12)
    assert np.array_equal(one, two) and not np.array_equal(one, three)


def test_too_many_clusters_is_an_error_that_says_what_to_change():
    with pytest.raises(ArenaError, match="lower diverse.n_clusters"):
        cluster_embeddings(np.eye(4, dtype=np.float32), 5)


@pytest.mark.slow  # loads a model
def test_projection_keeps_the_selected_points_and_is_seeded(arena_hard):
    _, emb, _ = arena_hard
    keep = np.array([3, 400, 7])
    idx, xy = project_2d(emb, "pca", seed=0, max_points=50, keep=keep)
    assert len(idx) == 50 and xy.shape == (50, 2) and set(keep) <= set(idx.tolist())
    idx2, xy2 = project_2d(emb[:60], "tsne", seed=0, max_points=500)
    idx3, xy3 = project_2d(emb[:60], "tsne", seed=0, max_points=500)
    assert xy2.shape == (60, 2) and np.allclose(xy2, xy3)


@pytest.mark.slow  # loads a model
def test_embedding_matches_a_bare_encode_and_keeps_input_order(embedder):
    texts = ["a short one", "a much longer sentence about clustering prompts " * 5, "medium length text here"] * 10
    ours = embed_texts(embedder, texts, batch_size=16)
    bare = embedder.encode(texts, batch_size=16, normalize_embeddings=True)
    assert np.allclose(ours, bare, atol=1e-5)


@pytest.mark.slow  # loads a model
def test_any_local_model_folder_loads_by_path(embedder):
    from arena_learning.curate.embed import bundled_model_path

    by_path = load_embedder(str(bundled_model_path()), max_seq_length=128)
    texts = ["How do I sort a list in Python?"]
    assert np.allclose(embed_texts(by_path, texts), embed_texts(embedder, texts), atol=1e-5)


def test_a_missing_embedding_model_is_an_error_naming_the_path(tmp_path):
    with pytest.raises(ArenaError, match="not a sentence-transformers model folder"):
        resolve_model_path(str(tmp_path / "nowhere"))


# ---- difficulty ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"difficulty": 7, "reason": "needs calculus"}', 7.0),
        ('Here you go:\n```json\n{"difficulty": "9", "reason": "x"}\n```', 9.0),
        ('{"reason": "easy", "difficulty": 2.5}', 2.5),
        ("Difficulty: 6 - it needs some domain knowledge", 6.0),
        ("I would rate this 8/10.", 8.0),
        ("4", 4.0),
        ('{"difficulty": 0}', None),
        ('{"difficulty": 42}', None),
        ("This is a hard one, no doubt.", None),
        ("", None),
    ],
)
def test_difficulty_reply_is_parsed_json_first_then_a_number(reply, score):
    assert parse_difficulty(reply) == score


def test_follow_up_turns_are_rated_with_the_earlier_turns_as_context():
    turns = ["Write a poem about the sea.", "Now rewrite it in French."]
    assert difficulty_text(turns, 0) == turns[0]
    second = difficulty_text(turns, 1)
    assert "Write a poem about the sea." in second and second.endswith("Now rewrite it in French.")
    messages = difficulty_messages(second)
    assert messages[0]["role"] == "system" and '"difficulty"' in messages[0]["content"]
    assert second in messages[1]["content"]


def test_conversation_difficulty_is_the_mean_and_a_failed_turn_is_never_defaulted():
    prompts = [P("a", "one", "two"), P("b", "three"), P("c", "four", "five")]
    replies = iter([8.0, 6.0, 3.0, 9.0, None])
    scored, counts = score_difficulty(prompts, lambda texts: [next(replies) for _ in texts])
    assert [p.difficulty for p in scored] == [7.0, 3.0, None]
    assert scored[2].meta["difficulty_turns"] == [9.0, None]
    assert counts == {"difficulty_scored": 2, "difficulty_failed": 1}
    assert [p.id for p in select_hard(scored, 5)] == ["a", "b"]


@pytest.mark.slow  # loads a model
def test_hard_set_takes_the_top_n_and_mix_keeps_cluster_difficulty_and_source(arena_hard):
    prompts, emb, _ = arena_hard
    prompts, emb = prompts[:200], emb[:200]

    def by_length(texts: list[str]) -> list[float | None]:
        # A stand-in judge: longer requests are harder. The real judge goes through the engine.
        return [float(min(10, 1 + len(t) // 150)) for t in texts]

    result = build_testset(
        prompts, emb, DiverseSettings(n_clusters=10, per_cluster=2, n_init=1), HardSettings(top_n=15), 0, by_length
    )
    assert len(result.hard) == 15
    cutoff = min(p.difficulty for p in result.hard)
    assert all(p.difficulty <= cutoff for p in result.clustered if p.id not in {h.id for h in result.hard})
    ids = [p.id for p in result.mix]
    assert len(ids) == len(set(ids)) == len({p.id for p in result.diverse} | {p.id for p in result.hard})
    for p in result.mix:
        assert p.cluster is not None and p.difficulty is not None and p.source
        assert set(p.meta["testset"]) <= {"diverse", "hard"}
    assert [s.name for s in result.steps] == ["cluster", "diverse", "hard", "mix"]
    assert result.steps[2].notes["scored"] == 200


@pytest.mark.slow  # loads a model
def test_exclude_diverse_makes_the_halves_disjoint(arena_hard):
    prompts, emb, _ = arena_hard
    score = lambda texts: [float(min(10, 1 + len(t) // 100)) for t in texts]  # noqa: E731
    result = build_testset(
        prompts[:150], emb[:150], DiverseSettings(n_clusters=10, per_cluster=3, n_init=1),
        HardSettings(top_n=20, exclude_diverse=True), 0, score,
    )
    assert len(result.mix) == 30 + 20


def test_mix_marks_a_prompt_in_both_halves_once():
    d = [P("a", "x", cluster="c00"), P("b", "y", cluster="c01")]
    h = [P("b", "y", cluster="c01", difficulty=9.0), P("c", "z", cluster="c02", difficulty=8.0)]
    out = mix(d, h)
    assert [(p.id, p.meta["testset"]) for p in out] == [("a", ["diverse"]), ("b", ["diverse", "hard"]), ("c", ["hard"])]


@pytest.mark.slow  # loads a model
def test_hard_set_without_a_judge_is_an_error(arena_hard):
    prompts, emb, _ = arena_hard
    with pytest.raises(ArenaError, match="hard.top_n"):
        build_testset(prompts[:20], emb[:20], DiverseSettings(n_clusters=2), HardSettings(top_n=3))


def one_thread_judge():
    # One llama.cpp thread: on two cores shared with other test processes, two threads
    # spin against each other and a 48-token reply can take tens of seconds.
    return default_difficulty_judge().model_copy(update={"n_threads": 1})


@pytest.mark.slow  # loads a model
def test_difficulty_through_the_bundled_judge_is_cached_in_the_ledger(tmp_path):
    prompts = [
        P("easy", "Say hello to my friend."),
        P("hard", "Prove that there are infinitely many primes of the form 4k+3."),
        P("two", "Write a poem about the sea.", "Now rewrite it as a sonnet in French."),
    ]
    judge = one_thread_judge()
    with Store(tmp_path / "ws") as store:
        score = judge_difficulty_scorer(store, judge, label="difficulty (test)")
        scored, counts = score_difficulty(prompts, score)
        calls = store.call_counts()
        # One call per user turn and one per retry of a reply without a score, every one recorded.
        n_calls = 4 + (score.stats.requests - score.stats.parsed)
        assert calls == {"ok": n_calls}
        assert counts["difficulty_scored"] + counts["difficulty_failed"] == 3
        for p in scored:  # a score is 1-10 or missing, never a default
            assert all(s is None or 1 <= s <= 10 for s in p.meta["difficulty_turns"])
        # A rerun is answered by the ledger: the same scores, no call sent again.
        again, _ = score_difficulty(prompts, judge_difficulty_scorer(store, judge))
        assert [p.meta["difficulty_turns"] for p in again] == [p.meta["difficulty_turns"] for p in scored]
        attempts = [a for (a,) in store.db.execute("SELECT attempts FROM calls")]
        assert store.call_counts() == calls and attempts == [1] * n_calls


# ---- the CLI ---------------------------------------------------------------------------------------


def _config(tmp_path: Path, **extra: str) -> Path:
    text = f"""
workspace: {tmp_path / 'ws'}
seed: 7
sources:
  - path: {shared('mt_bench', 'question.jsonl')}
embed:
  max_seq_length: 128
diverse:
  n_clusters: 8
  per_cluster: 2
  n_init: 1
  projection: pca
"""
    path = tmp_path / "testset.yaml"
    path.write_text(text + "".join(f"{k}: {v}\n" for k, v in extra.items()), encoding="utf-8")
    return path


@pytest.mark.slow  # loads a model
def test_cli_testset_build_writes_the_sets_and_prints_the_tables(tmp_path):
    app = typer.Typer()
    register(app)
    config = _config(tmp_path)
    result = CliRunner().invoke(app, ["testset", "build", str(config), "-q"], terminal_width=150)
    assert result.exit_code == 0, result.output
    assert "counts per step" in result.output and "per cluster" in result.output
    with Store(tmp_path / "ws") as store:
        sets = store.prompt_sets()
        assert sets["testset/ingested"] == 80 and sets["testset/clean"] == 80
        assert sets["testset/diverse"] == 16 and sets["testset/mix"] == 16
        assert store.get_prompts("testset/hard") == []  # hard.top_n is 0 by default
        mix_ids = [p.id for p in store.get_prompts("testset/mix")]
        cmap = store.get_meta("testset/cluster_map")
        assert cmap["method"] == "pca" and len(cmap["points"]) == 80
        assert sum(pt["selected"] for pt in cmap["points"]) == 16
        assert store.get_meta("testset/config")["diverse"]["n_clusters"] == 8
    lines = (tmp_path / "ws" / "sets" / "testset" / "mix.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == mix_ids
    assert (tmp_path / "ws" / "testset.config.yaml").is_file()

    # The same config again gives the same test set; --set overrides a field.
    again = CliRunner().invoke(app, ["testset", "build", str(config), "-q"], terminal_width=150)
    assert again.exit_code == 0, again.output
    with Store(tmp_path / "ws") as store:
        assert [p.id for p in store.get_prompts("testset/mix")] == mix_ids
    other = CliRunner().invoke(app, ["testset", "build", str(config), "-q", "--set", "diverse.per_cluster=1"])
    assert other.exit_code == 0, other.output
    with Store(tmp_path / "ws") as store:
        assert store.prompt_sets()["testset/mix"] == 8


@pytest.mark.slow  # loads a model
def test_cli_testset_build_with_a_hard_half_from_the_bundled_judge(tmp_path):
    app = typer.Typer()
    register(app)
    judge = yaml.safe_dump({"hard": {"top_n": 3, "candidates": 6, "judge": one_thread_judge().model_dump()}})
    config = _config(tmp_path)
    config.write_text(config.read_text() + judge)
    args = ["testset", "build", str(config), "-q"]
    result = CliRunner().invoke(app, args, terminal_width=150)
    assert result.exit_code == 0, result.output
    with Store(tmp_path / "ws") as store:
        hard = store.get_prompts("testset/hard")
        mixed = store.get_prompts("testset/mix")
        calls = store.call_counts()
        steps = {s["name"]: s for s in store.get_meta("testset/steps")}
    # 6 two-turn MT-Bench questions: 12 calls, and one retry per reply without a score.
    assert steps["hard"]["n_in"] == 6 and sum(calls.values()) == 12 + (12 - steps["hard"]["notes"]["judge_parsed"])
    assert len(hard) == min(3, steps["hard"]["notes"]["scored"])
    assert all(p.difficulty is not None and p.cluster is not None for p in hard)
    assert {p.id for p in hard} <= {p.id for p in mixed}
    again = CliRunner().invoke(app, args, terminal_width=150)
    assert again.exit_code == 0, again.output
    with Store(tmp_path / "ws") as store:
        assert store.call_counts() == calls  # resumed from the ledger, nothing sent twice
        assert [p.id for p in store.get_prompts("testset/hard")] == [p.id for p in hard]


def test_cli_testset_build_reports_config_errors_with_the_key(tmp_path):
    app = typer.Typer()
    register(app)
    config = _config(tmp_path, divers="{}")
    result = CliRunner().invoke(app, ["testset", "build", str(config)])
    assert result.exit_code == 2 and "divers: unknown key" in result.output


def test_cli_testset_build_without_sources_or_ingested_set_says_what_to_do(tmp_path):
    app = typer.Typer()
    register(app)
    config = tmp_path / "c.yaml"
    config.write_text(f"workspace: {tmp_path / 'empty'}\n")
    result = CliRunner().invoke(app, ["testset", "build", str(config)])
    assert result.exit_code == 2 and "arena ingest" in result.output
