"""Forgetting: what a consolidation drops and why, and the explanation of one item.

:func:`drops` is the one rule of what a consolidation drops: the expired items go, then,
while a budget is exceeded, the unpinned item with the highest forget score under the
store's policy (ties: the older first), as :func:`memlib.forgetting.consolidation_drops`
selects them; a store's consolidation and every replay (:mod:`memlib.store.replay`)
decide by it (a replay under an item budget alone, by :func:`budget_drops`: the same
selection, asked less). :func:`plan` decides a store's consolidation without changing anything;
:func:`change` is the plan as one
:class:`~memlib.store.backend.Change`; :func:`explain_row` and :func:`explain` say why
an item stays or goes (its forget score and the contributions to its value). Scores
and values are read with the current session's goal relevance as the consolidation
fixes it (:func:`goal_fixed`).

:func:`normalise` and :func:`tiers_of` give a value's ``V-bar`` and encoding tier.

>>> import numpy as np
>>> from memlib.store import MemoryStore
>>> st = MemoryStore()
>>> for day, text in enumerate(["I am allergic to peanuts!", "ok", "My sister is Ana."]):
...     _ = st.add(text, time=float(day), embedding=np.eye(384)[day])
>>> p = plan(st, st._backend, budget=2, budget_tokens=None, now=3.0, count_pinned=False)
>>> p["dropped_ids"], p["order"]
([1], [(1, 'budget')])
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError, check_int
from memlib.cues import join_store_cues
from memlib.forgetting import BudgetNeed, budget_need, forget_order, select_drops
from memlib.store.annotate import GOAL, goal_plan
from memlib.store.backend import Change
from memlib.value import encoding_tier

_GOAL = FACTORS.index(GOAL)


def normalise(store, values: np.ndarray) -> np.ndarray:
    """``V-bar`` of ``values`` under the store's value (:meth:`memlib.value.Value.normalise`)."""
    return store.value.normalise(values)


def tiers_of(store, values: np.ndarray) -> np.ndarray:
    """Return the encoding tier of each value (from its normalised value)."""
    return encoding_tier(np.clip(normalise(store, values), 0, 1))


@contextlib.contextmanager
def goal_fixed(cols, goal_fix):
    """Give the factors the current session's final goal relevance, for the block only."""
    if goal_fix is None:
        yield
        return
    pos, values = goal_fix
    factors = cols.view("factors")
    old = factors[pos, _GOAL].copy()
    factors[pos, _GOAL] = values
    try:
        yield
    finally:
        factors[pos, _GOAL] = old


def references_since(view, boundary: int):
    """Return the stream's need with the session that ends now counted, and ended at ``boundary`` (the next id).

    The user turns added since the last consolidation (their ids at or after its boundary) are
    held against the turns held before them (:func:`memlib.references.count_references`), each
    turn's session read from ``view.need``'s boundaries. A store's consolidation and its replays
    (:func:`memlib.store.replay.held_after`) count by this function.
    """
    from memlib.references import Need, count_references

    need = view.need or Need()
    ids = view.ids
    period = need.period(ids)
    new = period == len(need.boundaries)
    ask, old = new & view.user, ~new
    if ask.any() and old.any():
        E = view.embeddings
        return need.counted(*count_references(E[ask], period[ask], E[old], period[old]), boundary)
    return need.counted(0.0, 0.0, boundary)


def drops(view, policy, now: float, budget=None, budget_tokens=None, count_pinned: bool = False):
    """Decide what one consolidation of the items of ``view`` at ``now`` drops: the one rule of forgetting.

    The expired items go; then, while a budget is exceeded, the unpinned item with the
    highest forget score under ``policy`` (ties: the older first), as
    :func:`memlib.forgetting.consolidation_drops` selects them. The policy scores the items
    only when something must go. A store's consolidation (:func:`plan`) and every replay
    (:mod:`memlib.store.replay`) decide by this function, or, under an item budget alone, by
    :func:`budget_drops`, the same selection.

    Parameters
    ----------
    view : StoreView
        The items held (a store's view, or a subset of one taken by a replay).
    policy : Policy
    now : float
        Days; ages and expiry are measured at ``now``.
    budget, budget_tokens : int, optional
        Most items and most tokens to keep (an unbounded policy keeps every unexpired item).
    count_pinned : bool
        Whether pinned items use up the budgets.

    Returns
    -------
    scores : ndarray
        The forget scores (zeros where none was needed).
    expired, drop : ndarray of bool
        The expired items, and every item that goes (the expired among them).
    order : ndarray of int
        The positions dropped for a budget, in the order they go.
    """
    n = len(view)
    expired = view.expires <= now if n else np.zeros(0, bool)
    budget_tokens = budget_tokens if policy.bounded else None  # an unbounded policy has no budget
    wanted = budget_need(  # the selection among the unexpired items
        ~expired,
        budget if policy.bounded else None,
        view.tokens if budget_tokens is not None else None,
        budget_tokens,
        view.pinned.astype(bool),
        count_pinned,
    )
    if not n or not (wanted.any or expired.any()):
        return np.zeros(n), expired, expired.copy(), wanted.cand[:0]
    scores = _scores(view, policy, now)
    dropped, order = select_drops(scores, wanted)
    return scores, expired, expired | dropped, order


