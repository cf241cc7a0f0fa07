"""The memory value V(m) and the encoding depth it implies (eq. 2, section 3.2).

A memory's factor vector ``f(m)`` lies in ``[0, 1]^7`` (see :data:`memlib.FACTORS`);
its value is the linear score ``V = f @ w`` with non-negative weights ``w``.
The normalised value ``V / sum(w)`` lies in ``[0, 1]`` and selects one of four
encoding tiers.

:class:`Value` is what the scoring rules, the store and the studies ask of a value
(features, score, normalised score, contributions); :class:`LinearValue` is the
paper's, :class:`CueValue` a learned value over the store cues. :func:`value` and
:func:`normalised_value` are the paper's value as two functions; every linear score
is summed by :func:`linear_score`.

>>> import numpy as np
>>> F = np.array([[1, 0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0, 0]], dtype=float)
>>> w = np.array([1, 1, 0, 0, 0, 2, 0], dtype=float)
>>> value(F, w)
array([3., 0.])
>>> normalised_value(F, w)
array([0.75, 0.  ])
>>> encoding_tier(normalised_value(F, w))
array(['meta', 'shallow'], dtype='<U9')
"""

from __future__ import annotations

import json
import math
import numbers
import os
from typing import Protocol, runtime_checkable

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError

#: Encoding tiers, shallow to deep (section 3.2).
TIERS = ("shallow", "semantic", "schematic", "meta")
#: Lower bounds of the normalised value for the 2nd, 3rd and 4th tier.
TIER_THRESHOLDS = (0.20, 0.45, 0.70)


