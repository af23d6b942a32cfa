"""Readable names for clusters: the words that set each cluster's prompts apart (class-based TF-IDF).

``arena testset build`` and ``arena pool build`` number their k-means clusters (``c00``, ``c01``, ...).
A number says nothing to a reader of a board by cluster, so every cluster also gets a label of a
few words, chosen as BERTopic chooses a topic's words (c-TF-IDF, Grootendorst 2022): all the
prompts of a cluster are one document; a word's weight in a cluster is its frequency there times
``log(1 + A / f)``, where ``A`` is the average number of words per cluster and ``f`` the word's
frequency over every cluster. A word frequent in one cluster and rare in the others ranks first.
scikit-learn's ``CountVectorizer`` does the tokenising and English stop words; no model is needed.

Labels are made distinct: a cluster whose words repeat another's label takes its next word until
the two differ (a label is at most ``max_words`` words). A user's own names (a YAML or JSON file
``{c00: "python debugging", ...}``) replace the computed ones (``read_names``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import ArenaError

LABEL_KEY = "cluster_label"
"""The ``Prompt.meta`` key a cluster's label is stored under, with every prompt of the cluster."""


def ctfidf_words(texts: Sequence[str], clusters: Sequence[str], top: int = 10) -> dict[str, list[str]]:
    """Return cluster -> its ``top`` words by class-based TF-IDF, best first (ties: alphabetical)."""
    from sklearn.feature_extraction.text import CountVectorizer

    if len(texts) != len(clusters):
        raise ValueError(f"{len(texts)} texts but {len(clusters)} cluster names")
    names = sorted(set(clusters))
    docs = [" ".join(t for t, c in zip(texts, clusters) if c == name) for name in names]
    vec = CountVectorizer(stop_words="english", token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z]+\b", lowercase=True)
    try:
        counts = vec.fit_transform(docs).toarray().astype(np.float64)  # (clusters, words)
    except ValueError:  # no word at all (only stop words or numbers)
        return {name: [] for name in names}
    words = vec.get_feature_names_out()
    tf = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
    avg = counts.sum() / len(names)
    idf = np.log(1.0 + avg / np.maximum(counts.sum(axis=0), 1.0))
    weight = tf * idf
    out: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        order = sorted(np.flatnonzero(counts[i] > 0), key=lambda j: (-weight[i, j], words[j]))
        out[name] = [str(words[j]) for j in order[:top]]
    return out


def cluster_labels(texts: Sequence[str], clusters: Sequence[str], max_words: int = 3) -> dict[str, str]:
    """Return cluster -> a label of up to ``max_words`` words (at most five), distinct across clusters."""
    if not 1 <= max_words <= 5:
        raise ArenaError(f"a cluster label has 1 to 5 words, not {max_words}")
    ranked = ctfidf_words(texts, clusters, top=12)
    labels: dict[str, str] = {}
    used: set[str] = set()
    for name in sorted(ranked):
        words = ranked[name]
        label = " ".join(words[:max_words]) or name
        # a repeated label: swap in the cluster's next words until it differs (still max_words words)
        extra = max_words
        while label in used and extra < len(words):
            label = " ".join([*words[: max_words - 1], words[extra]])
            extra += 1
        if label in used:
            label = f"{label} ({name})"
        used.add(label)
        labels[name] = label
    return labels


def read_names(path: Path) -> dict[str, str]:
    """Return the user's cluster names from a YAML or JSON mapping ``{cluster: name}``; bad input says where."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ArenaError(f"cluster names: cannot read {path}: {err.strerror}") from err
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        raise ArenaError(f"cluster names: {path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                         f"{err}") from err
    if not isinstance(data, Mapping) or not all(isinstance(v, str) and v.strip() for v in data.values()):
        raise ArenaError(f"cluster names: {path} must map each cluster to a name, e.g. `c00: python debugging`")
    return {str(k): str(v).strip() for k, v in data.items()}
