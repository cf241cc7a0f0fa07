"""Retention scoring rules (Table 3): how each rule scores the turns of a haystack.

These are the keep/drop rules of the paper's evaluation, named "policies" in its
tables (the forgetting policies of a live store are :data:`memlib.store.POLICIES`).
:data:`SCORING_RULES` names them. Every rule maps a :class:`~memlib.cases.CaseSet`
to a (G, N) score array; higher scores are kept first. ``learned_V`` and ``uniform_V``
are the paper's value (:class:`~memlib.value.LinearValue`) with learned or unit
weights; ``<factor>_only`` ranks by one factor;
``recency_only`` by turn time; ``random`` by a seeded uniform draw.

A single factor can be coarse (reliability takes a handful of values), and the
retention metric never lets a tie favour gold. So a single-factor policy says
how *it* breaks ties: at random (seeded), by adding a jitter far below the
smallest gap between distinct factor values (``1e-9``, in float64). Without
it a coarse factor would be scored as if it always lost its ties.

>>> import numpy as np
>>> from memlib.cases import CaseSet
>>> cs = CaseSet.from_cases([np.eye(7)[[5, 0]]], [np.array([0.0, 1.0])], gold=[[0]])
>>> policy_scores("reliability_only", cs).round(6).tolist()
[[1.0, 0.0]]
>>> policy_scores("recency_only", cs).tolist()
[[0.0, 1.0]]
"""

from __future__ import annotations

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError, check_choice
from memlib.cases import CaseSet
from memlib.value import LinearValue, check_weights

#: Short policy name of each factor's single-factor policy, in factor order.
SINGLE_FACTOR = {
    "emotion_only": "emotional_intensity",
    "goal_only": "goal_relevance",
    "value_only": "value_alignment",
    "self_only": "self_relevance",
    "task_only": "task_utility",
    "reliability_only": "reliability",
    "usage_only": "usage_history",
}
#: The names of Table 3's scoring rules (the paper's tables call them policies).
SCORING_RULES = ("learned_V", "uniform_V", *SINGLE_FACTOR, "recency_only", "random")
#: Policies whose scores do not read the goal anchor, so they are the same in both regimes.
REGIME_FREE = ("recency_only", "random")


#: Size of the random tie-breaking jitter of single-factor policies.
TIE_JITTER = 1e-9


def policy_scores(name: str, cases: CaseSet, weights=None, seed: int = 0) -> np.ndarray:
    """Scores of policy ``name`` for every haystack turn, shape (G, N).

    Parameters
    ----------
    name : str
        One of :data:`SCORING_RULES`.
    cases : CaseSet
    weights : array_like, shape (7,), optional
        Required for ``learned_V``.
    seed : int
        Seed of the ``random`` policy and of single-factor tie-breaking.
    """
    check_choice("policy", name, SCORING_RULES)
    if name == "learned_V":
        if weights is None:
            raise ParameterError("policy learned_V needs weights")
        w = check_weights(weights)
    elif name == "uniform_V":
        w = np.ones(len(FACTORS))
    elif name in SINGLE_FACTOR:
        f = cases.factors[..., FACTORS.index(SINGLE_FACTOR[name])].astype(np.float64)
        return f + TIE_JITTER * haystack_draws(cases, seed)
    elif name == "recency_only":
        return cases.time.astype(np.float64, copy=True)
    else:  # random
        return haystack_draws(cases, seed)
    return LinearValue(w.astype(np.float32)).score(cases)


def haystack_draws(cases: CaseSet, seed: int = 0) -> np.ndarray:
    """Return uniform draws in [0, 1), shape (G, N), each haystack's from its own generator.

    A haystack's generator is seeded by ``seed`` and its content key (the smallest
    :attr:`~memlib.cases.CaseSet.keys` of its cases).

    So a haystack's draws do not depend on where it sits in the case set, nor on any id: the random
    policy and the tie-breaking of single factors stay the same when the file is reordered.

    >>> cs = CaseSet.from_cases([np.zeros((2, 7)), np.zeros((3, 7))], [np.arange(2.0), np.arange(3.0)],
    ...                         gold=[[0], [0]], keys=["a", "b"])
    >>> swapped = CaseSet.from_cases([np.zeros((3, 7)), np.zeros((2, 7))], [np.arange(3.0), np.arange(2.0)],
    ...                              gold=[[0], [0]], keys=["b", "a"])
    >>> bool(np.array_equal(haystack_draws(cs)[0, :2], haystack_draws(swapped)[1, :2]))
    True
    """
    import hashlib

    G, N = cases.time.shape
    keys = cases.haystack_keys()
    out = np.zeros((G, N))
    for h in range(G):
        digest = hashlib.sha256((keys[h] or str(h)).encode("utf-8", "surrogatepass")).digest()
        out[h] = np.random.default_rng([int(seed), int.from_bytes(digest[:8], "little")]).random(N)
    return out
