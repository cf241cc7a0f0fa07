"""The store's measured defaults: the replay simulation, the cue value, and the defaults file."""

import json

import numpy as np
import pandas as pd
import pytest

from memlib import ParameterError
from memlib.cues import STORE_CUES
from memlib.learning import fit_cue_value
from memlib.store import MemoryStore, ValuePolicy, make_policy
from memlib.studies import defaults as D
from memlib.studies import stream as S
from memlib.value import CueValue, load_defaults


def history(n_sessions=5, per_session=8, seed=0):
    rng = np.random.default_rng(seed)
    rows, E = [], []
    for s in range(n_sessions):
        for i in range(per_session):
            words = " ".join(
                rng.choice(["I", "my", "Tom", "on", "May", "3", "ok", "lol", "the", "trip"], rng.integers(1, 9))
            )
            rows.append(
                {
                    "text": f"{words} {s}.{i}",
                    "role": "user" if i % 3 else "assistant",
                    "speaker": "u",
                    "session": f"s{s}",
                    "time": s * 3.0 + i / 100,
                }
            )
            v = rng.normal(size=384)
            E.append(v / np.linalg.norm(v))
    return pd.DataFrame(rows), np.array(E)


def unbounded(h, E, **kw):
    """The factors and cues every turn ends up with (nothing forgotten)."""
    st = S.replay(h, kw.pop("weights", np.ones(7)), make_policy("rag_unbounded"), 10**6, E, np.zeros(len(h)))
    return st


@pytest.mark.parametrize("rule, beta", [("paper", 1.0), ("eq3", 10.0), ("value", 0.0)])
def test_the_simulation_keeps_what_the_store_keeps_with_the_papers_value(rule, beta):
    h, E = history()
    w = np.array([0.5, 1.0, 0.0, 0.7, 0.0, 1.2, 0.0])
    policy = {
        "paper": make_policy("paper"),
        "eq3": ValuePolicy(beta=beta, keep_top_value=False, value_weight=0.0, mood_weight=0.0),
        "value": ValuePolicy(keep_top_value=True, beta=1.0, value_weight=0.0, mood_weight=0.0),
    }[rule]
    store = S.replay(h, w, policy, 12, E, np.zeros(len(h)))
    full = unbounded(h, E, weights=w)
    v = full.factors @ w
    kept = D.simulate_store(v, v / w.sum(), h["time"].to_numpy(), h["session"].to_numpy(), 12, rule, beta)
    assert np.flatnonzero(kept).tolist() == store.ids


def test_the_simulation_keeps_what_the_store_keeps_with_a_cue_value():
    h, E = history(seed=3)
    rng = np.random.default_rng(1)
    cv = CueValue(rng.normal(size=21), interactions=True, quantiles=np.linspace(-3, 3, 101))
    policy = ValuePolicy(keep_top_value=True, beta=1.0, value_weight=0.0, mood_weight=0.0)
    store = MemoryStore(value=cv, policy=policy, merge_threshold=None)
    for i, r in h.iterrows():
        store.add(r["text"], role=r["role"], time=r["time"], session=r["session"], embedding=E[i], emotion=0.0)
        if i == len(h) - 1 or h["session"].iloc[i + 1] != r["session"]:
            store.consolidate(10)
    full = MemoryStore(value=cv, policy=make_policy("rag_unbounded"), merge_threshold=None)
    for i, r in h.iterrows():
        full.add(r["text"], role=r["role"], time=r["time"], session=r["session"], embedding=E[i], emotion=0.0)
    full.consolidate(10**6)
    v = full.values()
    kept = D.simulate_store(v, cv.normalise(v), h["time"].to_numpy(), h["session"].to_numpy(), 10, "value")
    assert np.flatnonzero(kept).tolist() == store.ids


def test_a_cue_value_round_trips_and_refuses_bad_input():
    cv = CueValue(np.arange(11.0), quantiles=np.linspace(0, 1, 101), info={"fit": "test"})
    assert CueValue.from_dict(json.loads(json.dumps(cv.to_dict()))) == cv
    with pytest.raises(ParameterError, match="needs 11 finite weights"):
        CueValue(np.ones(10))
    with pytest.raises(ParameterError, match="non-decreasing"):
        CueValue(np.ones(11), quantiles=np.linspace(1, 0, 101))
    with pytest.raises(ParameterError, match="x.json: its cues"):
        CueValue.from_dict({**cv.to_dict(), "cues": ["a"]}, source="x.json")


def test_fit_cue_value_weighs_each_dataset_the_same():
    rng = np.random.default_rng(0)
    big = rng.random((200, 10, 11))
    small = rng.random((4, 10, 11))
    # the big dataset keeps its long turns, the small one its dated turns
    parts = [(big, np.full(200, 10), (big[..., 7] > 0.8) * 1.0), (small, np.full(4, 10), (small[..., 5] > 0.8) * 1.0)]
    cv = fit_cue_value(parts)
    w = dict(zip(cv.feature_names, cv.weights))
    assert w["length"] > 0 and w["dates"] > 0  # the small dataset still has its say
    assert np.all(np.diff(cv.quantiles) >= 0)


def test_the_shipped_defaults_drive_a_default_store(tmp_path):
    d = load_defaults()
    assert d["format"] == "memlib-defaults" and set(d["datasets"]) == set(D.DATASETS)
    assert d["value"].cues == STORE_CUES
    p = ValuePolicy()
    assert p.config() == {k: d["policy"][k] for k in ("beta", "value_weight", "mood_weight", "keep_top_value")}
    st = MemoryStore()
    assert st.value_model == d["value"]
    assert MemoryStore(value="paper").value_model is None
    assert MemoryStore(weights=np.ones(7)).value_model is None
    with pytest.raises(ParameterError, match="not both"):
        MemoryStore(weights=np.ones(7), value=d["value"])
    # the cue value survives both file formats
    e = np.eye(384)
    st.add("I am allergic to peanuts.", time=0.0, embedding=e[0])
    st.add("ok", time=0.1, embedding=e[1])
    st.save(tmp_path / "s.npz")
    back = MemoryStore.load(tmp_path / "s.npz")
    assert back.value_model == d["value"] and back.items() == st.items()
    db = st.persist(tmp_path / "s.db")
    db.close()
    again = MemoryStore.open(tmp_path / "s.db")
    assert again.value_model == d["value"]
    np.testing.assert_allclose(again.values(), st.values())
    assert "contrib_user*first_person" in again.explain(0)


def test_a_defaults_file_that_is_not_one_is_refused(tmp_path):
    (tmp_path / "d.json").write_text('{"format": "other"}')
    with pytest.raises(ParameterError, match="not a memlib defaults file"):
        load_defaults(tmp_path / "d.json")
    with pytest.raises(ParameterError, match="no defaults file"):
        load_defaults(tmp_path / "missing.json")


def test_forget_scores_name_an_unknown_rule():
    with pytest.raises(ParameterError, match="unknown forgetting rule 'lru'"):
        D.forget_scores(np.ones(2), np.ones(2), np.ones(2), "lru")
