"""Usage history made live (issue 20): the replayed retrievals, counted by hand, causal and blind; the study on
planted corpora whose answer we know."""

import inspect

import numpy as np
import pytest

from fixtures import HashModel, write_longmemeval
from memlib import FACTORS, ParameterError
from memlib import datasets as D
from memlib import factors as Fm
from memlib.cases import CaseSet
from memlib.studies import STUDIES, DataSpec
from memlib.studies import usage as U
from memlib.usage import DEFAULT_K, USAGE_COLUMN, replay_annotation, replay_usage, usage_factor, with_usage

# four turns, 3-d unit vectors: a user, the assistant, two users
A, B, C, D3 = [1.0, 0, 0], [0, 1.0, 0], [0.6, 0.8, 0], [0, 0.6, 0.8]
E4 = np.array([[A, B, C, D3]])
USER4 = np.array([[True, False, True, True]])


def test_a_hand_counted_history():
    # turn 2 (C) sees A at 0.6 and B at 0.8; turn 3 (D) sees A at 0, B at 0.6 and C at 0.48; turn 0 sees nothing
    # and turn 1 is the assistant's, which retrieves nothing
    r, f = replay_usage(E4, USER4, [4], k=1)
    assert r.tolist() == [[0, 2, 0, 0]]  # B, twice
    np.testing.assert_allclose(f, [[0, 2 / 3, 0, 0]], rtol=1e-6)
    assert replay_usage(E4, USER4, [4], k=2)[0].tolist() == [[1, 2, 1, 0]]  # C: {A, B}; D: {B, C}
    # k larger than the store: every earlier turn comes back
    assert replay_usage(E4, USER4, [4], k=50)[0].tolist() == [[2, 2, 1, 0]]
    assert f.dtype == np.float32 and r.dtype == np.int64


def test_ties_go_to_the_earlier_turn_and_unnormalised_rows_are_cosines():
    E = np.array([[[2.0, 0], [1.0, 0], [5.0, 5.0], [3.0, 0]]])  # 0 and 1 point the same way
    r, _ = replay_usage(E, np.ones((1, 4), bool), [4], k=1)
    # turn 1 takes 0; turn 2 ties 0 and 1 (cos 0.707): 0; turn 3 ties 0 and 1 (cos 1) above 2: 0
    assert r.tolist() == [[3, 0, 0, 0]]


def test_histories_without_a_user_turn_padding_and_the_two_layouts():
    E = np.zeros((3, 4, 3))
    E[0] = E4[0]
    E[1, :2] = [A, B]
    E[2, :3] = [A, C, B]
    user = np.array([[True, False, True, True], [False, False, False, False], [True, True, True, False]])
    length = np.array([4, 2, 3])
    r, f = replay_usage(E, user, length, k=1)
    assert r[0].tolist() == [0, 2, 0, 0]
    assert r[1].tolist() == [0, 0, 0, 0] and f[1].tolist() == [0, 0, 0, 0]  # nobody asks: all zeros
    assert r[2].tolist() == [1, 1, 0, 0]  # turn 1 (C) takes A; turn 2 (B) takes C (0.8) over A (0); padding 0
    # a table of vectors and a row per position give the same counts
    table = np.array([A, B, C, D3])
    rows = np.array([[0, 1, 2, 3], [0, 1, 0, 0], [0, 2, 1, 0]])
    np.testing.assert_array_equal(replay_usage(table, user, length, k=1, rows=rows)[0], r)
    # no history at all
    assert replay_usage(np.zeros((0, 0, 3)), np.zeros((0, 0), bool), np.zeros(0, int))[0].shape == (0, 0)


def random_history(n=40, d=8, seed=0):
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(1, n, d))
    return E / np.linalg.norm(E, axis=2, keepdims=True), rng.random((1, n)) < 0.6


def test_turns_after_the_consolidation_point_change_nothing():
    E, user = random_history(40)
    r, f = replay_usage(E, user, [40], k=3)
    rng = np.random.default_rng(1)
    more = rng.normal(size=(1, 25, E.shape[2]))
    E2 = np.concatenate([E, more], axis=1)
    user2 = np.concatenate([user, np.ones((1, 25), bool)], axis=1)
    r2, f2 = replay_usage(E2, user2, [65], k=3, consolidate_at=[40])
    np.testing.assert_array_equal(r2[:, :40], r)
    np.testing.assert_array_equal(f2[:, :40], f)
    assert not r2[:, 40:].any()
    # consolidating earlier counts fewer retrievals, never more
    early, _ = replay_usage(E, user, [40], k=3, consolidate_at=[20])
    assert np.all(early <= r) and not early[0, 19:].any()
    assert replay_usage(E, user, [40], k=3, consolidate_at=[0])[0].sum() == 0


