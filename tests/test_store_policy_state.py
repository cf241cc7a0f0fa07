"""What a policy reads and keeps (issue 21): the read-only ``store.view``, and a policy's own per-item state.

MemoryBank's strength level is the MemoryBank policy's state (``item_state``), not a core column:
it is raised through ``on_retrieve``'s return value, kept with the items (dropped with them, undone
with a failed change) and saved in the ``level`` field every store file has, so old files load and
new files read as before. Any other per-item state a policy declares is kept the same way, in a
field ``state_<name>`` of both file formats."""

import sqlite3

import numpy as np
import pytest

from memlib import ParameterError
from memlib.store import MemoryStore, Policy, StoreError, make_policy
from memlib.store import baselines as B


def unit(i: int) -> np.ndarray:
    return np.eye(384)[i]


class Strength(Policy):
    """Forget the weakest first; every use doubles an item's strength (a state of its own, from 1)."""

    name = "strength"
    item_state = {"strength": 1.0}

    def forget_scores(self, view, now):
        return -view.state("strength")

    def on_retrieve(self, view, idx, now):
        return {"strength": 2 * view.state("strength")[idx]}


def strength_store(st, n=4):
    for i in range(n):
        st.add(f"fact {i}", time=float(i), embedding=unit(i), emotion=0.2)
    st.retrieve(query_embedding=unit(1), k=1)
    st.retrieve(query_embedding=unit(1), k=1)
    st.retrieve(query_embedding=unit(3), k=1)
    return st


def test_the_view_is_read_only_and_follows_the_store():
    st = MemoryStore(policy=B.MemoryBankPolicy())
    view = st.view
    assert len(view) == 0 and view.state_names == ["level"]
    for i in range(3):
        st.add(f"fact {i}", time=float(i), embedding=unit(i), emotion=0.1)
    st.retrieve(query_embedding=unit(0), k=1, now=5.0)
    assert view.ids.tolist() == [0, 1, 2] and view.time.tolist() == [0.0, 1.0, 2.0]
    assert view.retrievals.tolist() == [1, 0, 0] and view.last_access.tolist() == [5.0, 1.0, 2.0]
    assert view.state("level").tolist() == [1, 0, 0]
    for a in (view.time, view.factors, view.embeddings, view.state("level"), view.pinned):
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 0
    with pytest.raises(ParameterError, match="holds no per-item state 'strength'.*it holds: level"):
        view.state("strength")
    assert MemoryStore().view.state_names == []  # the default policy keeps no state of its own


def test_memorybank_levels_rise_to_the_cap_and_follow_their_items():
    st = MemoryStore(policy=make_policy("memorybank"), merge_threshold=None)
    for i in range(4):
        st.add(f"fact {i}", time=float(i), embedding=unit(i), emotion=0.1)
    for _ in range(3):
        st.retrieve(query_embedding=unit(2), k=1)
    st.add("fact 2 again", time=4.0, embedding=unit(2) + unit(0), emotion=0.1)
    assert st.view.state("level").tolist() == [0, 0, 2, 0, 0]  # capped at LEVELS - 1
    st.consolidate(2, now=4.5)  # the strong old item stays
    assert st.ids == [2, 4] and st.view.state("level").tolist() == [2, 0]


@pytest.mark.parametrize("kind", ["npz", "db"])
def test_a_policy_state_is_saved_and_loaded_with_its_items(tmp_path, kind):
    st = strength_store(MemoryStore(policy=Strength()))
    assert st.view.state("strength").tolist() == [1, 4, 1, 2]
    st.consolidate(2)
    assert st.ids == [1, 3]
    if kind == "npz":
        st.save(tmp_path / "s.npz")
        with np.load(tmp_path / "s.npz") as z:
            assert z["state_strength"].tolist() == [4, 2] and z["level"].tolist() == [0, 0]
        back = MemoryStore.load(tmp_path / "s.npz", policy=Strength())
    else:
        st.persist(tmp_path / "s.db")
        st.retrieve(query_embedding=unit(3), k=1)  # a change of the state, written to the file
        st.close()
        con = sqlite3.connect(tmp_path / "s.db")
        assert con.execute("SELECT id, state_strength, level FROM items").fetchall() == [(1, 4.0, 0.0), (3, 4.0, 0.0)]
        con.close()
        back = MemoryStore.open(tmp_path / "s.db", policy=Strength())
    assert back.items() == st.items() and back.view.state("strength").tolist() == st.view.state("strength").tolist()
    back.add("fact 9", time=9.0, embedding=unit(9))
    assert back.view.state("strength").tolist()[-1] == 1.0  # a new item starts at the declared value


