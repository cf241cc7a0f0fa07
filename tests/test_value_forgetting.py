import numpy as np
import pytest

from memlib import FACTORS, ParameterError
from memlib.forgetting import consolidation_drops, drop_to_budget, forget_score, over_budget
from memlib.value import TIERS, CueValue, LinearValue, Value, encoding_tier, normalised_value, value


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


def test_consolidation_drops_the_highest_scores_and_the_older_of_a_tie_first():
    s = [2.0, 5.0, 5.0, 1.0, 3.0]
    drop, order = consolidation_drops(s, budget=4)
    assert drop.tolist() == [False, True, False, False, False] and order.tolist() == [1]
    drop, order = consolidation_drops(s, budget=2)
    assert drop.tolist() == [False, True, True, False, True] and order.tolist() == [1, 2, 4]
    for budget in (5, 9, None):  # within the budget, or no budget: nothing goes
        drop, order = consolidation_drops(s, budget=budget)
        assert not drop.any() and order.tolist() == []
        assert not over_budget(np.ones(5, bool), budget)
    assert over_budget(np.ones(5, bool), 4) and not over_budget([True, True, False, False, False], 2)
    np.testing.assert_array_equal(drop_to_budget(s, budget=2), ~consolidation_drops(s, budget=2)[0])


def test_pinned_items_stay_and_use_the_budget_only_when_asked():
    s, pinned = [4.0, 3.0, 2.0, 1.0], [True, False, False, False]
    assert consolidation_drops(s, 2, pinned=pinned)[1].tolist() == [1]  # three candidates, room for two
    assert consolidation_drops(s, 2, pinned=pinned, count_pinned=True)[1].tolist() == [1, 2]
    drop, order = consolidation_drops(s, 0, pinned=pinned, count_pinned=True)
    assert order.tolist() == [1, 2, 3] and not drop[0]  # the pinned item stays, whatever its score
    # an item that is not eligible (expired) neither counts nor goes
    eligible = [True, True, True, False]
    assert consolidation_drops(s, 2, pinned=pinned, eligible=eligible)[1].tolist() == []
    assert consolidation_drops(s, 2, pinned=pinned, eligible=eligible, count_pinned=True)[1].tolist() == [1]
    assert over_budget(eligible, 2, pinned=pinned, count_pinned=True)
    assert not over_budget(eligible, 2, pinned=pinned)


def test_a_token_budget_drops_in_forget_order_until_the_rest_fits():
    s, tokens = [1.0, 4.0, 3.0, 2.0], [5, 2, 10, 3]  # 20 tokens; forget order 1, 2, 3, 0
    drop, order = consolidation_drops(s, tokens=tokens, budget_tokens=8)
    assert order.tolist() == [1, 2] and drop.tolist() == [False, True, True, False]  # 20 -> 18 -> 8
    assert consolidation_drops(s, tokens=tokens, budget_tokens=20)[1].tolist() == []
    assert consolidation_drops(s, 1, tokens=tokens, budget_tokens=8)[1].tolist() == [1, 2, 3]  # both must hold
    pinned = [True, False, False, False]  # its 5 tokens count only when asked
    assert consolidation_drops(s, tokens=tokens, budget_tokens=13, pinned=pinned)[1].tolist() == [1]  # 15 -> 13
    kw = {"tokens": tokens, "pinned": pinned, "count_pinned": True}
    assert consolidation_drops(s, budget_tokens=13, **kw)[1].tolist() == [1, 2]  # 20 -> 18 -> 8
    assert consolidation_drops(s, budget_tokens=4, **kw)[1].tolist() == [1, 2, 3]  # the pinned alone are over
    assert over_budget(np.ones(4, bool), budget_tokens=19, tokens=tokens)
    assert not over_budget(np.ones(4, bool), budget_tokens=20, tokens=tokens)


def test_consolidation_drops_refuses_bad_input():
    with pytest.raises(ParameterError, match="a token budget needs the tokens"):
        consolidation_drops([1.0, 2.0], budget_tokens=1)
    with pytest.raises(ParameterError, match="budget must be an integer >= 0"):
        consolidation_drops([1.0, 2.0], budget=-1)
    with pytest.raises(ParameterError, match="budget_tokens must be an integer >= 0"):
        consolidation_drops([1.0, 2.0], budget_tokens=1.5, tokens=[1, 1])
    with pytest.raises(ParameterError, match=r"scores must be one value per item \(1-d\), got shape \(\)"):
        consolidation_drops(1.0, budget=1)
    with pytest.raises(ParameterError, match="one value per item, got 2 for 1 items"):
        consolidation_drops([1.0, 2.0], budget=1, eligible=True)
    with pytest.raises(ParameterError, match="one value per item, got 2 for 3 items"):
        consolidation_drops([1.0, 2.0], budget=1, eligible=[True, True, True])
    with pytest.raises(ParameterError, match=r"pinned must have shape \(2,\)"):
        consolidation_drops([1.0, 2.0], budget=1, pinned=[True])
    with pytest.raises(ParameterError, match="count_pinned must be True or False"):
        consolidation_drops([1.0, 2.0], budget=1, count_pinned="yes")


