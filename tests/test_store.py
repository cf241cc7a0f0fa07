import numpy as np
import pytest
from fixtures import write_longmemeval

from memlib import FACTORS, ParameterError
from memlib import baselines as B
from memlib import datasets as D
from memlib import experiments as X
from memlib import factors as Fm
from memlib.metrics import retrieval_metrics
from memlib.store import MemoryStore, StoreError, ValuePolicy


def unit(rng):
    v = rng.normal(size=384)
    return v / np.linalg.norm(v)


def filled_store(policy=None, n_sessions=3, per_session=4, seed=0):
    rng = np.random.default_rng(seed)
    st = MemoryStore(weights=np.array([0.5, 1, 0, 0.2, 0, 2, 0]), policy=policy)
    for s in range(n_sessions):
        for i in range(per_session):
            role = "user" if i % 2 == 0 else "assistant"
            st.add(f"session {s} turn {i}: I like item {rng.integers(100)}!", role=role, time=s * 7 + i / 100,
                   session=f"s{s}", embedding=unit(rng))
        st.consolidate(budget=6)
    return st, rng


def test_save_load_round_trips_exactly(tmp_path):
    st, rng = filled_store()
    st.retrieve(query_embedding=unit(rng), k=2)
    path = tmp_path / "store.npz"
    st.save(path)
    back = MemoryStore.load(path)
    assert back.items() == st.items()
    np.testing.assert_array_equal(back.embeddings, st.embeddings)
    np.testing.assert_array_equal(back.factors, st.factors)
    assert back.forgotten == st.forgotten
    # the loaded store continues exactly like the original
    e = unit(rng)
    a = st.add("later turn", role="user", time=30.0, session="s9", embedding=e)
    b = back.add("later turn", role="user", time=30.0, session="s9", embedding=e)
    assert a == b
    st.consolidate(4)
    back.consolidate(4)
    assert back.items() == st.items()
    assert not list(tmp_path.glob("*.tmp"))


def test_store_stays_within_budget_and_forgets_by_eq3():
    st, _ = filled_store()
    assert len(st) == 6
    assert len(st.forgotten) == 3 * 4 - 6
    # the dropped items had the highest forget scores at their consolidation
    assert all(item["time"] < 14 for item in st.forgotten)


def test_retrieval_counts_make_usage_history_live():
    st, rng = filled_store()
    q = st.embeddings[0].astype(float)
    top = st.retrieve(query_embedding=q, k=1)
    assert top[0]["id"] == st.ids[0]
    u = FACTORS.index("usage_history")
    assert st.factors[0, u] == pytest.approx(0.5)
    st.retrieve(query_embedding=q, k=1, update=False)
    assert st.factors[0, u] == pytest.approx(0.5)


def test_value_resists_forgetting_with_large_beta():
    rng = np.random.default_rng(1)
    for beta, survivor in ((0.0, "new"), (50.0, "old")):
        st = MemoryStore(weights=np.array([0, 0, 0, 0, 1.0, 0, 0]), policy=ValuePolicy(beta=beta))
        st.add("old", time=0.0, embedding=unit(rng), task_utility=1.0)
        st.add("new", time=5.0, embedding=unit(rng), task_utility=0.0)
        st.consolidate(1, now=10.0)
        assert [i["text"] for i in st.items()] == [survivor]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda st, e: st.consolidate(-1), "budget must be an integer >= 0, got -1"),
        (lambda st, e: st.retrieve(query_embedding=e, k=0), "k must be an integer >= 1, got 0"),
        (lambda st, e: st.add("x", time=1.0, embedding=e), "time goes backwards"),
        (lambda st, e: st.add("x", role="system", time=50.0, embedding=e), "role must be 'user' or 'assistant'"),
        (lambda st, e: st.add("", time=50.0, embedding=e), "text must be a non-empty string"),
        (lambda st, e: st.add("x", time=50.0, embedding=e[:10]), "embedding must be 384 finite numbers"),
    ],
)
def test_bad_calls_raise_clear_errors(call, message):
    st, rng = filled_store()
    with pytest.raises(ParameterError, match=message):
        call(st, unit(rng))


