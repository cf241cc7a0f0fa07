"""Behaviour of the published baselines (memlib.store.baselines) in a live store.

Each test plants a store where the policy's own rule, and no other, decides the outcome: the
Generative Agents score (recency by last access, importance from emotional intensity, relevance
weighted 3) and the Recency policy (newest kept and returned first, whatever the query).
"""

import numpy as np
import pytest

from memlib.store import MemoryStore, make_policy
from memlib.store import baselines as B
from memlib.store.policies import POLICIES

DIM = 384


def unit_vectors(n, seed=0):
    """``n`` orthonormal vectors: every pair of turns has cosine exactly 0, so relevance ties but for the query's."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(DIM, n)))
    return q.T


def planted_store(policy, emotions, seed=0):
    """One turn per day (turn i at day i), orthonormal embeddings and the given emotional intensities."""
    vecs = unit_vectors(len(emotions), seed)
    st = MemoryStore(policy=policy)
    ids = [
        st.add(f"turn {i}", role="user", time=float(i), session="s", embedding=vecs[i], emotion=float(e))
        for i, e in enumerate(emotions)
    ]
    assert len(st) == len(emotions)  # nothing merged: every turn is its own item
    return st, ids, vecs


def kept(st) -> set:
    return set(st.ids)


# -- Generative Agents ---------------------------------------------------------------------------


def test_generative_agents_forgets_least_recently_accessed_when_importance_ties():
    st, ids, _ = planted_store(B.GenerativeAgentsPolicy(), [0.5] * 8)
    st.consolidate(budget=3)
    assert kept(st) == set(ids[-3:])


def test_generative_agents_importance_outweighs_recency():
    # importance weight 2 > recency weight 0.5: the oldest turn, the only poignant one, outlives newer calm turns
    emotions = [1.0] + [0.0] * 7
    st, ids, _ = planted_store(B.GenerativeAgentsPolicy(), emotions)
    st.consolidate(budget=2)
    assert ids[0] in kept(st)
    assert kept(st) == {ids[0], ids[-1]}  # the other survivor is the most recent turn


def test_generative_agents_recency_is_refreshed_by_access_unlike_fifo():
    """A retrieved turn becomes the most recently accessed: Generative Agents keeps it, FIFO still drops it."""
    for policy, survives in ((B.GenerativeAgentsPolicy(), True), (B.FIFOPolicy(), False)):
        st, ids, vecs = planted_store(policy, [0.5] * 6)
        hit = st.retrieve(query_embedding=vecs[0], k=1, now=10.0)
        assert hit[0]["id"] == ids[0]
        st.consolidate(budget=3, now=10.0)
        assert (ids[0] in kept(st)) is survives, policy.name


def test_generative_agents_relevance_dominates_retrieval():
    # the oldest, least important turn is returned first when it matches the query (relevance weight 3)
    emotions = [0.0] + [1.0] * 7
    st, ids, vecs = planted_store(B.GenerativeAgentsPolicy(), emotions)
    hits = st.retrieve(query_embedding=vecs[0], k=3)
    assert hits[0]["id"] == ids[0]
    # among the rest (relevance 0 for all), importance then recency order them: the newest poignant turns
    assert [h["id"] for h in hits[1:]] == [ids[-1], ids[-2]]


def test_generative_agents_score_is_the_published_weighted_sum():
    emotions = [0.2, 0.9, 0.5, 0.0]
    policy = B.GenerativeAgentsPolicy()
    st, _, vecs = planted_store(policy, emotions)
    q = vecs[2]
    scores = policy.retrieval_scores(st.view, q, 0.0, now=3.0)

    def minmax(x):
        return (x - x.min()) / (x.max() - x.min())

    recency = 0.99 ** np.array([4, 3, 2, 1])  # rank 1 = the most recently accessed (the last turn)
    importance = 1 + 9 * np.array(emotions)
    relevance = vecs @ q
    expected = 0.5 * minmax(recency) + 3 * minmax(relevance) + 2 * minmax(importance)
    np.testing.assert_allclose(scores, expected, atol=1e-6)


# -- Recency ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("emotions", [[0.0] * 8, [1.0] * 4 + [0.0] * 4])
def test_recency_keeps_the_newest_whatever_their_factors(emotions):
    st, ids, _ = planted_store(B.RecencyPolicy(), emotions)
    st.consolidate(budget=3)
    assert kept(st) == set(ids[-3:])


def test_recency_returns_newest_first_and_ignores_the_query():
    st, ids, vecs = planted_store(B.RecencyPolicy(), [0.5] * 6)
    hits = st.retrieve(query_embedding=vecs[0], k=3)  # the query matches the oldest turn exactly
    assert [h["id"] for h in hits] == [ids[-1], ids[-2], ids[-3]]
    assert ids[0] not in {h["id"] for h in hits}


def test_recency_forgetting_ignores_retrieval():
    st, ids, vecs = planted_store(B.RecencyPolicy(), [0.5] * 6)
    # Recency never returns the oldest turns, so mark them used as a retrieval would: repeat them (a merge)
    for i in (0, 1):
        assert st.add(f"turn {i} again", time=10.0, session="s", embedding=vecs[i], emotion=0.5) == ids[i]
    assert st.view.retrievals.tolist() == [1, 1, 0, 0, 0, 0] and st.view.last_access[:2].tolist() == [10, 10]
    st.consolidate(budget=2, now=10.0)
    assert kept(st) == set(ids[-2:])


def test_the_old_store_policy_name_learned_v_is_an_error_that_names_value():
    """``learned_V`` is the Table 3 scoring rule's name; the store's own policy is ``value`` (since 0.2.0)."""
    from memlib import ParameterError
    from memlib.store import POLICIES, ValuePolicy, make_policy
    from memlib.store.policies import OLD_NAMES

    assert OLD_NAMES == {"learned_V": "value"} and "learned_V" not in POLICIES and POLICIES["value"] is ValuePolicy
    with pytest.raises(ParameterError, match=r"the store policy 'learned_V' is named 'value' .*make_policy\('value'\)"):
        make_policy("learned_V", beta=2.0, keep_top_value=True)
    with pytest.raises(KeyError):
        POLICIES["learned_V"]


def test_a_store_file_of_the_value_policy_written_by_0_1_loads_without_a_warning(tmp_path):
    """A store file names its policy's class (``ValuePolicy``, whatever the registry calls it): files load unchanged."""
    import json
    import warnings

    from memlib.store import ValuePolicy, make_policy

    policy = make_policy("value", beta=2.0, keep_top_value=True)
    st = planted_store(policy, [0.1, 0.2])[0]
    st.save(tmp_path / "old.npz")
    st.persist(tmp_path / "old.db").close()
    with np.load(tmp_path / "old.npz") as z:
        assert json.loads(str(z["header"]))["policy"] == "ValuePolicy"  # what 0.1 wrote too
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = MemoryStore.load(tmp_path / "old.npz")
        again = MemoryStore.open(tmp_path / "old.db")
    for loaded in (back, again):
        assert type(loaded.policy) is ValuePolicy and loaded.policy.config() == policy.config()
        assert loaded.items() == st.items()
    again.close()


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_scores_an_empty_store_as_empty(name):
    """A store with nothing in it has nothing to forget or rank: each policy returns no scores, not an error."""
    st = MemoryStore(policy=make_policy(name))
    query = np.ones(DIM) / np.sqrt(DIM)
    assert np.shape(st.policy.forget_scores(st.view, 0.0)) == (0,)
    assert np.shape(st.policy.retrieval_scores(st.view, query, 0.0, 0.0)) == (0,)
    assert st.retrieve(query_embedding=query, k=3) == []