def test_a_turn_counts_only_the_user_turns_after_it():
    E, user = random_history(50, seed=2)
    k = 4
    r, _ = replay_usage(E, user, [50], k=k)
    later_users = np.cumsum(user[0, ::-1])[::-1] - user[0]  # user turns strictly after each position
    assert np.all(r[0] <= later_users)
    assert r.sum() == sum(min(k, j) for j in np.flatnonzero(user[0]))  # every retrieval is counted once
    # what happens before position i (who asked there), and turn i's own role, cannot move r[i]
    rng = np.random.default_rng(3)
    for i in (5, 20, 35):
        flipped = user.copy()
        flipped[0, : i + 1] = rng.random(i + 1) < 0.5
        assert replay_usage(E, flipped, [50], k=k)[0][0, i] == r[0, i]


def test_the_replay_takes_no_question():
    for fn in (replay_usage, replay_annotation):
        assert not [p for p in inspect.signature(fn).parameters if "question" in p or "query" in p]


def replace_questions(ds):
    cases = ds.cases.copy()
    cases["question"] = [f"Completely unrelated question number {i} about volcanoes?" for i in range(len(cases))]
    return ds.with_cases(cases)


def test_changing_the_question_leaves_the_usage_factor_unchanged(tmp_path, monkeypatch):
    from memlib import embeddings

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(embeddings, "load_model", lambda *a, **k: HashModel())
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json")))
    outs = []
    for data in (ds, replace_questions(ds)):
        ann = Fm.annotate(data, "blind", embedding_setting="fast", progress=False)
        r, f = replay_annotation(data, ann, k=2)
        outs.append((r, f, with_usage(ann.cases, f).factors))
    (r1, f1, F1), (r2, f2, F2) = outs
    assert r1.sum() > 0  # the histories' user turns did retrieve
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(f1, f2)
    np.testing.assert_array_equal(F1, F2)
    # only real positions are counted, and the usage column is the only one that moved
    np.testing.assert_array_equal(r1[~ann.cases.valid], 0)
    others = [i for i in range(len(FACTORS)) if i != USAGE_COLUMN]
    np.testing.assert_array_equal(F1[..., others], ann.cases.factors[..., others])


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"k": 0}, "k must be an integer >= 1, got 0"),
        ({"k": 2.5}, "k must be an integer >= 1, got 2.5"),
        ({"user": np.ones((1, 3), bool), "length": [3]}, "embeddings must have shape (G, N, d) = (1, 3, d) as user"),
        ({"user": np.ones(4, bool)}, "user must be a (G, N) array of bool"),
        ({"user": np.full((1, 4), "user")}, "user must hold True/False"),
        ({"length": [4, 4]}, "length must hold one integer per history (1)"),
        ({"length": [5]}, "length must be between 0 and the N = 4 positions"),
        ({"consolidate_at": [5]}, "consolidate_at must be between 0 and length"),
        ({"consolidate_at": [1.5]}, "consolidate_at must hold one integer per history"),
        ({"rows": np.zeros((1, 3), int)}, "rows must be a (1, 4) array of int"),
        ({"rows": np.array([[0, 1, 2, 9]])}, "embeddings must be a (T, d) table when rows is given"),
        ({"embeddings": np.array([[[np.nan, 0.0]] * 4])}, "embeddings must be finite"),
    ],
)
def test_bad_input_names_the_argument(kw, message):
    args = {"embeddings": E4, "user": USER4, "length": [4], **kw}
    with pytest.raises(ParameterError) as err:
        replay_usage(**args)
    assert message in str(err.value)


def test_bad_rows_and_factors_are_refused():
    with pytest.raises(ParameterError, match="rows must index the 4 rows of embeddings"):
        replay_usage(E4[0], USER4, [4], rows=np.array([[0, 1, 2, 9]]))
    cs = CaseSet.from_cases([np.zeros((2, 7))], [np.arange(2.0)], gold=[[0]])
    with pytest.raises(ParameterError, match=r"factor must have the \(G, N\) shape \(1, 2\)"):
        with_usage(cs, np.zeros((1, 3)))
    with pytest.raises(ParameterError, match=r"factor must hold values in \[0, 1\]"):
        with_usage(cs, [[0.5, 2.0]])
    with pytest.raises(ParameterError, match="retrieval counts must be finite and >= 0"):
        usage_factor([-1])
    assert DEFAULT_K == 10


