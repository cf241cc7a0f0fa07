"""The one interface every forgetting and retrieval policy of a store implements.

A policy decides which items a :class:`~memlib.store.MemoryStore` forgets at a
consolidation and how it ranks them for a query. Subclass :class:`Policy` and
override :meth:`~Policy.forget_scores` (and, where the rule differs from plain
similarity, :meth:`~Policy.retrieval_scores` and :meth:`~Policy.on_retrieve`);
register it in :data:`memlib.store.policies.POLICIES` to make it loadable by
name.

>>> import numpy as np
>>> class Oldest(Policy):
...     name = "oldest"
...     def forget_scores(self, store, now):
...         return -np.arange(len(store), dtype=float)   # the first item is dropped last
>>> Oldest().config(), Oldest.bounded
({}, True)
"""

from __future__ import annotations

import numpy as np


class Policy:
    """How a store forgets and ranks. Subclasses override the hooks below.

    Attributes
    ----------
    name : str
        The policy's name in :data:`memlib.store.policies.POLICIES`.
    bounded : bool
        ``False`` turns forgetting off: consolidation keeps every item.
    """

    name = "policy"
    bounded = True

    def forget_scores(self, store, now: float) -> np.ndarray:
        """One score per item of ``store`` at time ``now`` (days); the highest is dropped first."""
        raise NotImplementedError

    def retrieval_scores(self, store, query_vec, query_valence: float, now: float) -> np.ndarray:
        """One score per item for a unit query vector; the highest is returned first (default: similarity)."""
        return store.similarity(query_vec)

    def on_retrieve(self, store, idx: np.ndarray, now: float) -> None:
        """Update the state of the returned items ``idx``: count the retrieval and refresh usage history."""
        store._retrievals[idx] += 1
        store._last_access[idx] = now
        store._refresh_usage(idx)

    def config(self) -> dict:
        """The keyword arguments that rebuild this policy (saved with the store)."""
        return {}