def test_a_file_made_without_the_state_gets_its_column_when_the_policy_comes(tmp_path):
    path = tmp_path / "s.db"
    plain = MemoryStore.open(path, policy=make_policy("memgpt_fifo"))
    for i in range(3):
        plain.add(f"fact {i}", time=float(i), embedding=unit(i), emotion=0.2)
    plain.close()
    st = MemoryStore.open(path, policy=Strength())  # the stored items start at the declared value
    assert st.view.state("strength").tolist() == [1, 1, 1]
    st.retrieve(query_embedding=unit(0), k=1)
    st.close()
    assert MemoryStore.open(path, policy=Strength()).view.state("strength").tolist() == [2, 1, 1]
    again = MemoryStore.open(path, policy=make_policy("memgpt_fifo"))  # a policy that does not read it keeps it
    again.add("fact 3", time=3.0, embedding=unit(3), emotion=0.2)
    assert again.view.state("strength").tolist() == [2, 1, 1, 0]  # (0: a state no policy of the store declares)


def test_the_level_of_a_file_survives_another_policy_and_comes_back(tmp_path):
    path = tmp_path / "s.db"
    mb = MemoryStore.open(path, policy=make_policy("memorybank"))
    for i in range(3):
        mb.add(f"fact {i}", time=float(i), embedding=unit(i), emotion=0.2)
    mb.retrieve(query_embedding=unit(1), k=1)
    mb.close()
    fifo = MemoryStore.open(path, policy=make_policy("memgpt_fifo"))
    fifo.retrieve(query_embedding=unit(1), k=1)  # FIFO keeps no level: it stays as MemoryBank left it
    fifo.add("fact 3", time=3.0, embedding=unit(3), emotion=0.2)
    fifo.close()
    back = MemoryStore.open(path, policy=make_policy("memorybank"))
    assert back.view.state("level").tolist() == [0, 1, 0, 0]


def test_a_policy_that_sets_an_undeclared_state_is_refused_and_changes_nothing(tmp_path):
    class Sloppy(Strength):
        def on_retrieve(self, view, idx, now):
            return {"strenght": np.ones(len(idx))}

    for st in (MemoryStore(policy=Sloppy()), MemoryStore.open(tmp_path / "s.db", policy=Sloppy())):
        st.add("fact", time=0.0, embedding=unit(0))
        with pytest.raises(ParameterError, match="policy strength: on_retrieve set 'strenght', which is not in"):
            st.retrieve(query_embedding=unit(0), k=1)
        assert st.items()[0]["retrievals"] == 0 and st.view.state("strength").tolist() == [1]


def test_a_state_name_a_file_cannot_hold_is_refused():
    class Loud(Strength):
        item_state = {"Strength; DROP TABLE items": 1.0}

    with pytest.raises(ParameterError, match="policy strength: a per-item state name must be lower-case"):
        MemoryStore(policy=Loud())


def test_a_tampered_state_field_names_the_file_and_the_field(tmp_path):
    st = strength_store(MemoryStore(policy=Strength()))
    st.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["state_strength"] = arrays["state_strength"][:2]
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(StoreError, match=r"bad.npz: the item field state_strength has shape \(2,\), expected \(4,\)"):
        MemoryStore.load(tmp_path / "bad.npz", policy=Strength())


class OneScoreShort(Policy):
    """A policy that gives one forget score too few."""

    name = "one_short"

    def forget_scores(self, view, now):
        return np.zeros(len(view) - 1)


def test_a_policy_that_gives_the_wrong_number_of_forget_scores_is_refused_and_nothing_goes():
    st = MemoryStore(policy=OneScoreShort())
    for i in range(3):
        st.add(f"fact {i}", time=float(i), embedding=unit(i))
    with pytest.raises(ParameterError, match=r"one forget score per item, got shape \(2,\) for 3 items"):
        st.consolidate(1)
    assert st.ids == [0, 1, 2]
    st.consolidate(3)  # within its budget the policy is never asked
    assert st.ids == [0, 1, 2]
