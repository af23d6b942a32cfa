"""The training pool: decontamination against the test set, stratified seeded slices, the CLI."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from arena_learning.cli.curate import register
from arena_learning.curate.decontam import _units, decontaminate
from arena_learning.curate.ingest import ingest
from arena_learning.curate.slices import cut_slices, slice_sizes, stratified_order
from arena_learning.errors import ArenaError
from arena_learning.records import Prompt
from arena_learning.store import Store

from .conftest import shared


def P(id: str, *turns: str, **kw) -> Prompt:
    return Prompt(id=id, turns=list(turns), source="test", **kw)


def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


# ---- decontamination ---------------------------------------------------------------------------


def test_planted_test_items_are_removed_from_the_pool_and_nothing_else():
    tests = ingest([shared("mt_bench", "question.jsonl")]).prompts
    pool = ingest([shared("arena-hard-v0.1", "question.jsonl")]).prompts[:300]
    by_id = {t.id: t for t in tests}
    planted = [
        # the whole two-turn test item, verbatim
        P("copy", *by_id["81"].turns),
        # its first turn alone, lower-cased, with a typo
        P("first-turn", by_id["82"].turns[0].lower().replace("feedback", "feedbak")),
        # a test prompt pasted inside a longer request: Jaccard is low, the long n-grams match
        P("embedded", "I have a homework question and need it solved quickly, with all the steps shown "
                      "so that I can copy them into my notebook tonight before class: " + by_id["111"].turns[0]
                      + " Please also double check the final number twice."),
        # the second turn of a test item as the follow-up of another conversation
        P("second-turn", "Hello! I need some help with my writing.", by_id["84"].turns[1]),
    ]
    kept, dropped, matches = decontaminate(pool + planted, tests, threshold=0.7, ngram=13)
    assert [p.id for p in kept] == [p.id for p in pool]
    assert sum(dropped.values()) == 4
    assert matches == {"copy": "81", "first-turn": "82", "embedded": "111", "second-turn": "84"}
    assert dropped["contaminated_ngram"] >= 1  # "embedded" can only be caught by n-grams


# Hand paraphrases of MT-Bench questions 81-86: other words, the same request. MinHash and n-grams miss them all.
PARAPHRASES = [
    ("81", "Write a fun travel blog entry about a trip I just took to Hawaii, covering the culture and the sights "
           "nobody should miss."),
    ("82", "Write a formal email to my manager asking for comments on the Quarterly Financial Report I put together, "
           "in particular on the data analysis, the presentation style and how clear the conclusions are."),
    ("83", "I'm writing a blog article that compares two well-known phones. Make me an outline with the main points "
           "and section headings to contrast their features, performance and user experience."),
    ("84", "Help me persuade my shy friend, who hates speaking in public, to be a guest speaker at an event in our "
           "town. Write a convincing email with strong arguments that answers the objections they might raise."),
    ("85", "Create a memorable, original character description with rich imagery and inventive wording, in under "
           "two paragraphs."),
    ("86", "Describe a busy market in one paragraph, with the smells, the noise and the sights, so the reader feels "
           "they are there."),
]


def test_paraphrases_of_test_items_are_caught_by_embeddings_alone_and_real_prompts_are_not():
    from arena_learning.curate.embed import text_embedder
    from arena_learning.curate.settings import EmbedSettings

    tests = ingest([shared("mt_bench", "question.jsonl")]).prompts
    pool = ingest([shared("arena-hard-v0.1", "question.jsonl")]).prompts[:150]
    planted = [P(f"para-{k}", text) for k, text in PARAPHRASES]
    assert decontaminate(planted, tests)[1] == Counter()  # the other two tests miss every one
    embed = text_embedder(EmbedSettings(max_seq_length=128))
    cut = 0.75
    kept, dropped, matches = decontaminate(pool + planted, tests, embed=embed, embedding_threshold=cut)
    # each paraphrase's cosine to its nearest test unit (the units decontamination compares; the embedder gives the
    # rows of the pass decontamination made): caught exactly when it reaches the cut, and matched to that unit's item
    t_texts, t_owner = _units(tests, min_later_words=13, raw=True)
    sims = embed([p.turns[0] for p in planted]) @ embed(t_texts).T
    nearest = {p.id: (float(row.max()), tests[t_owner[int(row.argmax())]].id) for p, row in zip(planted, sims)}
    caught = {k: v for k, v in matches.items() if k.startswith("para-")}
    assert caught == {pid: test_id for pid, (sim, test_id) in nearest.items() if sim >= cut}, nearest
    # most paraphrases are that close, each to its own question (measured: 0.91, 0.83, 0.80, 0.88, 0.74, 0.72)
    assert len(caught) >= 4 and all(test_id == pid.removeprefix("para-") for pid, test_id in caught.items()), nearest
    assert dropped["contaminated_embedding"] == len(matches)
    assert len(kept) >= len(pool) - 1  # real prompts are not paraphrases: at most one arena-hard one is that close
    off = decontaminate(pool + planted, tests, embed=embed, embedding_threshold=None)
    assert len(off[0]) == len(pool) + len(planted)


def test_an_embedder_embeds_a_text_once_whether_asked_the_same_list_or_part_of_it(monkeypatch):
    # A flywheel checks each stored slice against one test set; a pool build clusters what decontamination kept
    # of the texts it embedded: each text goes through the model once.
    import numpy as np

    from arena_learning.curate import embed as embed_mod
    from arena_learning.curate.settings import EmbedSettings

    passes = []
    real = embed_mod.embed_texts
    monkeypatch.setattr(embed_mod, "embed_texts", lambda m, t, b, a=None: passes.append(len(t)) or real(m, t, b, a))
    embed = embed_mod.text_embedder(EmbedSettings(max_seq_length=64))
    tests = ["How do I bake bread?", "What is the capital of France?", "Explain photosynthesis."]
    first = embed(list(tests))
    first[0, 0] = 99.0  # a caller that writes into its result changes nothing kept
    again = embed(list(tests))
    assert passes == [3] and again[0, 0] != 99.0
    fresh = embed_mod.text_embedder(EmbedSettings(max_seq_length=64))(list(tests))
    assert np.array_equal(again, fresh)  # bit for bit a fresh embedder's
    heard = []
    part = embed([tests[2], tests[0]], heard.append)  # rows of the kept list, in the order asked
    assert passes == [3, 3] and heard == [2] and np.array_equal(part, fresh[[2, 0]])
    part[0, 0] = 99.0
    assert embed(list(tests))[2, 0] != 99.0
    # a fresh pass over the smaller list agrees to float32 rounding (here its padding is the same: bit for bit)
    smaller = embed_mod.text_embedder(EmbedSettings(max_seq_length=64))([tests[2], tests[0]])
    assert passes == [3, 3, 2] and np.allclose(smaller, fresh[[2, 0]], atol=1e-6)
    other = embed([tests[0], "A text no kept list holds."])  # one new text: that list is embedded
    assert passes == [3, 3, 2, 2] and np.allclose(other[0], fresh[0], atol=1e-5)


def test_shared_boilerplate_alone_does_not_make_an_item_contaminated():
    vicuna = {p.id: p for p in ingest([shared("vicuna_bench", "question.jsonl")]).prompts}
    # Questions 41-50 all end "Try to explain your answer. Your explanation should take the
    # reader through your reasoning step-by-step." but ask different things.
    tests = [vicuna["46"]]
    pool = [vicuna[str(i)] for i in range(41, 51) if i != 46]
    kept, dropped, _ = decontaminate(pool, tests)
    assert len(kept) == 9 and not dropped


def test_decontaminate_with_no_tests_keeps_the_pool():
    pool = [P("a", "x y z")]
    assert decontaminate(pool, [])[0] == pool


# ---- slices ------------------------------------------------------------------------------------


def _clustered(sizes: dict[str, int]) -> list[Prompt]:
    out = []
    for c, n in sizes.items():
        out.extend(P(f"{c}-{i}", f"prompt {c} {i}", cluster=c) for i in range(n))
    return out


def test_slices_partition_the_pool_with_each_cluster_in_proportion():
    sizes = {"c00": 400, "c01": 250, "c02": 120, "c03": 37, "c04": 9}
    pool = _clustered(sizes)
    slices = cut_slices(pool, 5, seed=1)
    ids = [p.id for s in slices for p in s]
    assert sorted(ids) == sorted(p.id for p in pool)  # every prompt in exactly one slice
    assert [len(s) for s in slices] == [164, 163, 163, 163, 163]
    for s in slices:
        counts = Counter(p.cluster for p in s)
        for c, n in sizes.items():
            assert abs(counts[c] - n * len(s) / len(pool)) <= 1.5, (c, counts[c])
    assert {p.meta["slice"] for p in slices[2]} == {"D2"}


def test_slices_are_seeded():
    pool = _clustered({"a": 30, "b": 20})
    one = [[p.id for p in s] for s in cut_slices(pool, 3, seed=4)]
    two = [[p.id for p in s] for s in cut_slices(pool, 3, seed=4)]
    three = [[p.id for p in s] for s in cut_slices(pool, 3, seed=5)]
    assert one == two and one != three


def test_d0_can_have_its_own_size():
    pool = _clustered({"a": 60, "b": 40})
    slices = cut_slices(pool, 4, seed=0, d0_size=10)
    assert [len(s) for s in slices] == [10, 30, 30, 30]
    assert Counter(p.cluster for p in slices[0]) == {"a": 6, "b": 4}
    with pytest.raises(ArenaError, match="d0_size"):
        slice_sizes(5, 3, d0_size=9)


def test_unclustered_prompts_are_shuffled_as_one_stratum():
    pool = [P(str(i), f"text {i}") for i in range(10)]
    order = stratified_order(pool, seed=3)
    assert sorted(order.tolist()) == list(range(10)) and order.tolist() != list(range(10))


# ---- the CLI -----------------------------------------------------------------------------------


def _pool_config(tmp_path: Path, **lines: str) -> Path:
    text = f"""
