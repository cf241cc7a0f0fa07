"""The stream study on RealMem: questions asked inside the stream, each at its own date.

A RealMem persona's questions have nested histories (a question's history is every session
before its own), so the stream study adds a persona's turns to one store that forgets nothing and
cuts it per question with the store's own replay (:func:`memlib.store.held_after`), instead of
replaying each question's history into a store of its own. These tests hold it to the slow path
(:func:`~memlib.studies.stream.replay` of each history, turn by turn, with its budget), store by
store and question by question.
"""

import json

import numpy as np
import pandas as pd
import pytest

from fixtures import HashModel
from memlib import FACTORS
from memlib.store import MemoryStore, held_after, rank
from memlib.studies import DataSpec
from memlib.studies import stream as S

# --------------------------------------------------------------------------- one planted history


def planted_history(n_sessions=9, seed=3):
    """Sessions of 1 to 7 turns, users and an assistant, random unit embeddings (some near each other)."""
    rng = np.random.default_rng(seed)
    rows, t = [], 0.0
    for s in range(n_sessions):
        t += float(rng.uniform(0.5, 9.0))  # days between sessions
        for j in range(int(rng.integers(1, 8))):
            role = "user" if (j % 2 == 0) != (s % 3 == 2) else "assistant"  # some sessions open with the assistant
            rows.append(
                {
                    "text": f"turn {len(rows)} of session {s}: " + " ".join(rng.choice(list("abcdefg"), 5)),
                    "role": role,
                    "speaker": "ana" if role == "user" else "assistant",
                    "session": f"s{s}",
                    "time": t + j / 1440.0,
                }
            )
    n = len(rows)
    E = rng.normal(size=(n, 384))
    E[5] = E[2] + 0.01 * rng.normal(size=384)  # a near-repeat (merging stays off in the stream study)
    E = (E / np.linalg.norm(E, axis=1, keepdims=True)).astype(np.float32)
    emotion = rng.uniform(0, 1, n)
    emotion[[3, 4]] = emotion[1]  # ties in importance
    return pd.DataFrame(rows), E, emotion


def session_ends(history):
    s = history["session"].to_numpy()
    return (np.flatnonzero(np.r_[s[1:] != s[:-1], True]) + 1).tolist()


def assert_same_items(fast, slow: MemoryStore, queries, policy, where: str):
    """``fast`` (a view a replay cut) holds what the store ``slow`` holds, column by column, and ranks alike."""
    assert fast.ids.tolist() == slow.ids, where
    for name in ("time", "valence", "retrievals", "last_access", "expires", "pinned", "tokens", "embeddings"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow.view, name), err_msg=f"{where} {name}")
    for name in ("factors", "cues"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=f"{where} {name}")
    np.testing.assert_array_equal(fast.values(), slow.values(), err_msg=where)
    for name in slow.view.state_names:
        np.testing.assert_array_equal(fast.state(name), slow.view.state(name), err_msg=where)
    for q, qv in queries:
        ranked = fast.ids[rank(fast, policy, q, qv, fast.now)]
        np.testing.assert_array_equal(ranked, np.asarray(slow.ids)[slow.rank(q, qv)])


@pytest.mark.parametrize("name", S.STREAM_POLICIES)
def test_one_store_cut_per_prefix_equals_each_prefix_replayed(name):
    history, E, emotion = planted_history()
    ends = session_ends(history)
    rng = np.random.default_rng(8)
    weights = rng.uniform(0, 2, 7)
    policy = S.stream_policy(name)
    queries = [(q / np.linalg.norm(q), v) for q, v in zip(rng.normal(size=(3, 384)), (0.0, 0.6, -0.4))]
    queries.append((E[2].astype(float), 0.2))  # a query that is a stored turn
    cuts = [(n, b) for n in ends[1:] for b in (1, 2, S.budget_count(0.3, n), S.budget_count(0.5, n), n + 3)]
    full = S.replay(history, weights, policy, None, E, emotion)  # as the study replays it: consolidated once
    before = full.ids
    sessions = history["session"].to_numpy()
    replayed = held_after(full.view, policy, sessions, cuts)
    assert full.ids == before and len(replayed.held) == len(cuts)  # the full store is left as it was
    for (n, b), held in zip(cuts, replayed.held):
        fast = full.view.take(held, float(history["time"].iloc[n - 1]))
        slow = S.replay(history.iloc[:n], weights, policy, b, E[:n], emotion[:n])
        assert_same_items(fast, slow, queries, policy, f"{name}, {n} turns, budget {b}")
        gold, ks = {0, 2, n - 1}, (1, 3, 10)
        for q, qv in queries:
            want = S.question_scores(slow.view, policy, q, qv, gold, ks, sessions[:n])
            assert S.question_scores(fast, policy, q, qv, gold, ks, sessions[:n]) == want


