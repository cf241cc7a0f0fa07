"""The store's forgetting policies: ours (:class:`ValuePolicy`) and one registry of all of them.

:data:`POLICIES` maps each policy's name to its class: the paper's value policy
and the published baselines of :mod:`memlib.store.baselines`. :func:`make_policy`
builds one by name; :meth:`memlib.store.MemoryStore.load` rebuilds a saved
store's policy from the same registry.

>>> make_policy("learned_V", beta=2.0).config()["beta"]
2.0
>>> sorted(POLICIES)
['generative_agents', 'learned_V', 'memgpt_fifo', 'memorybank', 'rag_unbounded', 'recency']
>>> make_policy("lru")
Traceback (most recent call last):
...
memlib._checks.ParameterError: unknown policy 'lru'; choose one of: learned_V, generative_agents, ...
"""

from __future__ import annotations

import inspect

import numpy as np

from memlib._checks import ParameterError, check_choice, check_positive
from memlib.forgetting import forget_score
from memlib.store.baselines import (
    FIFOPolicy,
    GenerativeAgentsPolicy,
    MemoryBankPolicy,
    RecencyPolicy,
    UnboundedRAGPolicy,
)
from memlib.store.protocol import Policy


class ValuePolicy(Policy):
    """The paper's single value for forgetting and retrieval.

    Forgetting: eq. 3, ``age**0.7 / (1 + r) / (1 + beta * V)`` with age in days at
    consolidation time (``keep_top_value=True`` instead drops the lowest ``V``
    first, the keep/drop rule of the paper's evaluation).

    Retrieval: ``sim + value_weight * V_bar + mood_weight * mood`` where ``sim =
    (1 + cos(query, item)) / 2``, ``V_bar = V / sum(w)`` and mood congruence
    ``mood = 1 - |valence(query) - valence(item)| / 2`` (VADER valences), all in
    [0, 1]. Defaults: ``value_weight = 0.5``, ``mood_weight = 0.1``; query
    similarity leads, the value breaks near-ties toward durable memories.
    """

    name = "learned_V"

    def __init__(
        self, beta: float = 1.0, value_weight: float = 0.5, mood_weight: float = 0.1, keep_top_value: bool = False
    ):
        self.beta = check_positive("beta", beta, allow_zero=True)
        self.value_weight = check_positive("value_weight", value_weight, allow_zero=True)
        self.mood_weight = check_positive("mood_weight", mood_weight, allow_zero=True)
        self.keep_top_value = bool(keep_top_value)

    def forget_scores(self, store, now):
        v = store.values()
        if self.keep_top_value:
            return -v
        return forget_score(np.maximum(now - store._time, 0.0), store._retrievals, v, beta=self.beta)

    def retrieval_scores(self, store, query_vec, query_valence, now):
        mood = 1.0 - np.abs(query_valence - store._valence) / 2.0
        return store.similarity(query_vec) + self.value_weight * store.normalised_values() + self.mood_weight * mood

    def config(self):
        return {
            "beta": self.beta,
            "value_weight": self.value_weight,
            "mood_weight": self.mood_weight,
            "keep_top_value": self.keep_top_value,
        }


#: Every built-in policy by name (its ``name`` attribute), ours first.
POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (ValuePolicy, GenerativeAgentsPolicy, MemoryBankPolicy, FIFOPolicy, RecencyPolicy, UnboundedRAGPolicy)
}


def make_policy(name: str, **params) -> Policy:
    """The policy registered as ``name``, built with ``params`` (e.g. ``beta`` for ``learned_V``).

    >>> make_policy("memorybank", beta=1.0)
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: policy memorybank takes no parameter beta; it takes: none
    """
    cls = POLICIES[check_choice("policy", name, POLICIES)]
    accepted = inspect.signature(cls).parameters
    unknown = [k for k in params if k not in accepted]
    if unknown:
        raise ParameterError(
            f"policy {name} takes no parameter {', '.join(unknown)}; it takes: {', '.join(accepted) or 'none'}"
        )
    return cls(**params)
