"""The forget score (eq. 3) and budgeted forgetting.

``forget(m) = age_days**0.7 * 1 / (1 + r) * 1 / (1 + beta * V(m))``: old,
unused, low-value memories have the highest scores and are dropped first.

:func:`consolidation_drops` is the one rule for what a consolidation drops: the store's
:meth:`~memlib.store.MemoryStore.consolidate` (through :func:`memlib.store.forget.plan`)
and the defaults study's replay (:func:`memlib.studies.defaults.simulate_store`) both
call it; :func:`drop_to_budget` is its item budget alone.

>>> import numpy as np
>>> s = forget_score(age_days=[1.0, 10.0, 10.0], retrievals=[0, 0, 3], value=[0.0, 0.0, 0.0])
>>> np.round(s, 3)
array([1.   , 5.012, 1.253])
>>> drop_to_budget(s, budget=2)
array([ True, False,  True])
"""

from __future__ import annotations

from typing import NamedTuple

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
    age, r, v = _checked_eq3_inputs(age_days=age_days, retrievals=retrievals, value=value)
    return _eq3(age, 1.0 + r, 1.0 + beta * v)


def _eq3(age, usage, resistance) -> np.ndarray:
    """Eq. 3 from its terms: ``age**0.7 / usage / resistance`` (``usage = 1 + r``, ``resistance = 1 + beta V``)."""
    return age**RECENCY_EXPONENT / usage / resistance


def _checked_eq3_inputs(**arrays) -> list[np.ndarray]:
    """Return the arrays as floats, refused by name unless each is finite and >= 0."""
    out = []
    for name, a in arrays.items():
        arr = np.asarray(a, dtype=float)
        if arr.size and not (arr.min() >= 0 and np.isfinite(arr.max())):  # a NaN fails the first test
            raise ParameterError(f"{name} must be finite and >= 0")
        out.append(arr)
    return out


def eq3_scorer(time, retrievals, value, beta: float = 1.0):
    """Return ``score(positions, now)``: :func:`forget_score` of the items at ``positions``, aged at ``now``.

    For a replay that scores subsets of the same items at many consolidations: the inputs are
    checked once, and each call gives, bit for bit, ``forget_score(max(now - time[positions], 0),
    retrievals[positions], value[positions], beta)``.

    >>> score = eq3_scorer(time=[0.0, 9.0, 10.0], retrievals=[0, 0, 3], value=[0.0, 0.0, 0.0])
    >>> bool(np.array_equal(score(np.array([0, 2]), 11.0), forget_score([11.0, 1.0], [0, 3], [0.0, 0.0])))
    True
    """
    beta = check_positive("beta", beta, allow_zero=True)
    time = np.asarray(time, dtype=float)
    if time.size and not np.isfinite(time).all():
        raise ParameterError("time must be finite")
    r, v = _checked_eq3_inputs(retrievals=retrievals, value=value)
    if not time.shape == r.shape == v.shape:
        shapes = (time.shape, r.shape, v.shape)
        raise ParameterError(f"time, retrievals and value must have one entry per item, got shapes {shapes}")
    usage, resistance = 1.0 + r, 1.0 + beta * v  # the divisors of forget_score, item by item

    def score(positions, now: float) -> np.ndarray:
        return _eq3(np.maximum(now - time[positions], 0.0), usage[positions], resistance[positions])

    return score


#: The forgetting rules of a value policy: eq. 3, or the lowest normalised value first.
FORGET_RULES = ("eq3", "value")


