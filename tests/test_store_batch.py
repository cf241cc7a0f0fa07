"""The store in an agent loop (issue 13): add_many and retrieve_many give exactly what add and
retrieve give one by one, with one embedder call per batch; the embedder= parameter (embed=, its
name before 0.2.0, is gone), and clear errors for a bad embedder. A fake embedder keeps these fast:
no test here loads the model."""

import subprocess
import sys
import warnings
import zlib

import numpy as np
import pytest

from memlib import ParameterError
from memlib.store import MemoryStore, StoreError
from test_store import assert_same_snapshot, snapshot


def fake_embed(texts):
    """A fixed random unit vector per text (seeded by its hash): a stand-in for the model."""
    rows = [np.random.default_rng(zlib.crc32(t.encode())).normal(size=384) for t in texts]
    return np.array(rows) / np.linalg.norm(rows, axis=1, keepdims=True)


class Counting:
    """An embedder that records every call (the texts it was given)."""

    def __init__(self, fn=fake_embed):
        self.fn = fn
        self.calls: list[list[str]] = []

    def __call__(self, texts):
        self.calls.append(list(texts))
        return self.fn(texts)


def conversation():
    """Turns of two sessions with every kind of argument, a verbatim repeat and a near-duplicate."""
    e = fake_embed(["My sister is Ana."])[0]
    close = e + 0.02 * np.random.default_rng(1).normal(size=384) / np.sqrt(384)  # cosine about 0.9998
    return [
        {"text": "Hi! I am Bob and I am terribly allergic to peanuts!", "time": 0.0, "session": "monday"},
        {"text": "Noted, Bob: no peanuts.", "role": "assistant", "speaker": "bot"},
        {"text": "My sister is Ana.", "time": 0.01, "task_utility": 0.7},
        {"text": "Parking spot 42 today.", "time": 0.02, "expires": 1.0},
        {"text": "I HATE traffic jams!!!", "time": 0.03, "emotion": 0.9},
        {"text": "Remember my passport number.", "time": 0.04, "pinned": True},
        {"text": "Good morning again.", "time": 1.0, "session": "tuesday", "speaker": "bob"},
        {"text": "My sister is Ana.", "time": 1.01, "session": "tuesday"},  # a repeat: merges into item 2
        {"text": "my sister's name is Ana", "time": 1.02, "session": "tuesday", "embedding": close},  # merges too
        {"text": "Shall we plan the trip?", "role": "assistant", "time": 1.03, "session": "tuesday"},
        {"text": "Yes, to Lyon in May.", "time": 1.04, "session": "tuesday", "emotion": 0.0},
    ]


def one_by_one(store, turns):
    return [store.add(**turn) for turn in turns]


# --------------------------------------------------------------------------- add_many


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_add_many_gives_exactly_what_add_gives_one_by_one(tmp_path, kind):
    def make(name):
        if kind == "memory":
            return MemoryStore(embedder=fake_embed)
        return MemoryStore.open(tmp_path / f"{name}.db", embedder=fake_embed)

    turns = conversation()
    seq, batch = make("seq"), make("batch")
    ids = one_by_one(seq, turns)
    assert batch.add_many(turns) == ids
    assert ids == [0, 1, 2, 3, 4, 5, 6, 2, 2, 9, 10]  # ids are turn positions; the two repeats merged into item 2
    assert [m["turn"] for m in batch.merges] == [7, 8]
    assert batch.items() == seq.items()  # factors, values, tiers, usage, pins, expiries
    assert batch.merges == seq.merges
    np.testing.assert_array_equal(batch.embeddings, seq.embeddings)
    np.testing.assert_array_equal(batch.factors, seq.factors)
    assert_same_snapshot(snapshot(batch, tmp_path), snapshot(seq, tmp_path))  # centroids, session, time too
    # and the two continue alike
    more = [{"text": "Ana likes tea.", "time": 2.0, "session": "wednesday"}, {"text": "So does Bob.", "time": 2.1}]
    assert batch.add_many(more) == one_by_one(seq, more)
    assert batch.consolidate(budget=3) == seq.consolidate(budget=3)
    assert batch.forgotten == seq.forgotten
    assert_same_snapshot(snapshot(batch, tmp_path), snapshot(seq, tmp_path))


