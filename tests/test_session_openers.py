"""The store cue ``first_in_session``: known when a turn arrives, kept in both store formats, the same in a batch.

A store sees a session open (a turn whose session label differs from the turn before it).
It keeps that fact per item, so forgetting the opening turn does not make the next one an
opener, and a file written before stores kept it reads it from the held items' sessions.
"""

import json
import sqlite3

import numpy as np
import pytest

from memlib import ParameterError
from memlib.cues import ITEM_CUES, STORE_CUES, first_in_session, item_cues, store_cues
from memlib.store import MemoryStore
from memlib.value import CueValue

FIRST = STORE_CUES.index("first_in_session")


def unit(i: int) -> np.ndarray:
    return np.eye(384)[i]


def store_of(sessions, forget=None) -> MemoryStore:
    """A store of one turn per session label; the turn at ``forget`` expires and a consolidation drops it."""
    st = MemoryStore(merge_threshold=None)
    for i, s in enumerate(sessions):
        st.add(
            f"turn {i} of {s}", time=float(i), session=s, embedding=unit(i), expires=i + 0.5 if i == forget else None
        )
    if forget is not None:
        st.consolidate(budget=len(sessions), now=float(len(sessions)))
    return st


def test_the_cue_marks_each_turn_whose_session_differs_from_the_one_before():
    assert first_in_session(["a", "a", "b", "a", "a"]).tolist() == [1.0, 0.0, 1.0, 1.0, 0.0]
    assert first_in_session([3, 3], previous=3).tolist() == [0.0, 0.0]
    assert first_in_session([]).tolist() == []
    rows = item_cues(["Hi.", "My sister is Ana."], ["user", "assistant"], [True, False])
    assert rows.shape == (2, len(ITEM_CUES)) and rows[:, -1].tolist() == [1.0, 0.0] and rows[:, 0].tolist() == [1, 0]
    assert store_cues(["Hi."], ["user"], [True], np.zeros((1, 7)))[0, FIRST] == 1.0
    with pytest.raises(ParameterError, match="one text, one role and one session opening per factor row"):
        store_cues(["Hi."], ["user"], [], np.zeros((1, 7)))


def test_a_store_marks_the_turns_that_opened_their_sessions_and_forgetting_one_does_not_move_it():
    assert store_of(["mon", "mon", "mon", "tue", "tue", ""]).cues[:, FIRST].tolist() == [1, 0, 0, 1, 0, 1]
    # no label at all (the default, ""): the store's first turn opens its session
    assert store_of([None, None]).cues[:, FIRST].tolist() == [1, 0]
    # the opener of Tuesday goes; the turn after it still did not open the session
    st = store_of(["mon", "mon", "mon", "tue", "tue", ""], forget=3)
    assert st.ids == [0, 1, 2, 4, 5] and st.cues[:, FIRST].tolist() == [1, 0, 0, 0, 1]


@pytest.mark.parametrize("kind", ["npz", "sqlite"])
def test_both_store_formats_keep_the_cue(tmp_path, kind):
    st = store_of(["mon", "mon", "tue", "tue"], forget=2)
    if kind == "npz":
        st.save(tmp_path / "s.npz")
        back = MemoryStore.load(tmp_path / "s.npz")
    else:
        st.persist(tmp_path / "s.db").close()
        back = MemoryStore.open(tmp_path / "s.db")
    np.testing.assert_array_equal(back.cues, st.cues)
    assert back.cues[:, FIRST].tolist() == [1, 0, 0]
    back.add("a new day", time=9.0, session="wed", embedding=unit(9))
    back.add("and more", time=9.5, session="wed", embedding=unit(10))
    assert back.cues[:, FIRST].tolist() == [1, 0, 0, 1, 0]


def test_an_older_npz_without_the_field_reads_it_from_the_held_items_sessions(tmp_path):
    st = store_of(["mon", "mon", "tue", "tue"], forget=2)  # Tuesday's opener: an older file cannot know it
    st.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        arrays = {k: z[k] for k in z.files if k != "first_in_session"}
    np.savez(tmp_path / "old.npz", **arrays)
    back = MemoryStore.load(tmp_path / "old.npz")
    assert back.cues[:, FIRST].tolist() == [1, 0, 1]
    np.testing.assert_array_equal(np.delete(back.cues, FIRST, 1), np.delete(st.cues, FIRST, 1))


def version_1_file(path, sessions, forget=None):
    """A store file as memlib wrote it before stores kept first_in_session (schema version 1)."""
    store_of(sessions, forget).persist(path).close()
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE items DROP COLUMN first_in_session")
    con.execute("PRAGMA user_version = 1")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'version'")
    con.commit()
    con.close()


