"""Online annotation: the seven factors of a turn as it arrives, from what the store has seen so far.

The store annotates causally, with the definitions of :mod:`memlib.factors` in the
blind regime: emotional intensity and valence (VADER, :func:`measure`), reliability
(provenance, with cues for the ``extended`` factor set), the task utility a judge gives,
and, through the online annotator that :func:`memlib.factors.annotate` runs too
(:class:`memlib.online.OnlineState`), self relevance (the cosine to the same speaker's
earlier user turns, or for an assistant turn to all user turns), value alignment (to the
store's value profile) and goal relevance (the cosine to the session's anchor: the
centroid of its user turns, or of all its turns before the first user turn). Goal
relevance is provisional until the session ends; :func:`goal_plan` gives the final values
then. The annotator's state is the store's session scalars and running sums
(:func:`online_state`), saved with the store as they always were.

:func:`annotate_turn` computes all of that for one checked turn, and the running sums
and session scalars the turn moves, without changing anything; :func:`turn_change` makes
it one change (:class:`memlib.store.backend.Change`): a new item, or the reinforcement of
the item the turn repeats (:func:`reinforced`, as a retrieval reinforces an item).

>>> import numpy as np
>>> from memlib import FACTORS
>>> from memlib.store.backend import MemoryBackend
>>> from memlib.store.checks import check_turn
>>> turn = check_turn({"text": "I love my sister Ana!", "time": 0.0})
>>> turn.embedding = np.eye(384)[0]   # (the store embeds it: memlib.store.embedder)
>>> measure(turn, "paper")
>>> a = annotate_turn(MemoryBackend(), turn, 0.0, value_profile=None, merge_threshold=0.95)
>>> dict(zip(FACTORS, a.row["factors"].round(2).tolist()))["goal_relevance"], a.merge, a.scalars["next_id"]
(1.0, None, 1)
"""

from __future__ import annotations

import functools
import itertools
import operator
from dataclasses import dataclass

import numpy as np

from memlib._checks import ParameterError
from memlib._text import bounded
from memlib.cues import first_in_session, item_cues
from memlib.factors import emotion_and_valence, reliability
from memlib.online import OnlineState, SessionGoal
from memlib.store.backend import Change
from memlib.store.checks import Turn
from memlib.store.columns import STATE, count_tokens, matvec

GOAL = "goal_relevance"


def valence(texts) -> np.ndarray:
    """VADER compound valence in [-1, 1] of each text."""
    return emotion_and_valence(texts)[1]


def _valence_cached(text: str) -> float:
    """VADER's valence of a text, from a cache keyed by the bounded prefix VADER reads (not the whole text)."""
    return _valence_of_prefix(bounded(text))


@functools.lru_cache(maxsize=4096)
def _valence_of_prefix(text: str) -> float:
    return float(valence([text])[0])


def measure(turn: Turn, factor_set: str) -> None:
    """Fill in the turn's emotion (unless given), valence (unless a batch gave it) and reliability."""
    if turn.emotion is None:
        emo, val = emotion_and_valence([turn.text])
        turn.emotion, turn.valence = float(emo[0]), float(val[0])
    elif turn.valence is None:
        turn.valence = _valence_cached(turn.text)
    turn.reliability = float(reliability([turn.role], [turn.text], cues=factor_set == "extended")[0])


def measure_batch(turns: list[Turn], factor_set: str) -> None:
    """:func:`measure` for all ``turns``, with the emotion (where not given) and valence of all in one pass."""
    emotion, text_valence = emotion_and_valence([t.text for t in turns], workers=1)  # no fork in an agent
    for i, turn in enumerate(turns):
        if turn.emotion is None:
            turn.emotion = float(emotion[i])
        turn.valence = float(text_valence[i])
        measure(turn, factor_set)  # (the reliability: the emotion and valence are there)


@dataclass
class Annotation:
    """What one turn is and changes, computed by :func:`annotate_turn` (nothing is changed yet).

    Attributes
    ----------
    row : dict
        The new item's columns (all but ``expires`` and ``pinned``).
    goal_fix : tuple or None
        ``(positions, values)``: the final goal relevance of the session the turn ends.
    scalars, sums : dict
        The session scalars and running sums after the turn (``sums["speakers"]``: the one it moves).
    merge : tuple or None
        ``(id, cosine)`` of the stored item the turn repeats.
    """

    row: dict
    goal_fix: tuple | None
    scalars: dict
    sums: dict
    merge: tuple | None


def online_state(data) -> OnlineState:
    """Return the online annotator's state (:class:`memlib.online.OnlineState`) that the store ``data`` holds.

    The store keeps (and saves) it as its session scalars ``current_session`` and
    ``session_has_user`` and its running sums ``user``, ``speakers``, ``session`` (the
    current session's user turns) and ``session_all``.
    """
    scalars, sums = data.scalars, data.sums
    return OnlineState(
        sums["user"],
        sums["speakers"],
        scalars["current_session"],
        sums["session"],
        sums["session_all"],
        scalars["session_has_user"],
    )