def test_add_many_embeds_in_one_call_and_only_what_lacks_an_embedding():
    emb = Counting()
    st = MemoryStore(embedder=emb)
    turns = conversation()
    st.add_many(turns)
    assert emb.calls == [[t["text"] for t in turns if "embedding" not in t]]  # one call, in order
    emb.calls.clear()
    given = [{"text": f"turn {i}", "time": 5.0 + i, "embedding": fake_embed([f"turn {i}"])[0]} for i in range(3)]
    assert st.add_many(given) == [11, 12, 13]
    assert st.add_many([]) == []
    assert emb.calls == []  # nothing to embed: the embedder is not called


def test_add_many_uses_the_batch_valence(monkeypatch):
    """The valence of a turn whose emotion is given comes from the one batch pass, not a per-turn call."""
    import memlib.store.annotate as A

    monkeypatch.setattr(A, "_valence_cached", lambda text: pytest.fail(f"valence recomputed for {text!r}"))
    st = MemoryStore(embedder=fake_embed)
    st.add_many([{"text": "I love this!", "time": 0.0, "emotion": 0.5}, {"text": "Awful.", "emotion": 0.1}])
    assert [round(v, 4) for v in st.view.valence] == [0.6696, -0.4588]


BAD_TURN_7 = [
    ({"colour": "red"}, r"turn 7 has an unknown key 'colour' \(add takes text, role, time"),
    ({"emotion": 2.0}, r"turn 7, 'emotion': emotion must be a number in \[0, 1\], got 2.0"),
    ({"text": "  "}, r"turn 7, 'text': text must be a non-empty string"),
    ({"role": "system"}, r"turn 7, 'role': role must be 'user' or 'assistant', got 'system'"),
    ({"time": 0.5}, r"turn 7, 'time': time goes backwards: 0.5 days is before the latest time 7.0 days"),
    ({"time": "not a date"}, r"turn 7, 'time': time must be a number of days or a datetime"),
    ({"expires": 3.0}, r"turn 7, 'expires': expires must be after the turn's time \(8.0 days\)"),
    ({"pinned": True, "expires": 9.0}, r"turn 7, 'expires': an item cannot be both pinned and expiring"),
    ({"pinned": "yes"}, r"turn 7, 'pinned': pinned must be True or False"),
    ({"task_utility": -1}, r"turn 7, 'task_utility': task_utility must be a number in \[0, 1\]"),
    ({"embedding": np.zeros(384)}, r"turn 7, 'embedding': embedding must not be the zero vector"),
    ({"embedding": np.ones(10)}, r"turn 7, 'embedding': embedding must be 384 finite numbers"),
]


@pytest.mark.parametrize("bad, message", BAD_TURN_7)
@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_bad_turn_names_the_turn_and_key_and_changes_nothing(tmp_path, kind, bad, message):
    emb = Counting()
    st = MemoryStore(embedder=emb) if kind == "memory" else MemoryStore.open(tmp_path / "s.db", embedder=emb)
    st.add_many([{"text": "first", "time": 0.0}, {"text": "second", "time": 0.1}])
    before = snapshot(st, tmp_path)
    emb.calls.clear()
    turns = [{"text": f"turn {i}", "time": 1.0 + i, "session": f"s{i // 4}"} for i in range(9)]
    turns[7] = {**turns[7], **bad}
    with pytest.raises(ParameterError, match=message):
        st.add_many(turns)
    assert emb.calls == []  # checked before the embedder runs
    assert_same_snapshot(before, snapshot(st, tmp_path))
    if kind == "file":
        st.close()
        assert_same_snapshot(before, snapshot(MemoryStore.open(tmp_path / "s.db"), tmp_path))


@pytest.mark.parametrize(
    "turns, message",
    [
        ({"text": "one turn, not a list"}, "add_many takes an iterable of dicts, one per turn, got a dict"),
        ("a string", "add_many takes an iterable of dicts, one per turn, got a str"),
        (42, "add_many takes an iterable of dicts, one per turn, got int"),
        ([{"text": "a", "time": 0.0}, "b"], "add_many: turn 1 must be a dict of add's arguments, got str"),
        ([{"text": "a", "time": 0.0}, {"role": "user"}], "add_many: turn 1 has no 'text'"),
        ([{"text": "a"}], "add_many: turn 0, 'time': the first add needs a time"),
        ([{"text": "a", "time": 0.0, "_valence": 0.3}], "turn 0 has an unknown key '_valence'"),
    ],
)
def test_add_many_refuses_what_is_not_a_list_of_turns(turns, message):
    st = MemoryStore(embedder=fake_embed)
    with pytest.raises(ParameterError, match=message):
        st.add_many(turns)
    assert len(st) == 0


