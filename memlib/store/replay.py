"""Every replay of a history into a bounded store: item by item, or from one view of all its turns.

An agent adds each turn and consolidates when a session ends; :func:`replay_history` does
exactly that with a store (the public API, turn by turn). A study replays thousands of
histories under many policies and budgets, so it replays them faster, with the same
decisions: :func:`held_after` starts from a :class:`~memlib.store.view.StoreView` that
holds *every* turn of a history (a store that forgot nothing, ``store.view``, or a history
annotated in a batch, :meth:`StoreView.of_history <memlib.store.view.StoreView.of_history>`)
and, at each session end, asks the policy which of the held turns go, by the rule a
store's consolidation applies (:func:`memlib.store.forget.drops`), on a view of just those
turns (:meth:`~memlib.store.view.StoreView.take`). Where an item budget alone decides (nothing
expires or is pinned), it selects the same way (:func:`memlib.store.forget.budget_drops`) on
the scores of the policy's :meth:`~memlib.store.protocol.Policy.forget_scorer`, which may read
a batch history's arrays once instead of taking a view at every session end.

Why that is the same store: a store annotates each turn from the turns before it, never
from what it still holds (with merging off), and a session's goal relevance is fixed at its
end, before anything is dropped; so a turn's columns in a bounded store are the ones it has
in a store that keeps everything, and what a budget changes is only which turns are held.

Histories nested in one another (RealMem's: a user's questions, each asked after the
sessions before its own) are replayed from one view with one cut per question, each with
its own budget. A policy whose order never changes (:attr:`Policy.static_order
<memlib.store.protocol.Policy.static_order>`: the lowest value first, the oldest first)
keeps, after any run of consolidations to a budget ``b``, the ``b`` turns it ranks best of
all it has seen, so one sort serves every cut.

>>> import numpy as np
>>> from memlib.store import MemoryStore, make_policy
>>> store = MemoryStore(merge_threshold=None)
>>> turns = [
...     {"text": f"turn {i}", "time": float(i), "session": i // 2, "embedding": np.eye(384)[i]}
...     for i in range(5)
... ]
>>> replay_history(store, turns, budget=5), len(store)   # nothing is forgotten
(5, 5)
>>> fifo = make_policy("memgpt_fifo")
>>> [h.tolist() for h in held_after(store.view, fifo, [t["session"] for t in turns], [(4, 2), (5, 3)]).held]
[[2, 3], [2, 3, 4]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlib._checks import ParameterError, check_int
from memlib.forgetting import forget_order
from memlib.references import Need, reference_table
from memlib.store.forget import budget_drops, drops, one_score_per_item


def replay_history(store, turns, budget: int | None = None, now_key: str = "time") -> int:
    """Add ``turns`` to ``store`` in order and consolidate to ``budget`` at each session end.

    Every turn is checked (and embedded, where it has no embedding) before the store
    changes, as :meth:`~memlib.store.MemoryStore.add_many` checks a batch: a bad turn
    anywhere leaves the store as it was.

    Parameters
    ----------
    store : MemoryStore
    turns : sequence of dict
        The keyword arguments of :meth:`~memlib.store.MemoryStore.add` for each turn, ``text``
        and ``session`` included; a session ends where the next turn's ``session`` differs,
        and after the last turn.
    budget : int, optional
        Items to keep at each session end; None: nothing is forgotten (no consolidation).
    now_key : str
        The key whose value is the consolidation's ``now`` (the session's last turn's time);
        a turn without it consolidates at the store's current time.

    Returns
    -------
    int
        The largest number of items the store held at a session end, before it consolidated.
    """
    turns = list(turns)
    if budget is not None:
        budget = check_int("budget", budget, minimum=0)
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or "text" not in turn or "session" not in turn:
            keys = sorted(turn) if isinstance(turn, dict) else type(turn).__name__
            raise ParameterError(f"turn {i} of the history needs 'text' and 'session', got {keys}")
    checked = store._checked_turns(turns)[0]
    peak = 0
    for i, (turn, kw) in enumerate(zip(checked, turns)):
        store._add(turn)
        if i == len(turns) - 1 or turns[i + 1]["session"] != kw["session"]:
            peak = max(peak, len(store))
            if budget is not None:
                store.consolidate(budget, now=kw.get(now_key))
    return peak


@dataclass(frozen=True)
class Replayed:
    """What :func:`held_after` returns.

    Attributes
    ----------
    held : list of ndarray of int
        Per cut, the positions of the view the bounded store holds after the cut's last session.
    peak : int
        The largest number of turns held at any session end of any cut, before it consolidated.
    """

    held: list
    peak: int


def session_ends(sessions) -> np.ndarray:
    """Return the number of turns up to the end of each session (a session is a run of equal labels).

    >>> session_ends(["a", "a", "b", "c", "c"]).tolist()
    [2, 3, 5]
    """
    s = np.asarray(sessions)
    return np.flatnonzero(np.r_[s[1:] != s[:-1], True]) + 1 if len(s) else np.zeros(0, np.int64)


def held_after(view, policy, sessions, cuts, references=None) -> Replayed:
    """Replay prefixes of one history in a bounded store, from a view that holds all its turns.

    Parameters
    ----------
    view : StoreView
        Every turn of the history, in time order (nothing forgotten).
    policy : Policy
        The store's forgetting rules.
    sessions : sequence, shape (len(view),)
        The session of each turn; a session is a run of equal labels.
    cuts : sequence of (int, int)
        ``(n_turns, budget)``: replay the first ``n_turns`` turns (a session end, or 0),
        consolidating to ``budget`` items at each session end.
    references : ReferenceTable, optional
        For a policy that reads its user's references (:attr:`Policy.reads_need
        <memlib.store.protocol.Policy.reads_need>`): the history's reference events
        (:func:`memlib.references.reference_table`, or the :meth:`~memlib.references.ReferenceTable.prefix`
        of a longer history's), counted once for every cut and every replay that reads them;
        counted here when not given. Each consolidation sums them over the turns it holds, which
        is what a store's consolidation counts (:func:`memlib.store.forget.references_since`).

    Returns
    -------
    Replayed
        Per cut, the positions held, as a store that replayed those turns with
        :func:`replay_history` holds them.
    """
    cuts = [(check_int("n_turns", n, minimum=0), check_int("budget", b, minimum=0)) for n, b in cuts]
    if len(sessions) != len(view):
        raise ParameterError(f"sessions must name the session of each of the {len(view)} turns, got {len(sessions)}")
    ends = session_ends(sessions)
    known = set(ends.tolist()) | {0}
    for n, _ in cuts:
        if n not in known:
            raise ParameterError(f"a cut of the history must end a session, got {n} turns")
    if _orders_once(view, policy):
        return _held_by_one_order(view, policy, ends, cuts)
    time, ids = view.time, view.ids
    never_expires = bool(np.isinf(view.expires).all())
    by_count = never_expires and policy.bounded and not view.pinned.any()  # an item budget alone decides
    if policy.reads_need and references is None:
        references = reference_table(view.embeddings, ends, view.user)
    if policy.reads_need and references.counts.shape != (len(ends), len(view)):
        raise ParameterError(
            f"references must count the {len(ends)} sessions and {len(view)} turns of the history, "
            f"got {references.counts.shape}"
        )
    score = policy.forget_scorer(view)
    held_sets, peak = [], 0
    for n, budget in cuts:
        held, start, need = np.zeros(0, np.int64), 0, Need()
        for s, end in enumerate(ends[ends <= n]):
            held = np.concatenate([held, np.arange(start, end)])
            now = float(time[end - 1])
            if policy.reads_need:  # this session's user turns against the turns held before it, as the store counts
                need = need.counted(*references.session_counts(s, held), int(ids[end - 1]) + 1)
            start = int(end)
            peak = max(peak, len(held))
            if never_expires and (len(held) <= budget or not policy.bounded):
                continue  # nothing expires and no budget is exceeded: nothing goes (drops would find nothing)
            if by_count:
                gone = budget_drops(one_score_per_item(score(held, now, need), len(held)), budget)
            else:
                gone = drops(view.take(held, now, need=need), policy, now, budget)[2]
            held = held[~gone]
        held_sets.append(held)
    return Replayed(held_sets, peak)


def _orders_once(view, policy) -> bool:
    """Whether one order serves every consolidation: a static order, no expiry, no pin, a bounded policy."""
    return bool(policy.static_order and policy.bounded and np.isinf(view.expires).all() and not view.pinned.any())


def _held_by_one_order(view, policy, ends, cuts) -> Replayed:
    """:func:`held_after` for a policy of :attr:`~memlib.store.protocol.Policy.static_order`: one sort."""
    n_all = len(view)
    go = forget_order(policy.forget_scores(view, float(view.time[-1]) if n_all else 0.0))  # first to go first
    held_sets, peak = [], 0
    for n, budget in cuts:
        mine = go[go < n]
        held_sets.append(np.sort(mine[max(len(mine) - budget, 0) :]))
        e = ends[ends <= n]
        if len(e):  # before each consolidation: what the last one kept, and the session's turns
            before = np.minimum(np.r_[0, e[:-1]], budget) + np.diff(np.r_[0, e])
            peak = max(peak, int(before.max()))
    return Replayed(held_sets, peak)


__all__ = ["Replayed", "held_after", "replay_history", "session_ends"]
