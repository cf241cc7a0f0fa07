"""Bad input to the store, as a hostile user would try it (issue 11): each case is refused with one
clear error and leaves everything as it was. The rows of the README's reliability table."""

import json
import os
import random
import signal
import time

import numpy as np
import pytest

from memlib import ParameterError
from memlib.store import MemoryStore, StoreError
from memlib.store.policies import default_policy
from test_store import assert_same_snapshot, filled_store, snapshot, unit
from test_store_durable import fork, kill_after, needs_fork, read_line

#: The class of the store's default policy (memlib/defaults.json says which).
DEFAULT_POLICY = type(default_policy()).__name__


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"emotion": 2.0}, "emotion must be a number in"),
        ({"emotion": float("nan")}, "emotion must be a number in"),
        ({"task_utility": -0.5}, "task_utility must be a number in"),
        ({"time": 1.0}, "time goes backwards"),
        ({"embedding": np.full(384, np.nan)}, "embedding must be 384 finite numbers"),
        ({"embedding": np.zeros(384)}, "embedding must not be the zero vector"),
        ({"expires": 10.0}, "expires must be after the turn's time"),
        ({"pinned": "yes"}, "pinned must be True or False"),
        ({"text": "   "}, "text must be a non-empty string"),
    ],
)
def test_a_rejected_add_leaves_the_store_exactly_as_it_was(tmp_path, bad, message):
    st, rng = filled_store()
    before = snapshot(st, tmp_path)
    call = {"text": "I am furious!", "time": 50.0, "session": "a new session", "speaker": "bob"}
    call["embedding"] = unit(rng)
    with pytest.raises(ParameterError, match=message):
        st.add(**{**call, **bad})
    assert_same_snapshot(before, snapshot(st, tmp_path))  # no centroid, session or time moved
    # and the next add is the one it would have been
    fresh, _ = filled_store()
    assert st.add(**call) == fresh.add(**call)
    assert st.items() == fresh.items()


def test_a_rejected_add_leaves_a_file_store_as_it_was(tmp_path):
    st = MemoryStore.open(tmp_path / "s.db")
    rng = np.random.default_rng(0)
    st.add("hello", time=1.0, session="s1", embedding=unit(rng))
    before = snapshot(st, tmp_path)
    with pytest.raises(ParameterError, match="emotion must be"):
        st.add("I am furious!", time=2.0, session="s2", embedding=unit(rng), emotion=2.0)
    assert_same_snapshot(before, snapshot(st, tmp_path))
    st.close()
    assert_same_snapshot(before, snapshot(MemoryStore.open(tmp_path / "s.db"), tmp_path))


@pytest.mark.parametrize(
    "query, message",
    [
        (np.full(384, np.nan), "query_embedding must be 384 finite numbers"),
        (np.r_[np.ones(383), np.inf], "query_embedding must be 384 finite numbers"),
        (np.ones(10), "query_embedding must be 384 finite numbers, got shape"),
        (np.zeros(384), "query_embedding must not be the zero vector"),
        ("not a vector", "query_embedding must be 384 finite numbers"),
    ],
)
def test_retrieve_refuses_a_bad_query_embedding_and_counts_no_usage(tmp_path, query, message):
    st, _ = filled_store()
    before = snapshot(st, tmp_path)
    with pytest.raises(ParameterError, match=message):
        st.retrieve(query_embedding=query, k=3)
    with pytest.raises(ParameterError, match=message):
        st.rank(query)
    assert_same_snapshot(before, snapshot(st, tmp_path))  # no retrieval count moved


def tamper(path, out, change):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("header")))
    change(header, arrays)
    np.savez(out, header=np.array(json.dumps(header)), **arrays)
    return out


def _set(key, value):
    return lambda h, a: h.__setitem__(key, value)