def check_weights(w) -> np.ndarray:
    """Return ``w`` as a float array of length 7 with non-negative finite entries.

    >>> check_weights([1, 1, 1, 1, 1, 1, -1])
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: weights must be >= 0; negative: usage_history=-1.0
    """
    w = np.asarray(w, dtype=float)
    if w.shape != (len(FACTORS),):
        raise ParameterError(f"weights must have shape ({len(FACTORS)},), one per factor; got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ParameterError("weights must be finite")
    if np.any(w < 0):
        bad = ", ".join(f"{FACTORS[i]}={w[i]}" for i in np.flatnonzero(w < 0))
        raise ParameterError(f"weights must be >= 0; negative: {bad}")
    return w


def linear_score(X, w, columns=None, out=None) -> np.ndarray:
    """``sum_j X[..., j] * w[j]``, summed column by column in order: the arithmetic of every linear value here.

    Not a matrix product: a BLAS product may round a row differently by where it
    sits, so a memory's score could change when its batch changes. Summed column
    by column, each row's score is the same float in any batch, at any position.
    No check on ``w`` (the learners score signed weights with it); the dtype is
    that of ``X`` and ``w`` together.

    Parameters
    ----------
    X : ndarray, shape (..., d)
    w : ndarray, shape (d,)
    columns : sequence of int, optional
        The columns summed, in this order (default: all). Leaving out a column of
        weight 0 gives the same floats when ``X`` is finite (``x + 0.0 == x``).
    out : ndarray, shape X.shape[:-1], optional
        Where to sum, in place, starting from the values it holds (zeros give the
        sum itself); of the result's dtype. Without it a new array of zeros is
        used. The products go through one scratch array, so no call allocates
        one array per column.

    >>> linear_score(np.array([[1.0, 2.0, 4.0]]), np.array([0.5, -1.0, 0.0])).tolist()
    [-1.5]
    >>> linear_score(np.array([[1.0, 2.0]]), np.array([0.5, 1.0]), out=np.array([np.inf])).tolist()
    [inf]
    """
    X, w = np.asarray(X), np.asarray(w)
    dtype = np.result_type(X.dtype, w.dtype)
    if out is None:
        out = np.zeros(X.shape[:-1], dtype=dtype)
    elif out.shape != X.shape[:-1] or out.dtype != dtype:
        raise ParameterError(f"out must have shape {X.shape[:-1]} and dtype {dtype}, got {out.shape} {out.dtype}")
    product = np.empty_like(out)
    for j in range(X.shape[-1]) if columns is None else columns:
        np.multiply(X[..., j], w[j], out=product)
        out += product
    return out


def _inputs(x, reads: str):
    """``x`` itself (an array), or the array an object holds as attribute ``reads`` (a store, a case set)."""
    held = None if hasattr(x, "__array__") else getattr(x, reads, None)
    return x if held is None else held


@runtime_checkable
class Value(Protocol):
    """A memory value: what scoring (:mod:`memlib.scoring`), the store and the studies ask of one.

    Two implementations: :class:`LinearValue`, the paper's ``V = f @ w`` over the seven
    factors, and :class:`CueValue`, a learned linear value over the store cues. Every
    method takes ``x``: the value's inputs as an array (factors for a linear value, store
    cues for a cue value), or an object that holds them as its attribute :attr:`reads`
    (a :class:`~memlib.store.MemoryStore`, a :class:`~memlib.cases.CaseSet`). A value
    subclasses :class:`Value` and inherits :meth:`normalised`, :meth:`eq3_value` and calling.

    ``V-bar`` (:meth:`normalise`) has one meaning: the value's place on its own scale,
    in [0, 1], non-decreasing in ``V``; the encoding tiers, the store's retrieval mix and
    eq. 3 for a signed value read it. Each value places itself on its scale: the paper's
    ``V`` lies in ``[0, sum(w)]`` (factors in [0, 1], weights >= 0), so ``V-bar`` is
    ``V / sum(w)``; a cue value is signed and unbounded, so ``V-bar`` is its rank among
    the values of the turns it was learned on.

    >>> F = np.array([[1, 0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0, 0]], dtype=float)
    >>> paper = LinearValue([1, 1, 0, 0, 0, 2, 0])
    >>> isinstance(paper, Value), paper.score(F).tolist(), paper.normalised(F).tolist()
    (True, [3.0, 0.0], [0.75, 0.0])
    >>> paper.contributions(F)[0].tolist()
    [1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0]
    """

    #: The array of a store or case set the value reads: ``"factors"`` or ``"cues"``.
    reads: str
    #: One name per column of :meth:`features` and :meth:`contributions`.
    feature_names: tuple
    #: Whether ``V`` can be negative; eq. 3's resistance ``1 + beta * V`` then reads ``V-bar`` (:meth:`eq3_value`).
    signed: bool

    def features(self, x) -> np.ndarray:
        """Return the features the value weighs, one row per memory (checked)."""
        ...

    def score(self, x) -> np.ndarray:
        """Return the value ``V`` of each memory."""
        ...

    def normalise(self, v) -> np.ndarray:
        """``V-bar`` in [0, 1] of values ``v`` (see the class docstring)."""
        ...

    def contributions(self, x) -> np.ndarray:
        """``features * weights``: the terms that sum to each value, one column per feature."""
        ...

    def normalised(self, x) -> np.ndarray:
        """``V-bar`` of each memory: :meth:`normalise` of :meth:`score`."""
        return self.normalise(self.score(x))

    def eq3_value(self, v, v_bar=None) -> np.ndarray:
        """Return the value eq. 3 reads (:func:`~memlib.forgetting.forget_score`): ``V``, or ``V-bar`` if signed.

        ``v_bar``: ``V-bar`` of ``v`` when the caller holds it already (a replay's view), else computed.
        """
        if not self.signed:
            return np.asarray(v)
        return self.normalise(v) if v_bar is None else v_bar

    def __call__(self, x) -> np.ndarray:
        """Return the value of each memory (:meth:`score`)."""
        return self.score(x)


class LinearValue(Value):
    """The paper's value (eq. 1): ``V = f @ w`` over the seven factors, with weights ``w >= 0``.

    Parameters
    ----------
    weights : array_like, shape (7,)
        Non-negative finite weights, one per factor of :data:`memlib.FACTORS`
        (:func:`check_weights`).

    Notes
    -----
    ``V`` is summed factor by factor (:func:`linear_score`, in the dtype of the
    factors: float32 factors give float32 values), skipping factors of weight 0;
    ``V-bar = V / sum(w)`` (0 for all-zero weights).

    >>> LinearValue([1, 1, 0, 0, 0, 2, -1])
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: weights must be >= 0; negative: usage_history=-1.0
    >>> LinearValue(np.ones(7)).score(np.zeros((2, 6)))
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: factor array must have 7 columns, got 6
    """

    reads = "factors"
    feature_names = FACTORS
    signed = False

    def __init__(self, weights):
        self.weights = np.array(check_weights(weights))  # a copy: the caller's array stays writable
        self.weights.setflags(write=False)

    def features(self, x) -> np.ndarray:
        """Return the factor array of ``x``, shape (..., 7)."""
        F = np.asarray(_inputs(x, self.reads))
        if F.ndim == 0 or F.shape[-1] != len(FACTORS):
            raise ParameterError(f"factor array must have {len(FACTORS)} columns, got {F.shape[-1] if F.ndim else 0}")
        return F

    def score(self, x) -> np.ndarray:
        """Return the value ``V = f @ w`` of each memory."""
        F = self.features(x)
        w = self.weights.astype(F.dtype if F.dtype.kind == "f" else float)
        return linear_score(F, w, np.flatnonzero(w))

    def normalise(self, v) -> np.ndarray:
        """Return ``V-bar``: the values ``v`` divided by the sum of the weights (0 if that is not positive)."""
        v = np.asarray(v)
        total = self.weights.sum()
        return v / total if total > 0 else np.zeros_like(v, dtype=float)

    def contributions(self, x) -> np.ndarray:
        """Return ``f * w``: the terms that sum to each value, one column per factor."""
        return self.features(x) * self.weights

    def __eq__(self, other) -> bool:
        return isinstance(other, LinearValue) and np.array_equal(self.weights, other.weights)

    __hash__ = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.weights.tolist()})"


