"""Hostile input to the store, round two (issue 22): arguments of the wrong kind, files that are not
stores, folders that cannot be written, lone surrogates and deep nesting. Each is one line naming the
argument or the file, and a refused call changes nothing: no state, no file left behind."""

import json
import math
import os
import pwd
import shutil
import sqlite3
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from memlib import ParameterError
from memlib.store import MemoryStore, StoreError
from memlib.store.policies import default_policy
from test_store import assert_same_snapshot, filled_store, snapshot, unit
from test_store_durable import fork, needs_fork, read_line

#: The class of the store's default policy (memlib/defaults.json says which).
DEFAULT_POLICY = type(default_policy()).__name__


def message(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def strict_embed(texts):
    """A stand-in for the model that, like the tokenizer, cannot take text that is not valid Unicode."""
    for t in texts:
        t.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
    rows = [np.random.default_rng(zlib.crc32(t.encode())).normal(size=384) for t in texts]
    return np.array(rows)


def complex_embed(texts):
    return np.ones((len(texts), 384)) * 1j


# --------------------------------------------------------------------------- arguments of the wrong kind


@pytest.mark.parametrize(
    "call, expected",
    [
        (
            lambda st, e: st.add("x", time="now", embedding=e),
            "time must be a number of days or a datetime, got 'now': "
            "pass time=None for the store's latest time, or datetime.now() for the wall clock",
        ),
        (
            lambda st, e: st.add("x", time="today", embedding=e),
            "time must be a number of days or a datetime, got "
            "'today': pass time=None for the store's latest time, or datetime.now() for the wall clock",
        ),
        (
            lambda st, e: st.consolidate(3, now="now"),
            "time must be a number of days or a datetime, got 'now': "
            "pass now=None for the store's latest time, or datetime.now() for the wall clock",
        ),
        (
            lambda st, e: st.add("x", time=30.0, embedding=e.reshape(2, 192)),
            "embedding must be 384 finite numbers in one 1-D row, got shape (2, 192)",
        ),
        (
            lambda st, e: st.add("x", time=30.0, embedding=e * (1 + 1j)),
            "embedding must be real numbers, got complex128 numbers",
        ),
        (
            lambda st, e: st.retrieve(query_embedding=e.astype(np.complex64), k=2),
            "query_embedding must be real numbers, got complex64 numbers",
        ),
        (
            lambda st, e: st.retrieve(query_embedding=e.reshape(1, 384), k=2),
            "query_embedding must be 384 finite numbers in one 1-D row, got shape (1, 384)",
        ),
        (lambda st, e: st.retrieve(query_embedding=e, k=2, update="no"), "update must be True or False, got 'no'"),
        (lambda st, e: st.retrieve(query_embedding=e, k=2, update=1), "update must be True or False, got 1"),
        (
            lambda st, e: st.explain(st.ids[0], now=1.0),
            "time goes backwards: now=1.0 days is before the latest time 14.03 days",
        ),
        (
            lambda st, e: st.consolidate(3, now=1.0),
            "time goes backwards: now=1.0 days is before the latest time 14.03 days",
        ),
        (
            lambda st, e: st.persist("never-made.db", timeout=math.nan),
            "timeout must be a finite number of seconds >= 0, got nan",
        ),
        (
            lambda st, e: st.persist("never-made.db", timeout="abc"),
            "timeout must be a finite number of seconds >= 0, got 'abc'",
        ),
    ],
)
def test_a_call_with_an_argument_of_the_wrong_kind_is_one_line_and_changes_nothing(
    tmp_path, monkeypatch, call, expected
):
    monkeypatch.chdir(tmp_path)
    st, rng = filled_store()
    before = snapshot(st, tmp_path)
    with pytest.raises(ParameterError) as err:
        call(st, unit(rng))
    assert message(err) == expected
    assert_same_snapshot(before, snapshot(st, tmp_path))  # no usage count, time or session moved
    assert st.path is None and not (tmp_path / "never-made.db").exists()


def test_explain_refuses_an_earlier_now_in_the_words_of_consolidate():
    st, _ = filled_store()
    with pytest.raises(ParameterError) as by_explain:
        st.explain(st.ids[0], now=st.items()[0]["time"])
    with pytest.raises(ParameterError) as by_consolidate:
        st.consolidate(3, now=st.items()[0]["time"], dry_run=True)
    assert message(by_explain) == message(by_consolidate)
    assert st.explain(st.ids[0], now=100.0)["id"] == st.ids[0]  # a later time is fine


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: MemoryStore(weights="abc"), "weights must be 7 numbers >= 0, one per factor, got 'abc'"),
        (
            lambda p: MemoryStore(weights=[1, 2, "x", 4, 5, 6, 7]),
            "weights must be 7 numbers >= 0, one per factor, got [1, 2, 'x', 4, 5, 6, 7]",
        ),
        (lambda p: MemoryStore(weights={"goal": 1}), "weights must be 7 numbers >= 0, one per factor, got {'goal': 1}"),
        (
            lambda p: MemoryStore(weights=[1j] * 7),
            "weights must be 7 numbers >= 0, one per factor, got [1j, 1j, 1j, 1j, 1j, 1j, 1j]",
        ),
        (lambda p: MemoryStore.open(p, timeout="abc"), "timeout must be a finite number of seconds >= 0, got 'abc'"),
        (lambda p: MemoryStore.open(p, timeout=math.inf), "timeout must be a finite number of seconds >= 0, got inf"),
        (lambda p: MemoryStore.open(p, timeout=True), "timeout must be a finite number of seconds >= 0, got True"),
        (lambda p: MemoryStore.open(p, weights="abc"), "weights must be 7 numbers >= 0, one per factor, got 'abc'"),
        (lambda p: MemoryStore.open(p, factor_set="mine"), "unknown factor_set 'mine'; choose one of: paper, extended"),
        (
            lambda p: MemoryStore(embedder=complex_embed).add("hi", time=0.0),
            "the embedder complex_embed must return real numbers, got an array of complex128 numbers",
        ),
    ],
)
def test_a_store_that_cannot_be_made_is_one_line_and_leaves_no_file(tmp_path, make, expected):
    with pytest.raises(ParameterError) as err:
        make(tmp_path / "new.db")
    assert message(err) == expected
    assert list(tmp_path.iterdir()) == []  # no empty .db left behind


