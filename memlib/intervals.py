"""Intervals over splits and cases: the cluster bootstrap, grouped summaries and paired gaps.

Every grouped interval resamples whole groups (a conversation, a question, a user) with
:func:`group_bootstrap_means`. :mod:`memlib.metrics` re-exports these names.

>>> m, lo, hi = paired_bootstrap([0.1, 0.3, 0.2], n_boot=200)
>>> round(m, 2), lo <= m <= hi
(0.2, True)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memlib._checks import ParameterError, check_int


def group_bootstrap_means(values, groups, n_boot: int, rng) -> np.ndarray:
    """Means of ``n_boot`` resamples of whole groups (a cluster bootstrap), drawn from ``rng``.

    Groups are numbered in the order ``values`` list them, so the resamples depend on that order
    and on ``rng``, never on how the groups are named. The one resampling of every grouped interval
    here (:func:`paired_bootstrap`, :func:`grouped_summary`).

    >>> group_bootstrap_means([1.0, 1.0, 3.0], ["a", "a", "b"], 4, np.random.default_rng(0)).round(2).tolist()
    [3.0, 1.67, 1.0, 1.0]
    """
    inv, codes = pd.factorize(np.asarray(groups))
    x = np.asarray(values, dtype=float)
    sums = np.bincount(inv, weights=x, minlength=len(codes))
    counts = np.bincount(inv, minlength=len(codes))
    pick = rng.integers(0, len(codes), size=(n_boot, len(codes)))
    return sums[pick].sum(axis=1) / counts[pick].sum(axis=1)


def grouped_summary(per_case: pd.DataFrame, keys, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Mean ``value`` per ``keys``, with a 95% interval that resamples whole groups (``group``).

    A group is a conversation (LoCoMo: about 200 questions on one history), a question
    (LongMemEval) or a user (RealMem), so questions that share a history are resampled together.
    One generator (``seed``) serves every key, in the order they come.

    Parameters
    ----------
    per_case : DataFrame
        One row per case: the ``keys`` columns, ``value`` and ``group``.
    keys : list of str
    n_boot, seed : int

    Returns
    -------
    DataFrame
        ``keys``, ``mean``, ``ci_low``, ``ci_high`` (NaN with a single group), ``n_questions``, ``n_groups``.

    >>> pc = pd.DataFrame({"k": "a", "value": [0.0, 1.0], "group": ["g1", "g2"]})
    >>> grouped_summary(pc, ["k"], n_boot=100)[["mean", "n_groups"]].values.tolist()
    [[0.5, 2.0]]
    """
    rng = np.random.default_rng(seed)
    out = []
    for key, g in per_case.groupby(keys, sort=False, dropna=False):
        x = g["value"].to_numpy()
        row = dict(zip(keys, key))
        row["mean"] = float(x.mean())
        n_groups = g["group"].nunique(dropna=False)
        if n_groups > 1:
            means = group_bootstrap_means(x, g["group"], n_boot, rng)
            row["ci_low"], row["ci_high"] = np.percentile(means, [2.5, 97.5])
        else:
            row["ci_low"] = row["ci_high"] = np.nan
        row["n_questions"] = len(x)
        row["n_groups"] = n_groups
        out.append(row)
    return pd.DataFrame(out)


def paired_bootstrap(gaps, n_boot: int = 1000, seed: int = 0, groups=None) -> tuple[float, float, float]:
    """Mean of per-case paired gaps and its 95% percentile bootstrap interval.

    Parameters
    ----------
    gaps : array_like, shape (C,)
        One paired difference per case (e.g. learned minus uniform retention).
    n_boot : int
        Bootstrap resamples (>= 1).
    seed : int
    groups : array_like, shape (C,), optional
        Resample whole groups instead of cases (a cluster bootstrap), for
        cases that share a history and so are not independent. Groups are
        numbered in the order the gaps list them, so the interval depends on
        that order (and a seed), never on how the groups are named.

    Returns
    -------
    (mean, low, high)

    >>> m, lo, hi = paired_bootstrap(np.full(50, 0.1), n_boot=200)
    >>> round(m, 3), round(lo, 3), round(hi, 3)
    (0.1, 0.1, 0.1)
    """
    n_boot = check_int("n_boot", n_boot, minimum=1)
    g = np.asarray(gaps, dtype=float)
    if len(g) == 0:
        raise ParameterError("paired_bootstrap needs at least one case")
    rng = np.random.default_rng(seed)
    if groups is None:
        idx = rng.integers(0, len(g), size=(n_boot, len(g)))
        means = g[idx].mean(axis=1)
    else:
        means = group_bootstrap_means(g, groups, n_boot, rng)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(g.mean()), float(lo), float(hi)
