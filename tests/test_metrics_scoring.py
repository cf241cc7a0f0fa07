import numpy as np
import pytest

from memlib import ParameterError
from memlib.metrics import CaseSet, RetentionEvaluator, expected_random_retention, keep_count, retention
from memlib.scoring import SCORING_RULES, policy_scores


def reference_retention(scores, gold, k):
    """Slow reference: sort by score desc, non-gold before gold on ties, keep k."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i in gold))
    kept = set(order[:k])
    return len(kept & set(gold)) / len(gold)


def random_caseset(rng, n_cases=40, shared=False, ties=True):
    lengths = rng.integers(3, 30, size=n_cases)
    n_h = 5 if shared else n_cases
    hay_len = rng.integers(3, 30, size=n_h)
    factors = [np.round(rng.random((n, 7)), 1 if ties else 6) for n in hay_len]
    times = [np.arange(n, dtype=float) for n in hay_len]
    case_h = rng.integers(0, n_h, size=n_cases) if shared else np.arange(n_cases)
    gold = [rng.choice(hay_len[h], size=rng.integers(0, min(4, hay_len[h]) + 1), replace=False) for h in case_h]
    del lengths
    return CaseSet.from_haystacks(factors, times, case_h, gold)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("kappa", [0.1, 0.3, 0.5, 0.9])
def test_vectorised_retention_matches_slow_reference(shared, kappa):
    rng = np.random.default_rng(7)
    cs = random_caseset(rng, shared=shared)
    w = rng.random(7)
    scores = cs.factors @ w.astype(np.float32)
    got = retention(cs, scores, kappa)
    for c in range(cs.n_cases):
        h = cs.case_haystack[c]
        n = cs.length[h]
        gold = set(np.flatnonzero(cs.gold_mask(c)).tolist())
        if not gold:
            assert np.isnan(got[c])
            continue
        k = int(keep_count([n], kappa)[0])
        assert got[c] == pytest.approx(reference_retention(scores[h, :n].tolist(), gold, k)), c


def test_keep_count_rounds_up_without_float_artefacts():
    assert keep_count([10, 20, 7, 1, 3], 0.3).tolist() == [3, 6, 3, 1, 1]
    with pytest.raises(ParameterError, match=r"keep_fraction must be in \(0, 1\)"):
        keep_count([10], 0)


def test_ties_never_favour_gold_constant_score_keeps_nothing():
    cs = CaseSet.from_cases([np.zeros((10, 7))], [np.zeros(10)], gold=[[3]])
    assert retention(cs, np.zeros((1, 10)), 0.5).tolist() == [0.0]
    # but strictly higher gold is kept
    s = np.zeros((1, 10))
    s[0, 3] = 1
    assert retention(cs, s, 0.1).tolist() == [1.0]


def test_cases_without_gold_are_excluded_and_counted():
    cs = CaseSet.from_cases([np.eye(7)[[0, 1]], np.eye(7)[[0, 1]]], [np.zeros(2)] * 2, gold=[[0], []])
    assert cs.n_without_gold == 1
    ev = RetentionEvaluator(cs, 0.5)
    s = cs.factors[..., 0]
    assert np.isnan(ev.per_case(s)[1])
    assert ev.mean(s) == 1.0


def test_subset_keeps_retention_of_selected_cases():
    rng = np.random.default_rng(3)
    cs = random_caseset(rng, shared=True)
    w = rng.random(7)
    full = retention(cs, cs.factors @ w.astype(np.float32), 0.3)
    idx = np.array([5, 1, 17, 30])
    sub = cs.subset(idx)
    part = retention(sub, sub.factors @ w.astype(np.float32), 0.3)
    np.testing.assert_array_equal(part, full[idx])
    assert sub.n_haystacks <= 4


def test_shared_haystacks_equal_duplicated_haystacks():
    rng = np.random.default_rng(5)
    F = [rng.random((12, 7)), rng.random((9, 7))]
    T = [np.arange(12.0), np.arange(9.0)]
    case_h = [0, 0, 1, 0]
    gold = [[1, 2], [5], [0, 8], [11]]
    shared = CaseSet.from_haystacks(F, T, case_h, gold)
    dup = CaseSet.from_cases([F[h] for h in case_h], [T[h] for h in case_h], gold)
    w = rng.random(7)
    np.testing.assert_array_equal(
        RetentionEvaluator(shared, 0.3).per_case(RetentionEvaluator(shared, 0.3).scores(w)),
        RetentionEvaluator(dup, 0.3).per_case(RetentionEvaluator(dup, 0.3).scores(w)),
    )


def test_objective_equals_policy_scoring():
    rng = np.random.default_rng(11)
    cs = random_caseset(rng)
    w = rng.random(7)
    ev = RetentionEvaluator(cs, 0.3)
    assert ev.objective(w) == pytest.approx(ev.mean(policy_scores("learned_V", cs, weights=w)))


def test_random_policy_expectation_is_keep_fraction():
    rng = np.random.default_rng(0)
    cs = CaseSet.from_cases(
        [rng.random((20, 7)) for _ in range(50)],
        [np.arange(20.0)] * 50,
        gold=[rng.choice(20, 3, replace=False) for _ in range(50)],
    )
    ev = RetentionEvaluator(cs, 0.3)
    draws = [ev.mean(policy_scores("random", cs, seed=s)) for s in range(300)]
    assert expected_random_retention(cs, 0.3) == pytest.approx(0.3)
    assert np.mean(draws) == pytest.approx(0.3, abs=0.01)


def test_policy_errors_are_clear():
    cs = CaseSet.from_cases([np.zeros((3, 7))], [np.zeros(3)], gold=[[0]])
    with pytest.raises(ParameterError, match="unknown policy 'nope'"):
        policy_scores("nope", cs)
    with pytest.raises(ParameterError, match="needs weights"):
        policy_scores("learned_V", cs)
    assert "recency_only" in SCORING_RULES and "random" in SCORING_RULES


def test_the_scoring_rules_have_one_name():
    """SCORING_RULES: POLICIES, its 0.1 name, is the store's forgetting policies only (memlib.store.POLICIES)."""
    import memlib.scoring as scoring

    with pytest.raises(AttributeError, match="no attribute 'POLICIES'"):
        scoring.POLICIES  # noqa: B018


