"""What the real-data studies share: group-aware splits, the learner's settings, learning and scoring per split.

They also share per-split summaries; what they read is a :class:`~.data_spec.DataSpec`.

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
from memlib.factors import REGIMES
from memlib.learning import N_ITER, RELEASED_LEARNER, RESTARTS, hill_climb, hill_climb_released
from memlib.metrics import CUTS, TIE_RULES, evaluator
from memlib.scoring import REGIME_FREE, SCORING_RULES, SINGLE_FACTOR, policy_scores
from memlib.studies._memo import Recall, content_key
from memlib.studies.data_spec import DataSpec

#: Quick mode takes at most ``QUICK_SPLITS`` splits (:func:`quick_splits`); what it reads is the data's
#: rule, :meth:`memlib.studies.data_spec.DataSpec.resolved`.
QUICK_SPLITS = 3
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
#: The most resampled splits a study takes (each split learns weights: 20 is the default).
MAX_SPLITS = 10_000


@dataclass(frozen=True)
class Protocol:
    """How a study splits, learns and counts retention (:data:`PROTOCOLS`).

    Attributes
    ----------
    splits : {'groups', 'shuffle'}
        ``groups``: :func:`group_splits` (numpy, seeded by the study's seed).
        ``shuffle``: the released experiment's, :func:`shuffle_splits`.
    learner : {'memlib', 'released'}
        :func:`memlib.learning.hill_climb` with :func:`learner_settings` and one
        seed per split, or :func:`memlib.learning.hill_climb_released` (seed 1 on
        every split).
    ties, cut
        The tie rule and keep-count rounding of the retention metric
        (:data:`memlib.metrics.TIE_RULES`, :data:`memlib.metrics.CUTS`).
    ddof : int
        Degrees of freedom of the standard deviation over splits (the released
        experiment reports the population's, 0).
    """

    splits: str = "groups"
    learner: str = "memlib"
    ties: str = "pessimistic"
    cut: str = "ceil"
    ddof: int = 1

    def __post_init__(self):
        check_choice("splits", self.splits, ("groups", "shuffle"))
        check_choice("learner", self.learner, ("memlib", "released"))
        check_choice("ties", self.ties, TIE_RULES)
        check_choice("cut", self.cut, CUTS)
        if self.ties == "pessimistic" and self.cut != "ceil":
            raise ParameterError("memlib's pessimistic tie rule is defined with its ceil cut only")

    def learn(self, objective, live, seed: int, quick: bool):
        """Learn weights under this protocol's learner: memlib's hill-climb at ``seed``, or the released one."""
        if self.learner == "released":
            settings = dict(RELEASED_LEARNER, n_iter=40) if quick else RELEASED_LEARNER
            return hill_climb_released(objective, live, **settings)
        return hill_climb(objective, live, seed=seed, **learner_settings(quick))


#: memlib's protocol and the authors' released experiment's (``experiments/lme_blind_forgetting.py``).
PROTOCOLS = {
    "memlib": Protocol(),
    "released": Protocol(splits="shuffle", learner="released", ties="stable", cut="floor", ddof=0),
}


def get_protocol(protocol) -> Protocol:
    """Return a :class:`Protocol` from itself or its name in :data:`PROTOCOLS`."""
    if isinstance(protocol, Protocol):
        return protocol
    return PROTOCOLS[check_choice("protocol", protocol, tuple(PROTOCOLS))]


def shuffle_splits(groups, n_splits: int = 20, first_seed: int = 100, keys=None, quick: bool = False):
    """Return the released experiment's splits: split ``r`` shuffles the groups with ``random.Random(first_seed + r)``.

    The groups are taken in the order they first appear among the cases (or
    by ``keys``, :func:`ordered_groups`); the first half (rounded down) of each
    shuffle trains. With one case per group (LongMemEval) this is the released
    ``shuffled = list(cases); Random(100 + rep).shuffle(shuffled); split =
    len(shuffled) // 2`` over the cases in that order.

    >>> [len(tr) for tr, te in shuffle_splits(["q1", "q2", "q3", "q4", "q5"], n_splits=2)]
    [2, 2]
    """
    import random

    n_splits = quick_splits(check_n_splits(n_splits), quick)
    groups = np.asarray(groups)
    uniq = list(pd.unique(groups)) if keys is None else list(ordered_groups(groups, keys))
    if len(uniq) < 2:
        raise ParameterError(
            f"too few usable cases to split: {len(groups)} cases in {len(uniq)} group(s); "
            "a train/test split needs at least 2 groups (conversations or questions)"
        )
    out = []
    for r in range(n_splits):
        order = list(uniq)
        random.Random(first_seed + r).shuffle(order)
        train = np.isin(groups, order[: len(order) // 2])
        out.append((np.flatnonzero(train), np.flatnonzero(~train)))
    return out


#: The learns a study shares while :func:`shared_learns` is open.
_LEARNS = Recall("shared_learns")


def shared_learns():
    """Within the block, :func:`learn` learns each training set under each protocol once and recalls it after.

    A study whose parts learn on the same cases (chapter 08: Table 3, Figure 3 at its keep fraction, the
    MLP ablation's linear value, the ladder's first rung) gets the same weights each time, computed once.
    Blocks nest: an inner block shares the outer one's learns (:class:`~._memo.Recall`).
    """
    return _LEARNS.block()


def _learn_key(train, keep_fraction: float, proto: Protocol, seed: int, quick: bool) -> tuple:
    """Return what a learn depends on: the training cases' content as the objective reads it, and the settings."""
    digest = content_key(train.factors, train.length, train.case_haystack, train.gold_case, train.gold_pos)
    # the released learner takes no seed of the study's (seed 1 on every split, RELEASED_LEARNER)
    return digest, keep_fraction, proto, seed if proto.learner == "memlib" else None, quick


def learn(train, keep_fraction: float, protocol, seed: int, quick: bool):
    """Weights learned on ``train`` under ``protocol`` (its tie rule, cut and learner) at ``seed``.

    Returns the :class:`~memlib.learning.LearnResult`; inside :func:`shared_learns` a learn of the same
    content and settings is recalled, not run again (the learners are deterministic).
    """
    proto = get_protocol(protocol)
    shared = _LEARNS.table()
    key = None if shared is None else _learn_key(train, keep_fraction, proto, seed, quick)
    if key is not None and key in shared:
        return shared[key]
    objective = evaluator(train, keep_fraction, proto.ties, proto.cut).objective
    result = proto.learn(objective, train.live_factors, seed, quick)
    if key is not None:
        shared[key] = result
    return result


def learner_settings(quick: bool) -> dict:
    """Hill-climb settings: the defaults, or a cheaper search in quick mode."""
    return dict(n_iter=100, restarts=1) if quick else dict(n_iter=N_ITER, restarts=RESTARTS)


def on_regime(study_on_cases, data, regime: str, keep_fraction: float, n_splits: int, seed: int, progress: bool):
    """Load one regime of ``data`` (a :class:`~.data_spec.DataSpec` or a dataset name) and run a study on its cases.

    The study runs as ``study_on_cases(cases, keep_fraction, n_splits, seed, quick, regime, progress)``; the
    result's ``info`` starts with the dataset's counts and the data that ran (:meth:`~.data_spec.DataSpec.info`).
    """
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    check_choice("regime", regime, REGIMES)
    data = DataSpec.of(data)
    ds, anns = data.load(progress, regimes=(regime,))
    result = study_on_cases(anns[regime].cases, keep_fraction, n_splits, seed, data.quick, regime, progress)
    result.info = {**ds.stats(), **data.info(), **result.info}
    return result


def ordered_groups(groups, keys=None) -> np.ndarray:
    """Return the distinct groups, in the order of their smallest case key (:attr:`~memlib.cases.CaseSet.keys`).

    Without keys, sorted by name. Keys that describe content and name no
    identifier make every split independent of how the ids are spelled and of
    the order of the file.

    >>> ordered_groups(["b", "a", "b"], keys=["k1", "k9", "k0"]).tolist()
    ['b', 'a']
    """
    groups = np.asarray(groups)
    if keys is None:
        return np.unique(groups)
    first = pd.Series(np.asarray(keys, dtype=str)).groupby(groups).min()
    return first.sort_values(kind="stable").index.to_numpy()


def group_splits(groups, n_splits: int, seed: int = 0, train_share: float = 0.5, keys=None):
    """Resampled train/test splits that keep each group on one side.

    Returns a list of ``(train_idx, test_idx)`` arrays of case indices. With ``G``
    groups, ``round(train_share * G)`` (at least 1, at most ``G - 1``) go to training.
    ``n_splits`` is at most :data:`MAX_SPLITS`. ``keys`` (one per case) order the
    groups before they are permuted (:func:`ordered_groups`).
    """
    n_splits = check_n_splits(n_splits)
    seed = check_int("seed", seed, minimum=0)
    train_share = check_fraction("train_share", train_share)
    groups = np.asarray(groups)
    uniq = ordered_groups(groups, keys)
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


def quick_splits(n_splits: int, quick: bool) -> int:
    """``n_splits``, at most :data:`QUICK_SPLITS` in quick mode.

    >>> quick_splits(20, quick=True), quick_splits(20, quick=False)
    (3, 20)
    """
    return min(n_splits, QUICK_SPLITS) if quick else n_splits


def split_plan(groups, n_splits: int, seed: int, keys=None, quick: bool = False):
    """Return the group-aware splits of :func:`group_splits` and one learner seed per split (:func:`quick_splits`)."""
    n_splits = quick_splits(n_splits, quick)
    return group_splits(groups, n_splits, seed, keys=keys), np.random.SeedSequence(seed).generate_state(n_splits)


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


def summarise(per_split: pd.DataFrame, keys, ddof: int = 1) -> pd.DataFrame:
    """Mean, std (``ddof`` 1 by default; 0 for one split) and count of ``retention`` per group of ``keys``."""
    g = per_split.groupby(list(keys), sort=False)["retention"]
    out = g.agg(mean="mean", std=lambda x: float(np.std(x, ddof=ddof)) if len(x) > 1 else 0.0, n_splits="count")
    return out.reset_index()


def _stable_scores(name: str, ev, cases, weights) -> np.ndarray:
    """Scores of a Table 3 policy under the stable tie rule: raw values, no tie jitter, float64 sums."""
    if name == "learned_V":
        return ev.scores(weights)
    if name == "uniform_V":
        return ev.scores(cases.live_factors.astype(np.float64))
    if name in SINGLE_FACTOR:
        return cases.factors[..., FACTORS.index(SINGLE_FACTOR[name])].astype(np.float64)
    if name == "recency_only":
        return cases.time.astype(np.float64)
    raise ParameterError(f"policy {name} has no score under the stable tie rule")


def evaluate_splits(
    regimes: dict,
    keep_fraction: float = 0.3,
    n_splits: int = 20,
    seed: int = 0,
    quick: bool = False,
    policies=REAL_POLICIES,
    progress: bool = False,
    protocol="memlib",
):
    """Learn on each split's training cases and score every policy on its test cases.

    Parameters
    ----------
    regimes : dict of str to CaseSet
        The same cases (same order) annotated in each regime.
    protocol : str or Protocol
        How to split, learn and count (:data:`PROTOCOLS`). Under the stable tie
        rule the ``random`` policy is left out (the studies report its expected
        retention instead).

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
        check_choice("policy", p, SCORING_RULES)
    proto = get_protocol(protocol)
    first = next(iter(regimes.values()))
    splits, learn_seeds = split_plan(first.groups, n_splits, seed, first.keys, quick)
    if proto.splits == "shuffle":
        splits = shuffle_splits(first.groups, n_splits, keys=first.keys, quick=quick)
    stable = proto.ties == "stable"
    if stable:
        policies = tuple(p for p in policies if p != "random")
    rows, wrows = [], []
    bar = tqdm(total=len(splits) * len(regimes), desc="splits", disable=not progress)
    for s, (train_idx, test_idx) in enumerate(splits):
        for regime, cases in regimes.items():
            train, test = cases.subset(train_idx), cases.subset(test_idx)
            learned = learn(train, keep_fraction, proto, int(learn_seeds[s]), quick)
            wrows += [
                {"regime": regime, "split": s, "factor": f, "weight": w} for f, w in zip(FACTORS, learned.weights)
            ]
            ev = evaluator(test, keep_fraction, proto.ties, proto.cut)
            for name in policies:
                if regime != "blind" and name in REGIME_FREE:
                    continue
                if stable:
                    r = ev.per_case(_stable_scores(name, ev, test, learned.weights))
                else:
                    r = ev.per_case(policy_scores(name, test, weights=learned.weights, seed=int(learn_seeds[s])))
                rows.append(
                    pd.DataFrame(
                        {
                            "policy": name,
                            "regime": regime,
                            "split": s,
                            "case_id": test.case_ids,
                            "key": test.keys,
                            "group": test.groups,
                            "retention": r,
                        }
                    )
                )
            bar.update()
    bar.close()
    per_case = pd.concat(rows, ignore_index=True).dropna(subset=["retention"])
    return per_case, pd.DataFrame(wrows)


def rank_by_worst_case(scores: pd.DataFrame, keys, corpus: str = "dataset") -> pd.DataFrame:
    """Rank configurations by their *worst* corpus, best first (ties: the better mean, then the first listed).

    A value an agent ships must hold on conversations nobody labelled, so it is chosen by the
    lowest of its held-out figures, not by their mean, which can be the best of two corpora and
    fail on a third. ``scores`` holds one ``mean`` per configuration (``keys``) and ``corpus``;
    returns ``keys..., worst, worst_corpus, mean``.

    >>> s = pd.DataFrame({"c": ["a", "a", "b", "b"], "dataset": ["x", "y", "x", "y"], "mean": [0.9, 0.3, 0.5, 0.5]})
    >>> rank_by_worst_case(s, ["c"]).values.tolist()
    [['b', 0.5, 'x', 0.5], ['a', 0.3, 'y', 0.6]]
    """
    keys = list(keys)
    rows = []
    for key, g in scores.groupby(keys, sort=False, dropna=False):
        at = g["mean"].idxmin()
        rows.append(
            {
                **dict(zip(keys, key if isinstance(key, tuple) else (key,))),
                "worst": float(g.loc[at, "mean"]),
                "worst_corpus": g.loc[at, corpus],
                "mean": float(g["mean"].mean()),
            }
        )
    out = pd.DataFrame(rows, columns=[*keys, "worst", "worst_corpus", "mean"])
    return out.sort_values(["worst", "mean"], ascending=False, kind="stable").reset_index(drop=True)


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