# --------------------------------------------------------------------------- files that are not stores


@pytest.mark.parametrize(
    "content, what",
    [
        (os.urandom(2048), "not a zip file"),
        (b"I am a plain text file, not a store.\n", "not a zip file"),
        (b"", "an empty file"),
        (None, "a single .npy array"),
    ],
)
def test_a_file_that_is_not_a_zip_is_not_a_store_export_and_nothing_suggests_allow_pickle(tmp_path, content, what):
    path = tmp_path / "memory.npz"
    if content is None:
        with open(path, "wb") as f:
            np.save(f, np.arange(3))
    else:
        path.write_bytes(content)
    with pytest.raises(StoreError) as err:
        MemoryStore.load(path)
    assert message(err) == (
        f"{path}: not a readable store file ({what}, so not a memlib store export: MemoryStore.save writes a zip)"
    )


def test_an_export_holding_a_pickled_array_names_the_file_and_does_not_invite_an_unsafe_load(tmp_path):
    st, _ = filled_store()
    st.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(tmp_path / "bad.npz", objects=np.array([{"a": 1}], dtype=object), **arrays)
    with pytest.raises(StoreError) as err:
        MemoryStore.load(tmp_path / "bad.npz")
    assert message(err) == (
        f"{tmp_path / 'bad.npz'}: not a readable store file (ValueError: it holds an object array, which a store "
        "never writes)"
    )
    assert "allow_pickle" not in message(err)


def test_saving_or_opening_under_a_file_says_the_parent_is_a_file(tmp_path):
    st, _ = filled_store()
    afile = tmp_path / "afile"
    afile.write_text("x")
    target = afile / "memory.npz"
    with pytest.raises(NotADirectoryError) as err:
        st.save(target)
    assert message(err) == f"[Errno 20] cannot save: {afile} is a file, not a folder: '{target}'"
    assert err.value.filename == str(target) and ".tmp" not in message(err)
    with pytest.raises(NotADirectoryError):
        st.save(afile / "deeper" / "memory.npz")
    for make in (lambda p: MemoryStore.open(p), lambda p: filled_store()[0].persist(p)):
        with pytest.raises(StoreError) as err:
            make(afile / "memory.db")
        assert message(err) == f"{afile / 'memory.db'}: cannot create the store file: {afile} is a file, not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and afile.read_text() == "x"
    assert st.path is None


def _nobody():
    try:
        return pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid
    except KeyError:
        return 65534, 65534


