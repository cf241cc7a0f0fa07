import numpy as np
import pandas as pd
import pytest

from fixtures import planted_regimes, write_longmemeval
from memlib import FACTORS, ParameterError
from memlib.metrics import retrieval_metrics
from memlib.store import POLICIES, MemoryStore, StoreError, ValuePolicy, make_policy
from memlib.store import baselines as B
from memlib.studies import DataSpec
from memlib.studies import stream as S


def unit(rng):
    v = rng.normal(size=384)
    return v / np.linalg.norm(v)


def filled_store(policy=None, n_sessions=3, per_session=4, seed=0):
    rng = np.random.default_rng(seed)
    st = MemoryStore(weights=np.array([0.5, 1, 0, 0.2, 0, 2, 0]), policy=policy)
    for s in range(n_sessions):
        for i in range(per_session):
            role = "user" if i % 2 == 0 else "assistant"
            st.add(
                f"session {s} turn {i}: I like item {rng.integers(100)}!",
                role=role,
                time=s * 7 + i / 100,
                session=f"s{s}",
                embedding=unit(rng),
            )
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
    from memlib.forgetting import forget_score

    st, rng = filled_store(policy=make_policy("paper"))
    assert len(st) == 6
    assert len(st.forgotten) == 3 * 4 - 6
    for i in range(4):  # one more session, then check the drop against eq. 3 computed by hand
        st.add(f"late {i}", role="user", time=30 + i / 100, session="s9", embedding=unit(rng))
    now = 30.5
    f = st.to_frame()
    scores = forget_score(now - f["time"], f["retrievals"], st.values(), beta=1.0)
    expected = f["id"].to_numpy()[np.argsort(-scores, kind="stable")[:4]]
    assert sorted(st.consolidate(6, now=now)) == sorted(expected.tolist())
    # the newest session has age ~0, so eq. 3 never drops it: the paper's rule, measured in chapter 06
    assert {"late 0", "late 1", "late 2", "late 3"} <= {item["text"] for item in st.items()}


def test_default_policy_drops_the_lowest_value_first():
    st, rng = filled_store()  # the measured default: drop by value (memlib/defaults.json)
    assert st.policy.keep_top_value
    before = st.to_frame()
    for i in range(4):
        st.add(f"late {i}", role="user", time=30 + i / 100, session="s9", embedding=unit(rng))
    dry = st.consolidate(6, dry_run=True)  # values as the consolidation fixes the session's goal
    dropped = st.consolidate(6)
    assert sorted(r["id"] for r in dry) == dropped and len(dropped) == 4 and len(before) == 6
    assert max(r["value"] for r in dry) <= min(st.values())


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
        st = MemoryStore(weights=np.array([0, 0, 0, 0, 1.0, 0, 0]), policy=ValuePolicy(beta=beta, keep_top_value=False))
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
    for name, cls in POLICIES.items():
        assert cls.__doc__ and cls.name == name


def test_retrieval_metrics_follow_longmemeval():
    assert retrieval_metrics([1, 2, 3], {2}, k=1) == (0.0, 0.0, 0.0)
    ra, rall, nd = retrieval_metrics([2, 5, 1], {1, 2}, k=3)
    assert (ra, rall) == (1.0, 1.0)
    assert nd == pytest.approx((1 + 1 / np.log2(3)) / 2)
    # a forgotten gold item can never be retrieved: recall_all fails, ndcg is capped
    assert retrieval_metrics([2], {1, 2}, k=10) == (1.0, 0.0, 0.5)


def test_stream_on_a_longmemeval_schema_file(tmp_path):
    data = DataSpec(str(write_longmemeval(tmp_path / "lme.json")), quick=True)
    res = S.stream(data, budgets=(0.5, 3), ks=(1, 5))
    t = res.table
    assert set(t["policy"]) == set(S.STREAM_POLICIES)
    rag = t[t["policy"] == "rag_unbounded"]
    assert (rag["retention"] == 1.0).all()
    assert (t["retention"] <= 1).all() and (t["recall_all"] <= t["recall_any"]).all()
    assert res.per_question["stored"].max() <= max(res.per_question["history"])
    bounded = res.per_question[(res.per_question["policy"] != "rag_unbounded") & (res.per_question["budget"] == 3)]
    assert (bounded["stored"] <= 3).all()


