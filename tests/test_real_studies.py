import numpy as np
import pandas as pd
import pytest

from memlib import ParameterError
from memlib import experiments as X
from memlib.learning import fit_mlp
from memlib.metrics import CaseSet, RetentionEvaluator, paired_bootstrap


def test_paired_bootstrap_recovers_a_planted_gap():
    rng = np.random.default_rng(0)
    gaps = 0.12 + rng.normal(0, 0.2, size=500)
    m, lo, hi = paired_bootstrap(gaps, n_boot=1000, seed=1)
    assert m == pytest.approx(gaps.mean())
    assert lo < 0.12 < hi and lo > 0.05 and hi < 0.2
    # no gap: the interval covers zero
    m0, lo0, hi0 = paired_bootstrap(rng.normal(0, 0.2, size=500), n_boot=1000, seed=1)
    assert lo0 < 0 < hi0
    # clustered resampling is wider when cases within a group move together
    groups = np.repeat(np.arange(10), 50)
    clustered = 0.1 + np.repeat(rng.normal(0, 0.2, size=10), 50) + rng.normal(0, 0.01, 500)
    _, clo, chi = paired_bootstrap(clustered, n_boot=1000, seed=1, groups=groups)
    _, ilo, ihi = paired_bootstrap(clustered, n_boot=1000, seed=1)
    assert chi - clo > 3 * (ihi - ilo)


def xor_cases(n_cases=80, seed=0):
    """Gold iff exactly one of two factors is high: no non-negative linear value separates it.

    Each case has 3 gold items with (high, low) or (low, high) and 17 others with
    (low, low) or (high, high); any positive weighting ranks (high, high) first.
    """
    rng = np.random.default_rng(seed)
    factors, times, gold = [], [], []
    for _ in range(n_cases):
        a = np.r_[rng.random(3) > 0.5, rng.random(17) > 0.5]
        b = np.r_[~a[:3], a[3:]]
        F = np.zeros((20, 7))
        F[:, 0] = np.where(a, 0.8, 0.2) + rng.normal(0, 0.05, 20)
        F[:, 3] = np.where(b, 0.8, 0.2) + rng.normal(0, 0.05, 20)
        F[:, 5] = rng.random(20)  # noise
        perm = rng.permutation(20)
        factors.append(F.clip(0, 1)[perm])
        times.append(np.arange(20.0))
        gold.append(np.flatnonzero(perm < 3))
    return CaseSet.from_cases(factors, times, gold)


def test_mlp_learns_an_interaction_a_linear_value_cannot():
    train, test = xor_cases(seed=0), xor_cases(seed=1)
    live = train.live_factors
    score = fit_mlp(train, live, epochs=300, seed=0)
    ev = RetentionEvaluator(test, 0.3)
    r_mlp = ev.mean(score(test.factors))
    from memlib.learning import hill_climb
    lin = hill_climb(RetentionEvaluator(train, 0.3).objective, live, n_iter=200, seed=0)
    r_lin = ev.objective(lin.weights)
    assert r_mlp >= 0.9
    assert r_mlp > r_lin + 0.2


def test_mlp_on_linearly_separable_factors_ranks_gold_first():
    rng = np.random.default_rng(3)
    F = [np.c_[rng.random((30, 1)), np.zeros((30, 6))] for _ in range(40)]
    gold = [np.argsort(-f[:, 0])[:3] for f in F]
    cs = CaseSet.from_cases(F, [np.arange(30.0)] * 40, gold)
    score = fit_mlp(cs, cs.live_factors, epochs=200, seed=0)
    assert RetentionEvaluator(cs, 0.1).mean(score(cs.factors)) == 1.0


def test_group_splits_keep_groups_apart_and_validate():
    groups = np.repeat(["a", "b", "c", "d"], 5)
    for tr, te in X.group_splits(groups, 10, seed=0):
        assert set(groups[tr]).isdisjoint(groups[te])
        assert len(tr) == len(te) == 10
    with pytest.raises(ParameterError, match="too few usable cases to split: 5 cases in 1 group"):
        X.group_splits(["a"] * 5, 3)
    with pytest.raises(ParameterError, match="n_splits must be an integer >= 2, got 1"):
        X.group_splits(groups, 1)


