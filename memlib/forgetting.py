"""The forget score (eq. 3) and budgeted forgetting.

``forget(m) = age_days**0.7 * 1 / (1 + r) * 1 / (1 + beta * V(m))``: old,
unused, low-value memories have the highest scores and are dropped first.

>>> import numpy as np
>>> s = forget_score(age_days=[1.0, 10.0, 10.0], retrievals=[0, 0, 3], value=[0.0, 0.0, 0.0])
>>> np.round(s, 3)
array([1.   , 5.012, 1.253])
>>> drop_to_budget(s, budget=2)
array([ True, False,  True])
"""

from __future__ import annotations

import numpy as np

from memlib._checks import ParameterError, check_int, check_positive

#: Exponent of the recency term in eq. 3.
RECENCY_EXPONENT = 0.7


def forget_score(age_days, retrievals, value, beta: float = 1.0) -> np.ndarray:
    """Forget score of eq. 3 (higher means forget sooner).

    Parameters
    ----------
    age_days : array_like
        Age of each memory in days (>= 0).
    retrievals : array_like
        How often each memory has been retrieved (>= 0).
    value : array_like
        Memory value ``V(m)`` (>= 0).
    beta : float
        Strength of the value resistance (>= 0); 0 ignores value.
    """
    beta = check_positive("beta", beta, allow_zero=True)
    age = np.asarray(age_days, dtype=float)
    r = np.asarray(retrievals, dtype=float)
    v = np.asarray(value, dtype=float)
    for name, arr in (("age_days", age), ("retrievals", r), ("value", v)):
        if np.any(~np.isfinite(arr)) or np.any(arr < 0):
            raise ParameterError(f"{name} must be finite and >= 0")
    return age**RECENCY_EXPONENT / (1.0 + r) / (1.0 + beta * v)


def forget_order(forget_scores) -> np.ndarray:
    """Return the indices in the order memories are forgotten: the highest forget score first.

    Among equal scores the earlier (lower index, i.e. older in a time-ordered
    store) goes first. The store's consolidation, its explanations and the
    defaults study's replay all forget in this order.

    >>> forget_order([1.0, 3.0, 3.0]).tolist()
    [1, 2, 0]
    """
    return np.argsort(-np.asarray(forget_scores, dtype=float), kind="stable")


def drop_to_budget(forget_scores, budget: int) -> np.ndarray:
    """Keep mask after dropping the highest forget scores until ``budget`` remain.

    Ties are broken by position: among equal scores the earlier item
    (lower index, i.e. older in a time-ordered store) is dropped first.

    >>> drop_to_budget([3.0, 1.0, 3.0], budget=1)
    array([False,  True, False])
    """
    budget = check_int("budget", budget, minimum=0)
    s = np.asarray(forget_scores, dtype=float)
    keep = np.ones(s.shape[0], dtype=bool)
    n_drop = s.shape[0] - budget
    if n_drop > 0:
        keep[forget_order(s)[:n_drop]] = False
    return keep
