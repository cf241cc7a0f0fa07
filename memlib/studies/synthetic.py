"""Chapter 01: the synthetic confound study (the paper's section 4.1, Table 2).

:func:`synthetic_confounds_on_cases` learns on training cases and scores every
policy on test cases; :func:`synthetic_confounds` draws both from the generator
of :mod:`memlib.synthetic` and calls it.

>>> res = synthetic_confounds(seed=0, n_train=10, n_test=10, quick=True)
>>> list(res.table.columns)
['policy', 'retention', 'n_cases']
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import check_fraction, check_int
from memlib.cases import CaseSet
from memlib.learning import LearnResult, hill_climb
from memlib.metrics import RetentionEvaluator, expected_random_retention
from memlib.scoring import policy_scores
from memlib.studies._common import learner_settings
from memlib.synthetic import MAX_CASES, make_cases

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


def synthetic_confounds_on_cases(
    train: CaseSet, test: CaseSet, keep_fraction: float = 0.4, seed: int = 0, quick: bool = False
) -> SyntheticResult:
    """Learn weights on ``train`` (learner seed ``seed``) and score every Table 2 policy on ``test``.

    The ``random`` row is the expected retention of a uniformly random keep set (``k / n``).
    """
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    learned = hill_climb(
        RetentionEvaluator(train, keep_fraction).objective,
        live=train.live_factors,
        seed=seed,
        **learner_settings(quick),
    )
    ev = RetentionEvaluator(test, keep_fraction)
    rows = []
    for name in SYNTHETIC_POLICIES:
        if name == "random":
            r = expected_random_retention(test, keep_fraction)
        else:
            r = ev.mean(policy_scores(name, test, weights=learned.weights))
        rows.append({"policy": name, "retention": r, "n_cases": test.n_cases})
    weights = pd.DataFrame({"factor": FACTORS, "weight": learned.weights, "live": train.live_factors})
    return SyntheticResult(pd.DataFrame(rows), weights, learned)


def synthetic_confounds(
    seed: int = 0,
    n_train: int = 60,
    n_test: int = 60,
    keep_fraction: float = 0.4,
    quick: bool = False,
) -> SyntheticResult:
    """Run the synthetic confound study (Table 2): learn on ``n_train`` cases, test on ``n_test``.

    Training and test cases are drawn from independent random streams derived
    from ``seed``, so they are disjoint.
    """
    seed = check_int("seed", seed, minimum=0)
    n_train = check_int("n_train", n_train, minimum=1, maximum=MAX_CASES)
    n_test = check_int("n_test", n_test, minimum=1, maximum=MAX_CASES)
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    train_seed, test_seed, learn_seed = np.random.SeedSequence(seed).generate_state(3)
    train = make_cases(n_train, seed=int(train_seed))
    test = make_cases(n_test, seed=int(test_seed))
    result = synthetic_confounds_on_cases(train, test, keep_fraction, seed=int(learn_seed), quick=quick)
    result.params = dict(seed=seed, n_train=n_train, n_test=n_test, keep_fraction=keep_fraction, quick=quick)
    return result
