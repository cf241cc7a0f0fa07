"""Each change of a store is applied whole or not at all, in memory and in a file (memlib.store.backend).

A change (an add, a merge, a consolidation, a retrieval's usage counts) is described once and applied
part by part by the store's backend; these tests make the last part fail, after the others were
applied, and check that the store is exactly as before, and that it then goes on as if the failed
call had never been made."""

import sqlite3

import numpy as np
import pytest

from memlib.store import MemoryStore, StoreError, durable
from memlib.store.backend import Change, MemoryBackend


def unit(i: int) -> np.ndarray:
    return np.eye(384)[i]


def made(kind, tmp_path, n=6):
    st = MemoryStore() if kind == "memory" else MemoryStore.open(tmp_path / f"{kind}.db")
    for i in range(n):
        st.add(f"fact {i}", time=float(i), session=f"s{i // 3}", embedding=unit(i), emotion=0.1 * i)
    return st


def snapshot(st):
    return st.items(), st.forgotten, st.merges, len(st), np.array(st.embeddings).copy()


def same(a, b):
    assert a[:4] == b[:4]
    np.testing.assert_array_equal(a[4], b[4])


def fail_after(monkeypatch, part):
    """Make the part ``part`` of MemoryBackend.apply raise once it has been applied in memory."""
    real = getattr(MemoryBackend, part)

    def failing(self, *args):
        real(self, *args)
        raise OSError("the disk is full")

    monkeypatch.setattr(MemoryBackend, part, failing)


OPERATIONS = {  # an operation, and the last part of its change
    "add": (lambda st: st.add("fact 9", time=9.0, session="s9", embedding=unit(9)), "_set_sums"),
    "merge": (lambda st: st.add("fact 2 again", time=9.0, session="s9", embedding=unit(2)), "_set_sums"),
    "consolidate": (lambda st: st.consolidate(2, now=9.0), "_set_scalars"),
    "retrieve": (lambda st: st.retrieve(query_embedding=unit(1), k=2), "_set_rows"),
    "pin": (lambda st: st.pin(3), "_set_rows"),
}


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_a_change_that_fails_part_way_leaves_the_store_as_it_was(tmp_path, monkeypatch, kind, operation):
    call, part = OPERATIONS[operation]
    st, reference = made(kind, tmp_path), made("memory", tmp_path)
    before = snapshot(st)
    fail_after(monkeypatch, part)
    with pytest.raises(OSError, match="the disk is full"):
        call(st)
    same(snapshot(st), before)
    monkeypatch.undo()
    assert call(st) == call(reference)  # and it goes on as if the failed call had never been made
    same(snapshot(st), snapshot(reference))
    if kind == "file":
        st.close()
        same(snapshot(MemoryStore.open(tmp_path / "file.db")), snapshot(reference))


def test_a_commit_that_fails_leaves_the_file_store_as_it_was_and_then_catches_up(tmp_path, monkeypatch):
    st, reference = made("file", tmp_path), made("memory", tmp_path)
    before = snapshot(st)
    real = durable.StoreFile.commit

    def commit(self):  # fails once, as SQLite fails (the real commit turns its error into a StoreError)
        monkeypatch.setattr(durable.StoreFile, "commit", real)
        with self.errors():
            raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(durable.StoreFile, "commit", commit)
    with pytest.raises(StoreError, match="cannot use the store file .disk I/O error."):
        st.add("fact 9", time=9.0, embedding=unit(9))
    same(snapshot(st), before)
    assert st.add("fact 9", time=9.0, embedding=unit(9)) == reference.add("fact 9", time=9.0, embedding=unit(9))
    same(snapshot(st), snapshot(reference))


def test_a_memory_backend_applies_a_change_part_by_part():
    b = MemoryBackend()
    row = {"ids": 0, "time": 1.0, "expires": np.inf}
    with b.transaction():
        b.apply(Change(append=(row, ("hi", "user", "user", "s")), scalars={"next_id": 1, "now": 1.0}, turn=True))
    with b.transaction():
        b.apply(Change(rows=[(np.array([0]), {"retrievals": [2.0], "goal_relevance": [0.25]})]))
    assert b.cols.view("retrievals").tolist() == [2.0] and b.cols.view("factors")[0, 1] == 0.25
    with b.transaction():
        drop = np.array([True])
        b.apply(Change(log=("forgotten", [(0, "hi", 1.0, 0.5, "semantic", "budget", 2.0)]), drop=drop))
    assert b.cols.n == 0 and b.log("forgotten")[0]["reason"] == "budget" and b.scalars["next_id"] == 1
