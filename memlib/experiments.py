"""Studies: each returns tidy pandas DataFrames computed from scratch.

>>> res = synthetic_confounds(seed=0, n_train=10, n_test=10, quick=True)
>>> list(res.table.columns)
['policy', 'retention', 'n_cases']
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS, synthetic
from memlib._checks import check_fraction, check_int
from memlib.learning import LearnResult, hill_climb
from memlib.metrics import RetentionEvaluator, expected_random_retention
from memlib.policies import policy_scores

#: Policies of Table 2 (the paper's list), plus the random baseline.
SYNTHETIC_POLICIES = ("learned_V", "uniform_V", "emotion_only", "self_only", "recency_only", "random")


@dataclass
class SyntheticResult:
    """Result of :func:`synthetic_confounds`.

    Attributes
    ----------
    table : DataFrame
        One row per policy: ``policy``, ``retention`` (mean over test cases), ``n_cases``.
    weights : DataFrame
        ``factor``, ``weight`` (learned; 0 on dead factors), ``live``.
    learning : LearnResult
        The learner's trace.
    params : dict
        The parameters the study ran with.
    """

    table: pd.DataFrame
    weights: pd.DataFrame
    learning: LearnResult
    params: dict = field(default_factory=dict)


def learner_settings(quick: bool) -> dict:
    """Hill-climb settings: the defaults, or a cheaper search in quick mode."""
    return dict(n_iter=100, restarts=1) if quick else dict(n_iter=300, restarts=3)


def synthetic_confounds(
    seed: int = 0,
    n_train: int = 60,
    n_test: int = 60,
    keep_fraction: float = 0.4,
    quick: bool = False,
) -> SyntheticResult:
    """The synthetic confound study (Table 2): learn on ``n_train`` cases, test on ``n_test``.

    Training and test cases are drawn from independent random streams derived
    from ``seed``, so they are disjoint. The ``random`` row is the expected
    retention of a uniformly random keep set (``k / n``).
    """
    seed = check_int("seed", seed, minimum=0)
    n_train = check_int("n_train", n_train, minimum=1)
    n_test = check_int("n_test", n_test, minimum=1)
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    train_seed, test_seed, learn_seed = np.random.SeedSequence(seed).generate_state(3)
    train = synthetic.make_cases(n_train, seed=int(train_seed))
    test = synthetic.make_cases(n_test, seed=int(test_seed))

    learned = hill_climb(
        RetentionEvaluator(train, keep_fraction).objective,
        live=train.live_factors,
        seed=int(learn_seed),
        **learner_settings(quick),
    )
    ev = RetentionEvaluator(test, keep_fraction)
    rows = []
    for name in SYNTHETIC_POLICIES:
        if name == "random":
            r = expected_random_retention(test, keep_fraction)
        else:
            r = ev.mean(policy_scores(name, test, weights=learned.weights))
        rows.append({"policy": name, "retention": r, "n_cases": n_test})
    weights = pd.DataFrame({"factor": FACTORS, "weight": learned.weights, "live": train.live_factors})
    params = dict(seed=seed, n_train=n_train, n_test=n_test, keep_fraction=keep_fraction, quick=quick)
    return SyntheticResult(pd.DataFrame(rows), weights, learned, params)


# --------------------------------------------------------------------------- factor overview (notebook 02)


def turn_factors(ds, ann) -> pd.DataFrame:
    """One row per unique haystack turn of an annotation, with its factors and metadata.

    A turn that appears in several haystacks (several histories) keeps its first occurrence.
    """
    parts = []
    seen = set()
    for g in range(ann.cases.n_haystacks):
        t = ann.turn_table(ds, g)
        t["row"] = ann.turn_rows[g, : ann.cases.length[g]]
        t = t[~t["row"].isin(seen)]
        seen.update(t["row"])
        parts.append(t)
    out = pd.concat(parts, ignore_index=True)
    gold_rows = set()
    cs = ann.cases
    gold_rows.update(ann.turn_rows[cs.case_haystack[cs.gold_case], cs.gold_pos].tolist())
    out["gold_for_any_question"] = out["row"].isin(gold_rows)
    return out


def factor_correlations(table: pd.DataFrame, live) -> pd.DataFrame:
    """Tidy Pearson correlations between the live factor columns (``a``, ``b``, ``r``)."""
    live = [f for f in FACTORS if f in set(live)]
    corr = table[live].corr()
    return corr.rename_axis("a").reset_index().melt(id_vars="a", var_name="b", value_name="r")


def goal_relevance_by_gold(blind, oracle) -> pd.DataFrame:
    """How well goal relevance singles out gold turns in each regime.

    For every case, the percentile rank of each gold turn's goal relevance among
    its haystack (0 = lowest, 1 = highest; ties count half) is averaged. Chance is
    0.5. Returns one row per regime with the mean goal relevance of gold and
    non-gold turns and the mean gold percentile.
    """
    rows = []
    gi = FACTORS.index("goal_relevance")
    for regime, ann in (("blind", blind), ("oracle", oracle)):
        cs = ann.cases
        goal = cs.factors[..., gi]
        valid = cs.valid
        h = cs.case_haystack[cs.gold_case]
        g = goal[h, cs.gold_pos]
        below = np.array([np.count_nonzero(goal[hh, : cs.length[hh]] < v) for hh, v in zip(h, g)])
        equal = np.array([np.count_nonzero(goal[hh, : cs.length[hh]] == v) for hh, v in zip(h, g)])
        pct = (below + 0.5 * (equal - 1)) / np.maximum(cs.length[h] - 1, 1)
        per_case = np.bincount(cs.gold_case, weights=pct, minlength=cs.n_cases) / np.maximum(cs.n_gold, 1)
        gold_sum = np.bincount(cs.gold_case, weights=g, minlength=cs.n_cases)
        case_sum = np.where(valid, goal, 0).sum(axis=1)[cs.case_haystack]
        nongold_mean = (case_sum - gold_sum) / (cs.length[cs.case_haystack] - cs.n_gold)
        rows.append({
            "regime": regime,
            "goal_relevance_gold": float(np.mean(g)),
            "goal_relevance_non_gold": float(np.mean(nongold_mean)),
            "gold_percentile": float(np.mean(per_case[cs.n_gold > 0])),
            "cases": int(cs.n_cases),
        })
    return pd.DataFrame(rows)
