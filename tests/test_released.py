"""The released experiment's reading (issue 19): its emotion rules, its metric, learner and splits, and
its factors, each checked against values worked out by hand or a plain-Python statement of the rule."""

import json
import random

import numpy as np
import pytest

from fixtures import HashModel, longmemeval_records
from memlib import FACTORS
from memlib import datasets as D
from memlib import embeddings as Emb
from memlib import factors as Fm
from memlib._checks import ParameterError
from memlib.cases import CaseSet
from memlib.learning import hill_climb_released
from memlib.metrics import StableOrderEvaluator, keep_count
from memlib.rule_emotion import rule_deltas, rule_intensity
from memlib.studies._common import PROTOCOLS, Protocol, shuffle_splits

# --------------------------------------------------------------------------- the emotion rules


@pytest.mark.parametrize(
    "text, expected",
    [
        # every turn: +0.05 / +0.05 for "topic continuation"; "like", "cats", "dogs": three runs of four letters
        ("I like cats and dogs.", (0.05, 0.05 + 0.15)),
        # "against" holds "again" (a substring test): -0.20 / +0.10; "against", "rules" and "this" are 3 runs
        ("This is against the rules.", (0.05 - 0.20, 0.05 + 0.10 + 0.15)),
        # two words or fewer: -0.05 / -0.18; "Okay" and "then" are two runs: two thirds of +0.15
        ("Okay then", (0.0, 0.05 - 0.18 + 0.15 * 2 / 3)),
        # a request for detail: +0.10 / +0.12; "could you give an example" has runs "could", "give", "example"
        ("Could you give an example", (0.05 + 0.10, 0.3)),
        # valence is capped at 0.4: gratitude 0.2 + laughter 0.15 + comprehension 0.1 + continuation 0.05 = 0.5
        ("thanks haha got it", (0.4, round(0.05 + 0.10 + 0.05 + 0.15 * 2 / 3, 4))),
    ],
)
def test_rule_deltas_follow_the_released_rules(text, expected):
    dv, da = rule_deltas(text)
    assert (dv, da) == (round(min(0.4, expected[0]), 4), round(min(0.3, expected[1]), 4))


def test_rule_intensity_is_abs_valence_times_half_plus_arousal_and_bounded():
    texts = ["I like cats and dogs.", "This is against the rules.", "Okay then", "terrible awful wrong!!!"]
    got = rule_intensity(texts)
    want = [min(1.0, max(0.0, abs(dv) * (0.5 + da))) for dv, da in map(rule_deltas, texts)]
    np.testing.assert_array_equal(got, want)
    assert got.max() <= 0.4 * 0.8 + 1e-12


# --------------------------------------------------------------------------- metric, learner, splits


