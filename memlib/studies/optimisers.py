"""Chapter 07: Algorithm 1's hill-climb against CMA-ES on the same splits (the paper's limitation L5).

:func:`optimiser_comparison_on_cases` gives both optimisers the same training
cases and the same number of objective evaluations on each group-aware split of
one :class:`~memlib.cases.CaseSet`; :func:`optimiser_comparison` loads a
regime of its data and calls it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import check_fraction
from memlib.cases import CaseSet
from memlib.learning import cma_es, hill_climb
from memlib.metrics import RetentionEvaluator
from memlib.studies._common import RealDataResult, learner_settings, on_regime, split_plan
from memlib.studies.data_spec import LOCOMO, DataSpec


def optimiser_comparison_on_cases(
    cases: CaseSet, keep_fraction=0.3, n_splits=20, seed=0, quick=False, regime="blind", progress=False
) -> RealDataResult:
    """Hill-climb and CMA-ES on the same splits of ``cases``, with the same evaluation budget.

    ``per_split`` has one row per (optimiser, split) with ``train_retention``,
    ``retention`` (test) and ``evaluations``; ``weights`` the weights each found;
    ``summary`` means and stds, plus a row ``cma_minus_hill_climb`` (paired test
    difference, with ``win_share``) and the mean cosine similarity between the
    two weight vectors (``weight_cosine``). ``info["budget"]`` is the budget.
    """
    from tqdm import tqdm

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    splits, learn_seeds = split_plan(cases.groups, n_splits, seed, cases.keys, quick)
    settings = learner_settings(quick)
    budget = settings["n_iter"] * settings["restarts"] + settings["restarts"]
    rows, wrows, cosines = [], [], []
    for s, (tr, te) in enumerate(tqdm(splits, desc="splits", disable=not progress)):
        train, test = cases.subset(tr), cases.subset(te)
        ev_tr, ev_te = RetentionEvaluator(train, keep_fraction), RetentionEvaluator(test, keep_fraction)
        found = {
            "hill_climb": hill_climb(ev_tr.objective, train.live_factors, seed=int(learn_seeds[s]), **settings),
            "cma_es": cma_es(ev_tr.objective, train.live_factors, max_evals=budget, seed=int(learn_seeds[s])),
        }
        for name, res in found.items():
            rows.append(
                {
                    "optimiser": name,
                    "regime": regime,
                    "keep_fraction": keep_fraction,
                    "split": s,
                    "train_retention": res.train_return,
                    "retention": ev_te.objective(res.weights),
                    "evaluations": res.n_evaluations,
                }
            )
            wrows += [{"optimiser": name, "split": s, "factor": f, "weight": w} for f, w in zip(FACTORS, res.weights)]
        a, b = found["hill_climb"].weights, found["cma_es"].weights
        cosines.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) if a.any() and b.any() else np.nan)
    per_split = pd.DataFrame(rows)
    wide = per_split.pivot(index="split", columns="optimiser", values="retention")
    diff = wide["cma_es"] - wide["hill_climb"]
    g = per_split.groupby("optimiser", sort=False)
    summary = pd.DataFrame(
        {
            "optimiser": list(g.groups),
            "train_mean": g["train_retention"].mean().to_numpy(),
            "mean": g["retention"].mean().to_numpy(),
            "std": g["retention"].std(ddof=1).to_numpy(),
            "evaluations": g["evaluations"].mean().to_numpy(),
        }
    )
    summary = pd.concat(
        [
            summary,
            pd.DataFrame(
                [
                    {
                        "optimiser": "cma_minus_hill_climb",
                        "mean": float(diff.mean()),
                        "std": float(diff.std(ddof=1)),
                        "win_share": float((diff > 0).mean()),
                        "weight_cosine": float(np.nanmean(cosines)),
                    }
                ]
            ),
        ],
        ignore_index=True,
    )
    summary.insert(1, "regime", regime)
    summary.insert(2, "keep_fraction", keep_fraction)
    return RealDataResult(summary, per_split, weights=pd.DataFrame(wrows), info={"budget": budget})


def optimiser_comparison(
    data: DataSpec | str = LOCOMO, keep_fraction=0.3, n_splits=20, seed=0, regime="blind", progress=False
) -> RealDataResult:
    """Run the optimiser comparison on one regime of ``data`` (see :func:`optimiser_comparison_on_cases`)."""
    return on_regime(optimiser_comparison_on_cases, data, regime, keep_fraction, n_splits, seed, progress)
