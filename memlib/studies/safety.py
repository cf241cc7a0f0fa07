"""When the defaults study may choose an adaptive store: its paired gain over its prior, with an interval.

An adaptive configuration of the defaults study (:mod:`memlib.studies.defaults`) moves away from
its *prior* (the same value model and training data, the lowest value first: what the adaptive
store does until its user's references say otherwise) only as far as its user's references say.
Issue 31 judges it *safe* where, on no held-out corpus, it keeps less than its prior minus 0.01,
and asks that the interval of the paired difference say so. The choice reads the same test:
:func:`prior_gains` measures each adaptive configuration's gain over its prior case by case, with
a 95% interval that resamples whole groups (a conversation, a question, a user), and
:func:`safe_configurations` keeps an adaptive configuration only where, on every corpus the
choice reads, that interval lies above ``-SAFETY``. A mean inside the margin is not enough: an
interval that reaches below it is a loss the data cannot rule out.

>>> forget = pd.DataFrame({"dataset": "x", "trained_on": "y", "split": "held_out", "value_model": "m",
...     "rule": ["value"] * 4 + ["adaptive"] * 4, "beta": 0.0, "value_scale": [0.0] * 4 + [1.0] * 4,
...     "value": [0.5, 0.5, 0.5, 0.5, 0.6, 0.4, 0.6, 0.6], "group": list("abcd") * 2})
>>> g = prior_gains(forget, n_boot=200)
>>> g[["rule", "value_scale", "metric"]].values.tolist(), round(float(g["mean"].iloc[0]), 3)
([['adaptive', 1.0, 'gain over prior']], 0.05)
>>> bool(g["ci_low"].iloc[0] < -SAFETY)   # a mean gain, but one group lost 0.1: not shown to be safe
True
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memlib._checks import ParameterError
from memlib.intervals import paired_bootstrap

#: An adaptive configuration may keep at most this much less gold than its prior on any corpus it is chosen on
#: (the lower end of the 95% interval of its paired gain, :func:`prior_gains`).
SAFETY = 0.01
#: What names a forgetting configuration of the defaults study.
FORGET_KEYS = ["value_model", "rule", "beta", "value_scale"]
#: What names the data a configuration was replayed on: the corpus, the corpora its value was learned on, the split.
ON = ["dataset", "trained_on", "split"]
#: The ``metric`` of :func:`prior_gains`' rows.
GAIN = "gain over prior"


def prior_gains(forget: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Return each adaptive configuration's paired gain over its prior per corpus and training set, with an interval.

    Parameters
    ----------
    forget : DataFrame
        One row per case and configuration: :data:`ON`, :data:`FORGET_KEYS`, ``value`` (the case's gold
        retention) and ``group``; within each corpus and training set, every configuration lists the
        cases in the same order.
    n_boot, seed : int
        Each configuration's interval has a generator of its own (``seed``), so it does not depend on
        which other configurations are measured.

    Returns
    -------
    DataFrame
        One row per adaptive configuration and (corpus, training set): :data:`ON`, :data:`FORGET_KEYS`,
        ``metric`` (:data:`GAIN`), ``mean``, ``ci_low``, ``ci_high`` (the configuration's retention minus its
        prior's, case by case, resampling whole groups; NaN with one group, as in
        :func:`~memlib.intervals.grouped_summary`), ``n_questions``, ``n_groups``. An adaptive configuration
        with no prior beside it, a prior with other cases, or rows of more than one ``metric`` is a
        :class:`~memlib._checks.ParameterError`.
    """
    if "metric" in forget and forget["metric"].nunique() > 1:
        raise ParameterError(f"prior_gains reads one metric, got {sorted(forget['metric'].unique())}")
    rows = []
    for key, block in forget.groupby([*ON, "value_model"], sort=False):
        where = dict(zip([*ON, "value_model"], key))
        prior = block[block["rule"] == "value"]
        for config, mine in block[block["rule"] == "adaptive"].groupby(FORGET_KEYS, sort=False):
            if len(prior) != len(mine) or not np.array_equal(prior["group"].to_numpy(), mine["group"].to_numpy()):
                raise ParameterError(
                    f"no prior (rule 'value') with the same cases for the adaptive configuration {config} on {where}"
                )
            gaps = mine["value"].to_numpy(dtype=float) - prior["value"].to_numpy(dtype=float)
            groups = mine["group"].to_numpy()
            n_groups = len(pd.unique(groups))
            mean, lo, hi = paired_bootstrap(gaps, n_boot, seed, groups=groups)
            lo, hi = (lo, hi) if n_groups > 1 else (np.nan, np.nan)
            row = {**where, **dict(zip(FORGET_KEYS, config)), "metric": GAIN, "mean": mean}
            rows.append(row | {"ci_low": lo, "ci_high": hi, "n_questions": len(gaps), "n_groups": n_groups})
    columns = [*ON, *FORGET_KEYS, "metric", "mean", "ci_low", "ci_high", "n_questions", "n_groups"]
    return pd.DataFrame(rows, columns=columns)


