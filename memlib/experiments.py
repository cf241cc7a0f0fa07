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
