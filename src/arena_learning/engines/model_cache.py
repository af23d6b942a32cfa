"""The models an in-process engine loads, once per process, shared by every engine that names the same one.

Loading a model takes seconds to minutes and its weights take memory, so the llama.cpp, transformers and
vLLM engines keep what they load here, under a key of what makes two loads the same (file, context size,
threads, dtype, ...). ``get`` loads under the cache's lock, so two engines built at once load a model once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ModelCache(Generic[K, V]):
    """Loaded models (or anything built from one: a batched context) by key, for this process.

    ``lock`` is reentrant: a loader may drop older entries (``drop``) while it runs under it. Two caches
    that must change together (a model and the contexts built on it) share one lock.
    """

    def __init__(self, lock: threading.RLock | None = None) -> None:
        self.lock = lock if lock is not None else threading.RLock()
        self._items: dict[K, V] = {}

    def get(self, key: K, load: Callable[[], V]) -> V:
        """Return the entry of ``key``, loading it with ``load()`` first if it is not here."""
        with self.lock:
            if key not in self._items:
                self._items[key] = load()
            return self._items[key]

    def peek(self, key: K) -> V | None:
        """Return the entry of ``key`` if it is loaded, else None (nothing is loaded)."""
        with self.lock:
            return self._items.get(key)

    def is_loaded(self, key: K) -> bool:
        """Return whether ``key`` is loaded in this process (a later ``get`` costs nothing)."""
        with self.lock:
            return key in self._items

    def drop(self, which: Callable[[K], bool] | None = None) -> list[V]:
        """Remove the entries whose key ``which`` accepts (every entry without it); return them, oldest first."""
        with self.lock:
            keys = [k for k in self._items if which is None or which(k)]
            return [self._items.pop(k) for k in keys]

    def __len__(self) -> int:
        return len(self._items)
