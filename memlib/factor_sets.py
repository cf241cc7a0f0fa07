"""The factor sets of :func:`memlib.factors.annotate` and the readings each is made of.

A *factor set* names one way to compute the seven factors: the paper's Table 1
as stated (``paper``), with our cues in its reliability heuristic
(``extended``), or as the authors' released experiment computes them
(``released``). Each set is a choice of *readings* (:data:`READINGS`): of
emotion, of the self centroid, of the blind goal anchor, of reliability and of
the order of a history's turns. :func:`resolve_readings` lays a caller's
readings over a set's and checks them. The provenance values of reliability
(:data:`PROVENANCE`) and the arousal readings of emotion
(:data:`AROUSAL_READINGS`) are defined with what reads them, in
:mod:`memlib.text_cues`.

>>> READINGS["released"]["goal"], "extended" in FACTOR_SETS, "released" in FACTOR_SETS
('session_or_history', True, False)
"""

from __future__ import annotations

from memlib._checks import ParameterError, check_choice
from memlib.text_cues import AROUSAL_READINGS, PROVENANCE

#: Factor sets: the paper's Table 1 as stated, and our extension of its reliability heuristic.
#: The factor sets that the store computes online, turn by turn, as well as
#: :func:`~memlib.factors.annotate` (and the studies).
FACTOR_SETS = ("paper", "extended")
#: Every factor set :func:`~memlib.factors.annotate` computes: :data:`FACTOR_SETS` and ``released``, the
#: reading of the authors' released experiment (:data:`READINGS`), which reads a whole history at once.
ALL_FACTOR_SETS = (*FACTOR_SETS, "released")
#: Readings of the user centroid of self relevance: the user's strictly earlier turns (causal, the
#: default), earlier turns and the turn itself, or all the user's turns of the history (not causal).
SELF_READINGS = ("earlier", "inclusive", "through_session", "history")
#: Readings of the blind goal anchor (:data:`memlib.goal_anchors.BLIND_ANCHORS`): the centroid of the
#: session's user turns with the session's turns as fallback (``session``) or the history's user turns
#: (``session_or_history``), or of the session's strictly earlier user turns (``earlier_in_session``,
#: causal at each turn).
GOAL_READINGS = ("session", "session_or_history", "earlier_in_session")
#: Emotion readings: VADER valence times arousal (Table 1 as memlib reads it), or the released rules.
EMOTION_READINGS = ("vader", "rules")
#: Reliability readings: provenance 0.8 / 0.4 (``paper``), 0.7 / 0.4 (``released``), or with our cues.
RELIABILITY_READINGS = ("paper", "released", "extended")
#: Order of a history's turns: by date (``time``; turn times in days) or as its file lists its sessions
#: (``file``; a turn's time is then its session's index, the only clock the released experiment reads).
HISTORY_ORDERS = ("time", "file")
#: What each factor set reads (a key given to :func:`~memlib.factors.annotate` overrides its set's).
READINGS = {
    "paper": {"emotion": "vader", "self": "earlier", "goal": "session", "reliability": "paper", "order": "time"},
    "extended": {"emotion": "vader", "self": "earlier", "goal": "session", "reliability": "extended", "order": "time"},
    "released": {
        "emotion": "rules",
        "self": "history",
        "goal": "session_or_history",
        "reliability": "released",
        "order": "file",
    },
}
_READING_CHOICES = {
    "emotion": EMOTION_READINGS,
    "self": SELF_READINGS,
    "goal": GOAL_READINGS,
    "reliability": RELIABILITY_READINGS,
    "order": HISTORY_ORDERS,
}


def resolve_readings(factor_set: str, readings: dict | None = None) -> dict:
    """Return the readings of ``factor_set`` (:data:`READINGS`) with ``readings`` laid over them, checked.

    >>> resolve_readings("released", {"self": "earlier"})["self"], resolve_readings("paper")["emotion"]
    ('earlier', 'vader')
    >>> resolve_readings("paper", {"colour": "blue"})
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: unknown reading 'colour'; known: emotion, self, goal, reliability, order
    """
    check_choice("factor_set", factor_set, ALL_FACTOR_SETS)
    out = dict(READINGS[factor_set])
    for key, value in (readings or {}).items():
        if key not in _READING_CHOICES:
            raise ParameterError(f"unknown reading {key!r}; known: {', '.join(_READING_CHOICES)}")
        out[key] = check_choice(f"{key} reading", value, _READING_CHOICES[key])
    return out


__all__ = [
    "ALL_FACTOR_SETS",
    "AROUSAL_READINGS",
    "EMOTION_READINGS",
    "FACTOR_SETS",
    "GOAL_READINGS",
    "HISTORY_ORDERS",
    "PROVENANCE",
    "READINGS",
    "RELIABILITY_READINGS",
    "SELF_READINGS",
    "resolve_readings",
]