def value(F, w) -> np.ndarray:
    """Memory value ``V = F @ w`` for a stack of factor vectors: ``LinearValue(w).score(F)``.

    Parameters
    ----------
    F : array_like, shape (..., 7)
        Factor vectors in ``[0, 1]``, columns in the order of :data:`memlib.FACTORS`.
    w : array_like, shape (7,)
        Non-negative weights.

    Returns
    -------
    numpy.ndarray, shape (...)
        Summed factor by factor (:func:`linear_score`), so each memory's value is the
        same float in any batch, at any position.
    """
    return LinearValue(w).score(F)


def normalised_value(F, w) -> np.ndarray:
    """Normalised value ``V / sum(w)`` in ``[0, 1]``; all-zero weights give 0: ``LinearValue(w).normalised(F)``."""
    return LinearValue(w).normalised(F)


def encoding_tier(v_bar) -> np.ndarray:
    """Return the encoding tier for normalised values (thresholds 0.20 / 0.45 / 0.70).

    A value equal to a threshold falls in the deeper tier.

    >>> encoding_tier([0.0, 0.2, 0.449, 0.7, 1.0]).tolist()
    ['shallow', 'semantic', 'semantic', 'meta', 'meta']
    """
    v_bar = np.asarray(v_bar, dtype=float)
    if np.any((v_bar < 0) | (v_bar > 1)) or not np.all(np.isfinite(v_bar)):
        raise ParameterError("normalised values must lie in [0, 1]")
    return np.asarray(TIERS)[np.searchsorted(TIER_THRESHOLDS, v_bar, side="right")]


# --------------------------------------------------------------------------- a value over cues


