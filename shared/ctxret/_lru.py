"""A bounded, thread-safe map from text to array, least recently used dropped first: what the local model keeps of
recently tokenized texts (:class:`~ctxret.embedders.local.LocalEmbedder`) and the ``latest`` stage of the own-text
vectors it embedded (:class:`~ctxret.query.latest.OwnVectors`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np


class TextLRU:
    """Arrays by text, the least recently used dropped first once their total weight passes ``limit``; ``weigh``
    gives an array's weight (1 each when ``None``), and an array heavier than ``limit`` is not kept. An entry is
    used when it is read or written. Safe to share between threads."""

    def __init__(self, limit: int, weigh: Callable[[np.ndarray], int] | None = None) -> None:
        self.limit = limit
        self._weigh = weigh
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def _weight(self, value: np.ndarray) -> int:
        return 1 if self._weigh is None else self._weigh(value)

    def get(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The arrays of those of ``texts`` it holds."""
        with self._lock:
            found = {t: self._items[t] for t in texts if t in self._items}
            for t in found:
                self._items.move_to_end(t)
        return found

    def put(self, texts: Sequence[str], values: Sequence[np.ndarray]) -> None:
        """Keep ``values[i]`` as the array of ``texts[i]``."""
        with self._lock:
            for text, value in zip(texts, values, strict=True):
                weight = self._weight(value)
                if weight > self.limit:
                    continue
                old = self._items.pop(text, None)
                if old is not None:
                    self._total -= self._weight(old)
                self._items[text] = value
                self._total += weight
            while self._total > self.limit:
                _, dropped = self._items.popitem(last=False)
                self._total -= self._weight(dropped)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._total = 0
