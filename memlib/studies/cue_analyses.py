"""The analyses of the cue study (chapter 09, :mod:`memlib.studies.cues`).

They are pure functions over a :class:`~memlib.studies.cue_data.CueData`, unit-tested on planted data.

:func:`evaluate` fits every learner on the same splits (:func:`logo_splits` for
leave-one-group-out), :func:`summarise_cases` and :func:`paired_gap` summarise it with
group-bootstrap intervals; :func:`weight_table` bootstraps the signed cue weights,
:func:`ablation` drops one cue group at a time, :func:`transfer` and :func:`transfer_share` score
models fit on another dataset, :func:`keep_fraction_curve` sets the cue value against the paper's
across keep fractions.

>>> CURVE_FRACTIONS
(0.1, 0.2, 0.3, 0.4, 0.5)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memlib._checks import check_fraction, check_int
from memlib.cues import CUES
from memlib.learning import fit_pairwise_logistic, retention_mass
from memlib.metrics import RetentionEvaluator, paired_bootstrap
from memlib.studies.cue_data import CUE_MODELS, CueData
from memlib.studies.cue_learners import LEARNERS, MODEL_LEARNERS, PAPER_MODEL, _paper_scores, _table_of, fit_cue_model

#: Keep fractions of the curve against the paper's value.
CURVE_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5)


# --------------------------------------------------------------------------- the learner comparison


def evaluate(
    data: CueData,
    splits,
    seeds,
    keep_fraction: float = 0.3,
    learners=LEARNERS,
    models=CUE_MODELS,
    calibrations=(False, True),
    paper: bool = True,
    quick: bool = False,
    evaluation: str = "grouped",
    progress: bool = False,
):
    """Every learner x model x calibration fit on each split's training cases, scored on its test cases.

    Returns
    -------
    per_case : DataFrame
        ``evaluation, model, learner, calibrated, split, case_id, group, retention``.
    weights : DataFrame
        ``model, learner, calibrated, split, cue, weight`` for the linear learners.
    """
    from tqdm import tqdm

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    rows, wrows = [], []
    for s, (tr, te) in enumerate(tqdm(splits, desc=f"{evaluation} splits", disable=not progress)):
        _, train = data.subset(tr)
        _, test = data.subset(te)
        ev = RetentionEvaluator(test.cases, keep_fraction)

        def add(model, learner, calibrated, scores, s=s, test=test, ev=ev):
            rows.append(
                pd.DataFrame(
                    {
                        "evaluation": evaluation,
                        "model": model,
                        "learner": learner,
                        "calibrated": calibrated,
                        "split": s,
                        "case_id": test.cases.case_ids,
                        "group": test.cases.groups,
                        "retention": ev.per_case(scores),
                    }
                )
            )

        if paper:
            add(PAPER_MODEL, "hill_climb", False, _paper_scores(train, test, keep_fraction, int(seeds[s]), quick))
        for calibrated in calibrations:
            for model in models:
                for learner in learners:
                    if learner not in MODEL_LEARNERS.get(model, LEARNERS):
                        continue
                    score, w = fit_cue_model(
                        learner, train, _table_of(calibrated, model), keep_fraction, int(seeds[s]), quick
                    )
                    add(model, learner, calibrated, score(test))
                    if w is not None:
                        names = data.table(calibrated, model).names
                        wrows += [
                            {
                                "model": model,
                                "learner": learner,
                                "calibrated": calibrated,
                                "split": s,
                                "cue": c,
                                "weight": float(x),
                            }
                            for c, x in zip(names, w)
                        ]
    per_case = pd.concat(rows, ignore_index=True).dropna(subset=["retention"])
    return per_case, pd.DataFrame(wrows)


def logo_splits(groups):
    """Leave-one-group-out: one split per group, the group as the test side.

    >>> [(tr.tolist(), te.tolist()) for tr, te in logo_splits(["a", "b", "a"])]
    [([1], [0, 2]), ([0, 2], [1])]
    """
    groups = np.asarray(groups)
    return [(np.flatnonzero(groups != g), np.flatnonzero(groups == g)) for g in np.unique(groups)]


KEYS = ["evaluation", "model", "learner", "calibrated"]


def summarise_cases(per_case: pd.DataFrame, keep_fraction: float, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Mean and std over splits of the test-case mean, and a 95% group-bootstrap interval of the mean.

    The interval resamples groups (conversations; questions on LongMemEval) of the per-case
    retention averaged over the splits in which the case was tested.
    """
    out = []
    for key, d in per_case.groupby(KEYS, sort=False):
        by_split = d.groupby("split")["retention"].mean()
        by_case = d.groupby(["case_id", "group"])["retention"].mean()
        m, lo, hi = paired_bootstrap(
            by_case.to_numpy(), n_boot=n_boot, seed=seed, groups=by_case.index.get_level_values("group")
        )
        out.append(
            {
                **dict(zip(KEYS, key)),
                "regime": "blind",
                "keep_fraction": keep_fraction,
                "mean": float(by_split.mean()),
                "std": float(by_split.std(ddof=1)) if len(by_split) > 1 else 0.0,
                "ci_low": lo,
                "ci_high": hi,
                "n_splits": int(len(by_split)),
            }
        )
    return pd.DataFrame(out)


