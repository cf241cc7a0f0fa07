"""Chapter 04: the nonlinear ablation, an MLP over the live factors against the linear value.

:func:`mlp_ablation_on_cases` fits both on the training cases of each split of
one :class:`~memlib.cases.CaseSet` and scores them on its test cases;
:func:`mlp_ablation` loads a regime of its data and calls it; :func:`difference_interval` reads
the paired difference.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memlib._checks import check_fraction
from memlib.cases import CaseSet
from memlib.learning import fit_mlp, hill_climb
from memlib.metrics import RetentionEvaluator
from memlib.scoring import policy_scores
from memlib.studies._common import RealDataResult, learner_settings, on_regime, split_plan, summarise
from memlib.studies.data_spec import LOCOMO, DataSpec


def mlp_ablation_on_cases(
    cases: CaseSet, keep_fraction=0.3, n_splits=20, seed=0, quick=False, regime="blind", progress=False
) -> RealDataResult:
    """Fit and score an MLP ``[16, 16]`` and the linear value on the same group-aware splits of ``cases``.

    ``summary`` has rows ``learned_V``, ``mlp`` and ``mlp_minus_linear`` (the
    paired per-split difference; ``win_share`` is the share of splits the MLP
    wins); ``regime`` only labels the rows.
    """
    from tqdm import tqdm

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    splits, learn_seeds = split_plan(cases.groups, n_splits, seed, cases.keys, quick)
    rows = []
    for s, (tr, te) in enumerate(tqdm(splits, desc="splits", disable=not progress)):
        train, test = cases.subset(tr), cases.subset(te)
        live = train.live_factors
        lin = hill_climb(
            RetentionEvaluator(train, keep_fraction).objective,
            live,
            seed=int(learn_seeds[s]),
            **learner_settings(quick),
        )
        mlp = fit_mlp(train, live, epochs=60 if quick else 200, seed=int(learn_seeds[s]))
        ev = RetentionEvaluator(test, keep_fraction)
        r_lin = ev.mean(policy_scores("learned_V", test, weights=lin.weights))
        r_mlp = ev.mean(mlp(test.factors))
        rows += [
            {"policy": "learned_V", "regime": regime, "keep_fraction": keep_fraction, "split": s, "retention": r_lin},
            {"policy": "mlp", "regime": regime, "keep_fraction": keep_fraction, "split": s, "retention": r_mlp},
            {
                "policy": "mlp_minus_linear",
                "regime": regime,
                "keep_fraction": keep_fraction,
                "split": s,
                "retention": r_mlp - r_lin,
            },
        ]
    per_split = pd.DataFrame(rows)
    summary = summarise(per_split, ["policy", "regime", "keep_fraction"])
    diff = per_split[per_split["policy"] == "mlp_minus_linear"]["retention"]
    summary["win_share"] = np.where(summary["policy"] == "mlp_minus_linear", float((diff > 0).mean()), np.nan)
    return RealDataResult(summary, per_split, info={"regime": regime})


def mlp_ablation(
    data: DataSpec | str = LOCOMO, keep_fraction=0.3, n_splits=20, seed=0, regime="blind", progress=False
) -> RealDataResult:
    """Run the MLP ablation on one regime of ``data`` (see :func:`mlp_ablation_on_cases`)."""
    return on_regime(mlp_ablation_on_cases, data, regime, keep_fraction, n_splits, seed, progress)


#: How :func:`difference_interval` reads an interval of the mean paired difference (MLP minus linear).
VERDICTS = ("tie", "mlp_ahead", "linear_ahead")


def difference_interval(per_split: pd.DataFrame, z: float = 1.96) -> pd.DataFrame:
    """Return the mean paired difference (MLP minus linear) over splits, its interval and what it says, per regime.

    The interval is the normal approximation over splits, ``mean +- z * std / sqrt(n)`` (95% for
    ``z = 1.96``); ``verdict`` is ``tie`` when it holds zero, else ``mlp_ahead`` or ``linear_ahead``
    (:data:`VERDICTS`). Returns ``regime, mean, ci_low, ci_high, n_splits, verdict``.

    >>> ps = pd.DataFrame({"policy": "mlp_minus_linear", "regime": "blind", "retention": [0.1, 0.2, 0.3]})
    >>> difference_interval(ps).round(3).to_dict("records")
    [{'regime': 'blind', 'mean': 0.2, 'ci_low': 0.087, 'ci_high': 0.313, 'n_splits': 3, 'verdict': 'mlp_ahead'}]
    """
    rows = []
    diffs = per_split[per_split["policy"] == "mlp_minus_linear"]
    for regime, d in diffs.groupby("regime", sort=False)["retention"]:
        x = d.to_numpy(dtype=float)
        half = z * x.std(ddof=1) / np.sqrt(len(x))
        lo, hi = x.mean() - half, x.mean() + half
        verdict = "tie" if lo <= 0 <= hi else ("mlp_ahead" if lo > 0 else "linear_ahead")
        rows.append(
            {"regime": regime, "mean": x.mean(), "ci_low": lo, "ci_high": hi, "n_splits": len(x), "verdict": verdict}
        )
    return pd.DataFrame(rows)