def budget_drops(scores, budget: int) -> np.ndarray:
    """:func:`drops` under an item budget alone, given the forget scores of the items held: the items that go.

    The same selection (:func:`memlib.forgetting.select_drops`), without asking the
    expiry, pins and tokens a replay of a batch history knows to be absent
    (:func:`memlib.store.replay.held_after` calls it at every consolidation, with the scores of
    its policy's :meth:`~memlib.store.protocol.Policy.forget_scorer`).
    """
    budget = check_int("budget", budget, minimum=0)
    n = len(scores)
    drop = np.zeros(n, bool)
    if n <= budget:
        return drop
    if np.isnan(scores).any():  # refused as the selection refuses it, with its message
        return select_drops(scores, BudgetNeed(np.arange(n), n - budget, False, None, None))[0]
    drop[forget_order(scores)[: n - budget]] = True  # every item a candidate: select_drops' order, without its checks
    return drop


def _scores(view, policy, now: float) -> np.ndarray:
    """Return the policy's forget score of each item of ``view``, refused unless there is one per item."""
    return one_score_per_item(policy.forget_scores(view, now), len(view))


def one_score_per_item(scores, n: int) -> np.ndarray:
    """Return a policy's forget ``scores`` as floats, refused unless there is one per item of the ``n`` held."""
    scores = np.asarray(scores, float)
    if scores.shape != (n,):
        raise ParameterError(f"the policy must give one forget score per item, got shape {scores.shape} for {n} items")
    return scores


def plan(store, data, budget, budget_tokens, now: float, count_pinned: bool) -> dict:
    """Plan what a consolidation of ``store`` (its backend ``data``) at ``now`` drops; nothing changes.

    Returns a dict: ``view`` (what the policy scored), ``need, goal_fix, now, scores, values``,
    ``expired, drop`` (bool per item), ``order`` (``(position, reason)`` in the order they go) and ``dropped_ids``.
    """
    cols = data.cols
    goal_fix = goal_plan(data)
    with goal_fixed(cols, goal_fix):
        view = store.view
        view.need = references_since(view, data.scalars["next_id"])  # the session ends now
        scores, expired, drop, order = drops(view, store.policy, now, budget, budget_tokens, count_pinned)
        values = view.values()
    return {
        "view": view,
        "need": view.need,
        "goal_fix": goal_fix,
        "now": now,
        "scores": scores,
        "values": values,
        "expired": expired,
        "drop": drop,
        "order": [(int(i), "expired") for i in np.flatnonzero(expired)] + [(int(i), "budget") for i in order],
        "dropped_ids": cols.view("ids")[drop].tolist(),
    }


def change(store, cols, p: dict) -> Change:
    """Return the consolidation planned in ``p`` as one change: the goal fix, the log, the drop and the time."""
    c = Change(scalars={"now": p["now"], "need": p["need"]}, drop=p["drop"])
    if p["goal_fix"] is not None:
        c.rows.append((p["goal_fix"][0], {GOAL: p["goal_fix"][1]}))
    idx = np.flatnonzero(p["drop"])
    values = p["values"][idx]
    records = zip(
        cols.view("ids")[idx].tolist(),
        [cols.strings["texts"][i] for i in idx],
        cols.view("time")[idx].tolist(),
        values.tolist(),
        tiers_of(store, values).tolist(),
        np.where(p["expired"][idx], "expired", "budget").tolist(),
        [p["now"]] * len(idx),
    )
    c.log = ("forgotten", list(records))
    return c


def explain_row(store, cols, i: int, p: dict, reason=None) -> dict:
    """Why the item at position ``i`` stays or goes under the plan ``p`` (a row of a dry run)."""
    f = cols.view("factors")[i].copy()
    if p["goal_fix"] is not None:
        pos, values = p["goal_fix"]
        hit = np.flatnonzero(pos == i)
        if len(hit):
            f[_GOAL] = values[hit[0]]
    cues = join_store_cues(cols.view("static_cues")[i], f)  # as MemoryStore.cues
    item = SimpleNamespace(factors=f[None], cues=cues[None])  # what the store's value reads, for item i
    names, contrib = store.value.feature_names, store.value.contributions(item)[0]
    expires = cols.view("expires")[i]
    row = {"id": int(cols.view("ids")[i]), "text": cols.strings["texts"][i]}
    if reason is not None:
        row["reason"] = reason
    row.update(
        forget_score=float(p["scores"][i]),
        value=float(p["values"][i]),
        tier=str(tiers_of(store, p["values"][i : i + 1])[0]),
        pinned=bool(cols.view("pinned")[i]),
        expires=None if np.isinf(expires) else float(expires),
    )
    row.update({f"contrib_{name}": float(c) for name, c in zip(names, contrib)})
    row.update(store.policy.explain_terms(p["view"], i))  # its terms beyond the value (the adaptive store's need)
    return row


def explain(store, data, i: int, now: float) -> dict:
    """:func:`explain_row` of the item at position ``i`` at ``now``, with ``expired`` and its ``rank`` to go."""
    cols = data.cols
    goal_fix = goal_plan(data)
    with goal_fixed(cols, goal_fix):
        view = store.view
        view.need = references_since(view, data.scalars["next_id"])  # as a consolidation now would count
        scores = np.asarray(store.policy.forget_scores(view, now), float)
        values = view.values()
    row = explain_row(store, cols, i, {"goal_fix": goal_fix, "scores": scores, "values": values, "view": view})
    expired = cols.view("expires") <= now
    cand = ~expired & ~cols.view("pinned").astype(bool)
    row["expired"] = bool(expired[i])
    if cand[i]:
        c = np.flatnonzero(cand)
        order = c[forget_order(scores[c])]
        row["rank"] = int(np.flatnonzero(order == i)[0]) + 1
    else:
        row["rank"] = None
    return row