@needs_fork
def test_a_store_in_a_read_only_folder_says_the_folder_must_be_writable():
    """Root ignores file modes, so as root the check runs in a forked child that has become ``nobody``."""
    root = os.geteuid() == 0
    folder = Path(tempfile.mkdtemp(prefix="memlib-ro-", dir="/tmp" if root else None))
    try:
        st = MemoryStore.open(folder / "m.db")
        st.add("hello", time=0.0, embedding=np.eye(384)[0])
        st.close()
        assert sorted(p.name for p in folder.iterdir()) == ["m.db"]  # (the last connection removes -wal, -shm)
        if root:
            uid, gid = _nobody()
            os.chown(folder, uid, gid)
            os.chown(folder / "m.db", uid, gid)
        os.chmod(folder, 0o555)

        def child(say):
            if root:
                os.setgid(gid)
                os.setuid(uid)
            for path in (folder / "m.db", folder / "new.db"):
                try:
                    MemoryStore.open(path)
                    say("opened")
                except StoreError as exc:
                    say(str(exc))

        pid, fd = fork(child)
        lines = [read_line(fd), read_line(fd)]
        os.waitpid(pid, 0)
        os.close(fd)
        assert lines == [
            f"{folder / 'm.db'}: cannot open the store: its folder {folder} must be writable, even to read the store "
            "(SQLite's WAL mode keeps m.db-wal and m.db-shm beside it); copy the store to a writable folder",
            f"{folder / 'new.db'}: cannot create the store file: its folder {folder} is not writable",
        ]
        assert sorted(p.name for p in folder.iterdir()) == ["m.db"]
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)


# --------------------------------------------------------------------------- lone surrogates


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_lone_surrogate_is_stored_as_the_replacement_character(tmp_path, kind):
    seen = []

    def embedder(texts):
        seen.extend(texts)
        return strict_embed(texts)

    path = tmp_path / "s.db"
    st = MemoryStore(embedder=embedder) if kind == "memory" else MemoryStore.open(path, embedder=embedder)
    assert st.add("a\ud800", time=0.0, speaker="An\udc00a", session="s\ud83d") == 0
    assert st.add_many([{"text": "b\udfff c", "session": "s\ud83d"}]) == [1]
    hits = st.retrieve("a\ud800", k=1)
    assert hits[0]["text"] == "a\ufffd" and hits[0]["speaker"] == "An\ufffda" and hits[0]["session"] == "s\ufffd"
    assert [h[0]["text"] for h in st.retrieve_many(["b\udfff c", "a\ud800"], k=1)] == ["b\ufffd c", "a\ufffd"]
    assert seen == ["a\ufffd", "b\ufffd c", "a\ufffd", "b\ufffd c", "a\ufffd"]  # the embedder never sees one
    assert [i["text"] for i in st.items()] == ["a\ufffd", "b\ufffd c"]
    if kind == "file":
        st.close()
        st = MemoryStore.open(path)
    else:
        st.persist(path)
        st.close()
        st = MemoryStore.open(path)
    assert [(i["text"], i["speaker"], i["session"]) for i in st.items()] == [
        ("a\ufffd", "An\ufffda", "s\ufffd"),
        ("b\ufffd c", "user", "s\ufffd"),
    ]


def test_an_old_export_holding_lone_surrogates_loads_cleaned_and_persists(tmp_path):
    """JSON escapes a lone surrogate, so an export written before the store cleaned text can hold one."""
    st, _ = filled_store()
    st.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("header")))
    header["texts"][0] = "old \ud800 text"
    header["speakers"][0] = "Bo\udfff"
    header["forgotten"][0]["text"] = "gone \ud800"
    np.savez(tmp_path / "old.npz", header=np.array(json.dumps(header)), **arrays)
    back = MemoryStore.load(tmp_path / "old.npz")
    assert back.items()[0]["text"] == "old \ufffd text" and back.items()[0]["speaker"] == "Bo\ufffd"
    assert back.forgotten[0]["text"] == "gone \ufffd"
    back.persist(tmp_path / "s.db")
    back.close()
    assert MemoryStore.open(tmp_path / "s.db").items() == back.items()


def test_a_failed_persist_leaves_no_file_and_the_store_as_it_was(tmp_path, monkeypatch):
    from memlib.store import durable

    st, _ = filled_store()
    (tmp_path / "snaps").mkdir()
    before = snapshot(st, tmp_path / "snaps")
    real = durable.StoreFile.insert_items

    def disk_full(self, items, positions):
        real(self, items, list(positions)[:2])  # part of the items written, then the disk fills up
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(durable.StoreFile, "insert_items", disk_full)
    with pytest.raises(StoreError) as err:
        st.persist(tmp_path / "s.db")
    assert message(err) == f"{tmp_path / 's.db'}: cannot use the store file (database or disk is full)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snaps"]  # no empty or partial .db, -wal or -shm
    assert st.path is None
    assert_same_snapshot(before, snapshot(st, tmp_path / "snaps"))
    monkeypatch.undo()
    st.persist(tmp_path / "s.db")  # and the same path works once the disk has room
    assert MemoryStore.open(tmp_path / "s.db").items() == st.items()


