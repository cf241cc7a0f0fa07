"""The readings of self/user relevance over a whole history (:data:`memlib.factor_sets.SELF_READINGS`).

Self relevance is ``(1 + cos(e_m, mu_user)) / 2``, ``mu_user`` a centroid of the user's turns.
The paper's reading, ``earlier`` (the user's strictly earlier turns), is causal: the online
annotator computes it turn by turn (:func:`memlib.online.annotate_history`). The others hold
more in the centroid, later turns included, so they are computed here over a whole history at
once, and :func:`memlib.factors.annotate` puts them in place of the annotator's column, as it
does the goal anchors of :mod:`memlib.goal_anchors`.
"""

from __future__ import annotations

import numpy as np

from memlib import FACTORS
from memlib.goal_anchors import _cos01
from memlib.online import annotate_history


def session_ends(sessions) -> np.ndarray:
    """For each row of a history, the row that ends its session (a history's sessions are contiguous)."""
    sessions = np.asarray(sessions)
    if len(sessions) == 0:
        return np.zeros(0, np.int64)
    starts = np.r_[True, sessions[1:] != sessions[:-1]]
    ends = np.r_[np.flatnonzero(starts)[1:] - 1, len(sessions) - 1]
    return ends[np.cumsum(starts) - 1]


def self_relevance(
    E: np.ndarray, roles: np.ndarray, speakers: np.ndarray, reading: str = "earlier", sessions=None
) -> np.ndarray:
    """Self/user relevance of each turn of one history under one reading (see :mod:`memlib.factors`).

    ``reading`` (:data:`SELF_READINGS`): ``earlier`` compares a turn with the
    centroid of the user's strictly earlier turns (the online annotator's,
    :func:`memlib.online.annotate_history`); the other readings are not causal,
    so they are computed here, over the whole history at once: ``inclusive`` puts a user turn
    in its own centroid; ``through_session`` uses the user's turns up to the end
    of the turn's session (``sessions``: one session code per row), what an
    agent that consolidates at each session's end knows; ``history`` uses all the
    user's turns of the history, later ones included (it reads no question, but
    it is not causal). An assistant turn is compared with the user turns
    (earlier ones, through its session, or all for ``history``).

    >>> E = np.eye(3)[[0, 1, 0, 2]].astype(float)
    >>> roles = np.array(["user", "assistant", "user", "user"])
    >>> self_relevance(E, roles, roles, "through_session", [0, 0, 1, 1]).round(3).tolist()
    [1.0, 0.5, 0.947, 0.724]
    """
    if reading == "earlier":
        return annotate_history(E, roles, speakers)[:, FACTORS.index("self_relevance")]
    user = roles == "user"
    out = np.full(len(E), 0.5)
    ends = session_ends(sessions) if reading == "through_session" else None

    def centroids(X, cum_rows=None):
        if reading == "history":
            return np.broadcast_to(X.sum(axis=0, keepdims=True), X.shape)
        cum = np.cumsum(X, axis=0)
        return cum[cum_rows] if reading == "through_session" else cum  # (inclusive)

    Eu = E * user[:, None]
    asst = ~user
    if asst.any():
        out[asst] = _cos01(E[asst], centroids(Eu, ends)[asst])
    for s in np.unique(speakers[user]):
        m = user & (speakers == s)
        if reading == "through_session":  # the speaker's turns through each row's session end
            cent = np.cumsum(E * m[:, None], axis=0)[ends][m]
        else:
            cent = centroids(E[m])
        out[m] = _cos01(E[m], cent)
    return out


__all__ = ["self_relevance", "session_ends"]