def test_corrupt_saved_store_is_refused(tmp_path):
    st, _ = filled_store()
    path = tmp_path / "s.npz"
    st.save(path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(StoreError, match="not a readable store file"):
        MemoryStore.load(tmp_path / "junk.npz")
    with pytest.raises(StoreError, match="no such store file"):
        MemoryStore.load(tmp_path / "missing.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["factors"] = arrays["factors"][:2]
    np.savez(tmp_path / "short.npz", **arrays)
    with pytest.raises(StoreError, match="factors has shape"):
        MemoryStore.load(tmp_path / "short.npz")


def test_store_factors_match_the_blind_annotator(tmp_path):
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json")))
    ann = Fm.annotate(ds, "blind", use_cache=False, progress=False)
    from memlib.embeddings import embed

    usable = ds.usable()
    rows = usable.haystack_rows(0)
    E = embed(ds.turns["text"].tolist(), use_cache=False, progress=False)
    st = X.replay(ds, rows, np.ones(7), B.UnboundedRAGPolicy(), 10**6, E,
                  Fm.emotional_intensity(ds.turns["text"].tolist()))
    np.testing.assert_allclose(st.factors, ann.cases.factors[0, : len(rows)], atol=1e-5)


def test_baseline_rules():
    rng = np.random.default_rng(3)
    st = MemoryStore(policy=B.MemoryBankPolicy())
    for t in range(4):
        st.add(f"turn {t}", time=float(t), embedding=unit(rng))
    # a recalled old item is strengthened and its clock reset, so it survives
    st.retrieve(query_embedding=st.embeddings[0].astype(float), k=1, now=3.0)
    st.consolidate(2, now=4.0)
    assert [i["text"] for i in st.items()] == ["turn 0", "turn 3"]
    fifo = MemoryStore(policy=B.FIFOPolicy())
    for t in range(4):
        fifo.add(f"turn {t}", time=float(t), embedding=unit(rng))
    fifo.consolidate(2)
    assert [i["text"] for i in fifo.items()] == ["turn 2", "turn 3"]
    rag = MemoryStore(policy=B.UnboundedRAGPolicy())
    for t in range(4):
        rag.add(f"turn {t}", time=float(t), embedding=unit(rng))
    assert rag.consolidate(1) == [] and len(rag) == 4
    ga = B.GenerativeAgentsPolicy()
    assert ga.RECENCY_DECAY == 0.99 and (ga.W_RECENCY, ga.W_RELEVANCE, ga.W_IMPORTANCE) == (0.5, 3.0, 2.0)
    for cls in B.POLICY_CLASSES:
        assert cls.__doc__


def test_retrieval_metrics_follow_longmemeval():
    assert retrieval_metrics([1, 2, 3], {2}, k=1) == (0.0, 0.0, 0.0)
    ra, rall, nd = retrieval_metrics([2, 5, 1], {1, 2}, k=3)
    assert (ra, rall) == (1.0, 1.0)
    assert nd == pytest.approx((1 + 1 / np.log2(3)) / 2)
    # a forgotten gold item can never be retrieved: recall_all fails, ndcg is capped
    assert retrieval_metrics([2], {1, 2}, k=10) == (1.0, 0.0, 0.5)


def test_stream_on_a_longmemeval_schema_file(tmp_path):
    res = X.stream(str(write_longmemeval(tmp_path / "lme.json")), budgets=(0.5, 3), ks=(1, 5), quick=True)
    t = res.table
    assert set(t["policy"]) == set(X.STREAM_POLICIES)
    rag = t[t["policy"] == "rag_unbounded"]
    assert (rag["retention"] == 1.0).all()
    assert (t["retention"] <= 1).all() and (t["recall_all"] <= t["recall_any"]).all()
    assert res.per_question["stored"].max() <= max(res.per_question["history"])
    bounded = res.per_question[(res.per_question["policy"] != "rag_unbounded") & (res.per_question["budget"] == 3)]
    assert (bounded["stored"] <= 3).all()