def test_one_registry_builds_saves_and_loads_every_policy(tmp_path):
    rng = np.random.default_rng(5)
    for name in POLICIES:
        st = MemoryStore(policy=make_policy(name))
        st.add("a turn", time=0.0, embedding=unit(rng))
        st.save(tmp_path / f"{name}.npz")
        assert MemoryStore.load(tmp_path / f"{name}.npz").policy.name == name
    keep = MemoryStore(policy=make_policy("value", keep_top_value=True, beta=2.0))
    keep.add("a turn", time=0.0, embedding=unit(rng))
    keep.save(tmp_path / "keep.npz")
    assert MemoryStore.load(tmp_path / "keep.npz").policy.config() == keep.policy.config()
    with pytest.raises(ParameterError, match="unknown policy 'lru'"):
        make_policy("lru")
    with pytest.raises(ParameterError, match="policy recency takes no parameter beta"):
        make_policy("recency", beta=1.0)


def planted_history(n_sessions=3, per_session=4, seed=0):
    """Turns with random unit embeddings, a week apart per session; emotion rises with the turn index."""
    rng = np.random.default_rng(seed)
    n = n_sessions * per_session
    history = pd.DataFrame(
        {
            "text": [f"turn {i}" for i in range(n)],
            "role": ["user", "assistant"] * (n // 2),
            "speaker": ["ana", "bot"] * (n // 2),
            "session": [f"s{i // per_session}" for i in range(n)],
            "time": [7.0 * (i // per_session) + i / 100 for i in range(n)],
        }
    )
    E = rng.normal(size=(n, 384))
    return history, E / np.linalg.norm(E, axis=1, keepdims=True), np.linspace(0.0, 1.0, n)


def test_replay_consolidates_at_each_session_end():
    history, E, emotion = planted_history()
    emotion_only = np.eye(7)[0]
    st = S.replay(history, emotion_only, make_policy("value", keep_top_value=True), 3, E, emotion)
    # the value is emotion alone, so the three most emotional turns survive
    assert st.ids == [9, 10, 11]
    fifo = S.replay(history, emotion_only, make_policy("memgpt_fifo"), 5, E, emotion)
    assert fifo.ids == [7, 8, 9, 10, 11]
    # the same turns added by hand give the same store
    by_hand = MemoryStore(weights=emotion_only, policy=make_policy("memgpt_fifo"))
    for i, turn in history.iterrows():
        by_hand.add(
            turn["text"],
            role=turn["role"],
            time=turn["time"],
            speaker=turn["speaker"],
            session=turn["session"],
            embedding=E[i],
            emotion=emotion[i],
        )
        if i in (3, 7, 11):
            by_hand.consolidate(5, now=turn["time"])
    assert by_hand.items() == fifo.items()


def test_question_scores_and_the_stream_table():
    history, E, emotion = planted_history()
    st = S.replay(history, np.ones(7), make_policy("memgpt_fifo"), 4, E, emotion)
    assert st.ids == [8, 9, 10, 11]
    scores = S.question_scores(st.view, st.policy, E[9], 0.0, gold={9, 2}, ks=(1, 4))
    # turn 9 is kept and is its own nearest neighbour; turn 2 was forgotten, so the ideal DCG (2) is out of reach
    assert scores == {
        "retention": 0.5,
        "recall_any@1": 1.0,
        "recall_all@1": 0.0,
        "ndcg@1": 1.0,
        "recall_any@4": 1.0,
        "recall_all@4": 0.0,
        "ndcg@4": 0.5,
    }
    per_q = pd.DataFrame([{"policy": "p", "budget": 0.5, "case_id": c, **scores} for c in ("a", "b")])
    t = S.stream_table(per_q, ks=(1, 4))
    assert list(t["k"]) == [1, 4] and (t["n_questions"] == 2).all() and (t["retention"] == 0.5).all()


def test_fold_weights_learn_on_the_other_fold():
    blind = planted_regimes(n_groups=4, per_group=3)["blind"]
    fold = S.two_folds(blind.groups, seed=0)
    assert set(fold) == {0, 1} and all(len(set(fold[blind.groups == g])) == 1 for g in set(blind.groups))
    weights, table = S.fold_weights(blind, fold, budgets=(0.3, 9), quick=True)
    assert set(weights) == {(0.3, 0), (0.3, 1), (9, 0), (9, 1)} and len(table) == 4 * 7
    # gold is planted in reliability: every fold learns to lean on it
    for w in weights.values():
        assert FACTORS[int(np.argmax(w))] == "reliability"


# --------------------------------------------------------------------------- helpers shared by the store tests


def snapshot(st, folder):
    """Everything a store holds, read back from its npz export: header and arrays (public API only)."""
    import json

    path = folder / f"snap{len(list(folder.glob('snap*.npz')))}.npz"
    st.save(path)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("header")))
    return header, arrays


def assert_same_snapshot(a, b):
    assert a[0] == b[0]
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        np.testing.assert_array_equal(a[1][k], b[1][k], err_msg=k)


def near(e, rng, noise=0.05):
    """A unit vector close to the unit vector ``e`` (cosine about 0.999)."""
    v = e + noise * rng.normal(size=384) / np.sqrt(384)
    return v / np.linalg.norm(v)


# --------------------------------------------------------------------------- pinning, expiry, merges, dry runs


def test_pinned_items_are_never_forgotten_and_do_not_count_against_the_budget():
    rng = np.random.default_rng(10)
    st = MemoryStore(policy=make_policy("memgpt_fifo"))
    for t in range(5):
        st.add(f"turn {t}", time=float(t), embedding=unit(rng), pinned=t == 0)
    assert st.items()[0]["pinned"] and not st.items()[1]["pinned"]
    st.consolidate(2)  # the pinned oldest item stays, and two unpinned ones besides it
    assert st.ids == [0, 3, 4]
    st.pin(3)
    st.consolidate(1, count_pinned=True)  # now the two pinned items use up the budget: no unpinned item stays
    assert st.ids == [0, 3]
    st.consolidate(0)
    assert st.ids == [0, 3]
    st.unpin(3)
    assert st.consolidate(0) == [3] and st.ids == [0]
    with pytest.raises(ParameterError, match="no retained item has id 3"):
        st.pin(3)
    with pytest.raises(ParameterError, match="cannot be both pinned and expiring"):
        st.add("x", time=9.0, embedding=unit(rng), pinned=True, expires=10.0)


def test_expired_items_are_never_retrieved_and_go_at_the_next_consolidation():
    import datetime as dt

    rng = np.random.default_rng(11)
    st = MemoryStore()
    e = unit(rng)
    st.add("My parking spot today is 42.", time=0.0, embedding=e, expires=dt.timedelta(days=1))
    st.add("My sister is Ana.", time=0.5, embedding=unit(rng), expires=30.0)
    st.add("Nice weather.", time=0.6, embedding=unit(rng))
    assert st.items()[0]["expires"] == 1.0
    assert st.retrieve(query_embedding=e, k=1, update=False)[0]["id"] == 0
    assert [h["id"] for h in st.retrieve(query_embedding=e, k=5, now=1.0, update=False)] == [1, 2]
    assert list(np.asarray(st.ids)[st.rank(e, now=2.0)]) == [1, 2]
    st.add("Later.", time=2.0, embedding=unit(rng))
    assert st.retrieve(query_embedding=e, k=5, update=False)[0]["id"] != 0  # expired at the latest time
    assert st.consolidate(10) == [0]  # under budget, yet the expired item goes
    assert st.forgotten[-1]["reason"] == "expired" and st.forgotten[-1]["at"] == 2.0
    with pytest.raises(ParameterError, match="expires must be after the turn's time"):
        st.add("x", time=3.0, embedding=unit(rng), expires=3.0)
    with pytest.raises(ParameterError, match="expires must be a time"):
        st.add("x", time=3.0, embedding=unit(rng), expires=[1])


def test_a_near_duplicate_merges_into_the_stored_item_and_reinforces_it():
    from memlib.store import MERGE_THRESHOLD

    assert MERGE_THRESHOLD == 0.95 and MemoryStore().merge_threshold == 0.95
    rng = np.random.default_rng(12)
    st = MemoryStore()
    e = unit(rng)
    assert st.add("I am allergic to peanuts.", time=0.0, embedding=e) == 0
    st.add("Nice weather.", time=0.1, embedding=unit(rng))
    again = near(e, rng)
    assert float(again @ e) > 0.95
    assert st.add("I'm allergic to peanuts!", time=1.0, embedding=again, session="s2") == 0  # merged into item 0
    assert len(st) == 2 and st.items()[0]["retrievals"] == 1
    assert st.factors[0, FACTORS.index("usage_history")] == pytest.approx(0.5)
    [m] = st.merges
    assert (m["id"], m["turn"], m["text"], m["time"]) == (0, 2, "I'm allergic to peanuts!", 1.0)
    assert m["cosine"] == pytest.approx(float(again @ e), abs=1e-6)
    assert st.add("Something new.", time=1.1, embedding=unit(rng)) == 3  # the merged turn used up id 2
    # a repeat of an expiring item with no expiry keeps it for good; a pinned repeat pins it
    st.add("Parking spot 42.", time=1.2, embedding=(p := unit(rng)), expires=2.0)
    st.add("Parking spot 42!", time=1.3, embedding=p)
    assert st.items()[-1]["expires"] is None
    st.add("Sister Ana.", time=1.4, embedding=(s := unit(rng)))
    st.add("Sister Ana!", time=1.5, embedding=s, pinned=True)
    assert st.items()[-1]["pinned"]
    off = MemoryStore(merge_threshold=None)
    off.add("a", time=0.0, embedding=e)
    off.add("a", time=0.0, embedding=e)
    assert len(off) == 2 and off.merges == []
    with pytest.raises(ParameterError, match="merge_threshold must be a number in"):
        MemoryStore(merge_threshold=1.5)


def test_a_dry_run_shows_what_would_go_and_why_and_changes_nothing(tmp_path):
    st, rng = filled_store()
    st.add("a new session's turn", time=30.0, session="s9", embedding=unit(rng), expires=31.0)
    st.add("and another one", time=30.5, session="s9", embedding=unit(rng))
    before = snapshot(st, tmp_path)
    rows = st.consolidate(3, now=32.0, dry_run=True)
    assert_same_snapshot(before, snapshot(st, tmp_path))
    assert rows[0]["reason"] == "expired" and {r["reason"] for r in rows[1:]} == {"budget"}
    scores = [r["forget_score"] for r in rows[1:]]
    assert scores == sorted(scores, reverse=True)  # in the order they would go
    for r in rows:
        contrib = [r[f"contrib_{f}"] for f in FACTORS]
        assert sum(contrib) == pytest.approx(r["value"])
    one = st.explain(rows[1]["id"], now=32.0)
    assert {k: one[k] for k in rows[1] if k != "reason"} == {k: v for k, v in rows[1].items() if k != "reason"}
    assert one["rank"] == 1 and not one["expired"]
    assert st.explain(rows[0]["id"], now=32.0)["expired"]
    # the real consolidation drops exactly those items
    assert sorted(st.consolidate(3, now=32.0)) == sorted(r["id"] for r in rows)


def test_a_budget_in_tokens_counts_whitespace_words():
    from memlib.store import count_tokens

    assert count_tokens("  I like   green tea \n") == 4
    rng = np.random.default_rng(13)
    st = MemoryStore(policy=make_policy("memgpt_fifo"))
    for t, text in enumerate(["one two three", "four five", "six", "seven eight nine ten"]):
        st.add(text, time=float(t), embedding=unit(rng))
    assert [i["tokens"] for i in st.items()] == [3, 2, 1, 4]
    rows = st.consolidate(budget_tokens=5, dry_run=True)
    assert [r["id"] for r in rows] == [0, 1]  # oldest first, until 5 of the 10 tokens remain
    assert st.consolidate(budget_tokens=7) == [0]
    assert st.consolidate(budget=2, budget_tokens=100) == [1]  # both budgets must hold
    with pytest.raises(ParameterError, match="consolidate needs a budget"):
        st.consolidate()


def test_learned_weights_from_a_table_with_factor_sets(tmp_path):
    import json

    import memlib

    rows = [
        {"policy": "learned_V", "regime": "blind", "factor_set": fs, **{f"w_{f}": w for f in FACTORS}}
        for fs, w in (("paper", 0.25), ("extended", 0.75))
    ]
    rows.append({"policy": "uniform_V", "regime": "blind", "factor_set": "paper"})
    path = tmp_path / "oracle-blind.json"
    path.write_text(json.dumps(rows))
    st = MemoryStore(weights=memlib.learned_weights(str(path)))
    assert st.weights.tolist() == [0.25] * 7
    ext = MemoryStore(weights=memlib.learned_weights(path, factor_set="extended"), factor_set="extended")
    assert ext.weights.tolist() == [0.75] * 7


def test_npz_export_keeps_pins_expiry_and_merges_and_reads_version_1(tmp_path):
    import json

    rng = np.random.default_rng(14)
    st = MemoryStore()
    e = unit(rng)
    st.add("pinned fact", time=0.0, embedding=e, pinned=True)
    st.add("pinned fact!", time=0.1, embedding=near(e, rng))
    st.add("expiring", time=0.2, embedding=unit(rng), expires=5.0)
    st.save(tmp_path / "s.npz")
    back = MemoryStore.load(tmp_path / "s.npz")
    assert back.items() == st.items() and back.merges == st.merges
    # a version 1 file (before pins, expiry and merges) still loads
    with np.load(tmp_path / "s.npz") as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("header")))
    for k in ("merge_threshold", "merges"):
        header.pop(k)
    header.update(version=1, ids=arrays.pop("ids").tolist())
    for k in ("expires", "pinned", "tokens"):
        arrays.pop(k)
    np.savez(tmp_path / "v1.npz", header=np.array(json.dumps(header)), **arrays)
    old = MemoryStore.load(tmp_path / "v1.npz")
    assert old.ids == st.ids and not any(i["pinned"] for i in old.items()) and old.merge_threshold == 0.95


