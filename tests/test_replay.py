"""One store: a replay from a view of every turn (held_after) keeps what a store replayed turn by turn keeps.

The studies measure the store through :func:`memlib.store.replay.held_after`; these tests hold it to
the store itself (:func:`memlib.store.replay_history`, the public API turn by turn) for every built-in
policy, on random histories full of ties, for every prefix of a history and several budgets.
"""

from __future__ import annotations

import numpy as np
import pytest

from memlib._checks import ParameterError
from memlib.store import POLICIES, MemoryStore, StoreView, held_after, make_policy, replay_history
from memlib.store.replay import session_ends
from memlib.value import LinearValue


def random_history(rng, n):
    """Turns with sessions of random length, times with ties, and a few repeated embeddings."""
    sessions = np.cumsum(rng.random(n) < 0.3)
    time = np.sort(rng.integers(0, n // 2 + 2, n)).astype(float) + sessions * 0.25
    E = rng.normal(size=(n, 384))
    E[rng.random(n) < 0.2] = E[0]  # repeats (merging is off, so each is its own item)
    roles = np.where(rng.random(n) < 0.6, "user", "assistant")
    return [
        {
            "text": f"turn {i} {'!' * int(rng.integers(0, 3))}",
            "role": str(roles[i]),
            "time": float(time[i]),
            "session": int(sessions[i]),
            "embedding": E[i],
            "emotion": float(rng.integers(0, 3) / 2),
        }
        for i in range(n)
    ]


POLICY_VARIANTS = {
    "value (drop by value)": lambda: make_policy("value", keep_top_value=True),
    "value (eq. 3, beta 10)": lambda: make_policy("value", beta=10.0),
    **{name: (lambda name=name: make_policy(name)) for name in POLICIES if name != "value"},
}


@pytest.mark.parametrize("name", sorted(POLICY_VARIANTS))
@pytest.mark.parametrize("weights", [None, np.ones(7)], ids=["cue value", "paper value"])
def test_held_after_keeps_what_the_store_keeps_for_every_prefix_and_budget(name, weights):
    rng = np.random.default_rng(7)
    for trial in range(3):
        turns = random_history(rng, int(rng.integers(8, 30)))
        full = MemoryStore(weights=weights, policy=POLICY_VARIANTS[name](), merge_threshold=None)
        replay_history(full, turns, budget=len(turns))
        sessions = [t["session"] for t in turns]
        ends = session_ends(sessions).tolist()
        cuts = [(n, b) for n in ends for b in (0, 1, 3, 7)]
        got = held_after(full.view, POLICY_VARIANTS[name](), sessions, cuts)
        peak = 0
        for (n, b), held in zip(cuts, got.held):
            store = MemoryStore(weights=weights, policy=POLICY_VARIANTS[name](), merge_threshold=None)
            peak = max(peak, replay_history(store, turns[:n], budget=b))
            assert full.view.ids[held].tolist() == store.ids, (name, trial, n, b)
        assert got.peak == peak


def test_one_order_and_session_by_session_agree():
    """A static order (drop by value, FIFO) is sorted once; replayed session by session it keeps the same."""
    rng = np.random.default_rng(3)

    class SessionBySession(type(make_policy("value", keep_top_value=True))):
        static_order = False

    for _ in range(20):
        turns = random_history(rng, int(rng.integers(5, 60)))
        full = MemoryStore(policy=make_policy("value", keep_top_value=True), merge_threshold=None)
        replay_history(full, turns, budget=len(turns))
        sessions = [t["session"] for t in turns]
        cuts = [(n, b) for n in session_ends(sessions) for b in (0, 2, 5)]
        fast = held_after(full.view, make_policy("value", keep_top_value=True), sessions, cuts)
        slow = held_after(full.view, SessionBySession(keep_top_value=True), sessions, cuts)
        assert [h.tolist() for h in fast.held] == [h.tolist() for h in slow.held]
        assert fast.peak == slow.peak


def test_held_after_refuses_a_cut_inside_a_session_and_sessions_of_the_wrong_length():
    turns = random_history(np.random.default_rng(1), 12)
    full = MemoryStore(merge_threshold=None)
    replay_history(full, turns, budget=12)
    sessions = [t["session"] for t in turns]
    inside = session_ends(sessions)[0] - 1
    with pytest.raises(ParameterError, match="a cut of the history must end a session, got"):
        held_after(full.view, make_policy("recency"), sessions, [(int(inside), 2)])
    with pytest.raises(ParameterError, match="sessions must name the session of each of the 12 turns, got 3"):
        held_after(full.view, make_policy("recency"), sessions[:3], [(0, 2)])
    assert held_after(full.view, make_policy("memorybank"), sessions, [(0, 3)]).held[0].tolist() == []


def test_replay_history_checks_every_turn_before_the_store_changes():
    turns = random_history(np.random.default_rng(2), 10)
    turns[7]["emotion"] = 2.0
    store = MemoryStore(merge_threshold=None)
    with pytest.raises(ParameterError, match="emotion"):
        replay_history(store, turns, budget=3)
    assert len(store) == 0 and store.forgotten == []


def recent_need_history(n_sessions=12, per_session=4, seed=0):
    """A user who keeps coming back to the recent past: each session's first user turn says again what the
    third turn of two sessions before said; the value (emotion) is random, so a store holds turns of every age."""
    rng = np.random.default_rng(seed)
    turns, E = [], []
    for s in range(n_sessions):
        for j in range(per_session):
            e = rng.normal(size=384)
            if j == 0 and s > 1:
                e = E[-2 * per_session + 2] + 0.05 * rng.normal(size=384)  # refers back two sessions
            E.append(e)
            turns.append(
                {
                    "text": f"s{s} t{j}",
                    "role": "user" if j % 2 == 0 else "assistant",
                    "time": float(s) + j / 100,
                    "session": s,
                    "embedding": e,
                    "emotion": float(rng.uniform(0.0, 1.0)),
                }
            )
    return turns


def test_the_adaptive_policy_counts_references_as_the_store_does_and_keeps_what_its_user_needs():
    from memlib.store import AdaptivePolicy

    turns = recent_need_history(n_sessions=30)
    sessions = [t["session"] for t in turns]
    cuts = [(n, 8) for n in session_ends(sessions)]
    adaptive = AdaptivePolicy(value_scale=1.0, z=0.0, value_weight=0.0, mood_weight=0.0)
    full = MemoryStore(weights=np.eye(7)[0], policy=adaptive, merge_threshold=None)
    replay_history(full, turns, budget=len(turns))
    got = held_after(full.view, adaptive, sessions, cuts)
    for (n, b), held in zip(cuts, got.held):
        store = MemoryStore(weights=np.eye(7)[0], policy=adaptive, merge_threshold=None)
        replay_history(store, turns[:n], budget=b)
        assert full.view.ids[held].tolist() == store.ids, n
    # the store counted the references: every session after the first refers to the day before
    need = store.view.need
    assert need.refs[1] == need.refs.sum() > 0 and need.exponent(0.0) > need.exponent(2.0) > 0
    # so it keeps the recent past, where dropping the lowest value first keeps the emotional old sessions
    by_value = MemoryStore(weights=np.eye(7)[0], policy=make_policy("value", keep_top_value=True), merge_threshold=None)
    replay_history(by_value, turns, budget=8)
    assert np.mean(store.ids) > np.mean(by_value.ids) + 10


def test_need_counts_are_saved_in_both_formats(tmp_path):
    from memlib.store import AdaptivePolicy

    def replayed():
        store = MemoryStore(weights=np.eye(7)[0], policy=AdaptivePolicy(value_scale=1.0, z=0.0), merge_threshold=None)
        replay_history(store, recent_need_history(), budget=8)
        return store

    store = replayed()
    before = store.view.need.to_dict()
    assert sum(before["refs"]) > 0 and len(before["boundaries"]) == 12
    store.save(tmp_path / "s.npz")
    assert MemoryStore.load(tmp_path / "s.npz").view.need.to_dict() == before
    replayed().persist(tmp_path / "s.db").close()
    again = MemoryStore.open(tmp_path / "s.db")
    assert again.view.need.to_dict() == before
    # the counts go on in the file: a consolidation there counts as one in memory
    more = [{**t, "session": t["session"] + 100} for t in recent_need_history(n_sessions=16)[48:]]
    replay_history(again, more, budget=8)
    replay_history(store, more, budget=8)
    assert again.view.need.to_dict() == store.view.need.to_dict() and again.ids == store.ids
    assert len(again.view.need.boundaries) == 16


def test_explain_shows_the_need_term_beside_the_value_and_they_make_up_the_forget_score():
    from memlib.store import AdaptivePolicy

    policy = AdaptivePolicy(value_scale=2.0, z=0.0, value_weight=0.0, mood_weight=0.0)
    store = MemoryStore(weights=np.eye(7)[0], policy=policy, merge_threshold=None)
    replay_history(store, recent_need_history(n_sessions=30), budget=8)
    b = store.view.need.exponent(0.0)
    assert b > 0
    for item_id in store.ids:
        row = store.explain(item_id)
        assert row["need_exponent"] == b and row["sessions_ago"] >= 1
        assert row["need_term"] == pytest.approx(b * np.log(row["sessions_ago"]))
        v_bar = store.view.normalised_values()[store.ids.index(item_id)]
        assert row["forget_score"] == pytest.approx(row["need_term"] - 2.0 * v_bar)
    # the dry run's rows carry the same terms; a policy without them adds none
    assert {"need_exponent", "need_term"} <= set(store.consolidate(budget=4, dry_run=True)[0])
    plain = MemoryStore(weights=np.eye(7)[0], policy=make_policy("value"), merge_threshold=None)
    replay_history(plain, recent_need_history(n_sessions=4), budget=8)
    assert "need_term" not in plain.explain(plain.ids[0])


def test_a_batch_history_normalises_its_values_once_and_every_taken_view_reads_the_same():
    from memlib.store import StoreView
    from memlib.value import LinearValue, load_defaults

    rng = np.random.default_rng(4)
    n = 50
    for value in (load_defaults()["value"], LinearValue(rng.uniform(0, 1, 7))):
        view = StoreView.of_history(
            value, time=np.arange(n, dtype=float), embeddings=np.eye(384)[:n], factors=rng.random((n, 7)),
            cues=rng.random((n, 12)), valence=np.zeros(n),
        )  # fmt: skip
        part = view.take(np.sort(rng.choice(n, 17, replace=False)), now=float(n))
        np.testing.assert_array_equal(part.normalised_values(), value.normalise(part.values()))
        assert part.normalised_values().min() >= 0 and part.normalised_values().max() <= 1


def batch_view_of(store_view, value) -> StoreView:
    """A batch history's view (its values computed once) over a store view's arrays."""
    v = store_view
    return StoreView.of_history(value, time=v.time, embeddings=v.embeddings, factors=v.factors, cues=v.cues,
                                valence=v.valence)  # fmt: skip


def random_view(rng, n, value=None) -> StoreView:
    """A batch view with few distinct times and embeddings: ties the older-first rule must break."""
    return StoreView.of_history(
        LinearValue(rng.uniform(0, 1, 7)) if value is None else value,
        time=np.sort(rng.integers(0, 9, n)).astype(float),
        embeddings=np.eye(384)[rng.integers(0, 5, n)],
        factors=rng.random((n, 7)).round(1),
        cues=rng.random((n, 12)),
        valence=np.zeros(n),
    )


def a_need(rng, n_sessions, boundary_every=3):
    """A stream's need after ``n_sessions`` sessions of random references, most of them recent."""
    from memlib.references import N_BINS, Need

    need = Need()
    for s in range(n_sessions):
        exposure = rng.integers(5, 40, N_BINS).astype(float)
        refs = np.minimum(rng.poisson(np.r_[3.0, 2.0, 1.0, np.full(N_BINS - 3, 0.1)]), exposure)
        need = need.counted(refs, exposure, boundary=(s + 1) * boundary_every)
    return need


@pytest.mark.parametrize("name", sorted(POLICY_VARIANTS))
def test_a_consolidation_by_count_drops_what_the_full_rule_drops(name):
    """budget_drops on the policy's scorer (a replay's consolidation: no expiry, pin or token budget) is drops."""
    from memlib.store.forget import budget_drops, drops

    rng = np.random.default_rng(7)
    n = 40
    view = random_view(rng, n)
    policy = POLICY_VARIANTS[name]()
    if policy.item_state or not policy.bounded:
        pytest.skip("a batch history holds no per-item state; an unbounded policy never consolidates by count")
    score = policy.forget_scorer(view)
    for budget in (0, 1, 13, 39, 40, 55):
        positions = np.sort(rng.choice(n, 30, replace=False))
        got = budget_drops(score(positions, 10.0, None), budget)
        assert got.tolist() == drops(view.take(positions, now=10.0), policy, 10.0, budget)[2].tolist()
        assert got.sum() == max(30 - budget, 0)


def test_a_consolidation_by_count_refuses_a_nan_score_and_breaks_ties_by_age():
    from memlib.store.forget import budget_drops

    with pytest.raises(ParameterError, match="item 2 has a NaN forget score"):
        budget_drops(np.array([1.0, 0.0, np.nan, np.nan]), 1)
    assert budget_drops(np.array([1.0, 0.0, np.nan]), 3).tolist() == [False] * 3  # nothing goes: nothing to rank
    assert budget_drops(np.array([2.0, 5.0, 2.0, 2.0]), 2).tolist() == [True, True, False, False]


@pytest.mark.parametrize("name", sorted(POLICY_VARIANTS))
@pytest.mark.parametrize("value", ["paper value", "cue value"])
def test_every_policy_scores_a_replay_as_it_scores_a_view_bit_for_bit(name, value):
    """A policy's forget_scorer (what a replay calls) gives forget_scores of the taken view, to the last bit.

    On the paper's value (eq. 3 reads ``V``) and on a signed cue value (eq. 3 reads ``V-bar``); with
    the need passed, and with the view's own need read when none is passed.
    """
    from memlib.value import load_defaults

    rng = np.random.default_rng(11)
    n = 60
    view = random_view(rng, n, load_defaults()["value"] if value == "cue value" else None)
    policy = POLICY_VARIANTS[name]()
    if policy.item_state:
        pytest.skip("a batch history holds no per-item state (a store replays this policy)")
    for own_need in (None, a_need(rng, 30)):
        view.need = own_need
        score = policy.forget_scorer(view)
        for trial in range(20):
            positions = np.sort(rng.choice(n, int(rng.integers(1, n)), replace=False))  # a consolidation holds some
            now = float(rng.uniform(0, 12))
            need = a_need(rng, int(rng.integers(0, 25)), boundary_every=3) if trial % 2 else None
            want = np.asarray(policy.forget_scores(view.take(positions, now, need=need), now), float)
            got = score(positions, now, need)
            assert got.tobytes() == want.tobytes(), (name, trial)
    view.need = None
    score = policy.forget_scorer(view)
    if name == "adaptive":  # the need moved the scores: the scorer read it, not a need of its own
        need = a_need(rng, 40)
        assert need.exponent(policy.z) > 0
        assert not np.array_equal(score(np.arange(n), 12.0, need), score(np.arange(n), 12.0, None))


def test_a_subclass_that_scores_its_own_way_is_scored_by_its_own_rule_in_a_replay():
    """A value or adaptive policy whose forget_scores (or exponent) a subclass overrides is replayed by the override."""
    from memlib.store import AdaptivePolicy, ValuePolicy

    class OldestFirst(ValuePolicy):
        def forget_scores(self, view, now):
            return -view.time

    class AlwaysRecent(AdaptivePolicy):
        def exponent(self, view):
            return 1.5

    view = random_view(np.random.default_rng(2), 30)
    positions = np.arange(5, 25)
    assert OldestFirst(beta=1.0).forget_scorer(view)(positions, 20.0).tolist() == (-view.time[positions]).tolist()
    recent = AlwaysRecent(value_scale=1.0, z=2.0)
    need = a_need(np.random.default_rng(3), 12)
    assert need.exponent(recent.z) != 1.5  # the stream's own exponent would score otherwise
    want = recent.forget_scores(view.take(positions, 20.0, need=need), 20.0)
    assert recent.forget_scorer(view)(positions, 20.0, need).tolist() == want.tolist()
    assert recent.explain_terms(view.take(positions, 20.0, need=need), 0)["need_exponent"] == 1.5


@pytest.mark.parametrize("name", sorted(POLICY_VARIANTS))
def test_a_batch_view_replays_every_policy_like_the_store(name):
    """held_after on a batch history's view (the policy's own scorer) keeps what it keeps on the store's view.

    The store's view is scored by taking views (the default scorer), and what it keeps is what the store keeps
    (``test_held_after_keeps_what_the_store_keeps_for_every_prefix_and_budget``).
    """
    rng = np.random.default_rng(13)
    policy = POLICY_VARIANTS[name]()
    if policy.item_state:
        pytest.skip("a batch history holds no per-item state (a store replays this policy)")
    for trial in range(4):
        turns = recent_need_history(n_sessions=20) if trial == 0 else random_history(rng, int(rng.integers(10, 50)))
        full = MemoryStore(weights=np.ones(7), policy=POLICY_VARIANTS[name](), merge_threshold=None)
        replay_history(full, turns, budget=len(turns))
        sessions = [t["session"] for t in turns]
        cuts = [(n, b) for n in session_ends(sessions).tolist() for b in (0, 2, 6)]
        batch = held_after(batch_view_of(full.view, LinearValue(np.ones(7))), policy, sessions, cuts)
        store = held_after(full.view, policy, sessions, cuts)
        assert [h.tolist() for h in batch.held] == [h.tolist() for h in store.held], (name, trial)
        assert batch.peak == store.peak