def annotate_turn(data, turn: Turn, t: float, value_profile, merge_threshold) -> Annotation:
    """Annotate the checked, measured ``turn`` (unit embedding) at time ``t`` against the store ``data``.

    ``data`` is the store's backend (:class:`memlib.store.backend.MemoryBackend`):
    its ``cols``, ``scalars`` and ``sums``. The factor row is the online annotator's
    (:meth:`memlib.online.OnlineState.step`, from :func:`online_state`), its goal
    relevance provisional until the session ends.
    """
    e = turn.embedding
    step = online_state(data).step(
        e[None],
        [turn.role],
        [turn.speaker],
        [turn.session],
        value_profile=value_profile,
        emotional_intensity=[turn.emotion],
        reliability=[turn.reliability],
        task_utility=[turn.task_utility],
    )
    state, next_id = step.state, data.scalars["next_id"]
    first = first_in_session([turn.session], previous=data.scalars["current_session"])  # a new label opens a session
    new_sums = {"user": state.user, "session": state.session_user, "session_all": state.session_all, "speakers": {}}
    if turn.role == "user":  # (only the speaker that moves)
        new_sums["speakers"][turn.speaker] = state.speakers[turn.speaker]
    return Annotation(
        row={
            "ids": next_id,
            "time": t,
            "valence": turn.valence,
            "retrievals": 0.0,
            "last_access": t,
            "tokens": count_tokens(turn.text),
            "embeddings": e.astype(np.float32),
            "factors": step.factors[0],
            "first_in_session": bool(first[0]),
            "static_cues": item_cues([turn.text], [turn.role], first)[0],
        },
        goal_fix=None if step.goal_fix is None else session_goal(data, step.goal_fix),
        scalars={
            "current_session": state.session,
            "session_has_user": state.session_has_user,
            "next_id": next_id + 1,
            "now": t,
        },
        sums=new_sums,
        merge=near_duplicate(data.cols, e, t, merge_threshold),
    )


def turn_change(store, data, turn: Turn, t: float, expiry: float) -> tuple[Change, int]:
    """Return the one change storing ``turn`` at ``t`` makes, and the id :meth:`~memlib.store.MemoryStore.add` returns.

    A new item; or, for a turn that repeats a stored item, that item reinforced as a
    retrieval would reinforce it, pinned if the turn is, expiring at the later expiry,
    and the merge logged. Either way the session's goal relevance is fixed if the turn
    starts a new session, and the clock, the session and the running sums move on.
    """
    a = annotate_turn(data, turn, t, store.value_profile, store.merge_threshold)
    change = Change(scalars=a.scalars, sums=a.sums, turn=True)
    if a.goal_fix is not None:
        change.rows.append((a.goal_fix[0], {GOAL: a.goal_fix[1]}))
    if a.merge is None:
        row = {**a.row, "expires": expiry, "pinned": turn.pinned}
        change.append = (row, (turn.text, turn.role, turn.speaker, turn.session))
        return change, a.row["ids"]
    item_id, cosine = a.merge
    cols = data.cols
    i = np.array([cols.position(item_id)])
    values = reinforced(store, cols, i, t)
    if turn.pinned:
        values.update(pinned=[True], expires=[np.inf])
    elif not cols.view("pinned")[i[0]]:
        values["expires"] = [max(cols.view("expires")[i[0]], expiry)]
    change.rows.append((i, values))
    change.log = ("merges", [{"id": item_id, "turn": a.row["ids"], "text": turn.text, "time": t, "cosine": cosine}])
    return change, item_id


def reinforced(store, cols, idx: np.ndarray, now: float) -> dict:
    """Return the columns of the items at ``idx`` after a use at ``now`` (a retrieval, or a turn merged into them).

    The usage count and the usage-history factor ``r / (1 + r)`` move on, the last
    access becomes ``now``, and the store's policy sets its own per-item state
    (:meth:`~memlib.store.protocol.Policy.on_retrieve`).
    """
    policy = store.policy
    r = cols.view("retrievals")[idx] + 1
    values = {"retrievals": r, "last_access": np.full(len(idx), now), "usage_history": r / (1.0 + r)}
    for name, v in (policy.on_retrieve(store.view, idx, now) or {}).items():
        if name not in policy.item_state:
            raise ParameterError(f"policy {policy.name}: on_retrieve set {name!r}, which is not in its item_state")
        values[STATE + name] = np.broadcast_to(np.asarray(v, dtype=np.float64), (len(idx),))
    return values


def near_duplicate(cols, e: np.ndarray, t: float, threshold: float | None):
    """``(id, cosine)`` of the stored item unexpired at ``t`` that the turn ``e`` repeats, or None."""
    if threshold is None or not cols.n:
        return None
    cos = matvec(cols.view("embeddings"), e.astype(np.float32))
    cos[cols.view("expires") <= t] = -np.inf
    j = int(np.argmax(cos))
    if cos[j] < threshold:
        return None
    return int(cols.view("ids")[j]), float(cos[j])


def goal_plan(data):
    """Return the final goal relevance of the current session's items: ``(positions, values)``, or None."""
    goal = online_state(data).session_goal()
    return None if goal is None else session_goal(data, goal)


def session_goal(data, goal: SessionGoal):
    """Return ``(positions, values)``: the goal relevance ``goal`` gives the stored items of its session, or None."""
    cols = data.cols
    if not cols.n:
        return None
    sessions = cols.strings["sessions"]
    n = start = len(sessions)
    while start and sessions[start - 1] == goal.session:
        start -= 1
    if sessions.count(goal.session) == n - start:  # the session's items are the last ones (the usual case)
        pos = np.arange(start, n)
    else:  # its label came back after another session's: its earlier items too
        pos = np.flatnonzero(np.fromiter(map(operator.eq, sessions, itertools.repeat(goal.session)), bool, n))
    if not len(pos):
        return None
    return pos, goal(cols.view("embeddings")[pos].astype(np.float64))