# --------------------------------------------------------------------------- the store's value (memlib.value.Value)


def test_the_store_holds_one_value_and_reads_it_for_values_tiers_and_explanations():
    from memlib.store.checks import StoreLinearValue
    from memlib.store.columns import matvec
    from memlib.value import CueValue, LinearValue, Value, load_defaults

    st, _ = filled_store()
    w = np.array([0.5, 1, 0, 0.2, 0, 2, 0])
    assert isinstance(st.value, StoreLinearValue) and st.value == LinearValue(w)
    np.testing.assert_array_equal(st.values(), matvec(st.factors, w))  # the store's sum, bit for bit as before
    np.testing.assert_array_equal(st.normalised_values(), st.values() / w.sum())
    row = st.explain(st.ids[0])
    assert [k[len("contrib_") :] for k in row if k.startswith("contrib_")] == list(FACTORS)
    assert sum(row[f"contrib_{f}"] for f in FACTORS) == pytest.approx(row["value"])
    cue = MemoryStore()
    cue.add("I am allergic to peanuts!", time=0.0, embedding=np.eye(384)[0])
    assert isinstance(cue.value, CueValue) and isinstance(cue.value, Value) and cue.value == load_defaults()["value"]
    np.testing.assert_array_equal(cue.values(), cue.value.features(cue.cues) @ cue.value.weights)
    np.testing.assert_array_equal(cue.normalised_values(), cue.value.normalise(cue.values()))


