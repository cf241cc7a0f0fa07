"""A store shared by threads (issue 22): an agent server's thread pool adds and retrieves at once.

Eight threads each run 500 operations (adds, a few batches, retrievals) on one store, in memory and
in a file. Every acknowledged add is present exactly once with its text, ids increase, no thread
sees an exception, and save/load (in memory) and close/reopen (file) give back the same items."""

import random
import sqlite3
import threading
import time
import zlib

import numpy as np
import pytest

from memlib.store import MemoryStore

THREADS, OPS = 8, 500


def fake_embed(texts):
    """A fixed random unit vector per text, seeded by its hash: a cheap, deterministic stand-in for the model."""
    rows = [np.random.default_rng(zlib.crc32(t.encode())).normal(size=384) for t in texts]
    return np.array(rows) / np.linalg.norm(rows, axis=1, keepdims=True)


def hammer(st, save_to=None):
    """Run THREADS threads of OPS operations each on ``st``; return ``(acked, errors, saved, seconds)``.

    ``acked[t]`` lists the ``(id, text)`` of every add thread ``t`` was told succeeded, in its order.
    With ``save_to``, thread 0 saves the store half-way through, while the others keep going.
    """
    start = threading.Barrier(THREADS)
    acked = [[] for _ in range(THREADS)]
    errors, saved = [], []

    def work(t):
        rnd = random.Random(t)
        try:
            start.wait()
            for i in range(OPS):
                r = rnd.random()
                if save_to is not None and t == 0 and i == OPS // 2:
                    st.save(save_to)
                    saved.append(True)
                elif r < 0.45:  # every tenth add measures its own emotion (VADER), the rest pass one
                    text = f"thread {t} item {i}"
                    emotion = None if i % 10 == 0 else 0.5
                    acked[t].append((st.add(text, session=f"s{i // 50}", emotion=emotion), text))
                elif r < 0.5:
                    texts = [f"thread {t} batch {i} turn {j}" for j in range(2)]
                    ids = st.add_many([{"text": x, "emotion": 0.2, "role": "assistant"} for x in texts])
                    acked[t].extend(zip(ids, texts))
                elif r < 0.9:
                    hits = st.retrieve(f"item {i}", k=3, update=r < 0.7)
                    assert 1 <= len(hits) <= 3 and len({h["id"] for h in hits}) == len(hits), hits
                else:
                    for hits in st.retrieve_many([f"item {i}", f"turn {i}"], k=2):
                        assert 1 <= len(hits) <= 2, hits
        except BaseException as exc:  # every failure of a thread is reported
            errors.append(f"thread {t} op {i}: {type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return acked, errors, saved, time.perf_counter() - t0


def check_every_acknowledged_add(st, acked, errors):
    assert errors == []
    for mine in acked:  # each thread's adds got increasing ids
        ids = [i for i, _ in mine]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    told = {0: "seed"} | {i: text for mine in acked for i, text in mine}
    assert len(told) == 1 + sum(map(len, acked)), "an id was handed out twice"
    assert np.all(np.diff(st.ids) > 0), "the store's ids are out of order"
    assert {item["id"]: item["text"] for item in st.items()} == told  # each add present exactly once, as told
    assert len(st) == len(told)


@pytest.mark.slow
def test_threads_share_an_in_memory_store(tmp_path):
    st = MemoryStore(embedder=fake_embed)
    st.add("seed", time=0)
    acked, errors, saved, seconds = hammer(st, save_to=tmp_path / "mid-run.npz")
    check_every_acknowledged_add(st, acked, errors)
    assert saved and sum(map(len, acked)) > THREADS * OPS * 0.4
    mid = MemoryStore.load(tmp_path / "mid-run.npz")  # a save while the others add is a whole store
    assert np.all(np.diff(mid.ids) > 0) and set(mid.ids) <= set(st.ids) and 0 < len(mid) < len(st)
    st.save(tmp_path / "s.npz")
    back = MemoryStore.load(tmp_path / "s.npz", embedder=fake_embed)
    assert back.items() == st.items() and back.merges == st.merges
    np.testing.assert_array_equal(back.embeddings, st.embeddings)
    print(f"\nin memory: {THREADS} threads x {OPS} operations, {len(st)} items, {seconds:.2f} s")


@pytest.mark.slow
def test_threads_share_a_file_store(tmp_path):
    path = tmp_path / "s.db"
    st = MemoryStore.open(path, embedder=fake_embed)
    st.add("seed", time=0)
    acked, errors, _, seconds = hammer(st)
    check_every_acknowledged_add(st, acked, errors)
    before = st.items()
    st.close()
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    back = MemoryStore.open(path, embedder=fake_embed)
    assert back.items() == before
    back.add("after the threads", time=1.0)
    assert back.ids[-1] == max(back.ids[:-1]) + 1
    print(f"\nfile: {THREADS} threads x {OPS} operations, {len(before)} items, {seconds:.2f} s")


def test_a_file_store_opened_in_one_thread_is_used_in_another(tmp_path):
    st = MemoryStore.open(tmp_path / "s.db", embedder=fake_embed)
    st.add("made in the main thread", time=0)
    out = []
    query = fake_embed(["from a worker"])[0]
    worker = threading.Thread(
        target=lambda: out.append((st.add("from a worker"), st.retrieve(query_embedding=query, k=1)))
    )
    worker.start()
    worker.join()
    assert out and out[0][0] == 1 and out[0][1][0]["text"] == "from a worker"
    st.close()
    assert [i["text"] for i in MemoryStore.open(tmp_path / "s.db").items()] == [
        "made in the main thread",
        "from a worker",
    ]


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_add_many_is_not_interleaved_with_another_threads_adds(tmp_path, kind):
    """A batch's turns get consecutive ids even while other threads add."""
    st = (
        MemoryStore(embedder=fake_embed)
        if kind == "memory"
        else MemoryStore.open(tmp_path / "s.db", embedder=fake_embed)
    )
    st.add("seed", time=0)
    batches, errors = [], []

    def work(t):
        try:
            for i in range(20):
                if t % 2:
                    st.add(f"single {t} {i}", emotion=0.1)
                else:
                    batches.append(st.add_many([{"text": f"batch {t} {i} {j}", "emotion": 0.1} for j in range(5)]))
        except BaseException as exc:  # every failure of a thread is reported
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert all(ids == list(range(ids[0], ids[0] + 5)) for ids in batches) and len(batches) == 40


def test_an_in_memory_store_can_still_be_copied_and_pickled_and_the_copy_has_its_own_lock():
    import copy
    import pickle

    s = MemoryStore(embedder=fake_embed)
    s.add("I am allergic to peanuts.", time=0)
    for twin in (copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert [i["text"] for i in twin.items()] == [i["text"] for i in s.items()]
        assert twin._lock is not s._lock
        twin.add("a second turn", time=1)
        assert len(twin.items()) == 2 and len(s.items()) == 1
