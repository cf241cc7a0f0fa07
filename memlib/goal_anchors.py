"""The goal anchors of goal relevance: what a turn's goal relevance is the cosine to.

Goal relevance is ``(1 + cos(e_m, e_goal)) / 2`` (Table 1 of the paper). The
anchor ``e_goal`` is pluggable: a class with ``prepare(ds, E)`` (called once on
the annotated turns and their embeddings) and ``goal(ds, case, rows, E,
question_vec)`` (the goal relevance of one history's rows), and a flag
``per_question`` that says whether it reads the case's question.

* **blind** anchors never read a question (:data:`BLIND_ANCHORS`, one per goal
  reading of :data:`memlib.factor_sets.GOAL_READINGS`):
  :class:`SessionCentroidAnchor` (the paper's choice: the centroid of the user
  turns of the turn's own session, which exists when the session is
  consolidated), :class:`SessionOrHistoryAnchor` (the released experiment's)
  and :class:`EarlierInSessionAnchor` (causal at each turn);
* the **oracle** anchor :class:`QuestionAnchor` is the held-out question (it
  peeks at the future).

:data:`ANCHORS` maps a regime to its anchor.

>>> sorted(ANCHORS), ANCHORS["oracle"].per_question, BLIND_ANCHORS["session"] is ANCHORS["blind"]
(['blind', 'oracle'], True, True)
>>> _cos01(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[2.0, 0.0], [0.0, 0.0]])).tolist()
[1.0, 0.5]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memlib.datasets import Dataset


def _group_sum(X: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Row sums of ``X`` per group code (a sorted ``reduceat``; much faster than ``np.add.at``)."""
    out = np.zeros((n_groups, X.shape[1]), dtype=np.float64)
    if len(codes):
        order = np.argsort(codes, kind="stable")
        sc = codes[order]
        starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
        out[sc[starts]] = np.add.reduceat(X[order].astype(np.float64), starts, axis=0)
    return out


def _cos01(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(1 + cos) / 2`` row-wise for unit rows ``a`` and (unnormalised) rows ``b``; 0.5 where b is 0."""
    norm = np.linalg.norm(b, axis=1)
    dot = np.einsum("ij,ij->i", a, b)
    cos = np.divide(dot, norm, out=np.zeros_like(dot), where=norm > 0)
    return np.clip((1.0 + cos) / 2.0, 0.0, 1.0)


class SessionCentroidAnchor:
    """Blind anchor: the centroid of the user turns of the turn's own session.

    It depends on the session only, never on the question (``per_question = False``).
    A session without user turns falls back to the centroid of all its turns.
    """

    name = "blind"
    per_question = False

    def prepare(self, ds: Dataset, E: np.ndarray) -> None:
        """Compute every turn's goal relevance to its session's centroid, once for all cases."""
        sess_codes = pd.factorize(ds.turns["session"])[0]
        user = (ds.turns["role"] == "user").to_numpy()
        S = sess_codes.max() + 1 if len(sess_codes) else 0
        cent_user = _group_sum(E[user], sess_codes[user], S)
        cent_all = _group_sum(E, sess_codes, S)
        has_user = np.bincount(sess_codes[user], minlength=S) > 0
        cent = np.where(has_user[:, None], cent_user, cent_all)
        self._turn_goal = _cos01(E, cent[sess_codes])

    def goal(self, ds: Dataset, case: int, rows: np.ndarray, E: np.ndarray, question_vec) -> np.ndarray:
        """Return the goal relevance of one history's ``rows`` (the question is not read)."""
        return self._turn_goal[rows]


class SessionOrHistoryAnchor(SessionCentroidAnchor):
    """Blind anchor of the released experiment: the session's user-turn centroid, else the history's.

    A session without user turns falls back to the centroid of the user turns
    of the turn's whole history (later sessions included), and to 0.5 when the
    history has none.
    """

    def prepare(self, ds: Dataset, E: np.ndarray) -> None:
        """Compute the session centroids' goal relevance and note which sessions have no user turn."""
        super().prepare(ds, E)
        sess_codes = pd.factorize(ds.turns["session"])[0]
        user = (ds.turns["role"] == "user").to_numpy()
        S = sess_codes.max() + 1 if len(sess_codes) else 0
        self._session_has_user = (np.bincount(sess_codes[user], minlength=S) > 0)[sess_codes]
        self._user = user

    def goal(self, ds: Dataset, case: int, rows: np.ndarray, E: np.ndarray, question_vec) -> np.ndarray:
        """Return the goal relevance of one history's ``rows``, a user-less session's to the history's users."""
        out = self._turn_goal[rows].copy()
        lone = ~self._session_has_user[rows]
        if lone.any():
            users = rows[self._user[rows]]
            cent = E[users].astype(np.float64).sum(axis=0, keepdims=True)
            out[lone] = _cos01(E[rows[lone]], np.broadcast_to(cent, (int(lone.sum()), E.shape[1])))
        return out


class EarlierInSessionAnchor(SessionCentroidAnchor):
    """Causal blind anchor: the centroid of the session's user turns strictly before the turn (0.5 for none)."""

    def prepare(self, ds: Dataset, E: np.ndarray) -> None:
        """Compute every turn's goal relevance to its session's strictly earlier user turns."""
        user = (ds.turns["role"] == "user").to_numpy()
        out = np.full(len(E), 0.5)
        for first, n in zip(ds.sessions["first_turn"], ds.sessions["n_turns"]):
            rows = np.arange(first, first + n)
            if n == 0:
                continue
            Eu = E[rows].astype(np.float64) * user[rows, None]
            before = np.cumsum(Eu, axis=0) - Eu
            out[rows] = _cos01(E[rows], before)
        self._turn_goal = out


class QuestionAnchor:
    """Oracle anchor: the held-out evaluation question (peeks at the future query)."""

    name = "oracle"
    per_question = True

    def prepare(self, ds: Dataset, E: np.ndarray) -> None:
        """Do nothing: the anchor is each case's own question."""

    def goal(self, ds: Dataset, case: int, rows: np.ndarray, E: np.ndarray, question_vec) -> np.ndarray:
        """Return the goal relevance of one history's ``rows`` to the case's question vector."""
        return np.clip((1.0 + E[rows] @ question_vec) / 2.0, 0.0, 1.0)


#: Goal anchors by regime name; add a class with ``prepare`` and ``goal`` to try another blind anchor.
ANCHORS = {"blind": SessionCentroidAnchor, "oracle": QuestionAnchor}
#: Blind anchors by goal reading (:data:`GOAL_READINGS`).
BLIND_ANCHORS = {
    "session": SessionCentroidAnchor,
    "session_or_history": SessionOrHistoryAnchor,
    "earlier_in_session": EarlierInSessionAnchor,
}


__all__ = [
    "ANCHORS",
    "BLIND_ANCHORS",
    "EarlierInSessionAnchor",
    "QuestionAnchor",
    "SessionCentroidAnchor",
    "SessionOrHistoryAnchor",
]
