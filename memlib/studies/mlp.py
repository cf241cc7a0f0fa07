"""Chapter 04: the nonlinear ablation, an MLP over the live factors against the linear value.

:func:`mlp_ablation_on_cases` fits both on the training cases of each split of
one :class:`~memlib.cases.CaseSet` and scores them on its test cases;
:func:`mlp_ablation` loads a dataset's regime and calls it.
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


def mlp_ablation_on_cases(
    cases: CaseSet,
    keep_fraction: float = 0.3,
    n_splits: int = 20,
    seed: int = 0,
    quick: bool = False,
    regime: str = "blind",
    progress: bool = False,
    sample: int | None = None,
    factor_set: str = "paper",
    embedding: str = "fast",
) -> RealDataResult:
    """An MLP ``[16, 16]`` and the linear value, fit and scored on the same group-aware splits of ``cases``.

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
    dataset="locomo",
    keep_fraction: float = 0.3,
    n_splits: int = 20,
    seed: int = 0,
    quick: bool = False,
    limit: int | None = None,
    regime: str = "blind",
    progress: bool = False,
    sample: int | None = None,
    factor_set: str = "paper",
    embedding: str = "fast",
) -> RealDataResult:
    """The MLP ablation on one regime of a dataset (see :func:`mlp_ablation_on_cases`)."""
    return on_regime(
        mlp_ablation_on_cases,
        dataset,
        regime,
        keep_fraction,
        n_splits,
        seed,
        quick,
        limit,
        progress,
        sample=sample,
        factor_set=factor_set,
        embedding=embedding,
    )