def test_a_store_that_forgets_nothing_holds_the_same_consolidated_once_and_under_another_policy():
    """What the study replays once per weights (consolidated after the last session, built under the first
    policy) is what a store of each policy consolidating at every session end holds, column by column."""
    history, E, emotion = planted_history()
    rng = np.random.default_rng(9)
    weights = rng.uniform(0, 2, 7)
    queries = [(q / np.linalg.norm(q), v) for q, v in zip(rng.normal(size=(2, 384)), (0.0, 0.5))]
    once = S.replay(history, weights, S.stream_policy("recency"), None, E, emotion)
    for name in S.STREAM_POLICIES:  # memorybank keeps a per-item state of its own
        policy = S.stream_policy(name)
        once.policy = policy
        each = S.replay(history, weights, policy, len(history), E, emotion)
        assert once.view.now == each.view.now
        assert_same_items(once.view, each, queries, policy, name)


def test_history_chains_join_only_prefixes_with_the_same_label():
    hs = [("a", "b", "c"), ("a",), ("a", "b"), ("a", "x"), ("b",), ("a", "b"), ()]
    chains = S.history_chains(hs, [0, 0, 0, 0, 0, 1, 0])
    assert chains == [[0, 2, 1, 6], [3], [5], [4]]
    assert sorted(i for c in chains for i in c) == list(range(len(hs)))
    # LoCoMo- or LongMemEval-like: no history nests in another, so each is replayed alone, as before
    assert S.history_chains([("a", "b"), ("c", "d"), ("a", "c")], [0, 0, 0]) == [[0], [1], [2]]


# --------------------------------------------------------------------------- the study on planted personas


def persona_file(name, n_sessions=7, seed=0, empty_turn=False):
    """A RealMem persona: each session states a fact; from the third on, a session opens with a question
    on the facts of two earlier sessions (one question also names a later session: a forward reference).
    With ``empty_turn`` the second session ends with an assistant turn without text, as six of RealMem do."""
    rng = np.random.default_rng(seed)
    words = ["peanuts", "piano", "Lisbon", "budget", "marathon", "thesis", "garden", "salsa", "tax", "visa"]
    dialogues = []
    for s in range(n_sessions):
        uuid = f"{seed:02x}{s:06x}"
        fact = f"{name} says: my {words[s % len(words)]} plan is number {int(rng.integers(100))}."
        turns = []
        if s >= 2:
            used = [{"session_uuid": f"{seed:02x}{k:06x}", "content": f"fact {k}"} for k in sorted({0, s - 2})]
            if s == 4:
                used.append({"session_uuid": f"{seed:02x}{n_sessions - 1:06x}", "content": f"fact {n_sessions - 1}"})
            turns += [
                {
                    "speaker": "User",
                    "content": f"What about my {words[(s - 2) % 10]}?",
                    "is_query": True,
                    "query_id": f"Q{s}",
                },
                {
                    "speaker": "Assistant",
                    "content": f"You told me about it, {s}.",
                    "is_query": False,
                    "memory_used": used,
                },
            ]
        turns += [
            {"speaker": "User", "content": fact, "is_query": False},
            {"speaker": "Assistant", "content": f"Noted, {words[s % 10]} ({s}).", "is_query": False},
            {"speaker": "User", "content": f"Thanks! See you on day {s}.", "is_query": False},
        ][: 1 + s % 3]
        if s == 1 and empty_turn:
            turns.append({"speaker": "Assistant", "content": "", "is_query": False})
        if s == 5:  # a second question in one session: both are asked at the same point of the stream
            turns += [
                {"speaker": "User", "content": "And my piano?", "is_query": True, "query_id": "Q5b"},
                {
                    "speaker": "Assistant",
                    "content": "Yes.",
                    "memory_used": [{"session_uuid": f"{seed:02x}{1:06x}", "content": "fact 1"}],
                },
            ]
        dialogues.append(
            {
                "session_identifier": f"Topic_{s}:S{s}",
                "session_uuid": uuid,
                "current_time": f"2025-12-{1 + 2 * s:02d} (Monday)",
                "dialogue_turns": turns,
                "extracted_memory": [
                    {"content": f"fact {s}", "source_content_snapshot": fact, "session_uuid": uuid, "source_turn": 0}
                ],
            }
        )
    return {"_metadata": {"person_name": name}, "dialogues": dialogues}


