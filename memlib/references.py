"""Reference events: when a user's new turn reaches back to a turn the store holds, and how far back.

An agent never has gold labels for its own conversations, but its user leaves traces of
what they need: a new turn that says again what an earlier turn said (about the same
project, person, date or number) *refers back* to it. This module counts those events,
causally and without a question:

* a **reference event** ``t -> j``: user turn ``t`` and a turn ``j`` the store held when
  ``t``'s session began (the current session is left out: what was just said is
  continuity, not need), whose embeddings have a cosine of at least :data:`THRESHOLD`;
* its **lag** is counted on the store's own clock, in consolidations (sessions, for an
  agent that consolidates at each session end): 1 for the previous session, 2 for the one
  before, ...; lags are counted in the bins of :data:`LAG_EDGES`;
* the **exposure** of a bin is how many (user turn, held turn) pairs were at that lag: a
  reference rate per held turn, so that a store that holds few old turns does not read
  their rarity as a lack of need.

The need over age is modelled as the rational analysis of memory has it (Anderson and
Schooler): the chance that a turn of age ``L`` sessions is needed falls as ``L ** -b``. The
paper's eq. 3 fixes the exponent (its ``age ** 0.7``); a store estimates it from its own
user. Each session's references are scored, given how many there were, against the pairs
at risk (a conditional likelihood, so that a session that refers back a lot weighs no more
in the exponent than its spread over the ages says), for every exponent of :data:`EXPONENTS`;
the exponent used is the one closest to 0 that a likelihood-ratio interval of the stream's
own references still admits (:meth:`Need.exponent`): a young stream, or one that reaches
back to every age alike, keeps 0, and forgets as the value alone says. Lags of one session
(the last exchange) are left out of the fit: they are continuity more than need.

:class:`Need` holds a stream's counts, their likelihood and its clock;
:func:`count_references` is the one definition of an update, used by the store at each
consolidation and by its replays (:func:`memlib.store.forget.references_since`).

>>> E = np.eye(4)[[0, 1, 0]]                   # turn 2 repeats turn 0, two sessions later
>>> refs, exposure = count_references(E[[2]], [2], E[:2], [0, 1], threshold=0.9)
>>> refs.tolist()[:3], exposure.tolist()[:3]   # the references and the pairs at risk, by lag
([0.0, 1.0, 0.0], [1.0, 1.0, 0.0])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from memlib._checks import ParameterError

#: Cosine at or above which a new user turn refers back to a held turn (a paraphrase, a restated fact).
THRESHOLD = 0.6
#: Lag bins, in sessions: [1, 2) the previous session, [2, 3), [3, 5), ... [65, inf) long ago.
LAG_EDGES = (1, 2, 3, 5, 9, 17, 33, 65)
N_BINS = len(LAG_EDGES)
#: The store moves its need exponent away from 0 only as far as a likelihood-ratio interval at ``Z``
#: standard errors allows. Chosen, not fixed by convention: at 2 (95%) the adaptive store lost 0.020
#: of LongMemEval-S's gold against the prior-only store and its placebo on RealMem gained 0.013; at 3
#: both fell inside 0.01 (``benchmarks/need_ceiling.py --sample 250``, 2026-12-04). A choice made by
#: looking at LongMemEval-S and at the placebos of all three corpora; it gives up 0.014 of RealMem's gain.
Z = 3.0


def lag_bins(lags) -> np.ndarray:
    """Return the bin of :data:`LAG_EDGES` of each lag in sessions (a lag below 1 counts as 1).

    >>> lag_bins([1, 2, 4, 5, 100]).tolist()
    [0, 1, 2, 3, 7]
    """
    return np.searchsorted(np.asarray(LAG_EDGES), np.maximum(np.asarray(lags), 1), side="right") - 1


def count_references(E_new, period_new, E_held, period_held, threshold: float = THRESHOLD) -> tuple:
    """Count the reference events of new user turns against the turns a store held before their session.

    Parameters
    ----------
    E_new : ndarray, shape (m, d)
        Unit embeddings of the new user turns.
    period_new : array_like of int, shape (m,)
        The session (consolidation period) of each.
    E_held : ndarray, shape (n, d)
        Unit embeddings of the turns held before the new turns' session began.
    period_held : array_like of int, shape (n,)
        The session of each (earlier than the new turns').
    threshold : float
        Cosine at or above which a new turn refers to a held one.

    Returns
    -------
    refs, exposure : ndarray, shape (N_BINS,)
        The events per lag bin, and the pairs at risk per bin.
    """
    period_new, period_held = np.asarray(period_new), np.asarray(period_held)
    if not len(period_new) or not len(period_held):
        return np.zeros(N_BINS), np.zeros(N_BINS)
    bins = lag_bins(period_new[:, None] - period_held[None, :])
    refs = np.bincount(bins[refers(E_new, E_held, threshold)], minlength=N_BINS).astype(np.float64)
    return refs, np.bincount(bins.ravel(), minlength=N_BINS).astype(np.float64)


def refers(E_new, E_held, threshold: float = THRESHOLD) -> np.ndarray:
    """Whether each new turn refers to each held turn: their cosine is at least ``threshold``, shape (m, n).

    The one comparison behind :func:`count_references` and :func:`reference_table`: float32
    products on one thread (einsum: a threaded BLAS product stalls for milliseconds on a busy
    machine), each product computed alike whatever else is compared beside it.
    """
    cos = np.einsum("id,jd->ij", np.asarray(E_new, dtype=np.float32), np.asarray(E_held, dtype=np.float32))
    return cos >= threshold


@dataclass(frozen=True)
class ReferenceTable:
    """Every reference event a history's user turns can make, counted once: what a replay reads per session.

    Made by :func:`reference_table`. Which held turns a replay's store still holds changes with
    its budget and policy, but whether a user turn refers back to a turn does not: a replay
    sums a row of :attr:`counts` over the turns it holds (:meth:`session_counts`) instead of
    comparing embeddings again at every consolidation of every replay.

    Attributes
    ----------
    counts : ndarray of int32, shape (S, n)
        ``counts[s, j]``: the user turns of session ``s`` whose cosine with turn ``j`` (of an
        earlier session) is at least the threshold; 0 where ``j`` is not earlier.
    asks : ndarray of int64, shape (S,)
        The user turns of each session.
    session : ndarray of int64, shape (n,)
        The session of each turn (0 for the first).
    """

    counts: np.ndarray
    asks: np.ndarray
    session: np.ndarray

    def prefix(self, n_sessions: int, n_turns: int) -> ReferenceTable:
        """Return the table of the history's first ``n_sessions`` sessions (its first ``n_turns`` turns)."""
        return ReferenceTable(self.counts[:n_sessions, :n_turns], self.asks[:n_sessions], self.session[:n_turns])

    def session_counts(self, s: int, held) -> tuple:
        """Return :func:`count_references` of session ``s``'s user turns against the held turns ``held`` (positions).

        ``held`` may hold turns of session ``s`` itself: only the earlier ones count, as a store counts.
        """
        if not self.asks[s]:  # no user turn: nothing refers back
            return np.zeros(N_BINS), np.zeros(N_BINS)
        held = np.asarray(held, dtype=np.int64)
        sessions = self.session[held]
        earlier = sessions < s
        held, sessions = held[earlier], sessions[earlier]
        if not len(held):
            return np.zeros(N_BINS), np.zeros(N_BINS)
        bins = _bins_of_lags(len(self.asks))[s - sessions]
        refs = np.bincount(bins, weights=self.counts[s][held], minlength=N_BINS)  # a row, then its items: faster
        return refs, self.asks[s] * np.bincount(bins, minlength=N_BINS).astype(np.float64)


@functools.lru_cache(maxsize=8)
def _bins_of_lags(n_sessions: int) -> np.ndarray:
    """:func:`lag_bins` of every lag from 0 to ``n_sessions``, looked up instead of searched (read-only)."""
    bins = lag_bins(np.arange(n_sessions + 1))
    bins.flags.writeable = False
    return bins


def reference_table(E, ends, user, threshold: float = THRESHOLD) -> ReferenceTable:
    """Count, once for a whole history, which earlier turns each session's user turns refer back to.

    Parameters
    ----------
    E : ndarray, shape (n, d)
        Unit embeddings of the history's turns, in order.
    ends : array_like of int, shape (S,)
        The number of turns up to the end of each session (:func:`memlib.store.replay.session_ends`).
    user : array_like of bool, shape (n,)
        Whether each turn is a user's.
    threshold : float
        As :func:`count_references`; both compare by :func:`refers`.

    >>> E = np.eye(4)[[0, 1, 0]]
    >>> t = reference_table(E, [1, 2, 3], [True, True, True], threshold=0.9)
    >>> t.counts.tolist(), t.session_counts(2, [0, 1])[0].tolist()[:3]
    ([[0, 0, 0], [0, 0, 0], [1, 0, 0]], [0.0, 1.0, 0.0])
    """
    E, ends, user = np.asarray(E, dtype=np.float32), np.asarray(ends, dtype=np.int64), np.asarray(user, dtype=bool)
    n = len(E)
    starts = np.r_[0, ends[:-1]].astype(np.int64)
    counts = np.zeros((len(ends), n), np.int32)
    asks = np.zeros(len(ends), np.int64)
    for s, (a, b) in enumerate(zip(starts, ends)):
        ask = a + np.flatnonzero(user[a:b])
        asks[s] = len(ask)
        if len(ask) and a:
            counts[s, :a] = refers(E[ask], E[:a], threshold).sum(axis=0)
    session = np.repeat(np.arange(len(ends), dtype=np.int64), np.diff(np.r_[0, ends]))
    return ReferenceTable(counts, asks, session)


#: The exponents ``b`` of the need curve ``L ** -b`` a stream's references are scored on.
EXPONENTS = np.round(np.arange(-1.0, 2.0 + 1e-9, 0.05), 2)
_EDGES = np.array([*LAG_EDGES, 2 * LAG_EDGES[-1]], dtype=float)
#: The log lag each bin stands for (the geometric middle of its lags); the first bin is not fitted.
LOG_LAG = np.log(np.sqrt(_EDGES[:-1] * np.maximum(_EDGES[1:] - 1, _EDGES[:-1])))


#: ``log(L ** -b)`` of each exponent (rows) and fitted bin (columns), and its exponential: what
#: :func:`session_loglik` weighs by.
_LOG_W = -EXPONENTS[:, None] * LOG_LAG[None, 1:]
_W = np.exp(_LOG_W)


def session_loglik(refs, exposure) -> np.ndarray:
    """Log-likelihood of one session's references at lags >= 2, given their number, for each of :data:`EXPONENTS`.

    Each reference falls on a pair at risk with probability proportional to ``L ** -b``.

    >>> ll = session_loglik([0, 9, 1, 0, 0, 0, 0, 0], [5, 10, 10, 10, 10, 10, 10, 10])  # all near
    >>> float(EXPONENTS[np.argmax(ll)]) > 1
    True
    """
    r, x = np.asarray(refs, float)[1:], np.asarray(exposure, float)[1:]
    if r.sum() <= 0:
        return np.zeros(len(EXPONENTS))
    with np.errstate(divide="ignore"):
        log_norm = np.log(_W @ x)
    return _LOG_W @ r - r.sum() * log_norm


@dataclass
class Need:
    """A stream's reference counts, their likelihood and its clock: how far back its user reaches.

    Attributes
    ----------
    refs, exposure : ndarray, shape (N_BINS,)
        Reference events, and the (user turn, held turn) pairs at risk, per lag bin.
    loglik : ndarray, shape (len(EXPONENTS),)
        The summed :func:`session_loglik` of every session so far.
    boundaries : list of int
        The item id that started each session after the first (the store's ``next_id`` at each
        consolidation): the session of an item id is the number of boundaries at or below it.
    """

    refs: np.ndarray = field(default_factory=lambda: np.zeros(N_BINS))
    exposure: np.ndarray = field(default_factory=lambda: np.zeros(N_BINS))
    loglik: np.ndarray = field(default_factory=lambda: np.zeros(len(EXPONENTS)))
    boundaries: list = field(default_factory=list)

    def period(self, ids) -> np.ndarray:
        """Return the session (consolidation period) of each item id, 0 for the first.

        >>> Need(boundaries=[3, 7]).period([0, 2, 3, 9]).tolist()
        [0, 0, 1, 2]
        """
        return np.searchsorted(self._boundary_ids, np.asarray(ids), side="right")

    @functools.cached_property
    def _boundary_ids(self) -> np.ndarray:
        """:attr:`boundaries` as an array, made once (a need is a value: :meth:`counted` returns a new one)."""
        return np.asarray(self.boundaries, dtype=np.int64)

    def lag_at_next(self, ids) -> np.ndarray:
        """Return each item's lag at the next session (its first chance to be referred to): 1 for the last session's.

        >>> Need(boundaries=[3, 7]).lag_at_next([0, 5]).tolist()
        [2, 1]
        """
        return len(self.boundaries) - self.period(ids)

    def counted(self, refs, exposure, boundary: int) -> Need:
        """Return the need with one session's counts added, the session ended at ``boundary`` (the next item id)."""
        refs, exposure = np.asarray(refs, float) + np.zeros(N_BINS), np.asarray(exposure, float) + np.zeros(N_BINS)
        loglik = self.loglik + session_loglik(refs, exposure)
        return Need(self.refs + refs, self.exposure + exposure, loglik, [*self.boundaries, int(boundary)])

    def exponent(self, z: float = Z) -> float:
        """Return the smallest exponent >= 0 that the stream's references admit (a likelihood-ratio interval at ``z``).

        0 when the interval holds 0 (or nothing was referred to): no age is preferred. Never
        below 0: need falls with age or stays flat, never rises (the rational analysis of memory
        the store rests on); a stream whose fit prefers the old over the new forgets by value
        alone. (Measured, blind, each corpus held out: allowing negative exponents lost 0.04 of
        LongMemEval-S's gold, and its placebo as much; bounded at 0 the loss was 0.000.)

        >>> n = Need().counted([0, 30, 5, 2, 1, 0, 0, 0], [50, 50, 100, 200, 400, 400, 400, 400], 1)
        >>> 0 < n.exponent(2.0) < n.exponent(0.0)
        True
        """
        if not np.any(self.loglik):
            return 0.0
        top = self.loglik.max()
        if not np.isfinite(top):  # a NaN admits no exponent: say so, not 0
            raise ParameterError("the need's log-likelihood must be finite (were references or pairs at risk NaN?)")
        smallest = EXPONENTS[np.argmax(self.loglik >= top - z * z / 2)]  # EXPONENTS ascend
        return 0.0 if smallest <= 0 else float(smallest)

    def to_dict(self) -> dict:
        """Return the need as JSON (what a store file holds)."""
        out = {"refs": self.refs.tolist(), "exposure": self.exposure.tolist(), "loglik": self.loglik.tolist()}
        return out | {"boundaries": list(self.boundaries)}

    @classmethod
    def from_dict(cls, d, source: str = "need") -> Need:
        """Read a need written by :meth:`to_dict`; anything else is a :class:`ParameterError` naming ``source``."""
        try:
            refs, exposure, loglik = (np.asarray(d[k], dtype=np.float64) for k in ("refs", "exposure", "loglik"))
            bounds = [int(b) for b in d["boundaries"]] if all(_is_int(b) for b in d["boundaries"]) else None
        except (TypeError, ValueError, KeyError):
            raise ParameterError(f"{source}: must hold refs, exposure, loglik and boundaries") from None
        for a in (refs, exposure):
            if a.shape != (N_BINS,) or not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ParameterError(f"{source}: refs and exposure must be {N_BINS} finite numbers >= 0 each")
        if np.any(refs > exposure):
            raise ParameterError(f"{source}: more references than pairs at risk in a lag bin")
        if loglik.shape != EXPONENTS.shape or not np.all(np.isfinite(loglik)) or np.any(loglik > 0):
            raise ParameterError(f"{source}: loglik must be {len(EXPONENTS)} finite numbers <= 0")
        if bounds is None or np.any(np.diff(bounds) < 0) or (bounds and bounds[0] < 0):
            raise ParameterError(f"{source}: boundaries must be item ids >= 0, in order")
        return cls(refs, exposure, loglik, bounds)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


__all__ = [
    "EXPONENTS",
    "LAG_EDGES",
    "N_BINS",
    "THRESHOLD",
    "Need",
    "ReferenceTable",
    "count_references",
    "lag_bins",
    "reference_table",
    "refers",
    "session_loglik",
]
