"""The one model cache of the in-process engines (llama.cpp, transformers, vLLM): a model is loaded once."""

from __future__ import annotations

import threading
import time

from arena_learning.engines.model_cache import ModelCache


def test_engines_built_at_once_load_a_model_once_and_share_it():
    cache: ModelCache[str, object] = ModelCache()
    loads = []

    def load() -> object:
        loads.append(1)
        time.sleep(0.05)  # a slow load: the others wait for it instead of loading again
        return object()

    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("m", load))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and len(got) == 4 and all(g is got[0] for g in got)
    assert cache.is_loaded("m") and not cache.is_loaded("other")


def test_peek_and_is_loaded_never_load_and_drop_removes_what_it_is_asked_to():
    cache: ModelCache[tuple[str, int], str] = ModelCache()
    assert cache.peek(("a", 1)) is None and not cache.is_loaded(("a", 1)) and len(cache) == 0
    for key in (("a", 1), ("a", 2), ("b", 1)):
        cache.get(key, lambda key=key: f"{key[0]}{key[1]}")
    assert cache.peek(("a", 2)) == "a2"
    # a folder retrained in place: its older entries go (a loader may do this under the lock: it is reentrant)
    assert cache.get(("a", 3), lambda: cache.drop(lambda k: k[0] == "a") and "a3") == "a3"
    assert [cache.is_loaded(k) for k in (("a", 1), ("a", 2), ("b", 1), ("a", 3))] == [False, False, True, True]
    assert cache.drop() == ["b1", "a3"] and len(cache) == 0


def test_two_caches_that_change_together_share_one_lock():
    models: ModelCache[str, str] = ModelCache()
    contexts: ModelCache[tuple[str, int], str] = ModelCache(models.lock)
    assert contexts.lock is models.lock
    with models.lock:  # what the llama.cpp engine does at exit: its contexts, then its models
        assert contexts.get(("m", 4), lambda: "ctx") == "ctx"