def released_retention(values, gold, keep_fraction):
    """The released metric in plain Python: sort by -V (stable), keep max(1, int(n * kf)), share of gold kept."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    kept = set(order[: max(1, int(len(values) * keep_fraction))])
    return sum(1 for g in gold if g in kept) / len(gold)


def random_cases(seed, n_cases=12, coarse=True):
    rng = np.random.default_rng(seed)
    factors, times, gold = [], [], []
    for _ in range(n_cases):
        n = int(rng.integers(3, 40))
        f = np.zeros((n, len(FACTORS)))
        f[:, [0, 1, 3, 5]] = rng.integers(0, 3, size=(n, 4)) / 2 if coarse else rng.random((n, 4))
        factors.append(f)
        times.append(np.sort(rng.integers(0, 5, n)).astype(float))
        gold.append(sorted(rng.choice(n, size=int(rng.integers(1, 4)), replace=False).tolist()))
    return CaseSet.from_cases(factors, times, gold=gold), factors, gold


@pytest.mark.parametrize("keep_fraction", [0.1, 0.3, 0.5])
def test_the_stable_evaluator_is_the_released_metric_with_ties(keep_fraction):
    cs, factors, gold = random_cases(0)
    w = np.array([0.3, 0.0, 0, 1.2, 0, 0.7, 0])
    ev = StableOrderEvaluator(cs, keep_fraction, cut="floor")
    got = ev.per_case(ev.scores(w))
    want = [released_retention(list(f @ w), g, keep_fraction) for f, g in zip(factors, gold)]
    np.testing.assert_allclose(got, want)
    assert ev.objective(w) == pytest.approx(np.mean(want))


def test_floor_and_ceil_cuts():
    assert keep_count([10, 7, 3, 1], 0.3, cut="floor").tolist() == [3, 2, 1, 1]
    assert keep_count([10, 7, 3, 1], 0.3).tolist() == [3, 3, 1, 1]


def released_learner(objective, names, seed=1, iters=120, step=0.5, decay=0.92):
    """Algorithm 1 as the released code states it, over a dict of weights."""
    rng = random.Random(seed)
    w = {f: 1.0 for f in names}
    best = objective(w)
    sigma = step
    for _ in range(iters):
        cand = dict(w)
        for f in names:
            if rng.random() < 0.5:
                cand[f] = max(0.0, cand[f] + rng.gauss(0.0, sigma))
        r = objective(cand)
        if r > best:
            w, best = cand, r
        sigma *= decay
    return w, best


def test_the_released_learner_makes_the_same_draws_as_the_released_loop():
    cs, _, _ = random_cases(1, coarse=False)
    ev = StableOrderEvaluator(cs, 0.3, cut="floor")
    live = np.zeros(len(FACTORS), bool)
    live[[0, 1, 3, 5]] = True
    names = [FACTORS[j] for j in np.flatnonzero(live)]

    def as_vector(wd):
        return np.array([wd.get(f, 0.0) for f in FACTORS])

    want, best = released_learner(lambda wd: ev.objective(as_vector(wd)), names)
    got = hill_climb_released(ev.objective, live)
    np.testing.assert_array_equal(got.weights, as_vector(want))
    assert got.train_return == best


def test_shuffle_splits_are_the_released_shuffles():
    groups = [f"q{i}" for i in range(9)]
    for r, (train, test) in enumerate(shuffle_splits(groups, n_splits=3)):
        order = list(groups)
        random.Random(100 + r).shuffle(order)
        assert [groups[i] for i in train] == sorted(order[:4], key=groups.index)
        assert len(test) == 5


def test_a_shared_learn_is_the_same_learn_run_once(monkeypatch):
    """Inside shared_learns, learn() runs a learner once per content and settings; outside it, every time."""
    from memlib.studies import _common

    cs, factors, gold = random_cases(2, coarse=False)
    twin = CaseSet.from_cases([f.copy() for f in factors], [np.arange(len(f), dtype=float) for f in factors], gold=gold)
    runs = []
    real_learn = Protocol.learn
    monkeypatch.setattr(Protocol, "learn", lambda self, *a: runs.append(a[-2:]) or real_learn(self, *a))
    released, memlib_ = PROTOCOLS["released"], PROTOCOLS["memlib"]
    alone = _common.learn(cs, 0.3, released, 0, True)
    with _common.shared_learns():
        first = _common.learn(cs, 0.3, released, 0, True)
        assert _common.learn(twin, 0.3, "released", 7, True) is first  # same content (the times are not read)
        with _common.shared_learns():  # nested: the outer block's learns
            assert _common.learn(cs, 0.3, released, 3, True) is first  # the released learner has its own seed
        assert _common.learn(cs, 0.2, released, 0, True) is not first
        m0 = _common.learn(cs, 0.3, memlib_, 0, True)
        assert _common.learn(cs, 0.3, memlib_, 1, True) is not m0  # memlib's learner reads the seed
        assert _common.learn(cs.subset(np.arange(6)), 0.3, released, 0, True) is not first
    assert _common.learn(cs, 0.3, released, 0, True) is not first  # the block closed: learned afresh
    assert len(runs) == 7
    np.testing.assert_array_equal(first.weights, alone.weights)
    assert first.train_return == alone.train_return


def test_memlibs_tie_rule_needs_its_ceil_cut():
    with pytest.raises(ParameterError, match="ceil cut only"):
        Protocol(ties="pessimistic", cut="floor")
    assert PROTOCOLS["released"].ddof == 0 and PROTOCOLS["memlib"] == Protocol()


# --------------------------------------------------------------------------- the released factors


@pytest.fixture
def lme(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: HashModel())
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(longmemeval_records()))
    return D.load(path)


def history(ann, c):
    cs = ann.cases
    h = cs.case_haystack[c]
    n = cs.length[h]
    return cs.factors[h, :n].astype(np.float64), cs.time[h, :n], ann.turn_rows[h, :n]


def test_released_factors_are_computed_as_the_released_experiment_does(lme):
    ann = Fm.annotate(lme, "blind", factor_set="released", progress=False)
    usable = lme.usable()
    E = Emb.embed_cached(usable.texts, progress=False)
    for c in range(ann.cases.n_cases):
        F, clock, rows = history(ann, c)
        turns = usable.turns.iloc[rows]
        user = (turns["role"] == "user").to_numpy()
        vecs = E[turns["text_id"].to_numpy()].astype(np.float64)
        mu = vecs[user].mean(axis=0)
        cos = vecs @ mu / np.linalg.norm(vecs, axis=1) / np.linalg.norm(mu)
        np.testing.assert_allclose(F[:, FACTORS.index("self_relevance")], 0.5 + 0.5 * cos, atol=1e-6)
        np.testing.assert_array_equal(F[:, FACTORS.index("reliability")], np.where(user, 0.7, 0.4))  # float64
        np.testing.assert_allclose(
            F[:, FACTORS.index("emotional_intensity")], rule_intensity(turns["text"].tolist()), atol=1e-7
        )
        # the released clock counts sessions in the order the file lists them
        assert clock[0] == 0 and np.all(np.diff(clock) >= 0)


def test_the_released_history_follows_the_file_not_the_dates(lme):
    """Question q1's file lists its sessions on 05/20, 05/22, 05/21: the released reading keeps that order."""
    by_file = Fm.annotate(lme, "blind", factor_set="released", progress=False)
    by_date = Fm.annotate(lme, "blind", factor_set="released", readings={"order": "time"}, progress=False)
    usable = lme.usable()
    c = list(by_file.cases.case_ids).index("q1")
    sessions_file = usable.turns.iloc[history(by_file, c)[2]]["session"].unique()
    sessions_date = usable.turns.iloc[history(by_date, c)[2]]["session"].unique()
    assert list(sessions_file) == [sessions_date[0], sessions_date[2], sessions_date[1]]


