"""Decontamination: drop from the training pool every item that near-duplicates a test item.

Two tests, either one drops a pool item:

- MinHash: the estimated Jaccard similarity of character (or word) shingles
  between the pool item and a test item reaches ``threshold``. Whole conversations
  are compared, and each user turn on its own, so a pool conversation that opens
  with an MT-Bench question and goes on elsewhere is still caught. A test item's
  later turn is matched on its own only when it has at least ``ngram`` words: a
  short follow-up ("Can you parallelize it?") is generic and counts only together
  with the turns before it.
- long n-grams: the pool item shares a run of ``ngram`` words (13, as in the GPT-3
  paper) with a test item, within one user turn. This catches a test prompt pasted
  inside a longer request, where Jaccard similarity is low.
- embeddings (when an embedder is given): the cosine similarity of a pool unit's embedding
  to its nearest test unit's reaches ``embedding_threshold``; units as for MinHash (the
  whole conversation and each turn), unnormalized text. This catches a paraphrase, which
  shares few shingles and no long n-gram with the test item.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..records import Prompt
from .dedupe import (
    Shingle,
    dedupe_text,
    lean_minhash,
    lsh_index,
    normalize,
    signatures,
    similarity,
    window_hashes,
    word_units,
    words,
)

if TYPE_CHECKING:
    from .settings import EmbedSettings, NearCopySettings


def _units(prompts: Sequence[Prompt], min_later_words: int = 0, raw: bool = False) -> tuple[list[str], np.ndarray]:
    """Return the texts compared (each conversation, and each turn of a multi-turn one) and their owner rows.

    A turn after the first is a unit of its own only with at least ``min_later_words`` words. Texts are
    normalized for MinHash; ``raw``: as written (for an embedder, which reads case and punctuation).
    """
    texts: list[str] = []
    owners: list[int] = []
    for i, p in enumerate(prompts):
        texts.append("\n".join(p.turns) if raw else dedupe_text(p))
        owners.append(i)
        if len(p.turns) > 1:
            for k, t in enumerate(p.turns):
                text = t if raw else normalize(t)
                if k > 0 and len(words(text)) < min_later_words:
                    continue
                texts.append(text)
                owners.append(i)
    return texts, np.asarray(owners, dtype=np.int64)


def ngram_hashes(text: str, n: int) -> np.ndarray:
    """Return 64-bit hashes of the word ``n``-grams of normalized ``text``; uint64 (G,), empty below n words."""
    units = word_units(normalize(text))
    if len(units) < n:
        return np.zeros(0, dtype=np.uint64)
    return window_hashes(units, n)


def _prompt_ngrams(p: Prompt, n: int) -> np.ndarray:
    parts = [ngram_hashes(t, n) for t in p.turns]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def _ngram_hit(
    pool_grams: np.ndarray, sorted_grams: np.ndarray, sorted_owner: np.ndarray, n_grams: np.ndarray, coverage: float
) -> int | None:
    """Return the test row most covered by ``pool_grams`` if it reaches ``coverage``, else None."""
    if not len(pool_grams) or not len(sorted_grams):
        return None
    g = np.unique(pool_grams)
    left = np.searchsorted(sorted_grams, g, side="left")
    right = np.searchsorted(sorted_grams, g, side="right")
    found = right > left
    if not found.any():
        return None
    # One pool n-gram can belong to several test items: expand each hit range.
    idx = np.concatenate([np.arange(a, b) for a, b in zip(left[found], right[found])])
    shared = np.bincount(sorted_owner[idx], minlength=len(n_grams))
    share = np.divide(shared, n_grams, out=np.zeros(len(n_grams)), where=n_grams > 0)
    best = int(np.argmax(share))
    return best if share[best] >= coverage else None


def decontaminate(
    pool: Sequence[Prompt],
    tests: Sequence[Prompt],
    threshold: float = 0.7,
    num_perm: int = 128,
    shingle: Shingle = "char",
    shingle_ngram: int = 5,
    ngram: int = 13,
    ngram_coverage: float = 0.5,
    seed: int = 1,
    advance: Callable[[int], None] | None = None,
    *,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    embedding_threshold: float | None = None,
) -> tuple[list[Prompt], Counter[str], dict[str, str]]:
    """Return pool prompts clean of ``tests``, drops by reason, and dropped pool id -> matching test id.

    Reasons: ``contaminated_minhash`` (checked first), ``contaminated_ngram`` and, with
    ``embed`` (texts -> unit-length embeddings, float32 (N, D)) and an ``embedding_threshold``,
    ``contaminated_embedding``. The n-gram test: the
    pool item holds at least ``ngram_coverage`` of a test item's distinct word
    ``ngram``-grams. A share rather than one shared n-gram, because benchmarks reuse
    boilerplate ("Try to explain your answer. Your explanation should take the reader
    through your reasoning step-by-step.") that would otherwise flag every pool item
    that happens to use it.
    ``advance`` is called with the number of pool prompts checked.
    """
    if not tests or not pool:
        return list(pool), Counter(), {}
    # A short later test turn is generic: alone it would match any conversation that uses it.
    test_texts, test_owner = _units(tests, min_later_words=ngram)
    test_sigs = signatures(test_texts, num_perm, seed, shingle, shingle_ngram)
    lsh = lsh_index(threshold, num_perm)
    for j, sig in enumerate(test_sigs):
        lsh.insert(j, lean_minhash(sig, seed), check_duplication=False)

    # Distinct n-grams of each test item, sorted, with their owner: np.searchsorted finds pool hits.
    grams = [np.unique(_prompt_ngrams(t, ngram)) for t in tests]
    n_grams = np.array([len(g) for g in grams], dtype=np.int64)
    owners = np.repeat(np.arange(len(tests), dtype=np.int64), n_grams)
    all_grams = np.concatenate(grams) if grams else np.zeros(0, dtype=np.uint64)
    order = np.argsort(all_grams, kind="stable")
    sorted_grams, sorted_owner = all_grams[order], owners[order]

    pool_texts, pool_owner = _units(pool)
    pool_sigs = signatures(pool_texts, num_perm, seed, shingle, shingle_ngram)
    hit_test: dict[int, int] = {}
    for u, sig in enumerate(pool_sigs):
        owner = int(pool_owner[u])
        if owner in hit_test:
            continue
        candidates = sorted(lsh.query(lean_minhash(sig, seed)))
        if candidates:
            sims = similarity(test_sigs[candidates], sig)
            best = int(np.argmax(sims))
            if sims[best] >= threshold:
                hit_test[owner] = int(test_owner[candidates[best]])

    nearest = None
    if embedding_threshold is not None and embed is not None:
        # only what the other tests kept is embedded: the costly test runs last
        rest = [i for i, p in enumerate(pool) if i not in hit_test]
        t_texts, t_owner = _units(tests, min_later_words=ngram, raw=True)
        p_texts, p_owner = _units([pool[i] for i in rest], raw=True)
        hit_unit = nearest_tests(embed(p_texts), embed(t_texts), embedding_threshold)
        nearest = np.full(len(pool), -1, dtype=np.int64)
        for u in np.flatnonzero(hit_unit >= 0)[::-1]:  # reversed: the pool item's first hit unit names the match
            nearest[rest[int(p_owner[u])]] = t_owner[hit_unit[u]]
    kept: list[Prompt] = []
    dropped: Counter[str] = Counter()
    matches: dict[str, str] = {}
    for i, p in enumerate(pool):
        if i in hit_test:
            dropped["contaminated_minhash"] += 1
            matches[p.id] = tests[hit_test[i]].id
        elif (hit := _ngram_hit(_prompt_ngrams(p, ngram), sorted_grams, sorted_owner, n_grams,
                                ngram_coverage)) is not None:
            dropped["contaminated_ngram"] += 1
            matches[p.id] = tests[hit].id
        elif nearest is not None and nearest[i] >= 0:
            dropped["contaminated_embedding"] += 1
            matches[p.id] = tests[int(nearest[i])].id
        else:
            kept.append(p)
        if advance is not None:
            advance(1)
    return kept, dropped, matches


def nearest_tests(pool_vecs: np.ndarray, test_vecs: np.ndarray, threshold: float, chunk: int = 4096) -> np.ndarray:
    """Return, per pool row, the row of its most similar test item if the cosine reaches ``threshold``, else -1.

    ``pool_vecs`` float32 (N, D) and ``test_vecs`` float32 (T, D) are unit length (embed.embed_texts), so a dot
    product is the cosine; pool rows go in chunks, so memory stays (chunk, T). Returns int64 (N,).
    """
    out = np.full(len(pool_vecs), -1, dtype=np.int64)
    if not len(pool_vecs) or not len(test_vecs):
        return out
    for start in range(0, len(pool_vecs), chunk):
        sims = pool_vecs[start : start + chunk] @ test_vecs.T
        best = np.argmax(sims, axis=1)
        hit = sims[np.arange(len(best)), best] >= threshold
        out[start : start + chunk][hit] = best[hit]
    return out


# ---- what a pool build has already checked ----------------------------------------------------------------------
# `arena pool build` decontaminates the pool against its test sets; the flywheel checks each stored slice again
# against every test set in the workspace, since one may come later. What the build checked is recorded (meta
# CHECKED_META: the settings, the test items, each set's content), so the flywheel checks a slice only against the
# test items the build did not see with the same settings: at paper scale, a 30K-prompt slice is not embedded again
# at each `arena plan`, run and resume. The tests are per test item (a pool item is dropped when it is near any one
# of them), so checking the rest alone drops what checking all would.

CHECKED_META = "pool/decontaminated"


def near_copy_fingerprint(s: NearCopySettings, embed: EmbedSettings) -> str:
    """Return what decides the near-copy tests' verdicts: ``s``'s NearCopySettings and ``embed``'s model (the model
    and its truncation; not the batch size or device, which change the embeddings' last bits only)."""
    from .settings import NearCopySettings

    fields: dict[str, Any] = {k: getattr(s, k) for k in NearCopySettings.model_fields}
    if fields.get("embedding_threshold") is not None:
        fields["embed"] = {"model": embed.model, "text": embed.text, "max_seq_length": embed.max_seq_length}
    return json.dumps(fields, sort_keys=True)


def item_key(p: Prompt) -> str:
    """A test item's key: its turns (what the tests read), not its id."""
    return hashlib.sha1("\x1f".join(p.turns).encode("utf-8")).hexdigest()[:16]


def content_key(prompts: Sequence[Prompt]) -> str:
    """A prompt set's content: its prompts' ids and turns, in any order."""
    h = hashlib.sha1()
    for line in sorted(f"{p.id}\x1e{item_key(p)}" for p in prompts):
        h.update(line.encode("utf-8"))
    return h.hexdigest()


def checked_record(fingerprint: str, tests: Sequence[Prompt], sets: dict[str, Sequence[Prompt]]) -> dict[str, Any]:
    """Return the record a pool build stores under CHECKED_META: its sets were checked against ``tests``."""
    return {"settings": fingerprint, "tests": sorted({item_key(t) for t in tests}),
            "sets": {name: content_key(ps) for name, ps in sets.items()}}


def unchecked_tests(record: Any, set_name: str, prompts: Sequence[Prompt], tests: Sequence[Prompt],
                    fingerprint: str) -> list[Prompt]:
    """Return the items of ``tests`` that the set ``set_name`` (holding ``prompts``) still has to be checked against:
    all of them unless ``record`` (CHECKED_META) says the build checked this very content with these settings."""
    if (not isinstance(record, dict) or record.get("settings") != fingerprint
            or record.get("sets", {}).get(set_name) != content_key(prompts)):
        return list(tests)
    seen = set(record.get("tests", []))
    return [t for t in tests if item_key(t) not in seen]