def test_a_linear_value_is_the_same_store_as_its_weights(tmp_path):
    from memlib.value import LinearValue

    w = [0.5, 1, 0, 0.2, 0, 2, 0]
    a = MemoryStore(weights=w, merge_threshold=None)
    b = MemoryStore(value=LinearValue(w), merge_threshold=None)
    rng = np.random.default_rng(9)
    for i in range(6):
        e = unit(rng)
        for st in (a, b):
            st.add(f"I like item {i}!", time=float(i), session=f"s{i // 2}", embedding=e)
    assert b.weights.tolist() == w and b.items() == a.items()
    assert b.consolidate(budget=3) == a.consolidate(budget=3)
    b.save(tmp_path / "b.npz")
    back = MemoryStore.load(tmp_path / "b.npz")
    assert back.value == LinearValue(w) and back.items() == b.items()
    with pytest.raises(ParameterError, match="not both"):
        MemoryStore(weights=w, value=LinearValue(w))
    with pytest.raises(ParameterError, match="value must be a memlib.value.CueValue, a memlib.value.LinearValue or"):
        MemoryStore(value=np.ones(7))


def test_weights_set_the_paper_value_and_are_only_a_setting_of_a_cue_store():
    from memlib.store.columns import matvec

    st, _ = filled_store()
    st.weights = np.ones(7)
    np.testing.assert_array_equal(st.values(), matvec(st.factors, np.ones(7)))
    assert st.value.weights.tolist() == [1.0] * 7
    cue = MemoryStore()
    cue.add("I am allergic to peanuts!", time=0.0, embedding=np.eye(384)[0])
    before, value = cue.values(), cue.value
    cue.weights = np.arange(7.0)
    assert cue.value is value and cue.weights.tolist() == list(range(7))
    np.testing.assert_array_equal(cue.values(), before)
    cue.value = "paper"  # the paper's value with the weights the store keeps
    assert cue.value.weights.tolist() == list(range(7)) and cue.values()[0] == pytest.approx(cue.factors[0] @ range(7))
    with pytest.raises(ParameterError, match="weights must be >= 0"):
        st.weights = -np.ones(7)
    with pytest.raises(ParameterError, match="value must be a memlib.value.CueValue"):
        st.value = "mine"


