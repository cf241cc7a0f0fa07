"""Retrieval: the order in which a store returns its items for a query, under its policy.

:func:`rank` is the one rule: the policy's retrieval scores of the unexpired items, the
highest first, ties to the older item. :meth:`memlib.store.MemoryStore.retrieve` and
:meth:`~memlib.store.MemoryStore.rank` return it, and the studies score a replayed store
by it (:mod:`memlib.store.replay`).

>>> import numpy as np
>>> from memlib.store import MemoryStore
>>> st = MemoryStore()
>>> for i, text in enumerate(["I like tea.", "I like coffee.", "Hello."]):
...     _ = st.add(text, time=float(i), embedding=np.eye(384)[i])
>>> rank(st.view, st.policy, np.eye(384)[1], k=1).tolist()
[1]
"""

from __future__ import annotations

import numpy as np

from memlib.store.columns import top_k


def rank(
    view, policy, query_vec, query_valence: float = 0.0, now: float | None = None, k: int | None = None, scores=False
):
    """Positions of the unexpired items of ``view`` in retrieval order under ``policy`` (the best first).

    Parameters
    ----------
    view : StoreView
    policy : Policy
    query_vec : ndarray, shape (384,)
        A unit query vector (checked by the caller).
    query_valence : float
        The query's VADER valence (mood congruence reads it).
    now : float, optional
        Days; an item that expires at or before ``now`` is not returned. Default: the view's
        clock (:attr:`StoreView.now <memlib.store.view.StoreView.now>`); a view without one
        returns every item.
    k : int, optional
        Only the first ``k`` (default: all).
    scores : bool
        Also return the policy's retrieval score of every item.

    Returns
    -------
    order : ndarray of int
    item_scores : ndarray of float, shape (len(view),)
        With ``scores=True`` only.
    """
    now = view.now if now is None else now
    item_scores = np.asarray(policy.retrieval_scores(view, query_vec, query_valence, now), float)
    alive = np.ones(len(view), bool) if now is None else view.expires > now
    if k is None:
        order = np.argsort(-item_scores, kind="stable")
        order = order[alive[order]]
    else:
        order = top_k(np.where(alive, item_scores, -np.inf), min(k, int(alive.sum())))
    return (order, item_scores) if scores else order


__all__ = ["rank"]
