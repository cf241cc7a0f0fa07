"""The one interface every forgetting and retrieval policy of a store implements.

A policy decides which items a :class:`~memlib.store.MemoryStore` forgets at a
consolidation and how it ranks them for a query. Subclass :class:`Policy` and
override :meth:`~Policy.forget_scores` (and, where the rule differs from plain
similarity, :meth:`~Policy.retrieval_scores`); register it in
:data:`memlib.store.policies.POLICIES` to make it loadable by name.

Every hook reads the held items through a read-only :class:`~memlib.store.view.StoreView`:
their per-item arrays, :meth:`~memlib.store.view.StoreView.values`,
:meth:`~memlib.store.view.StoreView.normalised_values` and
:meth:`~memlib.store.view.StoreView.similarity`. The same hooks score a live store
(``store.view``) and a replay (:mod:`memlib.store.replay`, which shows a policy the items
a bounded store would hold), so what a study measures is what a store does.
The store keeps the usage counts itself (a retrieval, or a turn merged into an item,
counts once). A policy that needs state of its own per item (MemoryBank's strength
level) declares it in :attr:`Policy.item_state`; the store keeps it with the items
(saved in both file formats, dropped with the items it belongs to), the policy reads
it as ``view.state(name)`` and sets it by returning it from :meth:`~Policy.on_retrieve`.

>>> import numpy as np
>>> class Oldest(Policy):
...     name = "oldest"
...     def forget_scores(self, view, now):
...         return -np.arange(len(view), dtype=float)   # the first item is dropped last
>>> Oldest().config(), Oldest.bounded
({}, True)
>>> class Strength(Oldest):   # a per-item state of its own, doubled by every retrieval
...     item_state = {"strength": 1.0}
...     def on_retrieve(self, view, idx, now):
...         return {"strength": view.state("strength")[idx] * 2}
>>> from memlib.store import MemoryStore
>>> st = MemoryStore(policy=Strength())
>>> st.add("I like tea.", time=0.0, embedding=np.eye(384)[0])
0
>>> _ = st.retrieve(query_embedding=np.eye(384)[0], k=1)
>>> st.view.state("strength").tolist(), st.view.retrievals.tolist()   # its state, and the store's count
([2.0], [1.0])
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
    static_order : bool
        ``True`` declares that an item's forget score depends on the item alone: not on the
        clock, its usage or the other items held (dropping the lowest value first, or the
        oldest). A replay may then order the turns once instead of at every consolidation
        (:func:`memlib.store.replay.held_after`); the items kept are the same.
    reads_need : bool
        ``True`` declares that the forget scores read ``view.need``, the stream's reference
        counts (:mod:`memlib.references`); a replay then keeps them as the store would.
    item_state : dict
        The per-item state this policy keeps in the store: name (lower-case letters,
        digits and ``_``) -> the value a new item starts with. Default: none.
    """

    name = "policy"
    bounded = True
    static_order = False
    reads_need = False
    item_state: dict[str, float] = {}

    def forget_scores(self, view, now: float) -> np.ndarray:
        """One score per item of ``view`` (a :class:`~memlib.store.view.StoreView`) at time ``now`` (days).

        The highest is dropped first.
        """
        raise NotImplementedError

    def forget_scorer(self, view):
        """Return ``score(positions, now, need)``: the forget scores of the items at ``positions`` of ``view``.

        What a replay asks at each consolidation of one history's view
        (:func:`memlib.store.replay.held_after`): by default
        ``forget_scores(view.take(positions, now, need=need), now)``. A policy may return a
        faster function that reads the view's arrays once; it must give the same scores, bit for
        bit (``tests/test_replay.py`` holds every policy of the registry to it).
        """

        def score(positions, now: float, need=None) -> np.ndarray:
            return self.forget_scores(view.take(positions, now, need=need), now)

        return score

    def retrieval_scores(self, view, query_vec, query_valence: float, now: float) -> np.ndarray:
        """One score per item for a unit query vector; the highest is returned first (default: similarity)."""
        return view.similarity(query_vec)

    def on_retrieve(self, view, idx: np.ndarray, now: float) -> dict | None:
        """Return the policy's own state of the items at positions ``idx``, retrieved at ``now`` (or merged into then).

        The store counts the use itself (``retrievals`` and ``last_access`` of the view,
        and the usage-history factor); ``view`` shows the items as they were before.
        Return ``{name: values}`` (one value per position, for names in
        :attr:`item_state`) to change this policy's state, or None (the default) to keep it.
        """
        return None

    def explain_terms(self, view, i: int) -> dict:
        """Return the terms of item ``i``'s forget score beyond its value, by name (default: none).

        :meth:`memlib.store.MemoryStore.explain` shows them beside the value's contributions.
        """
        return {}

    def config(self) -> dict:
        """Return the keyword arguments that rebuild this policy (saved with the store)."""
        return {}