def test_a_store_pickled_before_the_value_protocol_unpickles(tmp_path):
    import copy

    from memlib.value import LinearValue

    st, _ = filled_store()
    state = st.__getstate__()
    old = {k: v for k, v in state.items() if k not in ("_value", "_weights")}  # the old attributes
    old.update(value_model=None, weights=st.weights.copy())
    back = MemoryStore.__new__(MemoryStore)
    back.__setstate__(old)
    assert back.value == LinearValue(st.weights) and back.items() == st.items()
    assert copy.deepcopy(st).items() == st.items()


def test_a_sessions_goal_relevance_reaches_its_items_before_another_session_came_between():
    """A session label that comes back after another session's turns: the goal fix finds its earlier items too."""
    from memlib.online import SessionGoal
    from memlib.store.annotate import session_goal

    rng = np.random.default_rng(4)
    st = MemoryStore(merge_threshold=None)
    for i, label in enumerate(["a", "a", "b", "a", "a"]):
        st.add(f"turn {i}", time=float(i), session=label, embedding=unit(rng))
    goal = SessionGoal("a", unit(rng))
    pos, values = session_goal(st._backend, goal)
    assert pos.tolist() == [0, 1, 3, 4]
    np.testing.assert_array_equal(values, goal(st.view.embeddings[pos].astype(np.float64)))
    assert session_goal(st._backend, SessionGoal("b", goal.anchor))[0].tolist() == [2]
    assert session_goal(st._backend, SessionGoal("c", goal.anchor)) is None