def test_a_failed_persist_never_removes_a_file_that_was_there(tmp_path):
    st, _ = filled_store()
    other = MemoryStore.open(tmp_path / "s.db")
    other.add("someone else's store", time=0.0, embedding=np.eye(384)[0])
    other.close()
    with pytest.raises(StoreError) as err:
        st.persist(tmp_path / "s.db")
    assert message(err) == f"{tmp_path / 's.db'}: already holds a store; open it with MemoryStore.open"
    assert [i["text"] for i in MemoryStore.open(tmp_path / "s.db").items()] == ["someone else's store"]


# --------------------------------------------------------------------------- deep nesting

DEEP = "[" * 100000 + "]" * 100000


def _export(tmp_path):
    st, _ = filled_store()
    st.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return json.loads(str(arrays.pop("header"))), arrays


@pytest.mark.parametrize("where", ["the whole header", "policy_config", "texts"])
def test_a_deeply_nested_npz_header_is_one_error_naming_the_file(tmp_path, where):
    header, arrays = _export(tmp_path)
    if where == "the whole header":
        raw = DEEP
    else:
        header[where] = "DEEP"
        raw = json.dumps(header).replace('"DEEP"', DEEP)
    np.savez(tmp_path / "deep.npz", header=np.array(raw), **arrays)
    with pytest.raises(StoreError) as err:
        MemoryStore.load(tmp_path / "deep.npz")
    assert message(err) == f"{tmp_path / 'deep.npz'}: the store header is nested too deeply to be a memlib store header"


def test_a_nested_policy_config_within_json_limits_is_one_short_line(tmp_path):
    header, arrays = _export(tmp_path)
    header["policy_config"] = "DEEP"
    raw = json.dumps(header).replace('"DEEP"', '{"beta": ' + "[" * 900 + "]" * 900 + "}")
    np.savez(tmp_path / "deep.npz", header=np.array(raw), **arrays)
    with pytest.raises(StoreError) as err:
        MemoryStore.load(tmp_path / "deep.npz")
    assert message(err).startswith(f"{tmp_path / 'deep.npz'}: policy_config {{'beta': [[[[")
    assert f"does not build a {DEFAULT_POLICY}" in message(err) and len(message(err)) < 400


@pytest.mark.parametrize("key", ["policy_config", "weights", "current_session"])
def test_a_deeply_nested_sqlite_setting_is_one_error_naming_the_file(tmp_path, key):
    path = tmp_path / "s.db"
    filled_store()[0].persist(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = ? WHERE key = ?", (DEEP, key))
    con.commit()
    con.close()
    with pytest.raises(StoreError) as err:
        MemoryStore.open(path)
    assert message(err) == f"{path}: the setting {key!r} is nested too deeply to be a memlib store setting"


def test_a_store_tampered_with_while_open_fails_at_its_next_operation(tmp_path):
    path = tmp_path / "s.db"
    st = filled_store()[0].persist(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = ? WHERE key = 'now'", (DEEP,))
    con.commit()
    con.close()
    with pytest.raises(StoreError) as err:
        st.items()
    assert message(err) == f"{path}: the setting 'now' is nested too deeply to be a memlib store setting"


@pytest.mark.slow
def test_a_giant_turn_is_counted_and_scored_without_copies_of_itself(monkeypatch):
    """Word counts come one word at a time (as str.split counts them, on every white space character),
    and VADER and its cache see the bounded prefix VADER reads, never a whole giant turn."""
    import sys

    from memlib._text import TEXT_BOUND
    from memlib.store import annotate
    from memlib.store.memory import count_tokens

    spaces = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())
    text = "a" + "b".join(spaces) + "c  d"
    assert count_tokens(text) == len(text.split()) == len(spaces) + 2
    seen = []
    real = annotate.valence
    monkeypatch.setattr(annotate, "valence", lambda texts: seen.extend(map(len, texts)) or real(texts))
    annotate._valence_of_prefix.cache_clear()
    giant = "I am glad. " * 100_000  # 1.1 million characters
    annotate._valence_cached(giant)
    annotate._valence_cached(giant[:-1] + "!")  # differs only past the bound: the cached value serves
    assert seen and max(seen) <= TEXT_BOUND and len(seen) == 1
