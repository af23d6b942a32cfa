"""The batched context's seeded sampler (llama_batcher.Sampling): llama.cpp's default chain in numpy."""

from __future__ import annotations

import numpy as np
import pytest

from arena_learning.engines.llama_batcher import Sampling, prompt_salt


def draws(s: Sampling, logits: np.ndarray, n: int) -> np.ndarray:
    return np.array([s.pick(logits) for _ in range(n)])


def test_the_same_seed_draws_the_same_tokens_and_another_seed_other_ones():
    logits = np.random.default_rng(0).normal(size=500).astype(np.float32)
    a = draws(Sampling(temperature=1.0, seed=3, min_p=0.0), logits, 50)
    assert (a == draws(Sampling(temperature=1.0, seed=3, min_p=0.0), logits, 50)).all()
    assert (a != draws(Sampling(temperature=1.0, seed=4, min_p=0.0), logits, 50)).any()


def test_each_prompt_draws_its_own_stream_under_one_seed():
    logits = np.zeros(1000)  # every token as likely: the draws are the stream itself
    one = draws(Sampling(temperature=1.0, seed=0, top_k=0, min_p=0.0, salt=prompt_salt([2, 10, 11])), logits, 20)
    two = draws(Sampling(temperature=1.0, seed=0, top_k=0, min_p=0.0, salt=prompt_salt([2, 10, 12])), logits, 20)
    again = draws(Sampling(temperature=1.0, seed=0, top_k=0, min_p=0.0, salt=prompt_salt([2, 10, 11])), logits, 20)
    assert (one == again).all() and (one != two).sum() >= 15


def test_draws_follow_the_softmax_at_the_temperature():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    n = 20_000
    got = np.bincount(draws(Sampling(temperature=1.0, seed=0, min_p=0.0), logits, n), minlength=4) / n
    assert np.abs(got - [0.5, 0.3, 0.15, 0.05]).max() < 0.015
    # temperature 0.5 squares the odds: 0.25 : 0.09 : 0.0225 : 0.0025
    want = np.array([0.25, 0.09, 0.0225, 0.0025]) / 0.365
    got = np.bincount(draws(Sampling(temperature=0.5, seed=1, min_p=0.0), logits, n), minlength=4) / n
    assert np.abs(got - want).max() < 0.015


def test_top_k_top_p_and_min_p_cut_the_tail_before_the_draw():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.06, 0.04]))
    assert set(draws(Sampling(temperature=2.0, seed=0, top_k=2, min_p=0.0), logits, 2000)) == {0, 1}
    # top_p 0.85: the fewest best tokens reaching 0.85 are the first three (0.4 + 0.3 + 0.2)
    assert set(draws(Sampling(temperature=2.0, seed=0, top_p=0.85, min_p=0.0), logits, 2000)) == {0, 1, 2}
    # min_p 0.4: at least 0.4 x 0.4 = 0.16 likely, on the logits before the temperature
    assert set(draws(Sampling(temperature=5.0, seed=0, min_p=0.4), logits, 2000)) == {0, 1, 2}
    assert set(draws(Sampling(temperature=1.0, seed=0, top_k=1), logits, 200)) == {0}


def test_equal_logits_are_ordered_by_token_id_so_a_draw_never_depends_on_partition_order():
    logits = np.zeros(100)
    first = draws(Sampling(temperature=1.0, seed=7, top_k=10, min_p=0.0), logits, 30)
    assert set(first) <= set(range(10))
    assert (first == draws(Sampling(temperature=1.0, seed=7, top_k=10, min_p=0.0), logits, 30)).all()


@pytest.mark.parametrize("temperature", [0.05, 0.7])
def test_a_clear_winner_is_drawn_at_low_temperature(temperature):
    logits = np.array([0.0, 9.0, 1.0, 2.0])
    assert set(draws(Sampling(temperature=temperature, seed=0), logits, 100)) == {1}


def test_an_answers_bytes_that_are_not_utf8_are_left_out_as_the_library_does_and_counted():
    from arena_learning.engines.llama_batcher import decode_answer

    assert decode_answer("naïve – ok".encode()) == ("naïve – ok", 0)
    # stopped inside a character (2 of the 3 bytes of "–"), and a stray byte: the text is Llama's, the loss counted
    raw = b"ok " + "–".encode()[:2] + b"\xff!"
    assert decode_answer(raw) == (raw.decode("utf-8", errors="ignore"), 3) == ("ok !", 3)
