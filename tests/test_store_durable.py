"""The SQLite store of MemoryStore.open: the same store as in memory, every change one transaction,
safe against a killed process (SIGKILL in a forked child, many times), shared by processes."""

import os
import random
import select
import signal
import sqlite3
import time

import numpy as np
import pytest

from memlib import ParameterError
from memlib.store import MemoryStore, StoreError, make_policy
from memlib.store.policies import default_policy
from test_store import near, unit

#: The class of the store's default policy (memlib/defaults.json says which).
DEFAULT_POLICY = type(default_policy()).__name__

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="kills a forked child process")


def turn(i: int):
    """The i-th turn of a deterministic conversation: sessions of 7 turns; every 11th turn repeats an earlier one."""
    rng = np.random.default_rng(i)
    e = unit(rng)
    if i % 11 == 5:
        e = near(unit(np.random.default_rng(i - 3)), rng)
    return {
        "text": f"turn {i}: " + " ".join(rng.choice(["I", "like", "tea", "my", "sister", "Ana", "trips"], 5)),
        "role": "user" if i % 3 else "assistant",
        "time": i / 10,
        "session": f"s{i // 7}",
        "embedding": e,
        "emotion": float(rng.uniform()),
    }


def add_turn(st, i):
    st.add(**turn(i))


def replayed(n_turns: int, weights=None):
    st = MemoryStore(weights=weights)
    for i in range(n_turns):
        add_turn(st, i)
    return st


def integrity(path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


# --------------------------------------------------------------------------- the same store, kept in a file


def test_a_file_store_behaves_exactly_like_the_in_memory_store(tmp_path):
    mem, dur = MemoryStore(), MemoryStore.open(tmp_path / "s.db")
    rng = np.random.default_rng(0)
    queries = [unit(rng) for _ in range(5)]
    for st in (mem, dur):
        for i in range(60):
            add_turn(st, i)
            if i % 7 == 6:
                st.consolidate(20)
            if i % 13 == 0:
                st.retrieve(query_embedding=queries[i % 5], k=3)
        st.pin(st.ids[0])
        st.add("expiring", time=5.95, embedding=queries[0], expires=5.99)
        st.consolidate(budget_tokens=60, now=6.0)
    assert dur.items() == mem.items()
    assert dur.forgotten == mem.forgotten and dur.merges == mem.merges and len(mem.merges) > 0
    assert dur.consolidate(5, dry_run=True) == mem.consolidate(5, dry_run=True)
    dur.close()
    back = MemoryStore.open(tmp_path / "s.db")
    assert back.items() == mem.items() and back.forgotten == mem.forgotten and back.merges == mem.merges
    np.testing.assert_array_equal(back.embeddings, mem.embeddings)
    # and it continues exactly like the original
    for st in (back, mem):
        add_turn(st, 60)
        st.consolidate(10)
    assert back.items() == mem.items()
    assert integrity(tmp_path / "s.db") == "ok"


def test_a_file_store_is_private_and_uses_wal(tmp_path):
    path = tmp_path / "s.db"
    st = MemoryStore.open(path)
    add_turn(st, 0)
    assert st.path == path
    for p in tmp_path.iterdir():
        assert p.stat().st_mode & 0o777 == 0o600, p
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    st.close()
    assert len(st.items()) == 1  # a closed store stays readable, but no longer changes
    with pytest.raises(StoreError, match=f"{path}: the store is closed; open it again to change it"):
        add_turn(st, 1)


def test_forgotten_vectors_are_purged_by_later_adds(tmp_path):
    path = tmp_path / "s.db"
    st = MemoryStore.open(path, merge_threshold=None)
    for i in range(30):
        st.add(f"turn {i}", time=float(i), embedding=unit(np.random.default_rng(i)))
    st.consolidate(10)
    con = sqlite3.connect(path)
    count = lambda table: con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]  # noqa: E731
    assert (count("items"), count("vectors"), count("dropped_vectors")) == (10, 30, 20)
    for i in range(30, 40):
        st.add(f"turn {i}", time=float(i), embedding=unit(np.random.default_rng(i)))
    assert (count("items"), count("vectors"), count("dropped_vectors")) == (20, 20, 0)
    st.close()
    np.testing.assert_array_equal(MemoryStore.open(path).embeddings[0], st.embeddings[0])


def test_open_stores_settings_and_takes_new_weights(tmp_path):
    path = tmp_path / "s.db"
    w = np.array([0.5, 1, 0, 0.2, 0, 2, 0])
    st = MemoryStore.open(path, weights=w, policy=make_policy("value", beta=3.0), merge_threshold=0.9)
    add_turn(st, 0)
    st.close()
    back = MemoryStore.open(path)
    assert back.weights.tolist() == w.tolist() and back.policy.config()["beta"] == 3.0
    assert back.merge_threshold == 0.9 and back.factor_set == "paper"
    back.close()
    MemoryStore.open(path, weights=np.ones(7), merge_threshold=None).close()
    again = MemoryStore.open(path)
    assert again.weights.tolist() == [1.0] * 7 and again.merge_threshold is None
    with pytest.raises(ParameterError, match="was built with factor_set='paper'"):
        MemoryStore.open(path, factor_set="extended")


