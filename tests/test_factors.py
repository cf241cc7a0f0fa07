import numpy as np
import pytest
from fixtures import longmemeval_records, write_jsonl, write_longmemeval

from memlib import FACTORS, ParameterError
from memlib import datasets as D
from memlib import factors as Fm


@pytest.fixture(scope="module")
def lme(tmp_path_factory):
    return D.load(str(write_longmemeval(tmp_path_factory.mktemp("lme") / "lme.json")))


def replace_questions(ds):
    cases = ds.cases.copy()
    cases["question"] = [f"Completely unrelated question number {i} about volcanoes?" for i in range(len(cases))]
    return ds.with_cases(cases)


def test_blind_factors_do_not_change_when_questions_change(lme):
    a = Fm.annotate(lme, "blind", use_cache=False, progress=False)
    b = Fm.annotate(replace_questions(lme), "blind", use_cache=False, progress=False)
    np.testing.assert_array_equal(a.cases.factors, b.cases.factors)  # bit-identical
    # the oracle regime does read the question, so the same change moves it
    o1 = Fm.annotate(lme, "oracle", use_cache=False, progress=False)
    o2 = Fm.annotate(replace_questions(lme), "oracle", use_cache=False, progress=False)
    goal = FACTORS.index("goal_relevance")
    assert not np.array_equal(o1.cases.factors[..., goal], o2.cases.factors[..., goal])
    others = [i for i in range(7) if i != goal]
    np.testing.assert_array_equal(o1.cases.factors[..., others], o2.cases.factors[..., others])


def test_blind_factors_on_locomo_ignore_questions():
    try:
        ds = D.load("locomo").limit(1)
    except D.DatasetError as exc:
        pytest.skip(f"LoCoMo not available: {exc}")
    a = Fm.annotate(ds, "blind", progress=False)
    b = Fm.annotate(replace_questions(ds), "blind", progress=False)
    np.testing.assert_array_equal(a.cases.factors, b.cases.factors)
    assert a.cases.n_haystacks == 1  # every question of the conversation shares one history


def test_factor_values_in_unit_interval_and_inert_columns(lme):
    for regime in ("blind", "oracle"):
        ann = Fm.annotate(lme, regime, use_cache=False, progress=False)
        F = ann.cases.factors[ann.cases.valid]
        assert F.min() >= 0 and F.max() <= 1
        assert ann.inert == ["value_alignment", "task_utility", "usage_history"]
        assert ann.cases.n_cases == 2  # the abstention question has no gold


def test_optional_factors_become_live(lme):
    r = np.arange(len(lme.turns))
    ann = Fm.annotate(lme, "blind", value_profile="I care about my pets' health.",
                      task_utility=lambda texts: np.full(len(texts), 0.25), retrievals=r,
                      use_cache=False, progress=False)
    assert ann.inert == []
    F = ann.turn_table(lme, 0)
    rows = ann.turn_rows[0, : ann.cases.length[0]]
    np.testing.assert_allclose(F["usage_history"], r[rows] / (1 + r[rows]), rtol=1e-6)
    np.testing.assert_allclose(F["task_utility"], 0.25)
    with pytest.raises(ParameterError, match="task_utility must return one value in"):
        Fm.annotate(lme, "blind", task_utility=lambda t: np.full(len(t), 2.0), use_cache=False, progress=False)


def test_self_relevance_is_causal(lme, tmp_path):
    ann = Fm.annotate(lme, "blind", use_cache=False, progress=False)
    t = ann.turn_table(lme, 0)
    assert t.loc[0, "self_relevance"] == 0.5  # the first user turn has no earlier user turn
    # appending a later session does not change earlier turns' self relevance
    recs = longmemeval_records()[:1]
    for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions"):
        recs[0][key] = [recs[0][key][0], recs[0][key][2]]  # filler and travel: the first two in time
    recs[0]["haystack_sessions"][0] = [dict(t, has_answer=True) for t in recs[0]["haystack_sessions"][0]]
    short = D.load_longmemeval(write_longmemeval(tmp_path / "short.json", recs))
    s = Fm.annotate(short, "blind", use_cache=False, progress=False).turn_table(short, 0)
    n = len(s)
    # the shorter history is a prefix of the longer one: its turns' self relevance is unchanged
    np.testing.assert_allclose(s["self_relevance"].to_numpy(), t["self_relevance"].to_numpy()[:n])


def test_second_run_is_served_from_cache(lme, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    a = Fm.annotate(lme, "oracle", progress=False)
    b = Fm.annotate(lme, "oracle", progress=False)
    assert not a.info["cached"] and b.info["cached"]
    np.testing.assert_array_equal(a.cases.factors, b.cases.factors)
    np.testing.assert_array_equal(a.cases.gold_pos, b.cases.gold_pos)
    # a change in the data gives a new key
    c = Fm.annotate(replace_questions(lme), "oracle", progress=False)
    assert not c.info["cached"]
    assert len(list((tmp_path / "cache" / "factors").glob("*.npz"))) == 2
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_gold_positions_point_at_gold_text(lme):
    ann = Fm.annotate(lme, "blind", use_cache=False, progress=False)
    cs = ann.cases
    texts = [lme.turns.loc[ann.turn_rows[cs.case_haystack[c], p], "text"]
             for c, p in zip(cs.gold_case, cs.gold_pos)]
    assert texts[0].startswith("My dog Biscuit")
    assert len(texts) == 3


def test_jsonl_annotates(tmp_path):
    ds = D.load(str(write_jsonl(tmp_path / "c.jsonl")))
    ann = Fm.annotate(ds, "blind", use_cache=False, progress=False)
    assert ann.cases.n_haystacks == 1 and ann.cases.n_cases == 2


def test_emotion_and_reliability_heuristics():
    e = Fm.emotional_intensity(["ok.", "This is terrible!!!", "This is terrible."])
    assert e[0] == 0 and e[1] > e[2] > 0
    r = Fm.reliability(["user", "assistant", "user", "user"],
                       ["I live in Oslo.", "I live in Oslo.", "Maybe it was Oslo.", "Do you live in Oslo?"])
    assert r[0] > r[1] and r[0] > r[2] and r[0] > r[3]
    assert all(0 <= x <= 1 for x in r)
