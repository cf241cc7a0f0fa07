"""The online annotator: the causal factors of one history, turn by turn (Table 1 of the paper).

One definition of the factors that depend on what came before a turn, used both by
:func:`memlib.factors.annotate` (a whole history at once, :func:`annotate_history`) and by
the store as each turn arrives (:func:`memlib.store.annotate.annotate_turn`):

* **self relevance** ``= (1 + cos(e, mu)) / 2``: a user turn's ``mu`` is the sum of its
  own speaker's strictly earlier user turns, an assistant turn's the sum of all strictly
  earlier user turns; 0.5 with none (the ``earlier`` reading of the ``paper`` set);
* **goal relevance** ``= (1 + cos(e, g)) / 2`` where ``g`` is the anchor of the turn's
  session: the sum of its user turns, or of all its turns while it has none (the
  ``session`` reading). The anchor is known when the session ends, so a turn's value is
  *provisional* (its session's anchor so far, the turn included) until then, and the
  session-end fix (:class:`SessionGoal`) gives the final values of all its turns.

The other factors are read from the turn alone and are passed in as columns (emotional
intensity, reliability, task utility, usage history) or computed from a value-profile
vector (value alignment); an omitted one is 0 (inert).

:class:`OnlineState` holds the running sums of one history, and
:meth:`OnlineState.step` annotates the next turn or turns without changing it: it returns
a :class:`Step` with their factor rows, the fix of the session they end and the state
after them. A batch is the same as its turns one by one with each fix applied: a turn
whose session ends within the batch gets its final goal relevance at once. The sums are
float64, added in turn order (a batch may add a closed session's turns in another order,
which moves nothing beyond float noise).

>>> E = np.array([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6]])
>>> s = OnlineState.start(2).step(E[:2], ["user", "assistant"], ["ana", "assistant"], ["monday", "monday"])
>>> s.factors[:, [GOAL, SELF]].round(3).tolist()   # goal so far; self: 0.5 with no earlier user turn
[[1.0, 0.5], [0.8, 0.8]]
>>> t = s.state.step(E[2:], ["user"], ["ana"], ["tuesday"])   # a new session ends Monday's
>>> t.goal_fix(E[:2]).round(3).tolist(), t.factors[0, [GOAL, SELF]].round(3).tolist()
([1.0, 0.8], [1.0, 0.9])
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from memlib import FACTORS
from memlib.goal_anchors import _cos01

#: Column of each factor in a factor row (:data:`memlib.FACTORS` order).
COLUMN = {f: i for i, f in enumerate(FACTORS)}
GOAL, SELF, VALUE = COLUMN["goal_relevance"], COLUMN["self_relevance"], COLUMN["value_alignment"]
#: The factors read from the turn alone, given to :meth:`OnlineState.step` as columns.
GIVEN = ("emotional_intensity", "reliability", "task_utility", "usage_history")


def _cos01_to(E: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """``(1 + cos(e, anchor)) / 2`` for every unit row ``e`` of ``E``; 0.5 for a zero anchor (one thread)."""
    n = np.linalg.norm(anchor)
    if n == 0:
        return np.full(len(E), 0.5)
    return np.clip((1.0 + np.einsum("ij,j->i", E, anchor) / n) / 2.0, 0.0, 1.0)


@dataclass(frozen=True)
class SessionGoal:
    """The goal anchor of one session: its turns' goal relevance is ``goal(E)``.

    Attributes
    ----------
    session : hashable
        The session.
    anchor : ndarray
        The sum of its user turns, or of all its turns if it has none.
    """

    session: Hashable
    anchor: np.ndarray

    def __call__(self, E) -> np.ndarray:
        """Return the goal relevance of the session's turns with unit embeddings ``E`` (one row each)."""
        return _cos01_to(np.asarray(E), self.anchor)