def old_padded_scores(ev, w):
    """RetentionEvaluator's scores as they were summed before memlib.value.linear_score: its own column loop."""
    w = np.asarray(w, dtype=np.float32)[ev.columns]
    F = ev.cases.factors[..., ev.columns].astype(np.float32)
    s = np.zeros(F.shape[:2], np.float32)
    for j in range(len(w)):
        s += F[..., j] * w[j]
    width = ev._outside.shape[1]
    return s[:, :width] + ev._outside


def old_stable_scores(ev, w):
    w, F = np.asarray(w, dtype=np.float64), ev.cases.factors.astype(np.float64)
    s = np.zeros(F.shape[:2])
    for j in range(F.shape[2]):
        s = s + F[..., j] * w[j]
    return s


def stable_rank_retention(cs, scores, k):
    """Slow reference of the released rule: each haystack's turns in a stable sort, best first; keep ``k``."""
    out = []
    for c in range(cs.n_cases):
        h = cs.case_haystack[c]
        gold = np.flatnonzero(cs.gold_mask(c))
        real = [i for i in range(cs.length[h]) if not np.isnan(scores[h, i])]
        nan = [i for i in range(cs.length[h]) if np.isnan(scores[h, i])]
        # the padding of the row (never gold) sorts after every real score and before a NaN one
        order = sorted(real, key=lambda i: -scores[h, i]) + [-1] * (scores.shape[1] - cs.length[h]) + nan
        out.append(len(set(order[: k[h]]) & set(gold.tolist())) / len(gold) if len(gold) else np.nan)
    return np.array(out)


@pytest.mark.parametrize("keep_fraction", [0.05, 0.3, 0.5, 0.9])
@pytest.mark.parametrize("cut", ["floor", "ceil"])
def test_stable_evaluator_is_the_stable_sort_rank_on_shared_haystacks_with_ties_and_infinities(keep_fraction, cut):
    from memlib.metrics import StableOrderEvaluator

    rng = np.random.default_rng(5)
    cs = random_caseset(rng, shared=True)
    ev = StableOrderEvaluator(cs, keep_fraction, cut)
    scores = ev.scores(rng.integers(0, 2, 7).astype(float))  # coarse: many ties at the cut
    for extreme in (None, -np.inf, np.inf, np.nan):
        s = scores.copy()
        if extreme is not None:
            s[rng.random(s.shape) < 0.2] = extreme
        np.testing.assert_array_equal(ev.per_case(s), stable_rank_retention(cs, s, ev.k))


@pytest.mark.parametrize("signed", [False, True])
def test_evaluator_scores_are_the_old_sums_bit_for_bit(signed):
    from memlib.metrics import StableOrderEvaluator

    rng = np.random.default_rng(11)
    cs = random_caseset(rng, ties=False)
    w = rng.normal(size=7) if signed else rng.random(7)
    w[3] = 0.0
    ev = RetentionEvaluator(cs, 0.3)
    np.testing.assert_array_equal(ev.scores(w), old_padded_scores(ev, w))
    st = StableOrderEvaluator(cs, 0.3)
    np.testing.assert_array_equal(st.scores(w), old_stable_scores(st, w))
    if not signed:  # the paper's value, as the scoring rule reads it: the same float32 sum
        np.testing.assert_array_equal(ev.scores(w)[cs.valid], policy_scores("learned_V", cs, w)[cs.valid])


