"""The synthetic confound generator (the paper's section 4.1).

Each case holds ``n_gold`` gold items and ``n_distractors`` distractors, each a
factor vector in ``[0, 1]^7`` plus a time stamp. The design follows the paper:

* **gold** items are *old* and carry the true signal: high goal relevance,
  task utility and reliability;
* **distractors** are *recent* and carry two planted confounds (high value
  alignment and self relevance) plus high emotional noise.

The distributions are ours (the paper does not publish them). "High" is
``Beta(5, 2)`` (mean 0.71), "low" is ``Beta(2, 5)`` (mean 0.29); the design is
symmetric, so the three true-signal factors of gold mirror the three noisy
factors of distractors. Equal weights therefore see no difference on average,
while a weighting on the true-signal factors separates the two.
Gold ages are ``Uniform(20, 60)`` days, distractor ages ``Uniform(0, 10)`` days.
Usage history is 0 (no retrievals), so it is a dead factor.

>>> cs = make_cases(n_cases=3, seed=0)
>>> cs.n_cases, int(cs.length[0]), int(cs.n_gold[0])
(3, 20, 4)
"""

from __future__ import annotations

import numpy as np

from memlib import FACTORS
from memlib._checks import check_int
from memlib.cases import CaseSet

HIGH = (5.0, 2.0)
LOW = (2.0, 5.0)
#: Beta parameters per factor for (gold, distractor) items; usage history is 0.
DESIGN = {
    "emotional_intensity": (LOW, HIGH),
    "goal_relevance": (HIGH, LOW),
    "value_alignment": (LOW, HIGH),
    "self_relevance": (LOW, HIGH),
    "task_utility": (HIGH, LOW),
    "reliability": (HIGH, LOW),
}
GOLD_AGE_DAYS = (20.0, 60.0)
DISTRACTOR_AGE_DAYS = (0.0, 10.0)


#: The most cases one call draws (about 110 MB of factors at the default 20 items a case): a bound,
#: so a mistyped count fails at once instead of filling the memory.
MAX_CASES = 100_000
#: The most gold or distractor items one case holds.
MAX_ITEMS = 10_000


def make_cases(n_cases: int, seed: int = 0, n_gold: int = 4, n_distractors: int = 16) -> CaseSet:
    """Draw ``n_cases`` synthetic cases (see module docstring for the design).

    Item order within a case is shuffled; time is ``60 - age`` in days, so a
    larger time is more recent.
    """
    n_cases = check_int("n_cases", n_cases, minimum=1, maximum=MAX_CASES)
    seed = check_int("seed", seed, minimum=0)
    n_gold = check_int("n_gold", n_gold, minimum=1, maximum=MAX_ITEMS)
    n_distractors = check_int("n_distractors", n_distractors, minimum=1, maximum=MAX_ITEMS)
    rng = np.random.default_rng(seed)
    n = n_gold + n_distractors
    is_gold = np.r_[np.ones(n_gold, bool), np.zeros(n_distractors, bool)]
    factors, times, gold = [], [], []
    for _ in range(n_cases):
        F = np.zeros((n, len(FACTORS)))
        for name, (g, d) in DESIGN.items():
            j = FACTORS.index(name)
            F[:n_gold, j] = rng.beta(*g, size=n_gold)
            F[n_gold:, j] = rng.beta(*d, size=n_distractors)
        age = np.r_[rng.uniform(*GOLD_AGE_DAYS, size=n_gold), rng.uniform(*DISTRACTOR_AGE_DAYS, size=n_distractors)]
        perm = rng.permutation(n)
        factors.append(F[perm])
        times.append(GOLD_AGE_DAYS[1] - age[perm])
        gold.append(np.flatnonzero(is_gold[perm]))
    return CaseSet.from_cases(factors, times, gold, case_ids=[f"synthetic-{seed}-{i}" for i in range(n_cases)])