@pytest.fixture
def planted_realmem(tmp_path, monkeypatch):
    from memlib import embeddings as Emb

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: HashModel())
    folder = tmp_path / "rm"
    folder.mkdir()
    for i, name in enumerate(["Ana_Lima", "Ben_Cruz", "Chen_Wei"]):
        rec = persona_file(name, n_sessions=6 + i, seed=i, empty_turn=i == 0)
        (folder / f"{name}_dialogues_256k.json").write_text(json.dumps(rec))
    return folder


def test_the_stream_study_on_planted_realmem_equals_the_slow_path(planted_realmem):
    """Every question's row is what a store of its own history, replayed turn by turn with its budget, gives."""
    from memlib import datasets as D
    from memlib.embeddings import embed_cached
    from memlib.factors import emotion_and_valence

    data = DataSpec(str(planted_realmem), quick=True)
    fast = S.stream(data, budgets=(0.3, 0.5, 2), ks=(1, 3, 10))
    pq = fast.per_question
    ds = D.load(planted_realmem)
    hs = S.stream_histories(ds)
    assert fast.info["histories"] == len(hs.rows) and len(hs.rows) > 3
    assert any(len(c) > 1 for c in S.history_chains(hs.sessions, [0] * len(hs.rows)))  # nested histories
    weights = fast.weights.pivot_table(index=["budget", "fold"], columns="factor", values="weight")[list(FACTORS)]
    fold = S.two_folds(hs.cases["group"].to_numpy(), seed=0)
    for h in (0, len(hs.rows) // 2, len(hs.rows) - 1):
        rows = hs.rows[h]
        history = S.history_frame(ds, rows)
        texts = [ds.texts[i] for i in ds.turns["text_id"].to_numpy()[rows]]
        E = embed_cached(texts, "fast")
        emotion = emotion_and_valence(texts)[0]
        for c, gold in zip(hs.questions[h], hs.golds[h]):
            q = embed_cached([hs.cases["question"].iloc[c]], "fast")[0]
            qv = float(S.valence([hs.cases["question"].iloc[c]])[0])
            for b in (0.3, 0.5, 2):
                for name in S.STREAM_POLICIES:
                    w = weights.loc[(b, fold[c])].to_numpy() if name.startswith("learned_V") else np.ones(7)
                    policy = S.stream_policy(name)
                    slow = S.replay(history, w, policy, S.budget_count(b, len(rows)), E, emotion)
                    want = S.question_scores(slow.view, policy, q, qv, gold, (1, 3, 10), history["session"].to_numpy())
                    mine = (pq["case_id"] == hs.cases["case_id"].iloc[c]) & (pq["budget"] == b)
                    row = pq[mine & (pq["policy"] == name)]
                    if not gold:
                        assert row.empty
                        continue
                    got = row.iloc[0]
                    assert got["stored"] == len(slow) and got["history"] == len(rows)
                    assert {k: got[k] for k in want} == want, (h, c, b, name)
    # each question is asked on the history before its own session, with a budget of that history's share
    assert pq["history"].nunique() > 3 and set(pq["policy"]) == set(S.STREAM_POLICIES)
    share = pq[(pq["budget"] == 0.3) & (pq["policy"] != "rag_unbounded")]
    assert (share["stored"] == [min(S.budget_count(0.3, h), h) for h in share["history"]]).all()
    assert (pq.loc[pq["policy"] == "rag_unbounded", "retention"] == 1.0).all()
    assert "session_recall_any@3" in pq  # dated questions: session-level metrics too
    # the two questions of one session share its history
    b = pq[pq["case_id"].str.endswith("/Q5b")]
    a = pq[pq["case_id"].str.endswith("/Q5")]
    assert len(a) and (a["history"].to_numpy() == b["history"].to_numpy()).all()


def test_a_turn_without_text_is_left_out_of_the_histories(planted_realmem):
    """RealMem has six assistant turns with no text (LongMemEval-S twelve); a store refuses such a turn
    ("text must be a non-empty string"), so the study used to stop at the first history holding one."""
    from memlib import datasets as D

    ds = D.load(planted_realmem)
    empty = [i for i, t in enumerate(ds.turns["text"]) if not t.strip()]
    assert len(empty) == 1
    res = S.stream(DataSpec(str(planted_realmem), quick=True), budgets=(0.5,), ks=(3,), policies=("recency",))
    assert res.info["turns_without_text"] == 1
    cases = ds.usable().cases.set_index("case_id")
    nt = ds.sessions.set_index("session")["n_turns"]
    for case_id, n in res.per_question.set_index("case_id")["history"].items():
        hay = cases.loc[case_id, "haystack"]
        assert n == int(nt.loc[list(hay)].sum()) - (ds.turns.loc[empty[0], "session"] in hay)