# --------------------------------------------------------------------------- the Value protocol


def old_value(F, w):
    """memlib.value.value as it was summed before the Value protocol: factor by factor, zero weights skipped."""
    F = np.asarray(F)
    w = np.asarray(w, dtype=float).astype(F.dtype if F.dtype.kind == "f" else float)
    out = np.zeros(F.shape[:-1], dtype=w.dtype)
    for j in np.flatnonzero(w):
        out += F[..., j] * w[j]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_value_is_the_old_sum_bit_for_bit_and_the_same_float_at_any_position(dtype):
    rng = np.random.default_rng(3)
    F = rng.random((4, 300, 7)).astype(dtype)
    w = rng.random(7) * 3
    w[[2, 6]] = 0.0
    lv = LinearValue(w)
    v = lv.score(F)
    assert v.dtype == dtype
    np.testing.assert_array_equal(v, old_value(F, w))
    np.testing.assert_array_equal(v, value(F, w))
    perm = rng.permutation(300)
    np.testing.assert_array_equal(lv.score(F[:, perm]), v[:, perm])  # no row rounds by where it sits
    np.testing.assert_array_equal(lv.score(F[1, 7:8]), v[1, 7:8])
    np.testing.assert_array_equal(normalised_value(F, w), v / w.sum())
    np.testing.assert_array_equal(lv.normalised(F), normalised_value(F, w))


def test_linear_value_reads_an_object_holding_factors_and_refuses_bad_input():
    from memlib.cases import CaseSet

    rng = np.random.default_rng(4)
    cs = CaseSet.from_cases([rng.random((5, 7)), rng.random((3, 7))], [np.arange(5.0), np.arange(3.0)], [[0], [1]])
    lv = LinearValue(np.arange(7.0))
    np.testing.assert_array_equal(lv.score(cs), lv.score(cs.factors))
    assert lv.feature_names == FACTORS and lv.reads == "factors" and not lv.signed
    with pytest.raises(ParameterError, match="factor array must have 7 columns, got 6"):
        lv.score(np.zeros((2, 6)))
    with pytest.raises(ParameterError, match="factor array must have 7 columns, got 0"):
        lv.score(3.0)
    with pytest.raises(ParameterError, match="negative: emotional_intensity=-0.5"):
        LinearValue([-0.5, 0, 0, 0, 0, 0, 0])
    with pytest.raises(ParameterError, match=r"weights must have shape \(7,\)"):
        LinearValue(np.ones((7, 1)))
    with pytest.raises(ParameterError, match="finite"):
        LinearValue([np.nan] * 7)


def test_linear_value_keeps_its_weights_and_leaves_the_callers_array_alone():
    w = np.ones(7)
    lv = LinearValue(w)
    w[0] = 5.0  # the caller's array stays writable, and the value does not follow it
    assert lv.weights.tolist() == [1.0] * 7
    with pytest.raises(ValueError, match="read-only"):
        lv.weights[0] = 2.0
    assert lv == LinearValue(np.ones(7)) and lv != LinearValue(np.arange(7.0))
    assert LinearValue(np.zeros(7)).normalise(np.array([0.0, 0.0])).tolist() == [0.0, 0.0]


def test_both_values_implement_the_protocol():
    from memlib.cues import STORE_CUES

    rng = np.random.default_rng(5)
    lv = LinearValue(rng.random(7))
    cv = CueValue(rng.normal(size=2 * len(STORE_CUES) - 1), interactions=True, quantiles=np.linspace(-2, 2, 101))
    for v, X in ((lv, rng.random((40, 7))), (cv, rng.random((40, len(STORE_CUES))))):
        assert isinstance(v, Value)
        s = v.score(X)
        np.testing.assert_array_equal(v(X), s)
        C = v.contributions(X)
        assert C.shape == (40, len(v.feature_names))
        np.testing.assert_allclose(C.sum(axis=1), s, rtol=1e-12, atol=1e-12)  # the terms sum to the value
        nb = v.normalised(X)
        assert np.all((nb >= 0) & (nb <= 1))
        order = np.argsort(s)
        assert np.all(np.diff(nb[order]) >= 0)  # V-bar never reverses the order of V
        np.testing.assert_array_equal(nb, v.normalise(s))
    # eq. 3 reads the paper's V as the paper writes it, and a signed cue value's V-bar
    s = lv.score(np.ones((1, 7)))
    np.testing.assert_array_equal(lv.eq3_value(s), s)
    X = rng.random((3, len(STORE_CUES)))
    np.testing.assert_array_equal(cv.eq3_value(cv.score(X)), cv.normalised(X))
    assert cv.signed and cv.reads == "cues"


def test_cue_value_score_is_the_old_matrix_product_bit_for_bit():
    from memlib.cues import STORE_CUES

    rng = np.random.default_rng(6)
    cv = CueValue(rng.normal(size=len(STORE_CUES)))
    X = rng.normal(size=(500, len(STORE_CUES)))
    np.testing.assert_array_equal(cv.score(X), X @ cv.weights)
    with pytest.raises(ParameterError, match=r"store cues must have shape \(n, 12\), got \(3, 7\)"):
        cv.score(np.zeros((3, 7)))