def test_add_many_on_a_closed_file_store_says_so(tmp_path):
    emb = Counting()
    st = MemoryStore.open(tmp_path / "s.db", embedder=emb)
    st.close()
    with pytest.raises(StoreError, match="the store is closed"):
        st.add_many([{"text": "late", "time": 0.0}])
    assert emb.calls == []


# --------------------------------------------------------------------------- retrieve_many


def built(emb=fake_embed):
    st = MemoryStore(embedder=emb)
    st.add_many(conversation())
    return st


QUERIES = ["Who is my sister?", "peanuts", "Where do we go in May?", "Who is my sister?"]


def test_retrieve_many_without_update_is_retrieve_for_each_query(tmp_path):
    st = built()
    before = snapshot(st, tmp_path)
    got = st.retrieve_many(QUERIES, k=3, update=False)
    assert got == [st.retrieve(q, k=3, update=False) for q in QUERIES]
    assert [len(r) for r in got] == [3, 3, 3, 3]
    assert_same_snapshot(before, snapshot(st, tmp_path))


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_retrieve_many_with_update_is_retrieve_for_each_query_in_order(tmp_path, kind):
    a, b = built(), built()
    if kind == "file":
        a, b = a.persist(tmp_path / "a.db"), b.persist(tmp_path / "b.db")
    got = a.retrieve_many(QUERIES, k=2, now=1.5)
    assert got == [b.retrieve(q, k=2, now=1.5) for q in QUERIES]
    first, again = ({r["id"]: r["retrievals"] for r in hits} for hits in (got[0], got[3]))  # the same query
    assert first.keys() & again.keys()
    assert all(again[i] > first[i] for i in first.keys() & again.keys())  # the first time's hits were counted
    assert a.items() == b.items()
    assert_same_snapshot(snapshot(a, tmp_path), snapshot(b, tmp_path))


def test_retrieve_many_embeds_the_queries_in_one_call_after_checking_them():
    emb = Counting()
    st = built(emb)
    emb.calls.clear()
    st.retrieve_many(QUERIES, k=1)
    assert emb.calls == [QUERIES]
    emb.calls.clear()
    assert st.retrieve_many([]) == [] and emb.calls == []
    for queries, message in [
        (["fine", ""], r"retrieve_many: query 1 must be a non-empty string, got ''"),
        (["fine", None], r"retrieve_many: query 1 must be a non-empty string, got None"),
        ("one string", "got one string: use retrieve"),
    ]:
        with pytest.raises(ParameterError, match=message):
            st.retrieve_many(queries)
    with pytest.raises(ParameterError, match="k must be an integer >= 1, got 0"):
        st.retrieve_many(QUERIES, k=0)
    with pytest.raises(ParameterError, match="time must be a number of days or a datetime"):
        st.retrieve_many(QUERIES, now="soon")
    assert emb.calls == []


# --------------------------------------------------------------------------- the embedder


def test_the_embedder_is_used_for_add_and_retrieve():
    emb = Counting()
    st = MemoryStore(embedder=emb)
    st.add("I am allergic to peanuts.", time=0.0)
    st.retrieve("peanuts?", k=1)
    assert emb.calls == [["I am allergic to peanuts."], ["peanuts?"]]
    np.testing.assert_allclose(st.embeddings[0], fake_embed(["I am allergic to peanuts."])[0], rtol=1e-6)


def test_the_embedder_has_one_name_in_the_store_load_and_open(tmp_path):
    emb = Counting()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the name warns about nothing
        st = MemoryStore(embedder=emb)
        st.add("hello", time=0.0)
        st.save(tmp_path / "s.npz")
        back = MemoryStore.load(tmp_path / "s.npz", embedder=emb)
        dur = MemoryStore.open(tmp_path / "s.db", embedder=emb)
    back.retrieve("hi", k=1)
    dur.add("again", time=1.0)
    assert emb.calls == [["hello"], ["hi"], ["again"]]
    dur.close()
    for make in (  # embed=, the name before 0.2.0: Python's TypeError, and no file is made
        lambda: MemoryStore(embed=emb),
        lambda: MemoryStore.load(tmp_path / "s.npz", embed=emb),
        lambda: MemoryStore.open(tmp_path / "t.db", embed=emb),
    ):
        with pytest.raises(TypeError, match="unexpected keyword argument 'embed'"):
            make()
    assert not (tmp_path / "t.db").exists()


