"""Retrieval: the order in which a store returns its items for a query, under its policy.

:func:`rank` is the one rule: the policy's retrieval scores of the unexpired items, the
highest first, ties to the older item, and the user's own words before a reply that restates
them (:func:`sources_first`). :meth:`memlib.store.MemoryStore.retrieve` and
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

from memlib.references import THRESHOLD
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
    ranked = np.where(alive, item_scores, -np.inf)
    n = int(alive.sum())
    order = None
    if k is not None and k < n:
        order = top_k(ranked, k)
        replies, sources = restated(view, order)
        # an echo whose source ranks below it moves after its source: then the whole order decides the first k
        if (ranked[sources] < ranked[replies]).any():  # (on a tie the source, the older, is first already)
            order = None
    if order is None:
        order = sources_first(view, np.argsort(-ranked, kind="stable")[:n])[:k]
    return (order, item_scores) if scores else order


def restated(view, positions) -> tuple[np.ndarray, np.ndarray]:
    """Return the replies among ``positions`` that restate the user's turn just before them, and those turns.

    A reply (an item that is not the user's) restates the user turn before it when their cosine
    is at least :data:`memlib.references.THRESHOLD`, the store's one test of "the same content".
    Returns two arrays of positions of ``view``: the replies, in the order of ``positions``, and
    the user turn each restates.
    """
    positions = np.asarray(positions, dtype=np.int64)
    user = view.user
    replies = positions[~user[positions]]
    users = np.flatnonzero(user)
    none = np.zeros(0, dtype=np.int64)
    if not len(replies) or not len(users):
        return none, none
    before = np.searchsorted(users, replies) - 1  # the user turn just before each reply
    replies, sources = replies[before >= 0], users[before[before >= 0]]
    emb = view.embeddings
    cos = np.einsum("ij,ij->i", emb[replies].astype(np.float64), emb[sources].astype(np.float64))
    keep = cos >= THRESHOLD
    return replies[keep], sources[keep]


def sources_first(view, order) -> np.ndarray:
    """Return ``order`` with each reply that restates the user's turn just before it placed right after that turn.

    A reply restates the user's turn before it as :func:`restated` says ("Noted, no peanuts."
    after "I am allergic to peanuts."). Where both are in ``order`` and the reply ranks first,
    the reply moves to just after the user's turn: what the user said is the source, the echo
    adds nothing to it. :func:`rank` applies it to the whole order before it cuts the first
    ``k``, so the first ``k`` are always the start of the first ``k + 1``.

    Parameters
    ----------
    view : StoreView
    order : ndarray of int
        Positions of ``view``, best first.

    Examples
    --------
    >>> import numpy as np
    >>> from memlib.store import MemoryStore
    >>> st = MemoryStore()
    >>> fact, echo = np.eye(384)[0], np.eye(384)[0] * 0.8 + np.eye(384)[1] * 0.6
    >>> _ = st.add("I am allergic to peanuts.", time=0.0, embedding=fact)
    >>> _ = st.add("Noted, no peanuts.", time=0.0, role="assistant", embedding=echo)
    >>> sources_first(st.view, np.array([1, 0])).tolist()   # cosine 0.8: the echo follows its source
    [0, 1]
    """
    order = np.asarray(order, dtype=np.int64)
    replies, sources = restated(view, order)
    if not len(replies):
        return order
    rank_of = np.full(len(view), len(order), dtype=np.int64)  # a source outside ``order`` ranks after all of it
    rank_of[order] = np.arange(len(order))
    moves = (rank_of[sources] > rank_of[replies]) & (rank_of[sources] < len(order))
    if not moves.any():
        return order
    key = np.arange(len(order), dtype=np.float64)
    key[rank_of[replies[moves]]] = rank_of[sources[moves]] + 0.5
    return order[np.argsort(key, kind="stable")]


__all__ = ["rank", "restated", "sources_first"]