@dataclass(frozen=True)
class Step:
    """What :meth:`OnlineState.step` gives for a batch of turns.

    Attributes
    ----------
    factors : ndarray, shape (n, 7)
        The turns' factor rows (:data:`memlib.FACTORS` order), in [0, 1]. Goal relevance is
        final for a turn whose session ends within the batch, provisional for the others.
    goal_fix : SessionGoal or None
        The final anchor of the session that was open before the batch, if the batch ends
        it: its earlier turns (which the caller holds) take ``goal_fix(E)``.
    state : OnlineState
        The running sums after the turns.
    """

    factors: np.ndarray
    goal_fix: SessionGoal | None
    state: OnlineState


@dataclass(frozen=True)
class OnlineState:
    """The running sums of one history, behind self and goal relevance (see the module docstring).

    Attributes
    ----------
    user : ndarray
        The sum of every user turn so far.
    speakers : mapping
        Speaker -> the sum of that speaker's user turns so far.
    session : hashable or None
        The current session (the last turn's); None before the first turn.
    session_user, session_all : ndarray
        The sums of the current session's user turns and of all its turns.
    session_has_user : bool
        Whether the current session has a user turn.
    """

    user: np.ndarray
    speakers: Mapping
    session: Hashable | None
    session_user: np.ndarray
    session_all: np.ndarray
    session_has_user: bool

    @classmethod
    def start(cls, dim: int) -> OnlineState:
        """Return the state before the first turn, for embeddings of ``dim`` numbers."""
        return cls(np.zeros(dim), {}, None, np.zeros(dim), np.zeros(dim), False)

    def session_goal(self) -> SessionGoal | None:
        """Return the anchor of the current session as it stands (its final one if it ends now), or None."""
        if self.session is None:
            return None
        return SessionGoal(self.session, self.session_user if self.session_has_user else self.session_all)

    def step(self, E, roles, speakers, sessions, *, value_profile=None, **given) -> Step:
        """Annotate the next turns of the history, in order; the state is not changed.

        Parameters
        ----------
        E : array_like, shape (n, dim)
            The turns' unit embeddings.
        roles : sequence of {'user', 'assistant'}
        speakers : sequence
            Who says each turn (a user turn's self relevance reads its own speaker's turns).
        sessions : sequence of hashable
            Each turn's session (not None); a session's turns are contiguous in a history.
        value_profile : array_like, optional
            A unit value-profile vector: value alignment ``(1 + e @ v) / 2`` (else 0).
        **given : array_like
            One value per turn of the factors of :data:`GIVEN` (an omitted one is 0).

        Returns
        -------
        Step
        """
        E = np.asarray(E)
        n, dim = E.shape
        user = np.asarray(roles) == "user"
        F = np.zeros((n, len(FACTORS)))
        for name, values in given.items():
            if name not in GIVEN:
                raise TypeError(f"step() got an unexpected factor {name!r}; it takes {', '.join(GIVEN)}")
            F[:, COLUMN[name]] = values
        if value_profile is not None:
            F[:, VALUE] = (1.0 + np.einsum("ij,j->i", E, np.asarray(value_profile))) / 2.0
        if n == 0:
            return Step(F, None, self)
        X = E.astype(np.float64, copy=False)
        Xu = X * user[:, None]
        # Self relevance: the sum of the user turns strictly before each turn, or of its own speaker's
        # for a user turn. `anchors` holds the anchors of self relevance, then those of goal relevance.
        anchors = np.zeros((2 * n, dim))
        user_sum, asst, rest = self.user, ~user, 0
        if asst.any():  # an assistant turn's: the running sum of the user turns, as far as the last one needs
            rest = np.flatnonzero(asst)[-1]
            users = _running(self.user, X[:rest][user[:rest]], before=True)  # after 0, 1, 2, ... user turns
            anchors[:n][asst], user_sum = users[np.cumsum(user)[asst]], users[-1]
        user_sum = user_sum + X[rest:][user[rest:]].sum(axis=0)  # (the later user turns)
        speakers, speaker_sums = np.asarray(speakers, dtype=object), dict(self.speakers)
        said = dict.fromkeys(speakers[user].tolist())
        for s in said:
            m = user if len(said) == 1 else user & (speakers == s)
            own = _running(self.speakers.get(s, np.zeros(dim)), X[m], before=True)
            anchors[:n][m], speaker_sums[s] = own[:-1], own[-1]
        # Goal relevance, session by session: the final anchor of a session a later turn of the batch
        # ends; for the last one, its anchor so far, the turn included (provisional). The first session
        # continues the state's when the first turn is of the current session.
        sessions, zero = list(sessions), np.zeros(dim)
        starts = [*session_starts(sessions), n]
        carry = sessions[0] == self.session
        fix = None if carry else self.session_goal()  # a first turn of a new session ends the state's
        for k, (a, b) in enumerate(zip(starts[:-1], starts[1:])):
            cont = k == 0 and carry
            seed_user, seed_all = (self.session_user, self.session_all) if cont else (zero, zero)
            has_user = np.logical_or.accumulate(user[a:b]) | (cont and self.session_has_user)
            if b < n:  # the batch ends this session
                end = seed_user + Xu[a:b].sum(axis=0) if has_user[-1] else seed_all + X[a:b].sum(axis=0)
                anchors[n + a : n + b] = end
                if cont:
                    fix = SessionGoal(self.session, end)
            else:
                run_user, run_all = _running(seed_user, Xu[a:b]), _running(seed_all, X[a:b])
                anchors[n + a : n + b] = np.where(has_user[:, None], run_user, run_all)
        F[:, [SELF, GOAL]] = _cos01(np.concatenate((X, X)), anchors).reshape(2, n).T
        state = OnlineState(user_sum, speaker_sums, sessions[-1], run_user[-1], run_all[-1], bool(has_user[-1]))
        return Step(np.clip(F, 0.0, 1.0), fix, state)