def _echo_store(seed=0, n=40):
    """A store of user turns and replies on random unit vectors; every third reply restates the turn before it."""
    rng = np.random.default_rng(seed)
    st, E = MemoryStore(), rng.normal(size=(n, 384))
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        if role == "assistant" and i % 3 == 0:
            E[i] = E[i - 1] + 0.8 * rng.normal(size=384)  # an echo: cosine about 0.78 with the turn before
        st.add(f"turn {i}", time=float(i), role=role, embedding=E[i] / np.linalg.norm(E[i]))
    return st, rng


def test_retrieval_puts_the_users_words_before_an_echo_and_moves_nothing_else():
    from memlib.store import rank
    from memlib.store.retrieval import restated

    st, rng = _echo_store()
    view = st.view
    replies, sources = restated(view, np.arange(len(view)))
    assert len(replies) and set((replies - sources).tolist()) == {1}  # each echo restates the turn just before it
    for _ in range(20):
        q = rng.normal(size=384)
        q /= np.linalg.norm(q)
        scores = st.policy.retrieval_scores(view, q, 0.0, view.now)
        by_score = np.argsort(-scores, kind="stable").tolist()
        whole = rank(view, st.policy, q).tolist()
        assert sorted(whole) == sorted(by_score)
        for r, s in zip(replies, sources):
            assert whole.index(s) < whole.index(r)  # the source first, always
            if by_score.index(s) > by_score.index(r):
                assert whole.index(r) == whole.index(s) + 1 or whole[whole.index(s) + 1] in replies
        others = [i for i in by_score if i not in set(replies.tolist())]
        assert [i for i in whole if i not in set(replies.tolist())] == others  # only echoes move
        for k in (1, 3, 10, len(view)):
            assert rank(view, st.policy, q, k=k).tolist() == whole[:k]


def test_a_reply_unlike_the_turn_before_is_not_an_echo():
    from memlib.store.retrieval import restated

    st = MemoryStore()
    st.add("I am allergic to peanuts.", time=0.0, embedding=np.eye(384)[0])
    st.add("Great, good luck!", time=0.0, role="assistant", embedding=np.eye(384)[1])  # cosine 0
    st.add("I have a dog.", time=1.0, embedding=np.eye(384)[2])
    st.add("A dog!", time=1.0, role="user", embedding=np.eye(384)[2] * 0.8 + np.eye(384)[3] * 0.6)  # the user's own
    assert [len(a) for a in restated(st.view, np.arange(4))] == [0, 0]