workspace: {tmp_path / 'ws'}
seed: 2
sources:
  - path: {shared('sharegpt_sample', 'dummy_conversation.json')}
  - path: {shared('vicuna_bench', 'question.jsonl')}
decontam:
  test_sets: []
  test_sources:
    - path: {shared('mt_bench', 'question.jsonl')}
embed:
  max_seq_length: 64
slices:
  n_slices: 3
  n_clusters: 4
"""
    path = tmp_path / "pool.yaml"
    path.write_text(text + "".join(f"{k}: {v}\n" for k, v in lines.items()), encoding="utf-8")
    return path


@pytest.mark.slow  # loads a model
def test_cli_pool_build_decontaminates_and_writes_slices(tmp_path):
    config = _pool_config(tmp_path)
    result = CliRunner().invoke(cli(), ["pool", "build", str(config), "-q"], terminal_width=150)
    assert result.exit_code == 0, result.output
    assert "pool: counts per step" in result.output and "slices per cluster" in result.output
    with Store(tmp_path / "ws") as store:
        sets = store.prompt_sets()
        clean = store.get_prompts("pool/clean")
        slices = [store.get_prompts(f"pool/D{i}") for i in range(3)]
        steps = {s["name"]: s for s in store.get_meta("pool/steps")}
        matches = store.get_meta("pool/decontam_matches")
    assert sets["pool/ingested"] == 580
    assert sum(map(len, slices)) == len(clean) and all(p.cluster for p in clean)
    # Vicuna's question 81-twin ("Compose an engaging travel blog post about a recent trip to
    # Hawaii") is MT-Bench question 81's first turn: decontamination must catch it.
    assert matches.get("77") == "81"
    assert steps["decontaminate"]["n_in"] - steps["decontaminate"]["n_out"] == len(matches)
    d0 = (tmp_path / "ws" / "sets" / "pool" / "D0.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in d0] == [p.id for p in slices[0]]
    # What was checked, for the flywheel (which then checks a slice only against test items added since).
    from arena_learning.curate.decontam import CHECKED_META, content_key

    with Store(tmp_path / "ws") as store:
        record = store.get_meta(CHECKED_META)
    assert record["sets"] == {"pool/clean": content_key(clean),
                              **{f"pool/D{i}": content_key(s) for i, s in enumerate(slices)}}
    assert 0 < len(record["tests"]) <= steps["decontaminate"]["notes"]["test items"]

    # Fewer slices on a rerun: the old D2 must not linger.
    again = CliRunner().invoke(cli(), ["pool", "build", str(config), "-q", "--set", "slices.n_slices=2"])
    assert again.exit_code == 0, again.output
    with Store(tmp_path / "ws") as store:
        assert store.get_prompts("pool/D2") == []
        assert len(store.get_prompts("pool/D0")) + len(store.get_prompts("pool/D1")) == len(clean)


@pytest.mark.slow  # loads a model
def test_a_pool_build_clusters_on_the_embeddings_decontamination_made_of_the_same_texts(tmp_path, monkeypatch):
    # Single-turn prompts, none dropped: decontamination embedded exactly the texts clustering embeds, once.
    from arena_learning.curate import embed as embed_mod
    from arena_learning.curate.runs import run_pool
    from arena_learning.curate.settings import PoolConfig

    passes: list[int] = []
    real = embed_mod.embed_texts
    monkeypatch.setattr(embed_mod, "embed_texts", lambda m, t, b, a=None: passes.append(len(t)) or real(m, t, b, a))
    tests = tmp_path / "tests.jsonl"
    tests.write_text(json.dumps({"question_id": 1, "category": "x", "turns": ["Name three kinds of clouds."]}) + "\n")
    cfg = PoolConfig.model_validate({
        "workspace": str(tmp_path / "ws"), "sources": [{"path": str(shared("vicuna_bench", "question.jsonl"))}],
        "decontam": {"test_sets": [], "test_sources": [{"path": str(tests)}]}, "embed": {"max_seq_length": 64},
        "slices": {"n_slices": 2, "n_clusters": 4}})
    _, result = run_pool(cfg, progress=False)
    n = len(result.pool)
    assert n == 80 and all(p.cluster for p in result.pool)
    assert sorted(passes) == [1, n]  # the test prompt, and the pool once (decontamination's, reused to cluster)
    passes.clear()
    _, first_turn = run_pool(cfg.model_copy(update={"embed": cfg.embed.model_copy(update={"text": "first_turn"})}),
                             workspace=tmp_path / "ws2", progress=False)
    assert sorted(passes) == [1, n] and [p.cluster for p in first_turn.pool] == [p.cluster for p in result.pool]


def test_cli_pool_build_needs_the_named_test_set(tmp_path):
    config = tmp_path / "pool.yaml"
    config.write_text(f"workspace: {tmp_path / 'ws'}\nsources:\n  - path: {shared('vicuna_bench', 'question.jsonl')}\n")
    result = CliRunner().invoke(cli(), ["pool", "build", str(config)])
    assert result.exit_code == 2
    assert "'testset/mix'" in result.output and "arena testset build" in result.output


def test_a_short_generic_follow_up_turn_alone_does_not_make_a_conversation_contaminated():
    test = P("t", "Write a Python function that returns every prime number below a given bound n.",
             "Can you parallelize it?")
    other = P("p", "Write a C++ merge sort for singly linked lists that keeps equal elements stable.",
              "Can you parallelize it?")
    # The same follow-up after the same opening is still the test item.
    copy = P("copy", *test.turns)
    kept, dropped, matches = decontaminate([other, copy], [test], threshold=0.7, ngram=13)
    assert [p.id for p in kept] == ["p"]
    assert matches == {"copy": "t"}


def _pool_source_config(tmp_path: Path, test_source: Path) -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(
        f"workspace: {tmp_path / 'configured'}\n"
        f"sources:\n  - path: {shared('vicuna_bench', 'question.jsonl')}\n"
        f"decontam:\n  test_sets: []\n  test_sources:\n    - path: {test_source}\n"
        "slices:\n  n_slices: 2\n  n_clusters: 0\n",
        encoding="utf-8",
    )
    return path


def test_a_test_source_that_yields_no_prompts_is_an_error_naming_the_file(tmp_path):
    wrong = tmp_path / "tests.jsonl"
    wrong.write_text('{"question": "What is 2 + 2?"}\n{"question": "Name a prime."}\n', encoding="utf-8")
    result = CliRunner().invoke(cli(), ["pool", "build", str(_pool_source_config(tmp_path, wrong)), "-q"])
    assert result.exit_code == 2, result.output
    assert "decontam.test_sources" in result.output and "tests.jsonl" in result.output
    assert "wrong_format 2" in result.output


def test_pool_build_counts_skipped_test_inputs_and_saves_the_workspace_it_used(tmp_path):
    mt = shared("mt_bench", "question.jsonl").read_text(encoding="utf-8")
    tests = tmp_path / "tests.jsonl"
    tests.write_text(mt + "{not json\n", encoding="utf-8")
    used = tmp_path / "given-with-w"
    result = CliRunner().invoke(
        cli(), ["pool", "build", str(_pool_source_config(tmp_path, tests)), "-q", "-w", str(used)]
    )
    assert result.exit_code == 0, result.output
    with Store(used) as store:
        steps = {s["name"]: s for s in store.get_meta("pool/steps")}
        saved = store.get_meta("pool/config")
    assert steps["decontaminate"]["notes"] == {"test items": 80, "test inputs skipped": 1}
    assert saved["workspace"] == str(used)
    assert yaml.safe_load((used / "pool.config.yaml").read_text())["workspace"] == str(used)
    assert not (tmp_path / "configured").exists()


@pytest.mark.parametrize("stage", ["pool", "testset"])
def test_a_failed_build_closes_its_workspace(tmp_path, monkeypatch, stage):
    from arena_learning.curate import runs as commands
    from arena_learning.curate.settings import PoolConfig, TestsetConfig

    opened: list[Store] = []

    class Recorded(Store):
        closed = False

        def __init__(self, workspace):
            super().__init__(workspace)
            opened.append(self)

        def close(self):
            self.closed = True
            super().close()

    monkeypatch.setattr(commands, "Store", Recorded)
    with pytest.raises(ArenaError):  # the new workspace lacks the prompt sets a build starts from
        if stage == "pool":
            commands.run_pool(PoolConfig(workspace=str(tmp_path / "ws"), input_set="absent"), progress=False)
        else:
            commands.run_testset(TestsetConfig(workspace=str(tmp_path / "ws"), input_set="absent"), progress=False)
    assert len(opened) == 1 and opened[0].closed
