"""What the real-data studies share: loading both regimes, group-aware splits, the learner's
settings, learning and scoring per split, and per-split summaries.

>>> import numpy as np
>>> [(len(tr), len(te)) for tr, te in group_splits(np.repeat(["a", "b", "c", "d"], 2), n_splits=2)]
[(4, 4), (4, 4)]
>>> learner_settings(quick=True)
{'n_iter': 100, 'restarts': 1}
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_choice, check_fraction, check_int
from memlib.learning import N_ITER, RESTARTS, hill_climb
from memlib.metrics import RetentionEvaluator
from memlib.scoring import POLICIES, REGIME_FREE, policy_scores

#: Conversations (or questions) used in quick mode, shared by every real-data notebook so
#: the embedding cache built by one serves the others.
QUICK_LIMIT = 4
#: Policies of Table 3, in the paper's order.
REAL_POLICIES = (
    "learned_V",
    "uniform_V",
    "self_only",
    "reliability_only",
    "goal_only",
    "emotion_only",
    "recency_only",
    "random",
)
#: The two regimes of the goal anchor.
REGIMES = ("blind", "oracle")
#: The most resampled splits a study takes (each split learns weights: 20 is the default).
MAX_SPLITS = 10_000


def learner_settings(quick: bool) -> dict:
    """Hill-climb settings: the defaults, or a cheaper search in quick mode."""
    return dict(n_iter=100, restarts=1) if quick else dict(n_iter=N_ITER, restarts=RESTARTS)


def load_regimes(
    dataset,
    quick: bool = False,
    limit: int | None = None,
    progress: bool = False,
    *,
    sample: int | None = None,
    factor_set: str = "paper",
    embedding: str = "fast",
):
    """Load a dataset and its cached blind and oracle factor tables.

    Parameters
    ----------
    dataset : str or path
    quick : bool
        Limit the data to :data:`QUICK_LIMIT` groups (unless ``limit`` or ``sample`` says otherwise).
    limit : int, optional
        The first ``limit`` groups (conversations or questions).
    sample : int, optional
        A seeded random sample of ``sample`` groups (:meth:`memlib.datasets.Dataset.sample`).
    factor_set : {'paper', 'extended'}
        :data:`memlib.factors.FACTOR_SETS`.
    embedding : {'fast', 'reference', 'int8'}
        :data:`memlib.embeddings.SETTINGS`; the studies run ``fast`` (128 word pieces) unless told.

    Returns ``(ds, {"blind": Annotation, "oracle": Annotation})``.
    """
    from memlib import datasets, factors

    ds = datasets.load(dataset)
    if quick and limit is None and sample is None:
        limit = QUICK_LIMIT
    if limit is not None:
        ds = ds.limit(check_int("limit", limit, minimum=1))
    if sample is not None:
        ds = ds.sample(check_int("sample", sample, minimum=1))
    anns = {r: factors.annotate(ds, r, factor_set=factor_set, embedding=embedding, progress=progress) for r in REGIMES}
    require_cases(ds.name, anns["blind"].cases)
    if not np.array_equal(anns["blind"].cases.case_ids, anns["oracle"].cases.case_ids):
        raise RuntimeError("blind and oracle annotations disagree on the cases")
    return ds, anns


def require_cases(dataset_name: str, cases) -> None:
    """Refuse an annotation with no usable case, in one line naming the dataset.

    Every study needs at least one question with a gold turn in its history;
    without one, pandas and numpy would fail later with errors that name neither.
    """
    if cases.n_cases == 0:
        raise ParameterError(f"{dataset_name}: no usable question (none has a gold turn in its history)")


def load_regime(dataset, regime: str, quick: bool = False, limit: int | None = None, progress: bool = False, **data):
    """Load a dataset and the cases of one regime: ``(ds, CaseSet)`` (``data`` as in :func:`load_regimes`)."""
    check_choice("regime", regime, REGIMES)
    ds, anns = load_regimes(dataset, quick=quick, limit=limit, progress=progress, **data)
    return ds, anns[regime].cases


def on_regime(
    study_on_cases,
    dataset,
    regime: str,
    keep_fraction: float,
    n_splits: int,
    seed: int,
    quick: bool,
    limit: int | None,
    progress: bool,
    **data,
):
    """Load one regime of a dataset and run ``study_on_cases(cases, keep_fraction, n_splits, seed, quick, regime,
    progress)`` on its cases; the result's ``info`` starts with the dataset's counts (``data`` as in
    :func:`load_regimes`)."""
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    ds, cases = load_regime(dataset, regime, quick=quick, limit=limit, progress=progress, **data)
    result = study_on_cases(cases, keep_fraction, n_splits, seed, quick, regime, progress)
    result.info = {**ds.stats(), **data, **result.info}
    return result


def group_splits(groups, n_splits: int, seed: int = 0, train_share: float = 0.5):
    """Resampled train/test splits that keep each group on one side.

    Returns a list of ``(train_idx, test_idx)`` arrays of case indices. With ``G``
    groups, ``round(train_share * G)`` (at least 1, at most ``G - 1``) go to training.
    ``n_splits`` is at most :data:`MAX_SPLITS`.
    """
    n_splits = check_n_splits(n_splits)
    seed = check_int("seed", seed, minimum=0)
    train_share = check_fraction("train_share", train_share)
    groups = np.asarray(groups)
    uniq = np.unique(groups)
    if len(uniq) == 0:
        raise ParameterError("no usable cases to split: no question has a gold turn")
    if len(uniq) < 2:
        raise ParameterError(
            f"too few usable cases to split: {len(groups)} cases in {len(uniq)} group(s); "
            "a train/test split needs at least 2 groups (conversations or questions)"
        )
    n_train = min(max(1, int(round(train_share * len(uniq)))), len(uniq) - 1)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_splits):
        perm = rng.permutation(uniq)
        train = np.isin(groups, perm[:n_train])
        out.append((np.flatnonzero(train), np.flatnonzero(~train)))
    return out


def check_n_splits(n_splits) -> int:
    """``n_splits`` as an int in ``[2, MAX_SPLITS]``.

    >>> check_n_splits(10**20)
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: n_splits must be at most 10000, got 100000000000000000000
    """
    return check_int("n_splits", n_splits, minimum=2, maximum=MAX_SPLITS)


def split_plan(groups, n_splits: int, seed: int):
    """The group-aware splits of :func:`group_splits` and one learner seed per split."""
    return group_splits(groups, n_splits, seed), np.random.SeedSequence(seed).generate_state(n_splits)


@dataclass
class RealDataResult:
    """Result of a real-data study (:mod:`memlib.studies.oracle_blind`, ``mlp``, ``sweep``, ``optimisers``).

    Attributes
    ----------
    summary : DataFrame
        The published table: ``policy, regime, keep_fraction, mean, std, n_splits`` and
        study-specific columns.
    per_split : DataFrame
        ``policy, regime, keep_fraction, split, retention``.
    per_case : DataFrame
        ``policy, regime, split, case_id, group, retention`` (test cases only).
    weights : DataFrame
        ``regime, split, factor, weight``.
    bootstrap : DataFrame
        Paired gaps of learned_V against other policies with 95% intervals.
    info : dict
    """

    summary: pd.DataFrame
    per_split: pd.DataFrame
    per_case: pd.DataFrame = None
    weights: pd.DataFrame = None
    bootstrap: pd.DataFrame = None
    info: dict = field(default_factory=dict)


def summarise(per_split: pd.DataFrame, keys) -> pd.DataFrame:
    """Mean, std (ddof 1; 0 for one split) and count of ``retention`` per group of ``keys``."""
    g = per_split.groupby(list(keys), sort=False)["retention"]
    out = g.agg(mean="mean", std=lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0, n_splits="count")
    return out.reset_index()


def evaluate_splits(
    regimes: dict,
    keep_fraction: float = 0.3,
    n_splits: int = 20,
    seed: int = 0,
    quick: bool = False,
    policies=REAL_POLICIES,
    progress: bool = False,
):
    """Learn on each split's training cases and score every policy on its test cases.

    Parameters
    ----------
    regimes : dict of str to CaseSet
        The same cases (same order) annotated in each regime.

    Returns
    -------
    per_case : DataFrame
        ``policy, regime, split, case_id, group, retention``.
    weights : DataFrame
        ``regime, split, factor, weight``.
    """
    from tqdm import tqdm

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    seed = check_int("seed", seed, minimum=0)
    for p in policies:
        check_choice("policy", p, POLICIES)
    first = next(iter(regimes.values()))
    splits, learn_seeds = split_plan(first.groups, n_splits, seed)
    rows, wrows = [], []
    bar = tqdm(total=n_splits * len(regimes), desc="splits", disable=not progress)
    for s, (train_idx, test_idx) in enumerate(splits):
        for regime, cases in regimes.items():
            train, test = cases.subset(train_idx), cases.subset(test_idx)
            learned = hill_climb(
                RetentionEvaluator(train, keep_fraction).objective,
                train.live_factors,
                seed=int(learn_seeds[s]),
                **learner_settings(quick),
            )
            wrows += [
                {"regime": regime, "split": s, "factor": f, "weight": w} for f, w in zip(FACTORS, learned.weights)
            ]
            ev = RetentionEvaluator(test, keep_fraction)
            for name in policies:
                if regime != "blind" and name in REGIME_FREE:
                    continue
                r = ev.per_case(policy_scores(name, test, weights=learned.weights, seed=int(learn_seeds[s])))
                rows.append(
                    pd.DataFrame(
                        {
                            "policy": name,
                            "regime": regime,
                            "split": s,
                            "case_id": test.case_ids,
                            "group": test.groups,
                            "retention": r,
                        }
                    )
                )
            bar.update()
    bar.close()
    per_case = pd.concat(rows, ignore_index=True).dropna(subset=["retention"])
    return per_case, pd.DataFrame(wrows)


def side_by_side(results: dict, index, value: str = "mean", paper: dict | None = None) -> pd.DataFrame:
    """One column of ``value`` per dataset, rows matched on ``index`` (in the first table's order).

    ``results`` maps a dataset name to a tidy table holding ``index`` and
    ``value`` columns. ``paper`` maps a row's key (a tuple when ``index`` names
    several columns) to the paper's figure, shown in a last column ``paper_mean``
    (NaN where the paper reports none): the only column holding a paper figure.

    >>> a = pd.DataFrame({"policy": ["x", "y"], "mean": [0.1, 0.2]})
    >>> b = pd.DataFrame({"policy": ["y", "x"], "mean": [0.4, 0.3]})
    >>> side_by_side({"A": a, "B": b}, ["policy"], paper={"y": 0.5}).to_dict("list")
    {'policy': ['x', 'y'], 'A': [0.1, 0.2], 'B': [0.3, 0.4], 'paper_mean': [nan, 0.5]}
    """
    index = list(index)
    cols = [t.set_index(index)[value].rename(name) for name, t in results.items()]
    out = pd.concat(cols, axis=1, sort=False)
    if paper is not None:
        keys = out.index if len(index) > 1 else out.index.tolist()
        out["paper_mean"] = [paper.get(k, np.nan) for k in keys]
    return out.reset_index()