def rule_forget_scores(rule: str, age_days, retrievals, value=None, value_bar=None, beta: float = 1.0) -> np.ndarray:
    """Forget scores under one rule of :data:`FORGET_RULES` (higher goes first).

    ``eq3``: :func:`forget_score` of ``value`` (the value on eq. 3's scale: the paper's ``V``, or a
    signed value's ``V-bar``); ``value``: ``-value_bar``, the lowest normalised value first, age
    and usage aside. The store's value policy and the defaults study's replay both score by it.

    >>> rule_forget_scores("value", None, None, value_bar=np.array([0.2, 0.9])).tolist()
    [-0.2, -0.9]
    >>> rule_forget_scores("eq3", [1.0], [0.0], value=[0.0]).tolist()
    [1.0]
    """
    if rule not in FORGET_RULES:
        raise ParameterError(f"unknown forgetting rule {rule!r}; choose {' or '.join(FORGET_RULES)}")
    if rule == "value":
        return -np.asarray(value_bar, dtype=float)
    return forget_score(age_days, retrievals, value, beta=beta)


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
    """Keep mask after dropping the highest forget scores until ``budget`` remain (:func:`consolidation_drops`).

    Ties are broken by position: among equal scores the earlier item
    (lower index, i.e. older in a time-ordered store) is dropped first.

    >>> drop_to_budget([3.0, 1.0, 3.0], budget=1)
    array([False,  True, False])
    """
    drop, _ = consolidation_drops(forget_scores, check_int("budget", budget, minimum=0))
    return ~drop


class BudgetNeed(NamedTuple):
    """What a consolidation's budgets need before any score is read (:func:`budget_need`)."""

    #: Positions of the candidates (eligible, not pinned), in time order.
    cand: np.ndarray
    #: How many items over the item budget (0 or less: none).
    excess: int
    #: Whether the tokens held exceed the token budget.
    over_tokens: bool
    #: Tokens held (None without a token budget).
    held: int | None
    #: Tokens of each item (None without a token budget).
    tokens: np.ndarray | None
    #: The token budget (None: none).
    budget_tokens: int | None = None

    @property
    def any(self) -> bool:
        """Whether anything must go."""
        return self.excess > 0 or self.over_tokens


def budget_need(eligible, budget, tokens, budget_tokens, pinned, count_pinned) -> BudgetNeed:
    """Candidates, the items over ``budget`` and the tokens held: the part of the rule that needs no score."""
    eligible = np.asarray(eligible, dtype=bool)
    n = eligible.shape[0]
    pinned = np.zeros(n, bool) if pinned is None else np.asarray(pinned, dtype=bool)
    if pinned.shape != eligible.shape:
        raise ParameterError(f"pinned must have shape ({n},), got {pinned.shape}")
    if not isinstance(count_pinned, (bool, np.bool_)):
        raise ParameterError(f"count_pinned must be True or False, got {count_pinned!r}")
    cand = np.flatnonzero(eligible & ~pinned)
    fixed = eligible & pinned
    excess = 0
    if budget is not None:
        room = check_int("budget", budget, minimum=0) - (int(fixed.sum()) if count_pinned else 0)
        excess = len(cand) - max(room, 0)
    held = tok = None
    if budget_tokens is not None:
        check_int("budget_tokens", budget_tokens, minimum=0)
        if tokens is None:
            raise ParameterError("a token budget needs the tokens of each item")
        tok = np.asarray(tokens)
        if tok.shape != eligible.shape:
            raise ParameterError(f"tokens must have shape ({n},), got {tok.shape}")
        held = int(tok[cand].sum()) + (int(tok[fixed].sum()) if count_pinned else 0)
    over_tokens = held is not None and held > budget_tokens
    return BudgetNeed(cand, excess, over_tokens, held, tok, budget_tokens)


def over_budget(eligible, budget=None, *, tokens=None, budget_tokens=None, pinned=None, count_pinned=False) -> bool:
    """Whether a consolidation must drop anything to meet its budgets (no forget score needed).

    The test :func:`consolidation_drops` makes before it reads a score, so that a caller
    can skip computing the scores when nothing has to go.

    Parameters
    ----------
    eligible, budget, tokens, budget_tokens, pinned, count_pinned
        As for :func:`consolidation_drops`.

    Returns
    -------
    bool

    >>> over_budget([True, True, False], budget=2), over_budget([True, True, True], budget=2)
    (False, True)
    """
    return budget_need(eligible, budget, tokens, budget_tokens, pinned, count_pinned).any