def test_recency_and_single_factor_scores():
    F = np.zeros((3, 7))
    F[:, 3] = [0.1, 0.9, 0.5]
    cs = CaseSet.from_cases([F], [np.array([3.0, 1.0, 2.0])], gold=[[1]])
    assert retention(cs, policy_scores("self_only", cs), 0.3).tolist() == [1.0]
    assert retention(cs, policy_scores("recency_only", cs), 0.3).tolist() == [0.0]


def test_a_haystack_longer_than_its_padded_width_is_refused():
    cs = CaseSet.from_cases([np.zeros((3, 7))], [np.zeros(3)], gold=[[0]])
    with pytest.raises(ParameterError, match=r"haystack 0: length 6 is outside \[0, 3\], the padded width"):
        CaseSet(cs.factors, cs.time, np.array([6]), cs.case_haystack, cs.gold_case, cs.gold_pos, cs.case_ids, cs.groups)


@pytest.mark.parametrize("shared", [False, True])
def test_objective_is_the_mean_of_per_case_bit_for_bit_call_after_call(shared):
    """The objectives sum into arrays they keep and count ties only where a gold turn sits at the cut."""
    from memlib.metrics import StableOrderEvaluator

    rng = np.random.default_rng(12)
    cs = random_caseset(rng, shared=shared)
    evs = [RetentionEvaluator(cs, 0.3), StableOrderEvaluator(cs, 0.3, "floor"), StableOrderEvaluator(cs, 0.5)]
    ws = [rng.integers(0, 3, 7).astype(float), rng.random(7) * (rng.random(7) < 0.5), rng.normal(size=7), np.zeros(7)]
    for ev in evs:
        for w in ws + ws[::-1]:  # again, in another order: nothing of one call stays in the next
            assert ev.objective(w) == ev.mean(ev.scores(w))
    pessimistic, expected = evs[0].per_case(evs[0].scores(ws[0])), evs[0].per_case(evs[0].scores(ws[0]), "expected")
    assert np.nanmax(expected - pessimistic) > 0  # ties at the cut were counted


def test_a_zero_weight_leaves_out_only_finite_columns():
    from memlib.metrics import StableOrderEvaluator
    from memlib.value import linear_score

    F = np.full((1, 3, 7), 0.5)
    F[0, 1, 2] = np.inf  # 0 * inf is NaN: a column that is not finite is summed at any weight
    cs = CaseSet.from_cases([F[0]], [np.arange(3.0)], gold=[[0]])
    w = np.array([1.0, 1.0, 0.0, 0, 0, 0, 0])
    for ev in (StableOrderEvaluator(cs, 0.5), RetentionEvaluator(cs, 0.5, columns=np.ones(7, dtype=bool))):
        with np.errstate(invalid="ignore"):
            assert np.isnan(ev.scores(w)[0, 1]) and ev.scores(w)[0, 0] == 1.0
    start = np.array([np.inf, 1.0])
    np.testing.assert_array_equal(linear_score(np.ones((2, 3)), np.array([1.0, 2, 0]), out=start), [np.inf, 4.0])
    with pytest.raises(ParameterError, match="out must have shape"):
        linear_score(np.ones((2, 3)), np.ones(3), out=np.zeros(2, np.float32))


@pytest.mark.parametrize("signed", [False, True])
def test_columns_shared_by_runs_of_haystacks_sum_to_the_old_floats(signed):
    """Oracle haystacks of one conversation share every factor but the goal: those columns are summed per run."""
    from memlib.metrics import StableOrderEvaluator

    rng = np.random.default_rng(21)
    convs = [rng.random((int(rng.integers(5, 30)), 7)).astype(np.float32) for _ in range(3)]
    factors, gold = [], []
    for f in convs:
        for _ in range(6):  # six questions a conversation: their own goal column, the rest shared
            g = f.copy()
            g[:, 1] = rng.random(len(f))
            factors.append(g)
            gold.append(rng.choice(len(f), size=2, replace=False))
    cs = CaseSet.from_cases(factors, [np.arange(len(f), dtype=float) for f in factors], gold=gold)
    w = rng.normal(size=7) if signed else rng.random(7)
    w[4] = 0.0
    ev, st = RetentionEvaluator(cs, 0.3), StableOrderEvaluator(cs, 0.3)
    (bucket,) = ev._buckets  # 18 short rows: one group (rows sorted by length, a conversation's together)
    assert set(bucket.columns.runs) == set(st._columns.runs) == {0, 2, 3, 4, 5, 6}  # all but the goal
    np.testing.assert_array_equal(ev.scores(w), old_padded_scores(ev, w))
    np.testing.assert_array_equal(st.scores(w), old_stable_scores(st, w))
    assert ev.objective(w) == ev.mean(old_padded_scores(ev, w)) and st.objective(w) == st.mean(old_stable_scores(st, w))


