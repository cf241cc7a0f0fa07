"""Chapter 05: blind retention against the keep fraction (the paper's Figure 3).

:func:`keep_fraction_sweep_on_cases` scores five policies at each keep fraction
over the group-aware splits of one blind :class:`~memlib.cases.CaseSet`;
:func:`keep_fraction_sweep` loads the blind regime of its data and calls it.
"""

from __future__ import annotations

import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_fraction
from memlib.cases import CaseSet
from memlib.learning import hill_climb
from memlib.metrics import RetentionEvaluator
from memlib.scoring import SINGLE_FACTOR, policy_scores
from memlib.studies._common import RealDataResult, learner_settings, split_plan, summarise
from memlib.studies.data_spec import LOCOMO, DataSpec

#: Keep fractions of Figure 3.
SWEEP_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5)


def _check_fractions(fractions) -> list[float]:
    fractions = [check_fraction("keep_fraction", f) for f in fractions]
    if not fractions:
        raise ParameterError("fractions must hold at least one keep fraction")
    return fractions


def keep_fraction_sweep_on_cases(
    cases: CaseSet, fractions=SWEEP_FRACTIONS, n_splits=20, seed=0, quick=False, progress=False
) -> RealDataResult:
    """Retention of each policy at each keep fraction over the group-aware splits of blind ``cases``.

    Policies: learned_V, uniform_V, the best single factor (chosen on each split's
    training cases, named in ``factor``), reliability_only and recency_only.
    """
    from tqdm import tqdm

    fractions = _check_fractions(fractions)
    splits, learn_seeds = split_plan(cases.groups, n_splits, seed, cases.keys, quick)
    live = cases.live_factors
    singles = [p for p, f in SINGLE_FACTOR.items() if live[FACTORS.index(f)]]
    rows = []
    bar = tqdm(total=len(fractions) * len(splits), desc="sweep", disable=not progress)
    for kappa in fractions:
        for s, (tr, te) in enumerate(splits):
            train, test = cases.subset(tr), cases.subset(te)
            ev_tr, ev_te = RetentionEvaluator(train, kappa), RetentionEvaluator(test, kappa)
            lin = hill_climb(ev_tr.objective, train.live_factors, seed=int(learn_seeds[s]), **learner_settings(quick))
            best = max(singles, key=lambda p: ev_tr.mean(policy_scores(p, train)))
            for name, label in (
                ("learned_V", "learned_V"),
                ("uniform_V", "uniform_V"),
                (best, "best_single_factor"),
                ("reliability_only", "reliability_only"),
                ("recency_only", "recency_only"),
            ):
                rows.append(
                    {
                        "policy": label,
                        "factor": name if label == "best_single_factor" else "",
                        "regime": "blind",
                        "keep_fraction": kappa,
                        "split": s,
                        "retention": ev_te.mean(policy_scores(name, test, weights=lin.weights)),
                    }
                )
            bar.update()
    bar.close()
    per_split = pd.DataFrame(rows)
    summary = summarise(per_split, ["policy", "regime", "keep_fraction"])
    chosen = (
        per_split[per_split["policy"] == "best_single_factor"]
        .groupby("keep_fraction")["factor"]
        .agg(lambda x: x.value_counts().index[0])
    )
    summary["factor"] = summary.apply(
        lambda r: chosen.get(r["keep_fraction"], "") if r["policy"] == "best_single_factor" else "", axis=1
    )
    return RealDataResult(summary, per_split)


def keep_fraction_sweep(
    data: DataSpec | str = LOCOMO, fractions=SWEEP_FRACTIONS, n_splits=20, seed=0, progress=False
) -> RealDataResult:
    """Figure 3 on the blind regime of ``data`` (see :func:`keep_fraction_sweep_on_cases`)."""
    fractions = _check_fractions(fractions)
    data = DataSpec.of(data)
    ds, anns = data.load(progress, regimes=("blind",))
    result = keep_fraction_sweep_on_cases(anns["blind"].cases, fractions, n_splits, seed, data.quick, progress)
    result.info = ds.stats()
    return result