def consolidation_drops(
    scores, budget=None, *, tokens=None, budget_tokens=None, eligible=None, pinned=None, count_pinned=False
) -> tuple[np.ndarray, np.ndarray]:
    """Which items one consolidation drops to meet its budgets, and in which order.

    The candidates are the eligible items that are not pinned; they go in
    :func:`forget_order` (the highest forget score first; among equal scores the
    earlier, i.e. older, item first) until both budgets hold: at most ``budget``
    items, and at most ``budget_tokens`` tokens left (candidates are dropped in
    forget order until the remaining tokens fit, whatever their size). Pinned
    items are never dropped; they use up the budgets only with ``count_pinned``
    (if they alone exceed a budget, every candidate goes). Items that are not
    eligible (e.g. expired ones, which a store drops anyway) neither count nor go.

    Parameters
    ----------
    scores : array_like, shape (n,)
        Forget score of each item (higher goes first), in time order.
    budget : int, optional
        Most items to keep; None sets no item budget.
    tokens : array_like of int, shape (n,), optional
        Tokens of each item; needed with ``budget_tokens``.
    budget_tokens : int, optional
        Most tokens to keep; None sets no token budget.
    eligible : array_like of bool, shape (n,), optional
        The items the budgets apply to (default: all).
    pinned : array_like of bool, shape (n,), optional
        Items that are never dropped (default: none).
    count_pinned : bool
        Whether the eligible pinned items use up the budgets.

    Returns
    -------
    drop : ndarray of bool, shape (n,)
        The items dropped.
    order : ndarray of int
        Their positions, in the order they go.

    Examples
    --------
    >>> drop, order = consolidation_drops([1.0, 3.0, 3.0, 2.0], budget=2)
    >>> drop.tolist(), order.tolist()   # the tie at 3.0 drops the older first
    ([False, True, True, False], [1, 2])
    >>> consolidation_drops([1.0, 3.0, 2.0], budget_tokens=5, tokens=[4, 1, 2])[1].tolist()
    [1, 2]
    >>> consolidation_drops([3.0, 2.0, 1.0], budget=1, pinned=[True, False, False], count_pinned=True)[1].tolist()
    [1, 2]
    >>> consolidation_drops([1.0, float("nan"), 2.0], budget=1)
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: scores must be numbers: item 1 has a NaN forget score (1 in all)
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1:
        raise ParameterError(f"scores must be one value per item (1-d), got shape {s.shape}")
    n = s.shape[0]
    eligible = np.ones(n, bool) if eligible is None else eligible
    if np.shape(eligible) != s.shape:
        raise ParameterError(f"scores must have one value per item, got {n} for {np.size(eligible)} items")
    return select_drops(s, budget_need(eligible, budget, tokens, budget_tokens, pinned, count_pinned))


def select_drops(scores: np.ndarray, need: BudgetNeed) -> tuple[np.ndarray, np.ndarray]:
    """:func:`consolidation_drops` given what its budgets need (:func:`budget_need`): the selection by score.

    A caller that has already asked whether anything must go (:func:`memlib.store.forget.drops`)
    passes that answer instead of having it computed twice.
    """
    s = scores
    n = s.shape[0]
    cand, excess, over_tokens, held, tok, budget_tokens = need
    every = len(cand) == n and (not n or cand[-1] == n - 1)  # every item a candidate, in order: the scores as they are
    sc = s if every else s[cand]
    nan = np.isnan(sc)
    if nan.any():  # a NaN sorts nowhere: the item would never be forgotten
        raise ParameterError(
            f"scores must be numbers: item {int(cand[np.argmax(nan)])} has a NaN forget score ({nan.sum()} in all)"
        )
    drop = np.zeros(n, bool)
    if excess <= 0 and not over_tokens:
        return drop, cand[:0]
    order = forget_order(sc) if every else cand[forget_order(sc)]
    n_drop = max(excess, 0)
    if over_tokens:  # drop in forget order until the remaining tokens fit
        remaining = held - np.concatenate([[0], np.cumsum(tok[order])])
        fits = np.flatnonzero(remaining <= budget_tokens)
        n_drop = max(n_drop, int(fits[0]) if len(fits) else len(order))
    drop[order[:n_drop]] = True
    return drop, order[:n_drop]