def varied_caseset(rng, n=60):
    """Haystacks from 1 to 400 turns (nested histories beside short ones), coarse factors: many ties.

    Some cases share a haystack, a few haystacks repeat another's factors (runs of identical rows).
    """
    lengths = np.r_[rng.integers(1, 12, n // 2), rng.integers(150, 400, n - n // 2)]
    factors = [np.round(rng.random((m, 7)), 1) for m in lengths]
    for i in range(0, n - 1, 7):  # the next haystack repeats this one
        factors[i + 1], lengths[i + 1] = factors[i].copy(), lengths[i]
    case_h = np.r_[np.arange(n), rng.integers(0, n, n // 3)]
    gold = [rng.choice(lengths[h], size=min(lengths[h], int(rng.integers(0, 4))), replace=False) for h in case_h]
    return CaseSet.from_haystacks(factors, [np.arange(m, dtype=float) for m in lengths], case_h, gold)


def test_length_buckets_hold_every_row_once_in_length_order():
    from memlib.padded_rows import length_buckets

    rng = np.random.default_rng(3)
    length = rng.integers(1, 2000, 300)
    k = keep_count(length, 0.3)
    for cost in (0, 1000, 32768, 10**12):
        groups = length_buckets(length, k, cost)
        rows = np.concatenate(groups)
        assert sorted(rows.tolist()) == list(range(300))
        assert np.all(np.diff(length[rows]) >= 0)  # shortest first, each group a run of the sorted rows
    assert len(length_buckets(length, k, 10**12)) == 1
    assert len(length_buckets(length, k, 0)) > 8
    padded = [
        sum(len(g) * (int((length[g] - k[g]).max()) + int(k[g].max())) for g in length_buckets(length, k, c))
        for c in (10**12, 32768)
    ]
    assert padded[1] < 0.7 * padded[0]  # lengths spread from 1 to 2,000: most of one common width was padding


@pytest.mark.parametrize("kappa", [0.1, 0.3, 0.9])
def test_which_length_group_a_haystack_sits_in_changes_no_retention(monkeypatch, kappa):
    """One group, or many: the same scores, objective and retention, bit for bit, with ties and infinite scores."""
    import memlib.padded_rows as padded_rows

    rng = np.random.default_rng(8)
    cs = varied_caseset(rng)
    evs = {}
    for cost in (10**12, 0):
        monkeypatch.setattr(padded_rows, "BUCKET_COST", cost)
        evs[cost] = RetentionEvaluator(cs, kappa)
    one, many = evs[10**12], evs[0]
    assert len(one._buckets) == 1 and len(many._buckets) > 4
    for w in (rng.integers(0, 3, 7).astype(float), rng.normal(size=7), np.zeros(7)):
        assert one.objective(w) == many.objective(w)
        np.testing.assert_array_equal(one.scores(w), many.scores(w))
        s = one.scores(w).astype(np.float64)
        for extremes in ((), (-np.inf,), (np.inf,), (np.nan,), (np.nan, np.inf, -np.inf)):
            t = s.copy()
            for extreme in extremes:  # each on about 30% of the turns (a row may mix them)
                t[rng.random(t.shape) < 0.3] = extreme
            for ties in ("pessimistic", "expected"):
                np.testing.assert_array_equal(one.per_case(t, ties), many.per_case(t, ties))


@pytest.mark.parametrize("extreme", [-np.inf, np.inf])
def test_infinite_scores_keep_what_the_slow_reference_keeps(extreme):
    """A threshold at +-inf counts real turns only, never the padding that sits beside them."""
    rng = np.random.default_rng(9)
    cs = varied_caseset(rng, n=30)
    ev = RetentionEvaluator(cs, 0.3)
    s = ev.scores(rng.integers(0, 2, 7).astype(float)).astype(np.float64)
    s[rng.random(s.shape) < 0.5] = extreme
    got = ev.per_case(s)
    for c in range(cs.n_cases):
        h, gold = cs.case_haystack[c], set(np.flatnonzero(cs.gold_mask(c)).tolist())
        if gold:
            k = int(keep_count([cs.length[h]], 0.3)[0])
            assert got[c] == reference_retention(s[h, : cs.length[h]].tolist(), gold, k), c