def test_an_npz_export_becomes_a_file_store(tmp_path):
    mem = replayed(30)
    mem.consolidate(12)
    mem.save(tmp_path / "s.npz")
    dur = MemoryStore.load(tmp_path / "s.npz").persist(tmp_path / "s.db")
    assert dur.path == tmp_path / "s.db" and dur.forgotten == mem.forgotten
    dur.close()
    assert MemoryStore.open(tmp_path / "s.db").items() == mem.items()
    with pytest.raises(StoreError, match="s.db: already holds a store"):
        MemoryStore.load(tmp_path / "s.npz").persist(tmp_path / "s.db")


# --------------------------------------------------------------------------- killed processes


def fork(child) -> tuple[int, int]:
    """Run ``child(say)`` in a forked process; ``say(text)`` sends a line to the parent. Return (pid, read end)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = 0
        try:
            os.close(r)
            child(lambda text: os.write(w, f"{text}\n".encode()))
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def read_line(fd: int, timeout: float = 20.0) -> str:
    out = b""
    deadline = time.monotonic() + timeout
    while not out.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError("the child process said nothing")
        chunk = os.read(fd, 1)
        if not chunk:
            raise AssertionError(f"the child process ended early after {out!r}")
        out += chunk
    return out.decode().strip()


def kill_after(pid: int, fd: int, delay: float) -> list[str]:
    """Wait for the child's first line, SIGKILL it ``delay`` seconds later; return every line it sent."""
    lines = [read_line(fd)]
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    rest = b""
    while chunk := os.read(fd, 65536):
        rest += chunk
    os.close(fd)
    return lines + rest.decode().split("\n")[:-1]


def kill_many_times(tmp_path, child, check, kills: int = 12, seconds: float = 4.0, max_delay: float = 0.03):
    """SIGKILL ``child`` at random moments, ``kills`` times or for ``seconds``; after each kill,
    ``check(lines)`` reopens the store. Return the number of kills that landed inside an operation."""
    rnd = random.Random(0)
    in_flight = done = 0
    deadline = time.monotonic() + seconds
    while done < kills and time.monotonic() < deadline:
        pid, fd = fork(child)
        lines = kill_after(pid, fd, rnd.uniform(0.0, max_delay))
        in_flight += lines[-1].startswith("start")  # killed between the start of an operation and its end
        check(lines)
        done += 1
    assert done >= 4, "too few kills in the time allowed"
    return in_flight, done


@pytest.mark.slow
@needs_fork
def test_a_process_killed_during_add_loses_at_most_that_add(tmp_path):
    path = tmp_path / "s.db"
    MemoryStore.open(path).close()
    replayed(3)  # load VADER here, not in every child
    reference = MemoryStore()
    state = {"turns": 0}

    def child(say):
        st = MemoryStore.open(path)
        i = state["turns"]
        while True:
            say(f"start {i}")
            add_turn(st, i)
            say(f"done {i}")
            i += 1

    def check(lines):
        finished = [int(x.split()[1]) for x in lines if x.startswith("done")]
        acked = finished[-1] + 1 if finished else state["turns"]
        assert integrity(path) == "ok"
        st = MemoryStore.open(path)
        while state["turns"] < acked:  # what the child acknowledged is there
            add_turn(reference, state["turns"])
            state["turns"] += 1
        if st.items() != reference.items():  # else the add in flight committed too
            add_turn(reference, state["turns"])
            state["turns"] += 1
        assert st.items() == reference.items() and st.merges == reference.merges
        st.close()

    in_flight, kills = kill_many_times(tmp_path, child, check)
    assert in_flight >= kills // 2, f"only {in_flight} of {kills} kills landed inside an add"
    assert state["turns"] > 10


@pytest.mark.slow
@needs_fork
def test_a_process_killed_during_consolidate_loses_at_most_that_consolidation(tmp_path):
    path = tmp_path / "s.db"
    n, step = 1500, 10
    base = MemoryStore(merge_threshold=None)
    for i in range(n):
        add_turn(base, i)
    base.save(tmp_path / "base.npz")
    MemoryStore.load(tmp_path / "base.npz").persist(path).close()
    reference = MemoryStore.load(tmp_path / "base.npz")
    state = {"consolidations": 0}

    def child(say):
        st = MemoryStore.open(path)
        while True:
            j = (n - len(st)) // step
            say(f"start {j}")
            st.consolidate(n - step * (j + 1))
            say(f"done {j}")

    def check(lines):
        finished = [int(x.split()[1]) for x in lines if x.startswith("done")]
        acked = finished[-1] + 1 if finished else state["consolidations"]
        assert integrity(path) == "ok"
        st = MemoryStore.open(path)
        committed = (n - len(st)) // step
        assert committed in (acked, acked + 1)  # what the child acknowledged, and perhaps the one in flight
        while state["consolidations"] < committed:
            reference.consolidate(len(reference) - step)
            state["consolidations"] += 1
        assert st.items() == reference.items() and st.forgotten == reference.forgotten
        st.close()

    in_flight, kills = kill_many_times(tmp_path, child, check)
    assert in_flight >= kills // 2, f"only {in_flight} of {kills} kills landed inside a consolidation"
    assert len(reference) < n