# --------------------------------------------------------------------------- the study, on planted corpora


def planted(name, signal, n_groups=10, per_group=2, n=40, seed=0):
    """A corpus whose factors are noise; its usage factor marks the 3 gold turns of each history (``signal``)
    or is noise too."""
    rng = np.random.default_rng(seed)
    factors, times, usage, gold, groups, hay = [], [], [], [], [], []
    for g in range(n_groups):
        is_gold = np.zeros(n, bool)
        is_gold[rng.choice(n, 3, replace=False)] = True
        F = rng.random((n, 7))
        F[:, [2, 4, 6]] = 0
        factors.append(F)
        times.append(np.arange(n, dtype=float))
        u = np.where(is_gold, 0.8, 0.2) + rng.normal(0, 0.05, n) if signal else rng.random(n)
        usage.append(np.clip(u, 0, 1))
        for _ in range(per_group):
            gold.append(np.flatnonzero(is_gold))
            groups.append(f"g{g}")
            hay.append(g)
    cs = CaseSet.from_haystacks(factors, times, np.array(hay), gold, groups=groups)
    return U.UsageCorpus(name, cs, np.stack(usage))


def test_usage_that_marks_gold_shows_a_positive_delta_and_noise_none():
    corpora = {"a": planted("a", True, seed=0), "b": planted("b", True, seed=1), "noise": planted("noise", False)}
    res = U.usage_study_on(corpora, keep_fraction=0.3, n_splits=2, seed=0, quick=True)
    t = res.table.set_index(["evaluation", "corpus", "usage"])
    assert set(res.table["usage"]) == {"zero", "replayed", "shuffled"}
    assert set(res.table["evaluation"]) == {"in_domain", "across"}
    for corpus in ("a", "b"):
        live = t.loc[("in_domain", corpus, "replayed")]
        assert live["delta"] > 0.3 and live["delta_low"] > 0, corpus
        assert live["usage_weight"] > 0.3  # the learner leans on it
        across = t.loc[("across", corpus, "replayed")]  # learned on the other signal and the noise
        assert across["delta"] > 0.3 and across["delta_low"] > 0, corpus
    noise = t.loc[("in_domain", "noise", "replayed")]
    assert abs(noise["delta"]) < 0.15 and noise["delta_low"] < 0 < noise["delta_high"]
    # the placebo (each history's usage values permuted) carries no signal, even where usage did: what it moves
    # is the search's noise (here, 10 small histories and the quick budget: up to about 0.2)
    for corpus in ("a", "b", "noise"):
        placebo = t.loc[("in_domain", corpus, "shuffled")]
        assert abs(placebo["delta"]) < 0.25, corpus
        if corpus != "noise":
            assert t.loc[("in_domain", corpus, "replayed"), "delta"] - placebo["delta"] > 0.3, corpus
    assert np.isnan(t.loc[("in_domain", "a", "zero"), "delta"])
    assert (t.xs("zero", level="usage")["usage_weight"] == 0).all()
    assert t.loc[("across", "a", "replayed"), "n_groups"] == 10 and t.loc[("across", "a", "zero"), "n_fits"] == 3
    info = res.info["corpora"]
    assert info["a"]["mean_usage_gold"] > info["a"]["mean_usage_other"] and info["a"]["usage_only"] > 0.9
    # the two variants of a split score the same test cases
    pc = res.per_case
    for _, g in pc.groupby(["evaluation", "corpus", "fit"]):
        sets = g.groupby("usage")["case_id"].apply(frozenset)
        assert sets.nunique() == 1


def test_the_usage_study_is_registered_and_refuses_what_it_does_not_read():
    study = STUDIES["usage"]
    assert study.run.uncached is U.usage_study and study.table == "table"
    assert study.data_spec(quick=True).resolved().limit == 2  # two groups of each corpus, as transfer
    with pytest.raises(ParameterError, match="the usage study reads no dataset"):
        study.run.uncached(DataSpec("locomo"))
    with pytest.raises(ParameterError, match="k must be an integer >= 1, got 0"):
        study.run.uncached(U.DATA, k=0)
    with pytest.raises(ParameterError, match="at least two corpora"):
        U.usage_per_case({"a": planted("a", True)})
    with pytest.raises(ParameterError, match="usage must have the"):
        U.UsageCorpus("x", planted("a", True).cases, np.zeros((1, 1)))