def test_an_unknown_reading_is_refused(lme):
    with pytest.raises(ParameterError, match="unknown reading 'tone'"):
        Fm.annotate(lme, "blind", factor_set="released", readings={"tone": "warm"}, progress=False)
    with pytest.raises(ParameterError, match="unknown self reading 'later'"):
        Fm.annotate(lme, "blind", readings={"self": "later"}, progress=False)


@pytest.mark.parametrize("readings", [{}, {"self": "through_session", "goal": "session"}])
def test_released_blind_factors_never_read_the_question(lme, readings):
    a = Fm.annotate(lme, "blind", factor_set="released", readings=readings, progress=False, use_cache=False)
    cases = lme.cases.copy()
    cases["question"] = ["What is the capital of Peru?"] * len(cases)
    changed = lme.with_cases(cases)
    b = Fm.annotate(changed, "blind", factor_set="released", readings=readings, progress=False, use_cache=False)
    np.testing.assert_array_equal(a.cases.factors, b.cases.factors)


# --------------------------------------------------------------------------- the study: ladder and audit


@pytest.fixture
def lme_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MEMLIB_RESULT_CACHE", "0")
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: HashModel())
    records = longmemeval_records()
    # four more usable questions, so that splits have cases on both sides
    for i in range(4):
        rec = json.loads(json.dumps(records[i % 2]))
        rec["question_id"] = f"{rec['question_id']}_copy{i}"
        rec["question"] = f"{rec['question']} (asked again, {i})"
        records.append(rec)
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(records))
    return str(path)


