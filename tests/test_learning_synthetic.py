import numpy as np
import pytest

from memlib import ParameterError
from memlib.learning import hill_climb
from memlib.metrics import RetentionEvaluator
from memlib.studies.synthetic import synthetic_confounds
from memlib.synthetic import make_cases

LIVE6 = np.array([True] * 6 + [False])


def test_best_so_far_is_non_decreasing_and_dead_factors_stay_zero():
    cs = make_cases(30, seed=2)
    res = hill_climb(RetentionEvaluator(cs, 0.4).objective, cs.live_factors, n_iter=80, restarts=2, seed=4)
    for h in res.history:
        assert np.all(np.diff(h) >= 0)
    assert res.weights[6] == 0.0
    assert res.train_return == pytest.approx(max(res.restart_returns))
    assert res.train_return == pytest.approx(RetentionEvaluator(cs, 0.4).objective(res.weights))


def test_only_strict_improvements_are_accepted():
    res = hill_climb(lambda w: 1.0, LIVE6, n_iter=50, restarts=1, seed=0)
    np.testing.assert_array_equal(res.weights, [1, 1, 1, 1, 1, 1, 0])  # the uniform init survives


def test_learner_is_deterministic_per_seed():
    obj = lambda w: -float(np.sum((w - np.arange(7) / 7) ** 2))  # noqa: E731
    a = hill_climb(obj, LIVE6, n_iter=60, seed=3)
    b = hill_climb(obj, LIVE6, n_iter=60, seed=3)
    c = hill_climb(obj, LIVE6, n_iter=60, seed=4)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert not np.array_equal(a.weights, c.weights)


def test_learner_refuses_no_live_factor():
    with pytest.raises(ParameterError, match="no live factor"):
        hill_climb(lambda w: 0.0, np.zeros(7, bool))


def test_synthetic_study_separates_gold_from_confounds():
    res = synthetic_confounds(seed=0)
    r = res.table.set_index("policy")["retention"]
    assert r["learned_V"] >= 0.95
    assert r["uniform_V"] <= r["learned_V"] - 0.2
    for p in ("emotion_only", "self_only", "recency_only"):
        assert r[p] <= 0.10, p
    assert r["random"] == pytest.approx(0.4)
    # true-signal factors outweigh the planted confounds
    w = res.weights.set_index("factor")["weight"]
    signal = w[["goal_relevance", "task_utility", "reliability"]].sum()
    assert signal > w[["value_alignment", "self_relevance", "emotional_intensity"]].sum()


def test_synthetic_study_is_reproducible():
    a = synthetic_confounds(seed=5, quick=True)
    b = synthetic_confounds(seed=5, quick=True)
    assert a.table.equals(b.table)
    np.testing.assert_array_equal(a.weights["weight"], b.weights["weight"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(keep_fraction=0), r"keep_fraction must be in \(0, 1\), got 0"),
        (dict(keep_fraction=1.5), r"keep_fraction must be in \(0, 1\), got 1.5"),
        (dict(n_train=0), "n_train must be an integer >= 1, got 0"),
        (dict(seed=-1), "seed must be an integer >= 0, got -1"),
    ],
)
def test_synthetic_study_rejects_bad_parameters(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        synthetic_confounds(**kwargs)


@pytest.mark.slow
def test_cma_es_keeps_dead_factors_at_zero_and_is_seeded():
    from memlib.learning import cma_es

    cs = make_cases(30, seed=2)
    ev = RetentionEvaluator(cs, 0.4)
    a = cma_es(ev.objective, cs.live_factors, max_evals=120, seed=1)
    b = cma_es(ev.objective, cs.live_factors, max_evals=120, seed=1)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.weights[6] == 0 and np.all(a.weights >= 0)
    assert a.train_return == pytest.approx(ev.objective(a.weights))
    assert a.n_evaluations <= 130 and np.all(np.diff(a.history[0]) >= 0)
    assert a.train_return > ev.objective(np.r_[np.ones(6), 0]) + 0.3  # beats the uniform start on confounds


def test_the_moved_fits_are_the_ones_memlib_learning_names():
    from memlib import learning, value_net

    assert learning.fit_mlp is value_net.fit_mlp and learning.fit_mlp_released is value_net.fit_mlp_released


@pytest.mark.parametrize("learner", ["memlib", "released", "signed"])
def test_a_recalled_score_changes_no_climb_and_each_vector_is_scored_once(learner, monkeypatch):
    """The climbs score each distinct weight vector once (learning.recalled) and land where re-scoring lands."""
    import memlib.learning as learning

    cs = make_cases(30, seed=5)
    ev = RetentionEvaluator(cs, 0.3)
    live = cs.live_factors.copy()
    live[1:3] = False  # few live factors: vectors clipped back to 0 are proposed again often

    def climb(objective):
        if learner == "memlib":
            return learning.hill_climb(objective, live, n_iter=120, seed=1)
        if learner == "released":
            return learning.hill_climb_released(objective, live)
        return learning.hill_climb_signed(objective, live.astype(float), n_iter=80)

    seen = []
    res = climb(lambda w: seen.append(w.tobytes()) or ev.objective(w))
    assert len(seen) == len(set(seen)) <= res.n_evaluations
    assert learner == "signed" or len(seen) < res.n_evaluations  # unclipped signed steps never repeat a vector
    monkeypatch.setattr(learning, "recalled", lambda objective: objective)  # every evaluation scored afresh
    again = climb(ev.objective)
    np.testing.assert_array_equal(res.weights, again.weights)
    assert res.train_return == again.train_return and res.n_evaluations == again.n_evaluations
    for h, h2 in zip(res.history, again.history):
        np.testing.assert_array_equal(h, h2)
