"""Leave one corpus out (issue 20): the transfer matrix on planted corpora whose answers we know."""

import numpy as np
import pandas as pd
import pytest

from memlib import ParameterError
from memlib.cases import CaseSet
from memlib.cues import CueTable
from memlib.studies import transfer as T
from memlib.studies.cues import CueData

NAMES = ("is_user", "length_words", "first_person")  # three real cue names (cues_user reads is_user)


def planted(name, sign=1.0, n_groups=6, per_group=3, n=30, seed=0):
    """A corpus whose 3 gold turns of each history stand out on cue ``first_person`` (sign +1) or
    stand out *below* it (sign -1); the factors carry the same signal in self relevance."""
    rng = np.random.default_rng(seed)
    factors, times, values, gold, groups, hay = [], [], [], [], [], []
    for g in range(n_groups):
        is_gold = np.zeros(n, bool)
        is_gold[rng.choice(n, 3, replace=False)] = True
        cue = np.where(is_gold, 0.5 + 0.4 * sign, 0.5 - 0.4 * sign) + rng.normal(0, 0.05, n)
        F = rng.random((n, 7))  # noise on emotion and reliability hides the signal from equal weights
        F[:, 3] = np.clip(np.where(is_gold, 0.9, 0.2) + rng.normal(0, 0.05, n), 0, 1)
        F[:, [1, 2, 4, 6]] = 0
        factors.append(F)
        times.append(np.arange(n, dtype=float))
        values.append(np.stack([np.ones(n), rng.random(n), cue], axis=1))
        for _ in range(per_group):
            gold.append(np.flatnonzero(is_gold))
            groups.append(f"g{g}")
            hay.append(g)
    cs = CaseSet.from_haystacks(factors, times, np.array(hay), gold, groups=groups)
    tab = CueTable(np.stack(values).astype(np.float32), NAMES, cs.length.copy())
    return CueData(name, cs, tab)


def test_concat_keeps_each_corpus_apart_and_aligned():
    a, b = planted("a", n=20), planted("b", n=30, n_groups=4, seed=1)
    both = T.concat([a, b])
    assert both.cases.n_cases == a.cases.n_cases + b.cases.n_cases
    assert both.cases.factors.shape == (10, 30, 7) and both.raw.values.shape == (10, 30, 3)
    assert set(np.char.partition(both.cases.groups.astype(str), ":")[:, 0]) == {"a", "b"}
    # the second corpus's gold still points at its own turns
    for c in (0, a.cases.n_cases + 5):
        src, i = (a, c) if c < a.cases.n_cases else (b, c - a.cases.n_cases)
        np.testing.assert_array_equal(both.cases.gold_mask(c)[: src.cases.length[0]], src.cases.gold_mask(i))
    np.testing.assert_array_equal(both.calibrated.values[6:, :30], b.calibrated.values)


def test_a_signal_every_corpus_shares_transfers_and_a_flipped_one_does_not():
    corpora = {"a": planted("a", seed=0), "b": planted("b", seed=1), "flip": planted("flip", sign=-1.0, seed=2)}
    per_case = T.transfer_matrix(corpora, n_splits=2, seed=0, quick=True, models=("cues",))
    assert set(per_case["train"]) == {"in_domain", "uniform", "others", "others_worst_case", "a", "b", "flip"}
    # every row of one target and split scores the same test cases
    for (test, split), g in per_case.groupby(["test", "split"]):
        sets = g.groupby("train")["case_id"].apply(frozenset)
        assert sets.nunique() == 1, (test, split)
    levels = {n: 0.3 for n in corpora}
    s = T.summarise(per_case, levels, n_boot=100).set_index(["model", "train", "test"])["mean"]
    assert s["cues", "in_domain", "a"] > 0.9 and s["cues", "b", "a"] > 0.9  # the shared signal carries
    assert s["cues", "flip", "a"] < 0.2  # learned where the cue means the opposite, it ranks gold last
    assert s["cues", "in_domain", "flip"] > 0.9  # in domain the flipped corpus is easy too


def test_the_summary_reports_intervals_and_the_share_of_the_gain():
    corpora = {"a": planted("a", seed=0), "b": planted("b", seed=1), "c": planted("c", seed=2)}
    per_case = T.transfer_matrix(corpora, n_splits=2, seed=0, quick=True, models=("paper_factors",))
    summary = T.summarise(per_case, {n: 0.3 for n in corpora}, n_boot=100)
    row = summary.set_index(["model", "train", "test"]).loc[("paper_factors", "others", "a")]
    assert row["low"] <= row["mean"] <= row["high"]
    tested = per_case[(per_case["test"] == "a") & (per_case["train"] == "others")]["group"].nunique()
    assert row["n_groups"] == tested <= 6  # the groups some split tested (two random halves)
    expected = (row["mean"] - row["uniform"]) / (row["in_domain"] - row["uniform"])
    assert np.isfinite(expected) and row["share_of_in_domain_gain"] == pytest.approx(expected)
    result = T.TransferResult(summary, per_case)
    m = result.matrix("paper_factors")
    assert list(m.columns) == ["a", "b", "c"] and {"in_domain", "others"} <= set(m.index)
    assert np.isnan(m.loc["a", "a"])  # a corpus is never a source for itself


def test_same_seed_same_numbers():
    corpora = {"a": planted("a", seed=0), "b": planted("b", seed=1)}
    x = T.transfer_matrix(corpora, n_splits=2, seed=3, quick=True, models=("cues", "paper_factors"))
    y = T.transfer_matrix(corpora, n_splits=2, seed=3, quick=True, models=("cues", "paper_factors"))
    pd.testing.assert_frame_equal(x, y)