@pytest.mark.parametrize(
    "change, message",
    [
        (_set("policy_config", {"beta": "high"}), f"policy_config .* does not build a {DEFAULT_POLICY}"),
        (_set("policy_config", {"nope": 1}), f"policy_config .* does not build a {DEFAULT_POLICY}"),
        (_set("policy_config", ["beta"]), "policy_config must be a mapping"),
        (_set("policy", ["ValuePolicy"]), "the policy name must be a string"),
        (_set("policy", "LRUPolicy"), "unknown policy 'LRUPolicy'; pass policy= to open it"),
        (_set("texts", "one long text"), "texts must list one string per item"),
        (_set("roles", ["user"] * 5 + [7]), "roles must list one string per item"),
        (_set("next_id", "12"), "next_id must be an integer"),
        (_set("now", "yesterday"), "now must be a finite number or null"),
        (_set("session_has_user", "yes"), "session_has_user must be true or false"),
        (_set("current_session", 3), "current_session must be a string or null"),
        (_set("factor_set", "mine"), "factor_set must be one of paper, extended"),
        (_set("merge_threshold", 7), r"merge_threshold must be in \(0, 1\] or null"),
        (_set("speakers_with_sums", "user"), "speakers_with_sums does not match"),
        (_set("forgotten", {"id": 1}), "forgotten must be a list of records"),
        (lambda h, a: h.pop("next_id"), "missing fields next_id"),
        (lambda h, a: h.pop("policy"), "missing fields policy"),
        (_set("version", 7), "store format version 7 is not one of 1, 2"),
        (_set("format", "other"), "not a memlib MemoryStore file"),
        (lambda h, a: a.__setitem__("ids", a["ids"][::-1]), "item ids must be integers in increasing order"),
        (lambda h, a: a.__setitem__("factors", a["factors"] * 5), r"the item factors must lie in \[0, 1\]"),
        (lambda h, a: a.__setitem__("time", a["time"].astype(str)), "the item field time must be numeric"),
        (lambda h, a: a.__setitem__("weights", -a["weights"]), "weights must be >= 0"),
        (lambda h, a: a.pop("embeddings"), "missing fields embeddings"),
    ],
)
def test_a_tampered_store_header_fails_with_one_error_naming_the_file(tmp_path, change, message):
    st, _ = filled_store()
    st.save(tmp_path / "s.npz")
    bad = tamper(tmp_path / "s.npz", tmp_path / "bad.npz", change)
    with pytest.raises(StoreError, match=f"{bad}: {message}"):
        MemoryStore.load(bad)


def test_save_errors_name_the_target_file_not_a_temporary_one(tmp_path):
    st, _ = filled_store()
    folder = tmp_path / "a folder.npz"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as err:
        st.save(folder)
    assert err.value.filename == str(folder) and ".tmp" not in str(err.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError) as err:
        st.save(tmp_path / "file" / "s.npz")
    assert err.value.filename == str(tmp_path / "file" / "s.npz") and ".tmp" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a folder.npz", "file"]


@pytest.mark.slow
@needs_fork
def test_a_killed_save_leaves_no_temporary_file_and_the_old_file_whole(tmp_path):
    path = tmp_path / "s.npz"
    st, rng = filled_store()
    for i in range(1500):
        st.add(f"more {i}", time=30 + i / 100, embedding=unit(rng), emotion=0.2)
    st.save(path)
    expected = MemoryStore.load(path).items()

    def child(say):
        while True:
            say("start")
            st.save(path)
            say("done")

    rnd = random.Random(1)
    left_behind, in_flight, kills = 0, 0, 0
    deadline = time.monotonic() + 4
    while kills < 12 and time.monotonic() < deadline:
        pid, fd = fork(child)
        lines = kill_after(pid, fd, rnd.uniform(0.0, 0.03))
        in_flight += lines[-1] == "start"
        kills += 1
        left_behind += len([p for p in tmp_path.iterdir() if p.name != "s.npz"]) > 0
        assert path.stat().st_mode & 0o777 == 0o600
        assert MemoryStore.load(path).items() == expected  # whole, and the load tidies what a kill left
        assert [p.name for p in tmp_path.iterdir()] == ["s.npz"]
    assert kills >= 4 and in_flight >= kills // 2
    # the data are written to an unnamed file: a kill leaves a name behind only in the microseconds
    # between naming it and renaming it over the target
    assert left_behind <= 1


@needs_fork
def test_a_temporary_file_of_a_live_process_is_left_alone(tmp_path):
    from memlib.store.npz import remove_leftovers

    path = tmp_path / "s.npz"

    def child(say):
        say("ready")
        time.sleep(30)

    pid, fd = fork(child)
    try:
        assert read_line(fd) == "ready"
        live = tmp_path / f".s.npz.{pid}.abcd1234.tmp"
        dead = tmp_path / f".s.npz.{2**22 + 7}.abcd1234.tmp"
        live.write_bytes(b"x")
        dead.write_bytes(b"x")
        assert remove_leftovers(path) == [dead] and live.exists()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
