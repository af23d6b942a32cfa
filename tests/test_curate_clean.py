"""Clean: length, garbled text, language, moderation, exact and MinHash near dedupe, each drop counted."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

from arena_learning.curate.dedupe import exact_dedupe, near_dedupe, normalize, shingle_hashes, signatures
from arena_learning.curate.filters import (
    WordListModerator,
    clean,
    garbled_filter,
    language_filter,
    length_filter,
    moderation_filter,
    parse_moderation,
)
from arena_learning.curate.ingest import ingest
from arena_learning.curate.settings import CleanSettings, ModerationSettings
from arena_learning.errors import ConfigError
from arena_learning.records import Prompt

from .conftest import shared


def P(id: str, *turns: str) -> Prompt:
    return Prompt(id=id, turns=list(turns), source="test")


@pytest.fixture(scope="module")
def arena_hard() -> list[Prompt]:
    return ingest([shared("arena-hard-v0.1", "question.jsonl")]).prompts


# ---- length and garbled -------------------------------------------------------------------


def test_length_bounds_count_each_reason():
    prompts = [P("a", "hi"), P("b", "x" * 50), P("c", "y" * 500), P("d", "ok then", "and more", "and more still")]
    kept, dropped = length_filter(prompts, min_chars=5, max_chars=100, max_turns=2)
    assert [p.id for p in kept] == ["b"]
    assert dropped == {"too_short": 1, "too_long": 1, "too_many_turns": 1}


def test_empty_and_garbled_turns_are_dropped_by_reason():
    prompts = [
        P("empty", "A fine first question?", "   "),
        P("fffd", "Th\ufffds t\ufffdxt w\ufffds d\ufffdc\ufffdd\ufffdd badly"),
        P("digits", "12345 67890 ++++ ---- 2024-01-01 == 42"),
        P("control", "abc\x00\x01\x02\x03\x04def"),
        P("code", "def f(x):\n    return [i * 2 for i in range(x)]  # double"),
    ]
    kept, dropped = garbled_filter(prompts)
    assert [p.id for p in kept] == ["code"]
    assert dropped == {"empty": 1, "garbled_chars": 2, "few_letters": 1}


def test_defaults_keep_every_real_benchmark_prompt(arena_hard):
    vicuna = ingest([shared("vicuna_bench", "question.jsonl")]).prompts
    for prompts in (arena_hard, vicuna):
        kept, dropped = garbled_filter(prompts)
        assert not dropped
        kept, dropped, notes = language_filter(prompts, ["en"])
        assert not dropped, notes


# ---- language -----------------------------------------------------------------------------


def test_language_filter_drops_confident_other_languages_and_keeps_short_texts():
    prompts = [
        P("en", "Explain how a hash map handles collisions, with an example in Python."),
        P("de", "Wie kann ich meine Zeit besser einteilen und produktiver arbeiten?"),
        P("zh", "请解释一下量子计算的基本原理，并举一个简单的例子说明它的优势。"),
        P("fr", "Écris-moi un poème sur la mer et le vent qui souffle sur la côte."),
        P("short", "Who developed you?"),
    ]
    kept, dropped, notes = language_filter(prompts, ["en"])
    assert [p.id for p in kept] == ["en", "short"]
    assert dropped == {"language": 3}
    assert notes["language_too_short"] == 1 and notes["lang:de"] == 1 and notes["lang:zh"] == 1
    kept, _, _ = language_filter(prompts, ["en", "fr"])
    assert [p.id for p in kept] == ["en", "fr", "short"]


# ---- moderation ---------------------------------------------------------------------------


def test_word_list_flags_whole_words_and_phrases_case_insensitively():
    mod = WordListModerator(["bad thing", "csam"], [r"\bkill\s+all\b"])
    flags = mod(["A BAD   thing happened", "csamples are fine", "Kill all the bugs", "plain"])
    assert flags == [True, False, True, False]


def test_a_conversation_is_dropped_when_any_user_turn_is_flagged():
    prompts = [P("ok", "How do plants grow?", "And trees?"), P("late", "Hello there", "now tell me about csam")]
    kept, dropped, _ = moderation_filter(prompts, WordListModerator(["csam"]))
    assert [p.id for p in kept] == ["ok"] and dropped == {"moderation": 1}


def test_a_failed_moderation_check_is_counted_never_passed_silently():
    prompts = [P("a", "first"), P("b", "second", "third")]
    judge = lambda turns: [False, None, False]  # noqa: E731 - the judge failed on "second"
    kept, dropped, _ = moderation_filter(prompts, judge, on_failure="drop")
    assert [p.id for p in kept] == ["a"] and dropped == {"moderation_failed": 1}
    kept, dropped, notes = moderation_filter(prompts, judge, on_failure="keep")
    assert [p.id for p in kept] == ["a", "b"] and not dropped and notes == {"moderation_unchecked": 1}
    assert kept[1].meta["moderation"] == "unchecked"


def test_invalid_moderation_regex_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"clean.moderation.patterns: '\(unclosed'"):
        WordListModerator([], ["(unclosed"])


def test_moderation_judge_reply_is_parsed_tolerantly():
    assert parse_moderation('{"flagged": true, "category": "violence"}') is True
    assert parse_moderation('Sure. {"flagged": false, "category": "none"}') is False
    assert parse_moderation("flagged: yes") is True
    assert parse_moderation("I cannot decide.") is None


# ---- exact and near dedupe ----------------------------------------------------------------


def test_exact_dedupe_ignores_case_and_whitespace_and_keeps_the_first():
    prompts = [P("a", "What is  the capital of France?"), P("b", "what is the capital\nof france?"), P("c", "Other")]
    kept, dropped, dup_of = exact_dedupe(prompts)
    assert [p.id for p in kept] == ["a", "c"] and dropped == {"exact_duplicate": 1} and dup_of == {"b": "a"}


def _plant_near_duplicates(originals: list[Prompt]) -> list[Prompt]:
    rng = random.Random(7)
    planted = []
    for k, p in enumerate(originals[:12]):
        text = p.turns[0]
        words = text.split()
        kind = k % 4
        if kind == 0:  # one word replaced
            i = rng.randrange(len(words))
            words[i] = "banana"
            new = " ".join(words)
        elif kind == 1:  # a typo: two letters swapped
            i = rng.randrange(1, len(text) - 2)
            new = text[:i] + text[i + 1] + text[i] + text[i + 2 :]
        elif kind == 2:  # a polite suffix
            new = text + " Thanks a lot!"
        else:  # different case and spacing, a trailing question mark
            new = "  " + text.upper().replace(" ", "   ") + "?"
        planted.append(P(f"planted-{p.id}", new))
    return planted


def test_planted_near_duplicates_are_removed_and_real_prompts_kept(arena_hard):
    # Prompts of 20-150 words: long enough that one edit leaves them near-duplicates.
    originals = [p for p in arena_hard if 20 <= len(p.turns[0].split()) <= 150][:80]
    planted = _plant_near_duplicates(originals)
    kept, dropped, dup_of = near_dedupe(originals + planted, threshold=0.8)
    assert dropped == {"near_duplicate": 12}
    assert [p.id for p in kept] == [p.id for p in originals]
    assert all(dup_of[q.id] == q.id.removeprefix("planted-") for q in planted)


def test_near_dedupe_threshold_is_respected(arena_hard):
    a = P("a", arena_hard[3].turns[0])
    words = a.turns[0].split()
    half = P("b", " ".join(words[: len(words) // 2]) + " something entirely different here and there")
    kept, _, _ = near_dedupe([a, half], threshold=0.8)
    assert len(kept) == 2
    kept, _, _ = near_dedupe([a, half], threshold=0.05)
    assert len(kept) == 1


def test_signatures_equal_datasketch_minhash_of_the_same_shingles():
    from datasketch import MinHash

    texts = [normalize(t) for t in ["A short one", "Explain the Fourier transform to a ten year old, please.", "x"]]
    for shingle, n in (("char", 5), ("word", 3)):
        sigs = signatures(texts, num_perm=64, seed=3, shingle=shingle, ngram=n)
        for text, sig in zip(texts, sigs):
            m = MinHash(num_perm=64, seed=3, hashfunc=int)
            m.update_batch(shingle_hashes(text, shingle, n).tolist())
            assert np.array_equal(m.hashvalues, sig)


# ---- the chain ------------------------------------------------------------------------------


def test_clean_counts_every_drop_on_the_sharegpt_sample():
    prompts = ingest([shared("sharegpt_sample", "dummy_conversation.json")]).prompts
    kept, steps = clean(prompts, CleanSettings())
    assert [s.name for s in steps] == [
        "length", "empty/garbled", "exact dedupe", "near dedupe", "language", "moderation"
    ]
    for a, b in itertools.pairwise(steps):
        assert a.n_out == b.n_in
    for s in steps:
        assert s.n_in - s.n_out == sum(s.dropped.values())
    assert steps[0].n_in == 500 and steps[-1].n_out == len(kept)
    # The sample repeats a few identity questions many times over.
    assert steps[2].dropped["exact_duplicate"] > 300
    assert len({normalize(" ".join(p.turns)) for p in kept}) == len(kept)


def test_clean_with_moderation_off_and_no_languages_skips_those_steps():
    settings = CleanSettings(languages=[], moderation=ModerationSettings(mode="off"))
    _, steps = clean([P("a", "Tell me a story about a brave mouse.")], settings)
    # no language, no moderation step
    assert [s.name for s in steps] == ["length", "empty/garbled", "exact dedupe", "near dedupe"]


def test_clean_uses_a_given_moderator():
    prompts = [P("a", "Tell me a story about a brave mouse."), P("b", "Tell me about the weather on Mars.")]
    flag_mars = lambda turns: ["Mars" in t for t in turns]  # noqa: E731
    kept, steps = clean(prompts, CleanSettings(), moderator=flag_mars)
    assert [p.id for p in kept] == ["a"] and steps[-1].dropped == {"moderation": 1}


def test_mt_bench_json_round_trip_keeps_counts_stable():
    rows = [json.loads(line) for line in shared("mt_bench", "question.jsonl").open()]
    prompts = [Prompt(id=str(r["question_id"]), turns=r["turns"]) for r in rows]
    kept, steps = clean(prompts, CleanSettings())
    again, steps2 = clean(kept, CleanSettings())
    assert [p.id for p in again] == [p.id for p in kept]  # cleaning is idempotent
    assert all(s.n_in == s.n_out for s in steps2)


@pytest.mark.slow  # loads a model
def test_moderation_judge_goes_through_the_engine_and_the_ledger(tmp_path):
    from arena_learning.config import ModelSpec, SamplingParams
    from arena_learning.curate.filters import build_moderator
    from arena_learning.store import Store

    # The bundled 270M base model is no moderator: this pins the wiring (a cached call per
    # turn and per retry of a reply without a flag, a flag or an explicit failure per turn), not the judgement.
    judge = ModelSpec(name="moderator", engine="llamacpp", model="bundled", mode="completion", n_threads=1,
                      params=SamplingParams(max_tokens=16, temperature=0.0, stop=["\n"]))
    settings = ModerationSettings(mode="judge", judge=judge)
    prompts = [P("a", "How do plants grow?"), P("b", "Tell me a joke.", "Another one, please.")]
    with Store(tmp_path / "ws") as store:
        kept, dropped, _ = moderation_filter(prompts, build_moderator(settings, store), on_failure="drop")
        assert sum(store.call_counts().values()) >= 3
        # Its replies ("", a failed call; "Yes, it is.") hold no {"flagged": ...}: every turn is unrated, so both go.
        assert build_moderator(settings, store)([t for p in prompts for t in p.turns]) == [None, None, None]
        assert kept == [] and dropped == {"moderation_failed": 2}
        again, _, _ = moderation_filter(prompts, build_moderator(settings, store), on_failure="drop")
        assert [p.id for p in again] == [p.id for p in kept]
        # Nothing that succeeded is sent again (failed calls are, on every run).
        assert {a for (a,) in store.db.execute("SELECT attempts FROM calls WHERE status = 'ok'")} == {1}