def safe_configurations(scores: pd.DataFrame, gains: pd.DataFrame, margin: float = SAFETY) -> pd.DataFrame:
    """Drop the adaptive configurations whose gain over their prior may fall below ``-margin`` on a corpus.

    ``scores`` holds the configurations (:data:`FORGET_KEYS`) on the data a choice reads (``dataset``, and
    ``trained_on`` when several training sets are read); ``gains`` is :func:`prior_gains` of the same
    replays. An adaptive configuration is kept only where, on each of those, the lower end of its
    gain's interval (its mean where there is no interval: one group) is at least ``-margin``; every
    other rule is kept. An adaptive configuration
    with no gain on data it is scored on is a :class:`~memlib._checks.ParameterError`.

    >>> s = pd.DataFrame({"value_model": "m", "rule": ["value", "adaptive", "adaptive"], "beta": 0.0,
    ...     "value_scale": [0.0, 1.0, 2.0], "dataset": "x", "mean": [0.5, 0.7, 0.6]})
    >>> g = pd.DataFrame({"value_model": "m", "rule": "adaptive", "beta": 0.0, "value_scale": [1.0, 2.0],
    ...     "dataset": "x", "trained_on": "y", "split": "held_out", "mean": [0.2, 0.1], "ci_low": [-0.02, 0.05]})
    >>> safe_configurations(s, g)["value_scale"].tolist()   # scale 1's interval reaches 0.02 below its prior
    [0.0, 2.0]
    """
    on = [c for c in ("dataset", "trained_on") if c in scores]
    adaptive = scores[scores["rule"] == "adaptive"][[*on, *FORGET_KEYS]].drop_duplicates()
    read = adaptive.merge(gains, on=[*on, *FORGET_KEYS], how="left")
    low = read["ci_low"].where(read["ci_low"].notna(), read["mean"])
    if low.isna().any():
        where = read[low.isna()].iloc[0][[*FORGET_KEYS, *on]].to_dict()
        raise ParameterError(f"no gain over its prior (rule 'value') for the adaptive configuration {where}")
    unsafe = set(read.loc[(low < -margin).to_numpy(), FORGET_KEYS].itertuples(index=False, name=None))
    return scores[[k not in unsafe for k in scores[FORGET_KEYS].itertuples(index=False, name=None)]]


def gain_intervals(headline: pd.DataFrame, gains: pd.DataFrame, adaptive: dict) -> pd.DataFrame:
    """Return the headline with its ``gain over prior`` intervals from ``gains``: the ones the safety rule read.

    ``adaptive`` is the configuration (:data:`FORGET_KEYS`) the headline's adaptive rows describe.
    """
    mine = gains[(gains["split"] == "held_out") & (gains[FORGET_KEYS] == pd.Series(adaptive)).all(axis=1)]
    at = mine.set_index("dataset")
    rows = (headline["config"] == "gain over prior").to_numpy()
    out = headline.copy()
    for col in ("ci_low", "ci_high"):
        out.loc[rows, col] = out.loc[rows, "dataset"].map(at[col]).to_numpy()
    return out


__all__ = ["FORGET_KEYS", "GAIN", "ON", "SAFETY", "gain_intervals", "prior_gains", "safe_configurations"]