def paired_gap(per_case: pd.DataFrame, a: dict, b: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    """Mean per-case gap ``a - b`` (rows selected by column values) with a 95% group-bootstrap interval."""

    def pick(sel):
        d = per_case
        for k, v in sel.items():
            d = d[d[k] == v]
        return d.groupby(["case_id", "group"])["retention"].mean()

    gap = (pick(a) - pick(b)).dropna()
    m, lo, hi = paired_bootstrap(gap.to_numpy(), n_boot=n_boot, seed=seed, groups=gap.index.get_level_values("group"))
    return {"mean_gap": m, "ci_low": lo, "ci_high": hi, "n_cases": int(len(gap))}


# --------------------------------------------------------------------------- weights, ablation, transfer, curve


def weight_table(
    data: CueData,
    learner: str = "surrogate",
    model: str = "cues",
    n_boot: int = 200,
    seed: int = 0,
    keep_fraction: float = 0.3,
    quick: bool = False,
) -> pd.DataFrame:
    """Signed weights of the calibrated cue value fit on all cases, with 95% group-bootstrap intervals.

    Weights are per percentile of the cue within its history, normalised to ``sum |w| = 1``
    in every fit, so a weight is the cue's share of the value's influence and its sign says
    whether high values mark turns to keep (+) or to forget (-). ``sign`` is ``+`` or ``-`` when
    the interval excludes 0, ``constant`` for a cue that does not vary in the data (``is_user`` in
    person-person chat), else ``?``.
    """
    n_boot = check_int("n_boot", n_boot, minimum=1)
    tof = _table_of(True, model)
    names = data.table(True, model).names

    def fit(d, w0=None):
        if learner == "surrogate":  # bootstrap refits start from the full fit (same minimum, fewer steps)
            tab = tof(d)
            w = fit_pairwise_logistic(tab.values, tab.length, retention_mass(d.cases), w0=w0)
        else:
            _, w = fit_cue_model(learner, d, tof, keep_fraction, seed, quick)
        return w

    w_full = fit(data)
    w_all = w_full / max(np.abs(w_full).sum(), 1e-12)
    groups = data.cases.groups
    uniq = np.unique(groups)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        pick = rng.choice(uniq, len(uniq), replace=True)
        idx = np.concatenate([np.flatnonzero(groups == g) for g in pick])
        _, d = data.subset(idx)
        w = fit(d, w_full)
        boots.append(w / max(np.abs(w).sum(), 1e-12))
    B = np.array(boots)
    tab = data.table(True, model)
    real = tab.values[tab.valid]
    constant = real.min(axis=0) == real.max(axis=0) if len(real) else np.ones(len(names), bool)
    lo, hi = np.percentile(B, [2.5, 97.5], axis=0)
    meta = {c.name: c for c in CUES}
    return pd.DataFrame(
        {
            "cue": names,
            "group": [meta[n].group for n in names],
            "refines": [meta[n].factor for n in names],
            "weight": w_all,
            "ci_low": lo,
            "ci_high": hi,
            "sign": np.where(constant, "constant", np.where(lo > 0, "+", np.where(hi < 0, "-", "?"))),
        }
    )


def ablation(
    data: CueData,
    splits,
    seeds,
    keep_fraction: float = 0.3,
    learner: str = "surrogate",
    n_boot: int = 1000,
    seed: int = 0,
    quick: bool = False,
) -> pd.DataFrame:
    """Retention lost when one cue group is dropped (calibrated cues, ``learner``), on the same splits.

    ``change`` is mean(ablated - full) per case (negative: the group helps), with a 95%
    group-bootstrap interval.
    """
    from memlib.cues import CUE_GROUPS

    rows = []
    for s, (tr, te) in enumerate(splits):
        _, train = data.subset(tr)
        _, test = data.subset(te)
        ev = RetentionEvaluator(test.cases, keep_fraction)
        for drop in (None, *CUE_GROUPS):

            def tof(d, drop=drop):
                return d.table(True).select(drop_groups=() if drop is None else (drop,))

            if drop is not None and not tof(train).names:
                continue
            score, _ = fit_cue_model(learner, train, tof, keep_fraction, int(seeds[s]), quick)
            rows.append(
                pd.DataFrame(
                    {
                        "dropped": drop or "none",
                        "split": s,
                        "case_id": test.cases.case_ids,
                        "group": test.cases.groups,
                        "retention": ev.per_case(score(test)),
                    }
                )
            )
    pc = pd.concat(rows, ignore_index=True).dropna(subset=["retention"])
    full = pc[pc["dropped"] == "none"].groupby(["case_id", "group"])["retention"].mean()
    out = []
    for drop, d in pc[pc["dropped"] != "none"].groupby("dropped", sort=False):
        gap = (d.groupby(["case_id", "group"])["retention"].mean() - full).dropna()
        m, lo, hi = paired_bootstrap(
            gap.to_numpy(), n_boot=n_boot, seed=seed, groups=gap.index.get_level_values("group")
        )
        cues = [c.name for c in CUES if c.group == drop]
        out.append({"dropped": drop, "cues": ", ".join(cues), "change": m, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(out)


def transfer(
    source: CueData,
    target: CueData,
    splits,
    keep_fraction: float = 0.3,
    learners=("surrogate",),
    models=CUE_MODELS,
    seed: int = 0,
    quick: bool = False,
) -> pd.DataFrame:
    """Models fit on all of ``source`` (calibrated cues), scored on the test cases of each split of ``target``.

    Returns per-case rows as :func:`evaluate` does, with ``evaluation = "transfer"``.
    """
    rows = []
    for model in models:
        for learner in learners:
            score, _ = fit_cue_model(learner, source, _table_of(True, model), keep_fraction, seed, quick)
            for s, (_, te) in enumerate(splits):
                _, test = target.subset(te)
                rows.append(
                    pd.DataFrame(
                        {
                            "evaluation": "transfer",
                            "model": model,
                            "learner": learner,
                            "calibrated": True,
                            "split": s,
                            "case_id": test.cases.case_ids,
                            "group": test.cases.groups,
                            "retention": RetentionEvaluator(test.cases, keep_fraction).per_case(score(test)),
                        }
                    )
                )
    return pd.concat(rows, ignore_index=True).dropna(subset=["retention"])


def transfer_share(summary: pd.DataFrame, random_level: float) -> pd.DataFrame:
    """In-domain and transfer means side by side and the share of the in-domain gain over random that survives."""
    t = summary[summary["evaluation"] == "transfer"]
    g = summary[summary["evaluation"] == "grouped"].set_index(["model", "learner", "calibrated"])["mean"]
    out = []
    for _, r in t.iterrows():
        key = (r["model"], r["learner"], r["calibrated"])
        if key not in g.index:
            continue
        gain = g[key] - random_level
        out.append(
            {
                "model": r["model"],
                "learner": r["learner"],
                "in_domain": g[key],
                "transfer": r["mean"],
                "random": random_level,
                "share_of_gain": (r["mean"] - random_level) / gain if gain > 0 else np.nan,
            }
        )
    return pd.DataFrame(out)


def keep_fraction_curve(data: CueData, splits, seeds, fractions=CURVE_FRACTIONS, quick: bool = False):
    """Compare test retention across keep fractions: the paper's value against the calibrated cue value.

    The paper's value is learned at each fraction; the calibrated cue value (the surrogate) does not
    depend on the fraction. Both are scored on the same splits.

    Returns ``model, keep_fraction, mean, std`` over splits.
    """
    rows = []
    for s, (tr, te) in enumerate(splits):
        _, train = data.subset(tr)
        _, test = data.subset(te)
        fits = {
            m: fit_cue_model("surrogate", train, _table_of(True, m), 0.3, int(seeds[s]), quick)[0] for m in CUE_MODELS
        }
        for f in fractions:
            ev = RetentionEvaluator(test.cases, f)
            rows.append(
                {
                    "model": PAPER_MODEL,
                    "keep_fraction": f,
                    "split": s,
                    "retention": ev.mean(_paper_scores(train, test, f, int(seeds[s]), quick)),
                }
            )
            for m, score in fits.items():
                rows.append({"model": m, "keep_fraction": f, "split": s, "retention": ev.mean(score(test))})
    d = pd.DataFrame(rows)
    return (
        d.groupby(["model", "keep_fraction"], sort=False)["retention"]
        .agg(mean="mean", std=lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0)
        .reset_index()
    )


__all__ = [
    "CURVE_FRACTIONS",
    "ablation",
    "evaluate",
    "keep_fraction_curve",
    "logo_splits",
    "paired_gap",
    "summarise_cases",
    "transfer",
    "transfer_share",
    "weight_table",
]
