"""The memory value V(m) and the encoding depth it implies (eq. 2, section 3.2).

A memory's factor vector ``f(m)`` lies in ``[0, 1]^7`` (see :data:`memlib.FACTORS`);
its value is the linear score ``V = f @ w`` with non-negative weights ``w``.
The normalised value ``V / sum(w)`` lies in ``[0, 1]`` and selects one of four
encoding tiers.

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


def value(F, w) -> np.ndarray:
    """Memory value ``V = F @ w`` for a stack of factor vectors.

    Parameters
    ----------
    F : array_like, shape (..., 7)
        Factor vectors in ``[0, 1]``, columns in the order of :data:`memlib.FACTORS`.
    w : array_like, shape (7,)
        Non-negative weights.

    Returns
    -------
    numpy.ndarray, shape (...)
    """
    F = np.asarray(F)
    if F.shape[-1] != len(FACTORS):
        raise ParameterError(f"factor array must have {len(FACTORS)} columns, got {F.shape[-1]}")
    return F @ check_weights(w).astype(F.dtype if F.dtype.kind == "f" else float)


def normalised_value(F, w) -> np.ndarray:
    """Normalised value ``V / sum(w)`` in ``[0, 1]``; all-zero weights give 0."""
    w = check_weights(w)
    total = w.sum()
    v = value(F, w)
    return v / total if total > 0 else np.zeros_like(v, dtype=float)


def encoding_tier(v_bar) -> np.ndarray:
    """Encoding tier for normalised values (thresholds 0.20 / 0.45 / 0.70).

    A value equal to a threshold falls in the deeper tier.

    >>> encoding_tier([0.0, 0.2, 0.449, 0.7, 1.0]).tolist()
    ['shallow', 'semantic', 'semantic', 'meta', 'meta']
    """
    v_bar = np.asarray(v_bar, dtype=float)
    if np.any((v_bar < 0) | (v_bar > 1)) or not np.all(np.isfinite(v_bar)):
        raise ParameterError("normalised values must lie in [0, 1]")
    return np.asarray(TIERS)[np.searchsorted(TIER_THRESHOLDS, v_bar, side="right")]
