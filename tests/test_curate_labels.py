"""Readable cluster labels (curate/labels.py): class-based TF-IDF words, distinct, on real prompts."""

from __future__ import annotations

import pytest

from arena_learning.curate.labels import LABEL_KEY, cluster_labels, ctfidf_words, read_names
from arena_learning.errors import ArenaError

from .conftest import shared


def test_the_words_that_set_a_cluster_apart_rank_first():
    texts = ["How do I sort a list in Python?", "Python list comprehension with a filter",
             "Best pasta recipe with garlic", "How long to boil pasta?", "Explain a list of steps"]
    clusters = ["c00", "c00", "c01", "c01", "c02"]
    words = ctfidf_words(texts, clusters)
    assert words["c00"][0] == "python" and words["c01"][0] == "pasta"  # "list" is in c02 too: less distinctive
    labels = cluster_labels(texts, clusters, max_words=2)
    assert labels["c00"].startswith("python") and labels["c01"].startswith("pasta")
    assert len(set(labels.values())) == 3


def test_labels_are_distinct_even_when_the_top_words_repeat():
    texts = ["apple banana cherry date", "apple banana cherry elder", "apple banana cherry fig"]
    labels = cluster_labels(texts, ["c00", "c01", "c02"], max_words=3)
    assert len(set(labels.values())) == 3 and all(len(v.split()) <= 3 for v in labels.values())


def test_a_cluster_of_numbers_only_keeps_its_name():
    assert cluster_labels(["1 + 2", "3 * 4"], ["c00", "c01"]) == {"c00": "c00", "c01": "c01"}


def test_user_names_read_from_a_file_and_bad_files_say_where(tmp_path):
    good = tmp_path / "names.yaml"
    good.write_text("c00: python debugging\nc01: cooking\n")
    assert read_names(good) == {"c00": "python debugging", "c01": "cooking"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("- c00\n- c01\n")
    with pytest.raises(ArenaError, match="bad.yaml must map each cluster to a name"):
        read_names(bad)
    with pytest.raises(ArenaError, match="cannot read"):
        read_names(tmp_path / "absent.yaml")


@pytest.mark.slow  # loads the embedding model
def test_real_prompts_get_short_distinct_labels_and_a_planted_topic_is_named_by_its_word():
    from arena_learning.curate.embed import embed_prompts, load_embedder
    from arena_learning.curate.ingest import ingest
    from arena_learning.curate.settings import DiverseSettings, HardSettings
    from arena_learning.curate.testset import build_testset
    from arena_learning.records import Prompt

    prompts = ingest([shared("vicuna_bench", "question.jsonl")]).prompts
    planted = [Prompt(id=f"volcano-{i}", turns=[t], source="planted") for i, t in enumerate([
        "Why do volcanoes erupt?", "What is the biggest volcano on Earth?", "How is volcano lava formed?",
        "Can a dormant volcano erupt again?", "Describe the volcano eruption of Mount St. Helens.",
        "How do scientists predict when a volcano will erupt?", "What gases does a volcano release?",
        "Is it safe to live near a volcano?", "What is a supervolcano and how is it different from a volcano?",
        "How does a volcano affect the climate after an eruption?", "Which volcano erupted most recently?",
        "Write a short poem about a volcano at night."])]
    mixed = prompts + planted
    emb = embed_prompts(mixed, load_embedder(max_seq_length=128))
    result = build_testset(mixed, emb, DiverseSettings(n_clusters=8, per_cluster=2, n_init=2), HardSettings(), seed=0)
    labels = {p.cluster: p.meta[LABEL_KEY] for p in result.clustered}
    assert len(labels) == 8 and len(set(labels.values())) == 8
    assert all(1 <= len(v.split()) <= 5 for v in labels.values())
    home = max(labels, key=lambda c: sum(p.cluster == c for p in result.clustered if p.source == "planted"))
    print("\n" + "\n".join(f"{c}: {v}" for c, v in sorted(labels.items())))
    assert "volcano" in labels[home].split()
