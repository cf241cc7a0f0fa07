"""Chapter 03: oracle vs blind forgetting (the paper's Table 3, Figure 2 and bootstrap).

:func:`oracle_vs_blind_on_cases` learns and scores every policy in both regimes
over resampled group-aware splits of the same cases; :func:`oracle_vs_blind`
loads the blind and oracle annotations of its data and calls it. Its ``summary``
carries the mean learned weights of each regime on the ``learned_V`` rows
(columns ``w_<factor>``), which :func:`memlib.learned_weights` reads.

>>> import pandas as pd
>>> summary = pd.DataFrame({"policy": ["learned_V", "learned_V"], "regime": ["oracle", "blind"],
...                         "mean": [0.9, 0.6], "std": [0.01, 0.02]})
>>> table3(summary, "locomo").round(2).to_dict("records")
[{'policy': 'learned_V', 'oracle_mean': 0.9, 'oracle_std': 0.01, 'blind_mean': 0.6, 'blind_std': 0.02}]
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import check_fraction, check_int
from memlib.metrics import expected_random_retention, paired_bootstrap
from memlib.studies._common import (
    REAL_POLICIES,
    RealDataResult,
    evaluate_splits,
    get_protocol,
    summarise,
)
from memlib.studies.data_spec import DataSpec


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
    regimes: dict, keep_fraction=0.3, n_splits=20, seed=0, quick=False, n_boot=1000, progress=False, protocol="memlib"
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


#: The data Table 3 reads unless told: LoCoMo in the paper and extended factor sets.
DATA = DataSpec("locomo", factor_set="both")


def oracle_vs_blind(
    data: DataSpec | str = DATA, keep_fraction=0.3, n_splits=20, seed=0, n_boot=1000, protocol=None, progress=False
) -> RealDataResult:
    """Table 3 / Figure 2: every policy in both regimes over resampled group-aware 50/50 splits.

    ``data`` (a :class:`~.data_spec.DataSpec`, or a dataset name for :data:`DATA` on it) chooses
    the dataset, its part, the embedding, the readings and the factor set: ``paper`` (Table 1 as
    stated), ``extended`` (our reliability cues), ``released`` (the authors' released experiment),
    ``both`` (the default: paper and extended on the same splits, told apart by a ``factor_set``
    column in every table) or ``all`` (the three). ``protocol`` (:data:`~._common.PROTOCOLS`)
    defaults to ``released`` for the released factor set and to ``memlib`` otherwise.
    """
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    n_splits = check_int("n_splits", n_splits, minimum=2)
    data = DataSpec.of(data, like=DATA)
    parts = []
    for fs in data.factor_sets:
        label = protocol if isinstance(protocol, str) else ("released" if fs == "released" else "memlib")
        proto = get_protocol(protocol if protocol is not None else label)
        ds, anns = dataclasses.replace(data, factor_set=fs).load(progress)
        regimes = {r: a.cases for r, a in anns.items()}
        part = oracle_vs_blind_on_cases(regimes, keep_fraction, n_splits, seed, data.quick, n_boot, progress, proto)
        part.info = {
            **ds.stats(),
            "usable_cases_used": int(regimes["blind"].n_cases),
            "inert_factors": anns["blind"].inert,
            "embedding": data.embedding_setting,
            "protocol": label,
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

    info = {**parts[0][1].info, "factor_set": data.factor_set}
    return RealDataResult(
        stack("summary"), stack("per_split"), stack("per_case"), stack("weights"), stack("bootstrap"), info
    )


def _per_factor_set(layout, table: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """``layout(part, dataset)`` of each factor set's part of ``table``, stacked, with ``factor_set`` first."""
    parts = [
        layout(part.drop(columns="factor_set"), dataset).assign(factor_set=fs)
        for fs, part in table.groupby("factor_set", sort=False)
    ]
    return pd.concat([p[["factor_set", *p.columns[:-1]]] for p in parts], ignore_index=True)


def table3(summary: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Table 3 layout: one row per policy, ``oracle_mean/std`` and ``blind_mean/std`` columns.

    When ``dataset`` is the paper's (LongMemEval-S), ``paper_oracle`` and
    ``paper_blind`` columns hold the paper's means for comparison.
    """
    from memlib import paper

    if "factor_set" in summary:
        return _per_factor_set(table3, summary, dataset)
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
        return _per_factor_set(mean_weights, weights, dataset)
    out = weights.pivot_table(index="factor", columns="regime", values="weight", aggfunc=["mean", "std"], sort=False)
    out.columns = [f"{regime}_{stat}" for stat, regime in out.columns]
    out = out.reindex(list(FACTORS)).reset_index()
    if dataset == paper.PAPER_DATASET:
        out["paper_blind"] = out["factor"].map(paper.PAPER_BLIND_WEIGHTS)
    return out