def test_the_ladder_ends_at_memlibs_reading_and_its_steps_add_up(lme_file):
    from memlib.studies import DataSpec
    from memlib.studies.oracle_blind import oracle_vs_blind
    from memlib.studies.released import RUNGS, ladder

    data = DataSpec(lme_file, quick=True)
    steps = ladder(data, n_splits=3, n_boot=50)
    assert list(steps["rung"]) == [r[0] for r in RUNGS]
    assert steps["delta"].iloc[1:].sum() == pytest.approx(steps["learned_V"].iloc[-1] - steps["learned_V"].iloc[0])
    memlib_table1 = oracle_vs_blind(data, n_splits=3, n_boot=50).summary  # the paper set, as a DataSpec reads
    ours = memlib_table1.query("policy == 'learned_V' and regime == 'blind'")["mean"].iloc[0]
    assert steps["learned_V"].iloc[-1] == pytest.approx(ours, abs=1e-12)
    # each rung states every reading, and the last one reads Table 1 as memlib does
    last = steps.iloc[-1]
    assert {k: last[f"reading_{k}"] for k in ("emotion", "self", "goal", "reliability", "order")} == {
        k: v for k, v in Fm.READINGS["paper"].items()
    }


def test_the_causality_audit_names_what_reads_the_future():
    from memlib.studies.released import causality_table

    t = causality_table().set_index("reading")
    assert not t.loc["released", "causal_at_session_end"]
    assert t.loc["causal at each session's end", "causal_at_session_end"]
    assert t.loc["causal at each turn", "self_relevance"] == "earlier turns only"
    assert t.loc["paper", "goal_relevance"] == "later turns of its own session"


@pytest.mark.slow
def test_the_released_study_runs_and_labels_the_authors_figures(lme_file):
    from memlib.studies import STUDIES
    from memlib.studies.released import released_study

    data = STUDIES["released"].data_spec(dataset=lme_file, quick=True)  # the released set, 256 word pieces
    r = released_study(data, n_splits=3, n_boot=50, parts=("figure3", "mlp", "causal"))
    assert set(r.table["regime"]) == {"blind", "oracle"}
    assert r.table["authors_mean"].isna().all()  # not the authors' dataset: no reference figure is shown
    assert sorted(r.figure3["keep_fraction"].unique()) == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert list(r.mlp["policy"]) == ["learned_V", "mlp", "mlp_minus_linear"]
    assert r.mlp["mean"].iloc[2] == pytest.approx(r.mlp["mean"].iloc[1] - r.mlp["mean"].iloc[0])
    c = r.causal.set_index("variant")
    base = "released, histories by date"
    assert c.loc[base, "delta"] == 0.0
    assert 0 < c.loc[base, "all_turns_opening_share"] < 1


def test_the_released_mlp_does_not_depend_on_the_order_of_the_cases():
    from memlib.value_net import fit_mlp_released

    rng = np.random.default_rng(3)
    factors, times, gold, keys = [], [], [], []
    for i in range(10):
        n = int(rng.integers(5, 12))
        f = np.zeros((n, len(FACTORS)))
        f[:, [0, 1, 3, 5]] = rng.random((n, 4))  # noise: the order effects show most here
        factors.append(f)
        times.append(np.arange(float(n)))
        gold.append([int(rng.integers(0, n))])
        keys.append(f"k{i:02d}")
    live = np.zeros(len(FACTORS), bool)
    live[[0, 1, 3, 5]] = True
    a = CaseSet.from_cases(factors, times, gold=gold, keys=keys)
    perm = rng.permutation(10)
    b = CaseSet.from_cases(
        [factors[i] for i in perm], [times[i] for i in perm], gold=[gold[i] for i in perm], keys=[keys[i] for i in perm]
    )
    sa, sb = fit_mlp_released(a, live, epochs=30), fit_mlp_released(b, live, epochs=30)
    np.testing.assert_array_equal(sa(a.factors), sb(a.factors))
    np.testing.assert_array_equal(sa(a.factors)[perm], sa(b.factors))