# --------------------------------------------------------------------------- processes sharing a store


@needs_fork
def test_processes_read_while_one_writes_and_a_second_writer_fails_clearly(tmp_path):
    path = tmp_path / "s.db"
    st = MemoryStore.open(path)
    for i in range(5):
        add_turn(st, i)
    st.close()

    def hold_the_write_lock(say):
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        say("locked")
        time.sleep(30)

    pid, fd = fork(hold_the_write_lock)
    try:
        assert read_line(fd) == "locked"
        reader = MemoryStore.open(path, timeout=0.2)  # opening and reading need no write lock
        before = reader.items()
        assert len(reader.retrieve(query_embedding=turn(2)["embedding"], k=2, update=False)) == 2
        t0 = time.monotonic()
        with pytest.raises(StoreError, match=rf"{path}: another process is writing to this store; gave up .* 0.2 s"):
            add_turn(reader, 5)
        assert 0.15 < time.monotonic() - t0 < 5
        with pytest.raises(StoreError, match="another process is writing"):
            reader.retrieve(query_embedding=turn(2)["embedding"], k=2)  # counting usage is a write
        assert reader.items() == before  # the failed writes changed nothing
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    add_turn(reader, 6)  # the lock is free again
    assert len(reader) == 6


@needs_fork
def test_a_reader_sees_what_another_process_writes(tmp_path):
    path = tmp_path / "s.db"
    MemoryStore.open(path).close()
    reader = MemoryStore.open(path)

    go = tmp_path / "go"

    def writer(say):
        st = MemoryStore.open(path)
        for i in range(40):
            add_turn(st, i)
            say(f"done {i}")
        while not go.exists():
            time.sleep(0.01)
        st.consolidate(10)
        say("consolidated")
        time.sleep(30)

    pid, fd = fork(writer)
    try:
        sizes = []
        for i in range(40):
            assert read_line(fd) == f"done {i}"
            sizes.append(len(reader.items()))  # reads while the other process writes
        assert sizes == sorted(sizes) and sizes[-1] == 40 - len(replayed(40).merges)
        assert reader.items() == replayed(40).items()
        go.touch()
        assert read_line(fd) == "consolidated"
        reference = replayed(40)
        reference.consolidate(10)
        assert reader.items() == reference.items() and reader.forgotten == reference.forgotten
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


# --------------------------------------------------------------------------- files that are not stores


def test_files_that_are_not_stores_are_refused_with_the_file_named(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(StoreError, match=r"junk.db: not a readable store file"):
        MemoryStore.open(junk)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match=r"other.db: a SQLite database, but not a memlib store"):
        MemoryStore.open(other)
    with pytest.raises(StoreError, match=r"is a folder, not a store file"):
        MemoryStore.open(tmp_path)


@pytest.mark.parametrize(
    "sql, message",
    [
        (
            "UPDATE meta SET value = '{\"beta\": \"x\"}' WHERE key = 'policy_config'",
            f"does not build a {DEFAULT_POLICY}",
        ),
        ("UPDATE meta SET value = '{\"nope\": 1}' WHERE key = 'policy_config'", f"does not build a {DEFAULT_POLICY}"),
        ("UPDATE meta SET value = '42' WHERE key = 'policy'", "the policy name must be a string"),
        ("UPDATE meta SET value = '[1, 2]' WHERE key = 'weights'", "weights must be 7 finite numbers"),
        ("UPDATE meta SET value = '\"seven\"' WHERE key = 'next_id'", "next_id must be an integer"),
        ("UPDATE meta SET value = 'not json' WHERE key = 'now'", "the setting 'now' is not JSON"),
        ("DELETE FROM meta WHERE key = 'factor_set'", "missing settings factor_set"),
        ("UPDATE items SET emotional_intensity = 'high'", "an item column holds a value that is not a number"),
        ("UPDATE items SET reliability = 7", "the item factors must lie in"),
        ("UPDATE vectors SET embedding = x'00'", "an item embedding is not 384 float32 numbers"),
        ("DELETE FROM vectors", "the vectors table has no embedding for item 0"),
        ("DELETE FROM sums WHERE name = 'user'", "missing sums user"),
        ("PRAGMA user_version = 99", "store schema version 99 is not one of 1, 2"),
    ],
)
def test_a_tampered_file_store_fails_with_one_error_naming_the_file(tmp_path, sql, message):
    path = tmp_path / "s.db"
    st = MemoryStore.open(path)
    for i in range(4):
        add_turn(st, i)
    st.close()
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    with pytest.raises(StoreError, match=f"{path}: .*{message}"):
        MemoryStore.open(path)