def _running(seed: np.ndarray, X: np.ndarray, before: bool = False) -> np.ndarray:
    """Return the running sums ``seed + X[0], seed + X[0] + X[1], ...``, added in order (``before``: ``seed`` too).

    >>> _running(np.zeros(2), np.array([[1.0, 0.0], [0.0, 2.0]]), before=True).tolist()
    [[0.0, 0.0], [1.0, 0.0], [1.0, 2.0]]
    """
    out = np.empty((len(X) + 1, len(seed)))
    out[0] = seed
    for i, x in enumerate(X):  # (a row at a time: twice as fast as np.add.accumulate along the rows)
        np.add(out[i], x, out=out[i + 1])
    return out if before else out[1:]


def session_starts(sessions: list) -> list:
    """Return the position of each turn that starts a session, the first turn's (0) included.

    >>> session_starts(["mon", "mon", "tue", "mon"])
    [0, 2, 3]
    """
    return [0, *(i for i in range(1, len(sessions)) if sessions[i] != sessions[i - 1])]


def annotate_history(E, roles, speakers, sessions=None, *, value_profile=None, **given) -> np.ndarray:
    """Return the factor rows of a whole history, every session ended (its goal relevance final).

    One :meth:`OnlineState.step` over the history from :meth:`OnlineState.start`, with the
    fix of its last session applied: what :func:`memlib.factors.annotate` reads, where a
    history's sessions are consolidated. ``sessions`` defaults to one session; the other
    arguments are those of :meth:`OnlineState.step`.

    >>> E = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    >>> annotate_history(E, ["user", "assistant", "user"], ["ana", "assistant", "ana"])[:, GOAL].round(3).tolist()
    [0.947, 0.724, 0.947]
    """
    E = np.asarray(E)
    sessions = [0] * len(E) if sessions is None else list(sessions)
    step = OnlineState.start(E.shape[1]).step(E, roles, speakers, sessions, value_profile=value_profile, **given)
    if len(E):
        last = session_starts(sessions)[-1]  # the last session's turns: its end is the history's
        step.factors[last:, GOAL] = step.state.session_goal()(E[last:])
    return step.factors


__all__ = ["COLUMN", "GIVEN", "OnlineState", "SessionGoal", "Step", "annotate_history", "session_starts"]