def file_column(path):
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA user_version").fetchone()[0], [
            r[0] for r in con.execute("SELECT first_in_session FROM items ORDER BY id")
        ]
    finally:
        con.close()


def test_a_version_1_sqlite_file_reads_the_field_and_gets_the_column_at_its_first_write(tmp_path):
    path = tmp_path / "s.db"
    version_1_file(path, ["mon", "mon", "tue"])
    back = MemoryStore.open(path)
    assert back.cues[:, FIRST].tolist() == [1, 0, 1]
    back.add("later", time=5.0, session="tue", embedding=unit(5))
    back.close()
    assert file_column(path) == (2, [1, 0, 1, 0])
    assert MemoryStore.open(path).cues[:, FIRST].tolist() == [1, 0, 1, 0]


def test_a_version_1_file_and_its_store_agree_when_its_first_write_forgets(tmp_path):
    """The column is written from what the store read, before the write drops anything."""
    path = tmp_path / "s.db"
    version_1_file(path, ["mon", "mon", "tue", "tue"])
    con = sqlite3.connect(path)
    con.execute("UPDATE items SET expires = 3.5 WHERE id = 0")  # Monday's opener expires
    con.commit()
    con.close()
    st = MemoryStore.open(path)
    st.consolidate(budget=10, now=4.0)
    st.add("more", time=5.0, session="tue", embedding=unit(7))
    assert st.ids == [1, 2, 3, 4] and st.cues[:, FIRST].tolist() == [0, 1, 0, 0]
    st.close()
    assert file_column(path) == (2, [0, 1, 0, 0])
    assert MemoryStore.open(path).cues[:, FIRST].tolist() == [0, 1, 0, 0]


def test_a_store_pickled_before_it_kept_the_field_reads_it_from_its_sessions(tmp_path):
    st = store_of(["mon", "mon", "tue"])
    state = st.__getstate__()
    cols = state["_backend"].cols
    cols.data.pop("first_in_session")
    cols.data["static_cues"] = cols.data["static_cues"][:, :-1]  # is_user and the text cues, as they were
    back = MemoryStore.__new__(MemoryStore)
    back.__setstate__(state)
    assert back.cues[:, FIRST].tolist() == [1, 0, 1]
    back.add("wed", time=9.0, session="wed", embedding=unit(9))
    back.save(tmp_path / "s.npz")
    assert MemoryStore.load(tmp_path / "s.npz").cues[:, FIRST].tolist() == [1, 0, 1, 1]


def test_a_cue_value_learned_before_the_cue_gives_it_no_weight():
    older = [c for c in STORE_CUES if c != "first_in_session"]
    for interactions in (False, True):
        names = older + ([f"user*{c}" for c in older if c != "is_user"] if interactions else [])
        w = np.arange(1.0, len(names) + 1)
        d = {"kind": "cue_value", "cues": older, "interactions": interactions, "weights": w.tolist()}
        cv = CueValue.from_dict(json.loads(json.dumps(d)))
        got = dict(zip(cv.feature_names, cv.weights))
        assert got["first_in_session"] == 0.0 and got.get("user*first_in_session", 0.0) == 0.0
        assert [got[n] for n in names] == w.tolist()
        X = np.random.default_rng(0).random((5, len(STORE_CUES)))
        old = np.delete(X, FIRST, 1)  # what the value scored before: its own cues, and their user products
        old = np.hstack([old, old[:, :1] * old[:, 1:]]) if interactions else old
        np.testing.assert_allclose(cv.score(X), old @ w)
    as_array = CueValue.from_dict({"kind": "cue_value", "cues": older, "weights": np.ones(11)})
    assert as_array.weights.tolist() == [1.0] * 8 + [0.0] + [1.0] * 3
    with pytest.raises(ParameterError, match=r"^x.json: a cue value over 11 cues needs 11 weights, got shape \(1,\)$"):
        CueValue.from_dict({"kind": "cue_value", "cues": older, "weights": [1.0]}, source="x.json")
    with pytest.raises(ParameterError, match=r"^x.json: interactions must be true or false"):
        CueValue.from_dict({"kind": "cue_value", "cues": older, "weights": [1.0] * 21, "interactions": "yes"}, "x.json")
    with pytest.raises(ParameterError, match=r"^x.json: a cue value needs 12 finite weights"):
        CueValue.from_dict({"kind": "cue_value", "cues": older, "weights": "abc"}, source="x.json")