def _with_zero_weights(weights, old_cues, cues, interactions):
    """Return ``weights`` over ``old_cues`` (and their user products) as weights over ``cues``, 0 for a new cue.

    Weights that are not one number per old feature are returned as they are, for :class:`CueValue` to refuse.
    """
    if not isinstance(interactions, (bool, np.bool_)):
        return weights
    old = tuple(old_cues) + (_interaction_names(old_cues) if interactions else ())
    new = tuple(cues) + (_interaction_names(cues) if interactions else ())
    try:
        w = np.array(weights, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return weights
    if w.shape != (len(old),):
        raise ParameterError(f"a cue value over {len(old_cues)} cues needs {len(old)} weights, got shape {w.shape}")
    given = dict(zip(old, w))
    return [given.get(name, 0.0) for name in new]


def _interaction_names(cues) -> tuple:
    return tuple(f"user*{c}" for c in cues if c != "is_user")


class CueValue(Value):
    """A learned linear value over the cues a store computes (:data:`memlib.cues.STORE_CUES`).

    The paper's value is ``V = f @ w`` over seven factors in [0, 1] with non-negative
    weights. The value here is the same kind of object over more, signed, features: the
    store cues, and with ``interactions`` also each cue times ``is_user`` (a user's
    first-person statement and an assistant's can then weigh differently). It is learned
    from the retention objective (:func:`memlib.learning.fit_cue_value`), not set by hand.

    ``quantiles`` are 101 values of ``V`` (0th to 100th percentile) over the turns it was
    learned on; :meth:`normalise` maps a value to its place in that distribution, a ``V-bar``
    in [0, 1] that the encoding tiers and the retrieval mix read as they read the paper's
    ``V / sum(w)`` (see :class:`Value`). ``V`` can be negative, so eq. 3 reads ``V-bar``.

    >>> from memlib.cues import STORE_CUES
    >>> w = np.zeros(len(STORE_CUES)); w[STORE_CUES.index("length")] = 1.0
    >>> cv = CueValue(w, quantiles=np.linspace(0.0, 4.0, 101))
    >>> X = np.zeros((2, len(STORE_CUES))); X[:, STORE_CUES.index("length")] = [1.0, 3.0]
    >>> cv.score(X).tolist(), cv.normalised(X).round(2).tolist()
    ([1.0, 3.0], [0.25, 0.75])
    >>> cv.eq3_value(cv(X)).round(2).tolist()   # V can be negative: eq. 3 reads V-bar
    [0.25, 0.75]
    >>> CueValue.from_dict(cv.to_dict())(X).tolist()
    [1.0, 3.0]
    """

    reads = "cues"
    signed = True

    def __init__(self, weights, interactions: bool = False, quantiles=None, info: dict | None = None):
        from memlib.cues import STORE_CUES

        self.cues = STORE_CUES
        if not isinstance(interactions, (bool, np.bool_)):
            raise ParameterError(f"interactions must be true or false, got {interactions!r}")
        self.interactions = bool(interactions)
        names = self.cues + (_interaction_names(self.cues) if self.interactions else ())
        self.feature_names = names
        try:
            w = np.array(weights, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ParameterError(f"a cue value needs {len(names)} finite weights, got {weights!r:.60}") from None
        if w.shape != (len(names),):
            raise ParameterError(
                f"a cue value needs {len(names)} finite weights ({', '.join(names)}), got shape {w.shape}"
            )
        if not np.all(np.isfinite(w)):
            raise ParameterError("a cue value's weights must be finite (a NaN or infinity was given)")
        self.weights = w
        try:
            q = np.linspace(-1.0, 1.0, 101) if quantiles is None else np.array(quantiles, dtype=np.float64)
        except (TypeError, ValueError):
            q = np.zeros(0)
        if q.shape != (101,) or not np.all(np.isfinite(q)) or np.any(np.diff(q) < 0):
            raise ParameterError("quantiles must be 101 finite, non-decreasing values (0th to 100th percentile)")
        self.quantiles = q
        if info is not None and not isinstance(info, dict):
            raise ParameterError(f"info must be a dict, got {type(info).__name__}")
        try:
            self.info = json.loads(json.dumps(info or {}, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"info must hold JSON values only ({exc})") from None
        for a in (self.weights, self.quantiles):  # one default value is shared by every default store
            a.setflags(write=False)

    def features(self, x) -> np.ndarray:
        """Return the features of store cues ``x`` (n, 12): the cues, then (``interactions``) each times ``is_user``."""
        X = np.asarray(_inputs(x, self.reads), dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.cues):
            raise ParameterError(f"store cues must have shape (n, {len(self.cues)}), got {X.shape}")
        if not self.interactions:
            return X
        return np.hstack([X, X[:, :1] * X[:, 1:]])

    def contributions(self, x) -> np.ndarray:
        """``features * weights``, shape (n, features): the terms that sum to each value."""
        return self.features(x) * self.weights

    def score(self, x) -> np.ndarray:
        """Return the value of each row of store cues ``x`` (a matrix product over the features)."""
        return self.features(x) @ self.weights

    def normalise(self, v) -> np.ndarray:
        """``V-bar`` in [0, 1]: the share of the training turns whose value lies below ``v`` (interpolated)."""
        # tied quantiles (a flat stretch of training values) map to the middle of their percentiles
        xs, tie = np.unique(self.quantiles, return_inverse=True)
        ps = np.bincount(tie, np.linspace(0.0, 1.0, 101)) / np.bincount(tie)
        if len(xs) == 1:
            return np.full(np.shape(v), 0.5)
        return np.interp(np.asarray(v, dtype=np.float64), xs, ps)

    def to_dict(self) -> dict:
        """Return the value as a JSON dict (:meth:`from_dict` reads it back)."""
        return {
            "kind": "cue_value",
            "cues": list(self.cues),
            "interactions": self.interactions,
            "weights": self.weights.tolist(),
            "quantiles": self.quantiles.tolist(),
            "info": self.info,
        }

    @classmethod
    def from_dict(cls, d: dict, source: str = "the cue value") -> CueValue:
        """Rebuild a value from :meth:`to_dict`; an error names ``source`` and what is wrong."""
        from memlib.cues import STORE_CUES

        if not isinstance(d, dict) or d.get("kind") != "cue_value":
            raise ParameterError(f"{source}: not a cue value (expected a dict with kind 'cue_value')")
        cues = d.get("cues")
        older = tuple(c for c in STORE_CUES if c != "first_in_session")  # a value learned before the store read it
        if not isinstance(cues, list) or tuple(cues) not in (STORE_CUES, older):
            raise ParameterError(f"{source}: its cues {cues} are not this memlib's {list(STORE_CUES)}")
        try:
            weights, interactions = d["weights"], d.get("interactions", False)
            if tuple(cues) == older:  # it gives first_in_session (and its product with is_user) no weight
                weights = _with_zero_weights(weights, older, STORE_CUES, interactions)
            return cls(weights, interactions, d.get("quantiles"), d.get("info"))
        except KeyError as exc:
            raise ParameterError(f"{source}: missing {exc}") from None
        except (ParameterError, TypeError, ValueError) as exc:
            raise ParameterError(f"{source}: {exc}") from None

    def __eq__(self, other) -> bool:
        return isinstance(other, CueValue) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        top = np.argsort(-np.abs(self.weights))[:3]
        lead = ", ".join(f"{self.feature_names[i]} {self.weights[i]:+.2f}" for i in top)
        return f"CueValue({len(self.weights)} weights; largest: {lead})"


#: The defaults a store uses (:func:`load_defaults`), written by ``python -m memlib defaults``.
DEFAULTS_PATH = os.path.join(os.path.dirname(__file__), "defaults.json")


def load_defaults(path=None) -> dict:
    """Load the measured defaults: ``{"policy": {...}, "value": CueValue, "measured": {...}, ...}``.

    ``policy`` holds the forgetting rule and the retrieval mix of :class:`memlib.store.ValuePolicy`;
    ``value`` the default value of :class:`memlib.store.MemoryStore`. Both were chosen by
    :func:`memlib.studies.defaults_file.choose_defaults`, leaving one corpus out of LoCoMo,
    LongMemEval-S and RealMem at a time and taking the configuration whose worst held-out corpus
    keeps the most gold; ``measured`` holds the held-out numbers of each corpus.
    """
    path = DEFAULTS_PATH if path is None else os.fspath(path)
    if path == DEFAULTS_PATH and _DEFAULTS:
        return _DEFAULTS[0]
    try:
        with open(path, encoding="utf-8") as fh:
            d = json.load(fh)
    except FileNotFoundError:
        raise ParameterError(f"{path}: no defaults file; write one with `python -m memlib defaults --write`") from None
    except json.JSONDecodeError as exc:
        raise ParameterError(f"{path}: not JSON ({exc})") from None
    if not isinstance(d, dict) or d.get("format") != "memlib-defaults" or "policy" not in d or "value" not in d:
        raise ParameterError(f"{path}: not a memlib defaults file (format, policy and value expected)")
    policy = d["policy"]
    keys = ("keep_top_value", "beta", "value_weight", "mood_weight")
    if not isinstance(policy, dict) or sorted(policy) != sorted(keys):
        raise ParameterError(f"{path}: policy must hold exactly {', '.join(keys)}")
    if not isinstance(policy["keep_top_value"], bool):
        raise ParameterError(f"{path}: policy keep_top_value must be true or false")
    for k in keys[1:]:
        x = policy[k]
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or x < 0:
            raise ParameterError(f"{path}: policy {k} must be a finite number >= 0, got {x!r}")
    adaptive = d.get("adaptive")  # the adaptive store (memlib.store.AdaptivePolicy), when it was chosen
    if adaptive is not None:
        if not isinstance(adaptive, dict) or sorted(adaptive) != ["value_scale", "z"]:
            raise ParameterError(f"{path}: adaptive must hold exactly value_scale and z")
        for k, x in adaptive.items():
            if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or x < 0:
                raise ParameterError(f"{path}: adaptive {k} must be a finite number >= 0, got {x!r}")
    out = dict(d, value=CueValue.from_dict(d["value"], source=f"{path}: value"))
    if path == DEFAULTS_PATH:
        _DEFAULTS.append(out)
    return out


_DEFAULTS: list = []
