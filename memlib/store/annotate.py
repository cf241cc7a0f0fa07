"""Online annotation: the seven factors of a turn as it arrives, from what the store has seen so far.

The store annotates causally, with the definitions of :mod:`memlib.factors` in the
blind regime: emotional intensity and valence (VADER, :func:`measure`), reliability
(provenance, with cues for the ``extended`` factor set), self relevance (the cosine to
the same speaker's earlier user turns, or for an assistant turn to all user turns), the
task utility a judge gives, value alignment (to the store's value profile), and goal
relevance (the cosine to the session's anchor: the centroid of its user turns, or of all
its turns before the first user turn). Goal relevance is provisional until the session
ends; :func:`goal_plan` gives the final values then.

:func:`annotate_turn` computes all of that for one checked turn, and the running sums
and session scalars the turn moves, without changing anything; :func:`turn_change` makes
it one change (:class:`memlib.store.backend.Change`): a new item, or the reinforcement of
the item the turn repeats (:func:`reinforced`, as a retrieval reinforces an item).

>>> import numpy as np
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
from dataclasses import dataclass

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError
from memlib._text import bounded
from memlib.cues import text_role_cues
from memlib.factors import emotion_and_valence, reliability
from memlib.store.backend import Change
from memlib.store.checks import Turn
from memlib.store.columns import STATE, count_tokens, matvec
from memlib.store.state import DIM

_FI = {f: i for i, f in enumerate(FACTORS)}
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


def cos01(e: np.ndarray, anchor: np.ndarray) -> float:
    """``(1 + cos(e, anchor)) / 2`` in [0, 1] for a unit ``e``; 0.5 for a zero anchor."""
    n = np.linalg.norm(anchor)
    if n == 0:
        return 0.5
    return float(np.clip((1.0 + float(e @ anchor) / n) / 2.0, 0.0, 1.0))


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


def annotate_turn(data, turn: Turn, t: float, value_profile, merge_threshold) -> Annotation:
    """Annotate the checked, measured ``turn`` (unit embedding) at time ``t`` against the store ``data``.

    ``data`` is the store's backend (:class:`memlib.store.backend.MemoryBackend`):
    its ``cols``, ``scalars`` and ``sums``.
    """
    scalars, sums, e = data.scalars, data.sums, turn.embedding
    new_session = turn.session != scalars["current_session"]
    goal_fix = goal_plan(data) if new_session else None
    if new_session:
        session_sum, session_all_sum, has_user = np.zeros(DIM), np.zeros(DIM), False
    else:
        session_sum, session_all_sum, has_user = sums["session"], sums["session_all"], scalars["session_has_user"]
    f = np.zeros(len(FACTORS))
    f[_FI["emotional_intensity"]] = turn.emotion
    f[_FI["reliability"]] = turn.reliability
    speaker_sum = sums["speakers"].get(turn.speaker, np.zeros(DIM))
    f[_FI["self_relevance"]] = cos01(e, speaker_sum if turn.role == "user" else sums["user"])
    f[_FI["task_utility"]] = turn.task_utility
    if value_profile is not None:
        f[_FI["value_alignment"]] = (1.0 + float(e @ value_profile)) / 2.0
    user_sum = sums["user"]
    if turn.role == "user":
        speaker_sum, user_sum, session_sum, has_user = speaker_sum + e, user_sum + e, session_sum + e, True
    session_all_sum = session_all_sum + e
    f[_FI[GOAL]] = cos01(e, session_sum if has_user else session_all_sum)  # provisional; final at the session's end
    next_id = scalars["next_id"]
    new_sums = {"user": user_sum, "session": session_sum, "session_all": session_all_sum, "speakers": {}}
    if turn.role == "user":
        new_sums["speakers"][turn.speaker] = speaker_sum
    return Annotation(
        row={
            "ids": next_id,
            "time": t,
            "valence": turn.valence,
            "retrievals": 0.0,
            "last_access": t,
            "tokens": count_tokens(turn.text),
            "embeddings": e.astype(np.float32),
            "factors": np.clip(f, 0.0, 1.0),
            "static_cues": text_role_cues([turn.text], [turn.role])[0],
        },
        goal_fix=goal_fix,
        scalars={"current_session": turn.session, "session_has_user": has_user, "next_id": next_id + 1, "now": t},
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
    for name, v in (policy.on_retrieve(store, idx, now) or {}).items():
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
    cols, scalars, sums = data.cols, data.scalars, data.sums
    cur = scalars["current_session"]
    if cur is None or not cols.n:
        return None
    pos = np.fromiter((i for i, s in enumerate(cols.strings["sessions"]) if s == cur), dtype=np.int64)
    if not len(pos):
        return None
    anchor = sums["session"] if scalars["session_has_user"] else sums["session_all"]
    n = np.linalg.norm(anchor)
    if n == 0:
        return pos, np.full(len(pos), 0.5)
    cos = matvec(cols.view("embeddings")[pos].astype(np.float64), anchor) / n
    return pos, np.clip((1.0 + cos) / 2.0, 0.0, 1.0)
