"""Published memory policies as :class:`~memlib.store.protocol.Policy` objects.

Each baseline follows its source's own definition; the docstrings cite the
file and constants read. Where a source has no budgeted forgetting, or needs
an LLM, the adaptation is stated.

* :class:`GenerativeAgentsPolicy`: Park et al. (2023), retrieval score.
* :class:`MemoryBankPolicy`: Zhong et al. (2024), Ebbinghaus retention.
* :class:`FIFOPolicy`: MemGPT-style first-in first-out eviction (Packer et al. 2023).
* :class:`RecencyPolicy`: keep and return the most recent turns.
* :class:`UnboundedRAGPolicy`: plain similarity retrieval over everything (the ceiling).
* :class:`memlib.store.policies.ValuePolicy`: ours, the learned value.

All of them are registered by name in :data:`memlib.store.policies.POLICIES`.
"""

from __future__ import annotations

import numpy as np

from memlib.store.protocol import Policy


def _minmax(x: np.ndarray) -> np.ndarray:
    """Min-max normalise to [0, 1]; a constant vector maps to 0.5 (as the GA code does), an empty one to itself.

    >>> _minmax(np.array([2.0, 4.0, 3.0])).tolist(), _minmax(np.array([7.0, 7.0])).tolist(), _minmax(np.array([])).size
    ([0.0, 1.0, 0.5], [0.5, 0.5], 0)
    """
    if not len(x):
        return np.zeros(0)
    lo, hi = float(np.min(x)), float(np.max(x))
    return np.full(len(x), 0.5) if hi == lo else (x - lo) / (hi - lo)


class GenerativeAgentsPolicy(Policy):
    """Generative Agents' retrieval score: recency, importance and relevance.

    Source: joonspk-research/generative_agents,
    ``reverie/backend_server/persona/cognitive_modules/retrieve.py`` (``new_retrieve``:
    each component min-max normalised to [0, 1] by ``normalize_dict_floats``, combined
    with ``gw = [0.5, 3, 2]`` for recency, relevance and importance, times
    ``recency_w = relevance_w = importance_w = 1``) and
    ``persona/memory_structures/scratch.py`` (``recency_decay = 0.99``).

    * Recency: ``0.99 ** rank`` over items ordered by last access, rank 1 the most
      recently accessed. (The released ``extract_recency`` sorts ascending, which
      gives the *oldest* item the largest value; we follow the paper's stated
      intent, recent = high.)
    * Importance: the source asks an LLM for a 1-10 "poignancy". API-free stand-in:
      ``1 + 9 * emotional intensity`` (VADER-based, :mod:`memlib.factors`), the closest
      lexical reading of poignancy.
    * Relevance: cosine similarity to the query.

    Forgetting: Generative Agents keeps everything. Under a budget we drop the
    items with the lowest query-free part of the score (``0.5 * recency + 2 *
    importance``, normalised) first: our adaptation.
    """

    name = "generative_agents"
    RECENCY_DECAY = 0.99
    W_RECENCY, W_RELEVANCE, W_IMPORTANCE = 0.5, 3.0, 2.0

    def _recency(self, view) -> np.ndarray:
        order = np.argsort(-view.last_access, kind="stable")  # most recent first
        rank = np.empty(len(order))
        rank[order] = np.arange(1, len(order) + 1)
        return self.RECENCY_DECAY**rank

    def _importance(self, view) -> np.ndarray:
        return 1.0 + 9.0 * view.factors[:, 0]

    def forget_scores(self, view, now):
        """Return minus the query-free score (recency and importance, each min-max normalised)."""
        keep_score = self.W_RECENCY * _minmax(self._recency(view)) + self.W_IMPORTANCE * _minmax(self._importance(view))
        return -keep_score

    def retrieval_scores(self, view, query_vec, query_valence, now):
        """Return the weighted sum of recency, relevance and importance, each min-max normalised."""
        relevance = 2.0 * view.similarity(query_vec) - 1.0  # the cosine
        return (
            self.W_RECENCY * _minmax(self._recency(view))
            + self.W_RELEVANCE * _minmax(relevance)
            + self.W_IMPORTANCE * _minmax(self._importance(view))
        )


class MemoryBankPolicy(Policy):
    """MemoryBank's Ebbinghaus forgetting curve with strength updates on recall.

    Source: zhongwanjun/MemoryBank-SiliconFriend,
    ``memory_bank/memory_retrieval/forget_memory.py``: ``forgetting_curve(t, S) =
    exp(-t / S)`` with ``t`` in days since the memory's ``cur_level_date``;
    ``memory_level = 3`` levels with strengths ``S = 1, 2, 3``; a recalled memory
    moves one level up (capped) and its date resets to the recall date
    (``update_memory_when_searched``). Retrieval is dense similarity search (FAISS).

    The source forgets at random with probability ``1 - R``; under a budget we
    drop the lowest retention ``R`` first (deterministic; our adaptation).

    Each item's level (0, 1, 2: strength ``S = level + 1``) is this policy's own
    per-item state (:attr:`item_state`), kept by the store with the item.
    """

    name = "memorybank"
    LEVELS = 3
    item_state = {"level": 0.0}

    def retention(self, view, now) -> np.ndarray:
        """Return each item's retention ``R = exp(-t / S)``, ``t`` the days since its last access."""
        t = np.maximum(now - view.last_access, 0.0)
        strength = np.minimum(view.state("level"), self.LEVELS - 1) + 1.0
        return np.exp(-t / strength)

    def forget_scores(self, view, now):
        """Return minus the retention: the least retained item goes first."""
        return -self.retention(view, now)

    def on_retrieve(self, view, idx, now):
        """Return the levels of the items at ``idx`` moved one up (capped at the top level)."""
        return {"level": np.minimum(view.state("level")[idx] + 1, self.LEVELS - 1)}


class FIFOPolicy(Policy):
    """MemGPT-style first-in first-out eviction with similarity retrieval.

    Source: cpacker/MemGPT (Packer et al. 2023): when the context queue overflows,
    the oldest messages are evicted first (the paper's queue manager, "flush" of
    the FIFO queue); evicted messages go to recall storage searched by embedding
    similarity. Here the bounded store is the queue and nothing is recalled
    from evicted turns, so the oldest turns are simply forgotten.
    """

    name = "memgpt_fifo"
    static_order = True

    def forget_scores(self, view, now):
        """Return minus each item's time: the oldest goes first."""
        return -view.time


class RecencyPolicy(Policy):
    """Keep the most recent turns and return them newest first (no query use)."""

    name = "recency"
    static_order = True

    def forget_scores(self, view, now):
        """Return minus each item's time: the oldest goes first."""
        return -view.time

    def retrieval_scores(self, view, query_vec, query_valence, now):
        """Return each item's time: the newest comes first (the query is not used)."""
        return view.time.astype(np.float64)


class UnboundedRAGPolicy(Policy):
    """Plain similarity retrieval over every stored turn, with no forgetting (the ceiling)."""

    name = "rag_unbounded"
    bounded = False

    def forget_scores(self, view, now):
        """Return zero for every item (the policy is unbounded: nothing is dropped)."""
        return np.zeros(len(view))