def test_an_embedder_must_be_callable():
    with pytest.raises(ParameterError, match=r"embedder must be a callable, list of str -> \(n, 384\) array, got str"):
        MemoryStore(embedder="all-MiniLM-L6-v2")


def wrong_shape(texts):
    return np.ones((len(texts), 10))


def one_row_short(texts):
    return fake_embed(texts)[1:]


def with_nan(texts):
    E = fake_embed(texts)
    E[-1, 3] = np.nan
    return E


def with_zero_row(texts):
    E = fake_embed(texts)
    E[0] = 0.0
    return E


def words(texts):
    return [t.split() for t in texts]


@pytest.mark.parametrize(
    "embedder, message",
    [
        (wrong_shape, r"the embedder wrong_shape returned shape \(3, 10\) for 3 texts; it must return \(3, 384\)"),
        (one_row_short, r"the embedder one_row_short returned shape \(2, 384\) for 3 texts"),
        (with_nan, r"the embedder with_nan returned a NaN or infinity for text 2 \('c c'\)"),
        (with_zero_row, r"the embedder with_zero_row returned a zero vector for text 0 \('a'\)"),
        (words, r"the embedder words must return an \(n, 384\) array of numbers, got list"),
    ],
)
def test_a_bad_embedder_output_is_a_clear_error_that_changes_nothing(tmp_path, embedder, message):
    st = MemoryStore(embedder=embedder)
    st.add("first", time=0.0, embedding=fake_embed(["first"])[0])
    before = snapshot(st, tmp_path)
    with pytest.raises(ParameterError, match=message):
        st.add_many([{"text": "a", "time": 1.0}, {"text": "b b"}, {"text": "c c"}])
    with pytest.raises(ParameterError, match=message):
        st.retrieve_many(["a", "b b", "c c"])
    assert_same_snapshot(before, snapshot(st, tmp_path))
    with pytest.raises(ParameterError, match=f"the embedder {embedder.__name__}"):
        st.add("a", time=1.0)


# --------------------------------------------------------------------------- the default embedder, lazily loaded


def test_the_default_embedder_is_the_direct_encoder_at_the_fast_setting(monkeypatch):
    import memlib.embeddings as Emb

    seen = []

    def encode(texts, setting="fast", device=None):
        seen.append((list(texts), setting))
        return fake_embed(texts).astype(np.float32)

    monkeypatch.setattr(Emb, "embed_uncached", encode)
    st = MemoryStore()
    st.add_many([{"text": "one", "time": 0.0}, {"text": "two"}])
    st.retrieve("one", k=1)
    assert seen == [(["one", "two"], "fast"), (["one"], "fast")]
    assert MemoryStore.warm_up() >= 0.0
    assert seen[-1] == (["Warming up: I am so glad to meet you!"], "fast")


def test_embed_uncached_calls_the_model_once_without_a_cache(monkeypatch, tmp_path):
    import memlib.embeddings as Emb

    calls = []

    class Model:
        def encode(self, texts, **kw):
            calls.append((list(texts), kw))
            return fake_embed(texts).astype(np.float32)

    lengths = []
    monkeypatch.setattr(Emb, "load_model", lambda n, device=None: lengths.append(n) or Model())
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path))
    E = Emb.embed_uncached(["a", "bb", "a"])
    assert E.shape == (3, 384) and E.dtype == np.float32
    assert lengths == [128]
    assert calls == [
        (
            ["a", "bb", "a"],
            {"batch_size": 64, "convert_to_numpy": True, "normalize_embeddings": True, "show_progress_bar": False},
        )
    ]
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert Emb.embed_uncached([]).shape == (0, 384) and len(calls) == 1
    with pytest.raises(ParameterError, match="texts must be strings, got int at position 1"):
        Emb.embed_uncached(["a", 3])
    with pytest.raises(ParameterError, match="embedding setting must be one of reference, fast"):
        Emb.embed_uncached(["a"], setting="quick")


def test_importing_memlib_or_making_a_store_loads_no_model():
    code = (
        "import sys, memlib, memlib.store\n"
        "st = memlib.store.MemoryStore()\n"
        "st.add('hi', time=0.0, embedding=[1.0] + [0.0] * 383)\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
