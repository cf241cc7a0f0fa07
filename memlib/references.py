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

:class:`Need` holds a stream's counts and its clock; :func:`count_references` is the one
definition of an update, used by the store at each consolidation and by its replays
(:func:`memlib.store.forget.references_since`); :meth:`Need.relative_need` turns the counts
into the stream's need over age, each bin's rate over the stream's overall rate, shrunk
toward 1 (no preference for any age) as far as the evidence is not significant.

>>> E = np.eye(4)[[0, 1, 0]]                   # turn 2 repeats turn 0, two sessions later
>>> refs, exposure = count_references(E[[2]], [2], E[:2], [0, 1], threshold=0.9)
>>> refs.tolist()[:3], exposure.tolist()[:3]   # the references and the pairs at risk, by lag
([0.0, 1.0, 0.0], [1.0, 1.0, 0.0])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memlib._checks import ParameterError

#: Cosine at or above which a new user turn refers back to a held turn (a paraphrase, a restated fact).
THRESHOLD = 0.6
#: Lag bins, in sessions: [1, 2) the previous session, [2, 3), [3, 5), ... [65, inf) long ago.
LAG_EDGES = (1, 2, 3, 5, 9, 17, 33, 65)
N_BINS = len(LAG_EDGES)


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
    # one thread (einsum): a threaded BLAS product stalls for milliseconds on a busy machine
    cos = np.einsum("id,jd->ij", np.asarray(E_new, dtype=np.float32), np.asarray(E_held, dtype=np.float32))
    refs = np.bincount(bins[cos >= threshold], minlength=N_BINS).astype(np.float64)
    return refs, np.bincount(bins.ravel(), minlength=N_BINS).astype(np.float64)


@dataclass
class Need:
    """A stream's reference counts and its clock: what a store knows of how far back its user reaches.

    Attributes
    ----------
    refs, exposure : ndarray, shape (N_BINS,)
        Reference events, and the (user turn, held turn) pairs at risk, per lag bin.
    boundaries : list of int
        The item id that started each session after the first (the store's ``next_id`` at each
        consolidation): the session of an item id is the number of boundaries at or below it.
    """

    refs: np.ndarray = field(default_factory=lambda: np.zeros(N_BINS))
    exposure: np.ndarray = field(default_factory=lambda: np.zeros(N_BINS))
    boundaries: list = field(default_factory=list)

    def period(self, ids) -> np.ndarray:
        """Return the session (consolidation period) of each item id, 0 for the first.

        >>> Need(boundaries=[3, 7]).period([0, 2, 3, 9]).tolist()
        [0, 0, 1, 2]
        """
        return np.searchsorted(np.asarray(self.boundaries, dtype=np.int64), np.asarray(ids), side="right")

    def lag_at_next(self, ids) -> np.ndarray:
        """Return each item's lag at the next session (its first chance to be referred to): 1 for the last session's.

        >>> Need(boundaries=[3, 7]).lag_at_next([0, 5]).tolist()
        [2, 1]
        """
        return len(self.boundaries) - self.period(ids)

    def counted(self, refs, exposure, boundary: int) -> Need:
        """Return the need with the counts of a session added, the session ended at ``boundary`` (the next item id)."""
        return Need(self.refs + refs, self.exposure + exposure, [*self.boundaries, int(boundary)])

    def to_dict(self) -> dict:
        """Return the need as JSON (what a store file holds)."""
        return {"refs": self.refs.tolist(), "exposure": self.exposure.tolist(), "boundaries": list(self.boundaries)}

    @classmethod
    def from_dict(cls, d, source: str = "need") -> Need:
        """Read a need written by :meth:`to_dict`; anything else is a :class:`ParameterError` naming ``source``."""
        try:
            refs, exposure = (np.asarray(d[k], dtype=np.float64) for k in ("refs", "exposure"))
            bounds = [int(b) for b in d["boundaries"]] if all(_is_int(b) for b in d["boundaries"]) else None
        except (TypeError, ValueError, KeyError):
            raise ParameterError(f"{source}: must hold refs, exposure ({N_BINS} numbers each) and boundaries") from None
        for a in (refs, exposure):
            if a.shape != (N_BINS,) or not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ParameterError(f"{source}: refs and exposure must be {N_BINS} finite numbers >= 0 each")
        if np.any(refs > exposure):
            raise ParameterError(f"{source}: more references than pairs at risk in a lag bin")
        if bounds is None or np.any(np.diff(bounds) < 0) or (bounds and bounds[0] < 0):
            raise ParameterError(f"{source}: boundaries must be item ids >= 0, in order")
        return cls(refs, exposure, bounds)

    def relative_need(self, z: float = 2.0) -> np.ndarray:
        """Each bin's reference rate over the stream's overall rate, shrunk toward 1 by ``z`` standard errors.

        The log rate ratio of a bin is moved toward 0 by ``z`` of its standard errors (Poisson
        counts'), and set to 0 where that crosses 0: a bin differs from the rest only as far as
        its own references say so with some confidence. A young stream (few references) has
        every bin at 1, and so changes nothing.

        Returns
        -------
        ndarray, shape (N_BINS,)
            Positive; 1 for a bin with no significant difference, or no exposure.

        >>> Need(np.r_[40.0, 5.0, np.zeros(6)], np.r_[100.0, 100.0, np.zeros(6)]).relative_need().round(2)[:3]
        array([1.14, 0.59, 1.  ])
        """
        total_r, total_e = float(self.refs.sum()), float(self.exposure.sum())
        out = np.ones(N_BINS)
        if total_r <= 0 or total_e <= 0:
            return out
        seen = self.exposure > 0
        r = self.refs[seen]
        expected = total_r / total_e * self.exposure[seen]
        log_ratio = np.log((r + 0.5) / (expected + 0.5))  # (a half count each side: no log of zero)
        se = np.sqrt(1.0 / (r + 0.5) + 1.0 / (total_r + 0.5))
        out[seen] = np.exp(np.sign(log_ratio) * np.maximum(np.abs(log_ratio) - z * se, 0.0))
        return out


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


__all__ = ["LAG_EDGES", "N_BINS", "THRESHOLD", "Need", "count_references", "lag_bins"]