def planted_regimes(n_groups=6, per_group=10, seed=0):
    """Gold turns are reliable and old; the oracle goal column points at gold, the blind one is noise."""
    rng = np.random.default_rng(seed)
    out = {}
    for regime in ("blind", "oracle"):
        r = np.random.default_rng(seed)
        factors, times, gold, groups = [], [], [], []
        for g in range(n_groups):
            for c in range(per_group):
                F = r.random((30, 7)) * 0.5
                F[:, [2, 4, 6]] = 0
                gp = r.choice(30, 3, replace=False)
                F[gp, 5] += 0.5
                if regime == "oracle":
                    F[gp, 1] = 1.0
                factors.append(F)
                times.append(np.arange(30.0))
                gold.append(gp)
                groups.append(f"g{g}")
        out[regime] = CaseSet.from_cases(factors, times, gold, case_ids=[f"c{i}" for i in range(len(gold))],
                                         groups=groups)
    del rng
    return out


def test_evaluate_splits_and_bootstrap_on_planted_data():
    regimes = planted_regimes()
    per_case, weights = X.evaluate_splits(regimes, keep_fraction=0.3, n_splits=4, seed=0, quick=True)
    summary = per_case.groupby(["policy", "regime"])["retention"].mean()
    assert summary[("goal_only", "oracle")] == 1.0
    assert summary[("learned_V", "blind")] > 0.9
    assert summary[("reliability_only", "blind")] > 0.9
    assert ("recency_only", "oracle") not in summary.index and ("random", "oracle") not in summary.index
    assert summary[("random", "blind")] == pytest.approx(0.3, abs=0.1)
    assert set(weights["factor"][weights["weight"] > 0]) <= {"emotional_intensity", "goal_relevance",
                                                             "self_relevance", "reliability"}
    boot = X.bootstrap_gaps(per_case, n_boot=200)
    row = boot[(boot["comparison"] == "learned_V - recency_only") & (boot["resample"] == "cases")].iloc[0]
    assert row["ci_low"] > 0.3 and row["learned_wins_splits"] == 4


def test_evaluate_splits_rejects_unknown_policy():
    with pytest.raises(ParameterError, match="unknown policy 'oracle_magic'"):
        X.evaluate_splits(planted_regimes(), policies=("oracle_magic",), n_splits=2)


def test_real_study_parameter_errors():
    with pytest.raises(ParameterError, match=r"keep_fraction must be in \(0, 1\), got 1.5"):
        X.oracle_vs_blind("locomo", keep_fraction=1.5)
    with pytest.raises(ParameterError, match="n_splits must be an integer >= 2, got 1"):
        X.oracle_vs_blind("locomo", n_splits=1)
    with pytest.raises(ParameterError, match="unknown dataset 'nope'"):
        X.oracle_vs_blind("nope")


def test_same_seed_same_numbers():
    a, wa = X.evaluate_splits(planted_regimes(), n_splits=3, seed=4, quick=True)
    b, wb = X.evaluate_splits(planted_regimes(), n_splits=3, seed=4, quick=True)
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(wa, wb)


def test_table3_layout_and_paper_columns():
    summary = pd.DataFrame({"policy": ["learned_V", "learned_V", "recency_only"], "regime": ["oracle", "blind", "blind"],
                            "mean": [0.9, 0.5, 0.3], "std": [0.01, 0.02, 0.03]})
    t = X.table3(summary, "locomo")
    assert list(t["policy"]) == ["learned_V", "recency_only"] and "paper_blind" not in t
    t = X.table3(summary, "longmemeval_s")
    assert t.set_index("policy").loc["learned_V", "blind_mean"] == 0.5
    assert np.isnan(t.set_index("policy").loc["recency_only", "oracle_mean"])
    assert "paper_blind" in t and "paper_oracle" in t
