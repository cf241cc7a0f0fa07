"""Chapter 03: oracle vs blind forgetting (the paper's Table 3, Figure 2 and bootstrap).

:func:`oracle_vs_blind_on_cases` learns and scores every policy in both regimes
over resampled group-aware splits of the same cases; :func:`oracle_vs_blind`
loads a dataset's blind and oracle annotations and calls it. Its ``summary``
carries the mean learned weights of each regime on the ``learned_V`` rows
(columns ``w_<factor>``), which :func:`memlib.learned_weights` reads.

>>> import pandas as pd
>>> summary = pd.DataFrame({"policy": ["learned_V", "learned_V"], "regime": ["oracle", "blind"],
...                         "mean": [0.9, 0.6], "std": [0.01, 0.02]})
>>> table3(summary, "locomo").round(2).to_dict("records")
[{'policy': 'learned_V', 'oracle_mean': 0.9, 'oracle_std': 0.01, 'blind_mean': 0.6, 'blind_std': 0.02}]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import check_choice, check_fraction, check_int
from memlib.metrics import expected_random_retention, paired_bootstrap
from memlib.studies._common import (
    REAL_POLICIES,
    RealDataResult,
    evaluate_splits,
    get_protocol,
    load_regimes,
    summarise,
)


def bootstrap_gaps(
    per_case: pd.DataFrame,
    baselines=("uniform_V", "recency_only", "reliability_only"),
    n_boot: int = 1000,
    seed: int = 0,
    regime: str = "blind",
) -> pd.DataFrame:
    """Paired per-case bootstrap of learned_V minus each baseline, plus split wins.

    Each case's retention is averaged over the splits where it was a test case;
    the gap is learned minus baseline per case; cases are resampled (the paper's
    protocol) and, as a stricter check, whole groups (conversations) too.
    """
    d = per_case[per_case["regime"] == regime]
    # cases in the order of their content keys, so that renaming ids or reordering the file changes nothing
    by_case = (
        d.groupby(["policy", "key", "case_id", "group"], sort=False)["retention"]
        .mean()
        .unstack("policy")
        .sort_index(level="key")
    )
    by_split = d.groupby(["policy", "split"])["retention"].mean().unstack("policy")
    out = []
    for b in baselines:
        gap = (by_case["learned_V"] - by_case[b]).dropna()
        groups = gap.index.get_level_values("group")
        for resample, grp in (("cases", None), ("groups", groups)):
            m, lo, hi = paired_bootstrap(gap.to_numpy(), n_boot=n_boot, seed=seed, groups=grp)
            out.append(
                {
                    "comparison": f"learned_V - {b}",
                    "regime": regime,
                    "resample": resample,
                    "mean_gap": m,
                    "ci_low": lo,
                    "ci_high": hi,
                    "learned_wins_splits": int((by_split["learned_V"] > by_split[b]).sum()),
                    "n_splits": int(len(by_split)),
                    "n_cases": int(len(gap)),
                    "n_groups": int(groups.nunique()),
                }
            )
    return pd.DataFrame(out)


def with_mean_weights(summary: pd.DataFrame, weights: pd.DataFrame) -> pd.DataFrame:
    """``summary`` plus columns ``w_<factor>``: each regime's mean learned weight on its ``learned_V`` row.

    Other rows get NaN. ``weights`` is long: ``regime, split, factor, weight``.
    """
    mean = weights.groupby(["regime", "factor"])["weight"].mean()
    learned = summary["policy"] == "learned_V"
    columns = {f"w_{f}": summary["regime"].map(mean.xs(f, level="factor")).where(learned) for f in FACTORS}
    return summary.assign(**columns)


def oracle_vs_blind_on_cases(
    regimes: dict,
    keep_fraction: float = 0.3,
    n_splits: int = 20,
    seed: int = 0,
    quick: bool = False,
    n_boot: int = 1000,
    progress: bool = False,
    protocol="memlib",
) -> RealDataResult:
    """Every Table 3 policy in each regime of ``regimes`` (``{"blind": CaseSet, "oracle": CaseSet}``).

    Recency and random read no goal anchor, so they appear in the blind regime
    only. ``info`` holds the random policy's expected retention on the blind cases.
    ``protocol`` says how to split, learn and count (:data:`~._common.PROTOCOLS`).
    """
    proto = get_protocol(protocol)
    per_case, weights = evaluate_splits(
        regimes, keep_fraction, n_splits, seed, quick, progress=progress, protocol=proto
    )
    per_split = (
        per_case.groupby(["policy", "regime", "split"], sort=False)["retention"]
        .mean()
        .reset_index()
        .assign(keep_fraction=keep_fraction)
    )
    summary = with_mean_weights(summarise(per_split, ["policy", "regime", "keep_fraction"], proto.ddof), weights)
    boot = bootstrap_gaps(per_case, n_boot=n_boot, seed=seed)
    info = {"expected_random": expected_random_retention(regimes["blind"], keep_fraction, proto.cut)}
    return RealDataResult(summary, per_split, per_case, weights, boot, info)


def oracle_vs_blind(
    dataset="locomo",
    keep_fraction: float = 0.3,
    n_splits: int = 20,
    seed: int = 0,
    quick: bool = False,
    limit: int | None = None,
    n_boot: int = 1000,
    progress: bool = False,
    sample: int | None = None,
    factor_set: str = "both",
    embedding: str = "fast",
    protocol: str | None = None,
    readings: dict | None = None,
) -> RealDataResult:
    """Table 3 / Figure 2: every policy in both regimes over resampled group-aware 50/50 splits.

    ``factor_set`` is ``paper`` (Table 1 as stated), ``extended`` (our
    reliability cues), ``released`` (the authors' released experiment) or
    ``both`` (the default: paper and extended on the same splits, told apart by
    a ``factor_set`` column in every table) or ``all`` (the three). ``sample``, ``embedding`` and
    ``readings`` choose the data (see :func:`~._common.load_regimes`).
    ``protocol`` (:data:`~._common.PROTOCOLS`) defaults to ``released`` for the
    released factor set and to ``memlib`` otherwise.
    """
    from memlib.factors import ALL_FACTOR_SETS, FACTOR_SETS

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    n_splits = check_int("n_splits", n_splits, minimum=2)
    if factor_set == "both":
        sets = FACTOR_SETS
    elif factor_set == "all":
        sets = ALL_FACTOR_SETS
    else:
        sets = (check_choice("factor_set", factor_set, (*ALL_FACTOR_SETS, "both", "all")),)
    parts = []
    for fs in sets:
        proto = get_protocol(protocol if protocol is not None else ("released" if fs == "released" else "memlib"))
        ds, anns = load_regimes(
            dataset,
            quick=quick,
            limit=limit,
            progress=progress,
            sample=sample,
            factor_set=fs,
            embedding=embedding,
            readings=readings,
        )
        regimes = {r: a.cases for r, a in anns.items()}
        part = oracle_vs_blind_on_cases(regimes, keep_fraction, n_splits, seed, quick, n_boot, progress, proto)
        part.info = {
            **ds.stats(),
            "usable_cases_used": int(regimes["blind"].n_cases),
            "inert_factors": anns["blind"].inert,
            "embedding": embedding,
            "protocol": protocol if isinstance(protocol, str) else ("released" if fs == "released" else "memlib"),
            **part.info,
        }
        parts.append((fs, part))
    if len(parts) == 1:
        fs, result = parts[0]
        for name in ("summary", "per_split", "per_case", "weights", "bootstrap"):
            setattr(result, name, getattr(result, name).assign(factor_set=fs))
        result.info["factor_set"] = fs
        return result

    def stack(name):
        return pd.concat([getattr(p, name).assign(factor_set=fs) for fs, p in parts], ignore_index=True)

    info = {**parts[0][1].info, "factor_set": "both"}
    return RealDataResult(
        stack("summary"), stack("per_split"), stack("per_case"), stack("weights"), stack("bootstrap"), info
    )


def table3(summary: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Table 3 layout: one row per policy, ``oracle_mean/std`` and ``blind_mean/std`` columns.

    When ``dataset`` is the paper's (LongMemEval-S), ``paper_oracle`` and
    ``paper_blind`` columns hold the paper's means for comparison.
    """
    from memlib import paper

    if "factor_set" in summary:
        return pd.concat(
            [
                table3(part.drop(columns="factor_set"), dataset)
                .assign(factor_set=fs)
                .loc[:, lambda d: ["factor_set", *d.columns[:-1]]]
                for fs, part in summary.groupby("factor_set", sort=False)
            ],
            ignore_index=True,
        )
    wide = summary.pivot_table(index="policy", columns="regime", values=["mean", "std"], sort=False)
    wide.columns = [f"{regime}_{stat}" for stat, regime in wide.columns]
    order = [p for p in REAL_POLICIES if p in wide.index]
    cols = [c for c in ("oracle_mean", "oracle_std", "blind_mean", "blind_std") if c in wide.columns]
    out = wide.reindex(order)[cols].reset_index()
    if dataset == paper.PAPER_DATASET:
        means = paper.table3_means()
        for regime in ("oracle", "blind"):
            out[f"paper_{regime}"] = [means.get((p, regime), np.nan) for p in out["policy"]]
    return out


def mean_weights(weights: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Mean and std of the learned weights per factor and regime (plus the paper's blind means)."""
    from memlib import paper

    if "factor_set" in weights:
        return pd.concat(
            [
                mean_weights(part.drop(columns="factor_set"), dataset)
                .assign(factor_set=fs)
                .loc[:, lambda d: ["factor_set", *d.columns[:-1]]]
                for fs, part in weights.groupby("factor_set", sort=False)
            ],
            ignore_index=True,
        )

    out = weights.pivot_table(index="factor", columns="regime", values="weight", aggfunc=["mean", "std"], sort=False)
    out.columns = [f"{regime}_{stat}" for stat, regime in out.columns]
    out = out.reindex(list(FACTORS)).reset_index()
    if dataset == paper.PAPER_DATASET:
        out["paper_blind"] = out["factor"].map(paper.PAPER_BLIND_WEIGHTS)
    return out