def test_transfer_needs_two_corpora_and_known_models():
    with pytest.raises(ParameterError, match="at least two corpora, got 1"):
        T.transfer_matrix({"a": planted("a")})
    with pytest.raises(ParameterError, match="unknown model 'mlp'"):
        T.transfer_matrix({"a": planted("a"), "b": planted("b")}, models=("mlp",))


def test_the_worst_case_fit_does_no_worse_on_its_worst_corpus_than_the_pooled_fit():
    from memlib.metrics import RetentionEvaluator

    # a large corpus where the cue helps and a small one where it hurts: pooling follows the large one
    big, small = planted("big", n_groups=12, seed=0), planted("small", sign=-1.0, n_groups=3, seed=1)
    for model in ("cues", "paper_factors"):
        pooled = T.fit_value(model, T.concat([big, small]), 0.3, seed=0, quick=True)
        robust, w = T.fit_worst_case(model, [big, small], 0.3, seed=0, quick=True)

        def worst(score):
            return min(RetentionEvaluator(d.cases, 0.3).mean(score(d)) for d in (big, small))

        assert worst(robust) >= worst(pooled) - 1e-9, model
        assert w.shape[0] == (7 if model == "paper_factors" else len(NAMES))
    assert worst(robust) > 0.5  # the self-relevance factor serves both corpora; the robust fit finds it


def test_weight_signs_flag_the_cue_whose_meaning_flips_between_corpora():
    corpora = {"a": planted("a", seed=0), "b": planted("b", seed=1), "flip": planted("flip", sign=-1.0, seed=2)}
    w = T.weight_signs(corpora, quick=True, models=("cues",)).set_index("feature")
    assert not w.loc["first_person", "sign_stable"]
    assert w.loc["first_person", "a"] > 0 > w.loc["first_person", "flip"]
    same = T.weight_signs({k: corpora[k] for k in ("a", "b")}, quick=True, models=("cues",)).set_index("feature")
    assert same.loc["first_person", "sign_stable"]


# --------------------------------------------------------------------------- roles relative to the conversation

ROLE_NAMES = ("is_user", "self_talk", "first_person", "length")  # real cue names: the role models read them


def role_corpus(name, person_person, n_groups=6, n=30, seed=0):
    """Two speakers taking turns. Person-person: both are ``user`` and both talk about themselves;
    gold is the 3 turns highest on ``first_person``, by either speaker. User-assistant: the user talks
    about herself (``first_person`` high on every user turn), and gold is the 3 assistant turns higher
    still on it: a value that weighs an assistant's cue at half a user's loses them."""
    rng = np.random.default_rng(seed)
    speaker = np.tile([0, 1], n // 2)
    factors, times, values, gold, groups = [], [], [], [], []
    for g in range(n_groups):
        if person_person:
            gp = rng.choice(n, 3, replace=False)
            fp = rng.uniform(0.1, 0.6, n)
            talk = np.where(speaker == 0, 1.0, 0.8) + rng.normal(0, 0.02, n)
            user = np.ones(n)
        else:
            gp = rng.choice(np.flatnonzero(speaker == 1), 3, replace=False)
            fp = np.where(speaker == 0, rng.uniform(0.6, 0.8, n), rng.uniform(0.0, 0.2, n))
            talk = np.where(speaker == 0, 1.0, 0.1) + rng.normal(0, 0.02, n)
            user = (speaker == 0).astype(float)
        fp[gp] = rng.uniform(0.85, 0.95, 3)
        factors.append(rng.random((n, 7)))
        times.append(np.arange(n, dtype=float))
        values.append(np.stack([user, np.clip(talk, 0, 1), fp, rng.random(n)], axis=1))
        gold.append(gp)
        groups.append(f"g{g}")
    cs = CaseSet.from_cases(factors, times, gold, case_ids=[f"{name}{g}" for g in range(n_groups)], groups=groups)
    return CueData(name, cs, CueTable(np.stack(values).astype(np.float32), ROLE_NAMES, cs.length.copy()))


def test_the_relative_role_model_carries_a_person_person_fit_to_user_assistant_chat():
    from memlib.metrics import RetentionEvaluator

    pp, ua = role_corpus("pp", True), role_corpus("ua", False, seed=1)
    got = {}
    for model in ("cues_user", "cues_relative"):
        got[model] = RetentionEvaluator(ua.cases, 0.3).mean(T.fit_value(model, pp, 0.3, quick=True)(ua))
        assert RetentionEvaluator(pp.cases, 0.3).mean(T.fit_value(model, pp, 0.3, quick=True)(pp)) > 0.9
    # cues_user learns first_person twice over in person-person chat (a cue and its copy by the constant
    # is_user), so the assistant's gold turns weigh half the user's turns; the relative model has no copy
    assert got["cues_relative"] > 0.9 > 0.5 > got["cues_user"]
    w = T.weight_signs({"pp": pp, "ua": ua}, quick=True, models=("cues_relative",)).set_index("feature")
    assert w.loc["is_user", "pp"] == 0 and w.loc["self_talk*is_user", "pp"] == 0  # nothing learned on a constant
    assert w.loc["self_talk*is_user", "ua"] != 0


def test_the_worst_case_fit_gives_no_weight_to_what_no_training_history_sees():
    pp = role_corpus("pp", True)
    pp2 = role_corpus("pp2", True, seed=2)
    _, w = T.fit_worst_case("cues_relative", [pp, pp2], 0.3, seed=0, quick=True)
    names = pp.table(True, "cues_relative").names
    unseen = T.unseen(T.concat([pp, pp2]).table(True, "cues_relative"))
    assert [n for n, u in zip(names, unseen) if u] == ["is_user", "self_talk*is_user"]
    assert np.all(w[unseen] == 0) and np.any(w[~unseen] != 0)
