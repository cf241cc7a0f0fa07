import numpy as np
import pytest

from memlib import FACTORS, ParameterError
from memlib.forgetting import drop_to_budget, forget_score
from memlib.value import TIERS, encoding_tier, normalised_value, value


def test_factor_names_in_paper_order():
    assert FACTORS == (
        "emotional_intensity",
        "goal_relevance",
        "value_alignment",
        "self_relevance",
        "task_utility",
        "reliability",
        "usage_history",
    )


def test_value_is_linear_and_normalised_in_unit_interval():
    rng = np.random.default_rng(1)
    F = rng.random((50, 7))
    w = rng.random(7) * 3
    v = value(F, w)
    np.testing.assert_allclose(v, F @ w)
    vb = normalised_value(F, w)
    assert vb.min() >= 0 and vb.max() <= 1
    np.testing.assert_allclose(normalised_value(np.ones((1, 7)), w), [1.0])


def test_negative_or_misshaped_weights_are_refused():
    with pytest.raises(ParameterError, match="usage_history=-1"):
        value(np.zeros((2, 7)), [1, 1, 1, 1, 1, 1, -1])
    with pytest.raises(ParameterError, match="shape"):
        value(np.zeros((2, 7)), [1, 1])


def test_encoding_tiers_at_thresholds():
    v = [0.0, 0.1999, 0.2, 0.4499, 0.45, 0.6999, 0.7, 1.0]
    assert encoding_tier(v).tolist() == [
        "shallow",
        "shallow",
        "semantic",
        "semantic",
        "schematic",
        "schematic",
        "meta",
        "meta",
    ]
    assert tuple(TIERS) == ("shallow", "semantic", "schematic", "meta")
    with pytest.raises(ParameterError):
        encoding_tier([1.2])


def test_forget_score_matches_eq3_and_its_monotonicity():
    s = forget_score([8.0], [1], [2.0], beta=0.5)
    assert s[0] == pytest.approx(8.0**0.7 / 2 / 2)
    ages = forget_score([1, 2, 4], [0, 0, 0], [1, 1, 1])
    assert np.all(np.diff(ages) > 0)  # older forgets sooner
    uses = forget_score([5, 5, 5], [0, 1, 5], [1, 1, 1])
    assert np.all(np.diff(uses) < 0)  # retrieval protects
    vals = forget_score([5, 5, 5], [0, 0, 0], [0, 1, 3])
    assert np.all(np.diff(vals) < 0)  # value resists
    np.testing.assert_allclose(forget_score([5, 5], [0, 0], [0, 9], beta=0), forget_score([5, 5], [0, 0], [0, 0]))


def test_forget_score_rejects_negative_inputs():
    with pytest.raises(ParameterError, match="age_days"):
        forget_score([-1], [0], [0])
    with pytest.raises(ParameterError, match="beta"):
        forget_score([1], [0], [0], beta=-1)


def test_drop_to_budget_drops_highest_scores_first():
    keep = drop_to_budget([0.5, 3.0, 1.0, 2.0], budget=2)
    assert keep.tolist() == [True, False, True, False]
    assert drop_to_budget([1.0, 2.0], budget=5).all()
    assert not drop_to_budget([1.0, 2.0], budget=0).any()
    with pytest.raises(ParameterError, match="budget"):
        drop_to_budget([1.0], budget=-1)
