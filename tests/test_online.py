"""The online annotator (memlib.online): the one definition of the causal factors that
memlib.factors.annotate and the store both run."""

import numpy as np
import pandas as pd
import pytest

from memlib import FACTORS
from memlib import datasets as D
from memlib import embeddings as Emb
from memlib import factors as Fm
from memlib import online as O
from memlib.store import MemoryStore

GOAL, SELF = FACTORS.index("goal_relevance"), FACTORS.index("self_relevance")

# Two sessions. Monday: Ana (user), the assistant, then Bo (user), who has said nothing before.
# Tuesday: the assistant speaks first (the session has no user turn yet), then Ana.
E = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 1.0, 0.0], [0.0, 0.6, 0.8], [0.8, 0.0, 0.6]])
ROLES = ["user", "assistant", "user", "assistant", "user"]
SPEAKERS = ["ana", "assistant", "bo", "assistant", "ana"]
SESSIONS = ["mon", "mon", "mon", "tue", "tue"]
R2 = np.sqrt(2.0)
# self relevance: Ana has no earlier turn; the assistant's is the cosine to Ana's turn (0.6); Bo has none
# of his own; Tuesday's assistant turn: to Monday's user turns, (0.6) / sqrt(2); Ana: to her Monday turn (0.8)
SELF_BY_HAND = [0.5, 0.8, 0.5, (1 + 0.6 / R2) / 2, 0.9]
# final goal relevance: Monday's anchor is its user turns (1, 1, 0); Tuesday's is Ana's turn alone
GOAL_BY_HAND = [(1 + 1 / R2) / 2, (1 + 1.4 / R2) / 2, (1 + 1 / R2) / 2, (1 + 0.48) / 2, 1.0]
# provisional goal relevance, as each turn arrives: the session's anchor so far, the turn included
# (Tuesday's assistant turn: all of the session's turns, itself, while it has no user turn)
PROVISIONAL_BY_HAND = [1.0, 0.8, (1 + 1 / R2) / 2, 1.0, 1.0]


def turn_by_turn(E, roles, speakers, sessions):
    """Each turn in its own step, each session-end fix applied to the rows of its session."""
    state, rows, fixes = O.OnlineState.start(E.shape[1]), [], []
    for i in range(len(E)):
        step = state.step(E[i : i + 1], roles[i : i + 1], speakers[i : i + 1], sessions[i : i + 1])
        rows.append(step.factors[0].copy())
        fixes.append(step.goal_fix)
        if step.goal_fix is not None:
            for j in range(i):
                if sessions[j] == step.goal_fix.session:
                    rows[j][GOAL] = step.goal_fix(E[j : j + 1])[0]
        state = step.state
    return np.array(rows), fixes, state


def test_a_small_history_by_hand():
    F = O.annotate_history(E, ROLES, SPEAKERS, SESSIONS)
    np.testing.assert_allclose(F[:, SELF], SELF_BY_HAND, atol=1e-12)
    np.testing.assert_allclose(F[:, GOAL], GOAL_BY_HAND, atol=1e-12)
    rows, fixes, state = turn_by_turn(E, ROLES, SPEAKERS, SESSIONS)
    assert [f is not None for f in fixes] == [False, False, False, True, False]  # Tuesday ends Monday
    assert fixes[3].session == "mon"
    np.testing.assert_allclose(rows[:, SELF], SELF_BY_HAND, atol=1e-12)
    np.testing.assert_allclose(rows[:3, GOAL], GOAL_BY_HAND[:3], atol=1e-12)  # fixed at Monday's end
    np.testing.assert_allclose(rows[3:, GOAL], PROVISIONAL_BY_HAND[3:], atol=1e-12)  # Tuesday is still open
    np.testing.assert_allclose(state.session_goal()(E[3:]), GOAL_BY_HAND[3:], atol=1e-12)  # its end
    np.testing.assert_array_equal(state.user, E[0] + E[2] + E[4])
    np.testing.assert_array_equal(state.speakers["ana"], E[0] + E[4])
    assert state.session == "tue" and state.session_has_user and set(state.speakers) == {"ana", "bo"}


def test_the_provisional_goal_is_the_session_anchor_so_far():
    step = O.OnlineState.start(3).step(E, ROLES, SPEAKERS, SESSIONS)
    # Monday ends within the batch, so its turns are final at once; Tuesday's are provisional
    np.testing.assert_allclose(step.factors[:, GOAL], GOAL_BY_HAND[:3] + PROVISIONAL_BY_HAND[3:], atol=1e-12)
    assert step.goal_fix is None  # nothing was open before the batch
    state = O.OnlineState.start(3)
    for i in range(5):
        step = state.step(E[i : i + 1], ROLES[i : i + 1], SPEAKERS[i : i + 1], SESSIONS[i : i + 1])
        assert step.factors[0, GOAL] == pytest.approx(PROVISIONAL_BY_HAND[i])
        state = step.state


def test_the_given_factors_and_value_alignment_are_placed_in_their_columns():
    v = np.array([0.0, 0.0, 1.0])
    given = {"emotional_intensity": [0.1] * 5, "reliability": [0.8, 0.4, 0.8, 0.4, 0.8], "usage_history": [0.5] * 5}
    F = O.annotate_history(E, ROLES, SPEAKERS, SESSIONS, value_profile=v, task_utility=np.full(5, 0.25), **given)
    for name, values in {**given, "task_utility": [0.25] * 5}.items():
        np.testing.assert_allclose(F[:, FACTORS.index(name)], values)
    np.testing.assert_allclose(F[:, FACTORS.index("value_alignment")], (1 + E @ v) / 2)
    assert not O.annotate_history(E, ROLES, SPEAKERS, SESSIONS)[:, [0, 2, 4, 5, 6]].any()  # omitted: inert
    with pytest.raises(TypeError, match="unexpected factor 'goal_relevance'"):
        O.OnlineState.start(3).step(E, ROLES, SPEAKERS, SESSIONS, goal_relevance=np.ones(5))


def random_history(seed, n=80, dim=16):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dim))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    roles = rng.choice(["user", "assistant"], n)
    speakers = np.where(roles == "user", rng.choice(["ana", "bo", "cy"], n), "assistant")
    sessions = np.sort(rng.integers(0, 12, n))
    roles[sessions == sessions[n // 2]] = "assistant"  # a session without a user turn
    return X, roles, speakers, sessions


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_appending_a_turn_changes_no_earlier_row_but_by_the_session_end_fix(seed):
    X, roles, speakers, sessions = random_history(seed, n=40)
    before, _, _ = turn_by_turn(X[:1], roles[:1], speakers[:1], sessions[:1])
    for k in range(1, len(X)):
        after, fixes, _ = turn_by_turn(X[: k + 1], roles[: k + 1], speakers[: k + 1], sessions[: k + 1])
        moved = np.zeros(after.shape[:1], bool)
        if fixes[k] is not None:  # turn k starts a session: the one it ends gets its final goal relevance
            assert sessions[k] != sessions[k - 1] and fixes[k].session == sessions[k - 1]
            moved = sessions[: k + 1] == fixes[k].session
        np.testing.assert_array_equal(after[:k][~moved[:k]], before[~moved[:k]])
        np.testing.assert_array_equal(np.delete(after[:k], GOAL, axis=1), np.delete(before, GOAL, axis=1))
        assert fixes[k] is not None or sessions[k] == sessions[k - 1]  # a new session always ends one
        before = after


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_batch_is_its_turns_one_by_one_with_the_fixes_applied(seed):
    X, roles, speakers, sessions = random_history(seed)
    one_by_one, _, last = turn_by_turn(X, roles, speakers, sessions)
    for cuts in ([], [1, 2, 3], [10, 11, 40, 41, 70], list(range(0, 80, 7))):
        state, rows = O.OnlineState.start(X.shape[1]), np.zeros((len(X), len(FACTORS)))
        for a, b in zip([0, *cuts], [*cuts, len(X)]):
            step = state.step(X[a:b], roles[a:b], speakers[a:b], sessions[a:b])
            rows[a:b] = step.factors
            if step.goal_fix is not None:
                earlier = np.flatnonzero(sessions[:a] == step.goal_fix.session)
                rows[earlier, GOAL] = step.goal_fix(X[earlier])
            state = step.state
        np.testing.assert_allclose(rows, one_by_one, rtol=0, atol=1e-12)
        for name in ("user", "session_user", "session_all"):
            np.testing.assert_allclose(getattr(state, name), getattr(last, name), rtol=0, atol=1e-12)
    whole = O.annotate_history(X, roles, speakers, sessions)
    open_rows = sessions == sessions[-1]
    np.testing.assert_allclose(whole[~open_rows], one_by_one[~open_rows], rtol=0, atol=1e-12)
    np.testing.assert_allclose(whole[open_rows, GOAL], last.session_goal()(X[open_rows]), rtol=0, atol=1e-12)


def test_an_empty_batch_changes_nothing():
    state = O.OnlineState.start(3).step(E, ROLES, SPEAKERS, SESSIONS).state
    step = state.step(np.zeros((0, 3)), [], [], [])
    assert step.state is state and step.goal_fix is None and step.factors.shape == (0, len(FACTORS))


# --------------------------------------------------------------------------- one code path


def tiny_dataset() -> D.Dataset:
    """The hand history above as a dataset of one conversation (two sessions, one question)."""
    texts = ["I am Ana.", "Hello Ana.", "I am Bo.", "Good morning.", "Ana again."]
    turns = pd.DataFrame(
        {
            "session": SESSIONS,
            "turn": [0, 1, 2, 0, 1],
            "role": ROLES,
            "speaker": SPEAKERS,
            "text": texts,
            "text_id": range(5),
            "timestamp": pd.to_datetime(["2024-01-01"] * 3 + ["2024-01-02"] * 2),
        }
    )
    sessions = pd.DataFrame({"session": ["mon", "tue"], "first_turn": [0, 3], "n_turns": [3, 2]})
    cases = pd.DataFrame(
        {
            "case_id": ["q0"],
            "question": ["Who is Bo?"],
            "question_date": [pd.Timestamp("2024-01-03")],
            "haystack": [("mon", "tue")],
            "gold": [(2,)],
            "group": ["c0"],
            "usable": [True],
        }
    )
    return D.Dataset("tiny", turns, sessions, cases, texts)


def fake_embed(texts, *args, **kwargs):
    """The hand history's vectors, padded to 384 numbers; a question gets a vector of its own."""
    table = dict(zip(tiny_dataset().texts, np.pad(E, ((0, 0), (0, 381)))))
    return np.array([table.get(t, np.eye(384)[5]) for t in texts], dtype=np.float32)


@pytest.fixture
def spy(monkeypatch):
    """Record every call of the annotator's step (and run it)."""
    calls = []
    step = O.OnlineState.step

    def recording(self, E, *args, **kwargs):
        calls.append(len(E))
        return step(self, E, *args, **kwargs)

    monkeypatch.setattr(O.OnlineState, "step", recording)
    return calls


def test_factors_annotate_runs_the_online_annotator(spy, monkeypatch):
    monkeypatch.setattr(Fm, "embed_cached", fake_embed)
    monkeypatch.setattr(Emb, "embed_cached", fake_embed)  # the text table (embed_text_table)
    ann = Fm.annotate(tiny_dataset(), "blind", use_cache=False, progress=False)
    assert spy == [5]  # one step over the one history
    F = ann.cases.factors[0, : ann.cases.length[0]]
    np.testing.assert_allclose(F[:, SELF], SELF_BY_HAND, atol=1e-6)
    np.testing.assert_allclose(F[:, GOAL], GOAL_BY_HAND, atol=1e-6)
    # the readings that are not online replace its columns, and still run it for the others
    spy.clear()
    kw = dict(factor_set="released", readings={"order": "time"}, use_cache=False, progress=False)
    released = Fm.annotate(tiny_dataset(), "blind", **kw)
    assert spy == [5] and not np.allclose(released.cases.factors[0, :5, SELF], SELF_BY_HAND)


def test_the_store_runs_the_online_annotator(spy):
    st = MemoryStore()
    for i, text in enumerate(tiny_dataset().texts):
        st.add(text, role=ROLES[i], speaker=SPEAKERS[i], session=SESSIONS[i], time=i, embedding=fake_embed([text])[0])
    assert spy == [1] * 5  # one step per turn
    np.testing.assert_allclose(st.factors[:, SELF], SELF_BY_HAND, atol=1e-6)
    np.testing.assert_allclose(st.factors[:, GOAL], GOAL_BY_HAND[:3] + PROVISIONAL_BY_HAND[3:], atol=1e-6)
    st.consolidate(budget=10)  # a consolidation fixes the open session's goal relevance
    np.testing.assert_allclose(st.factors[:, GOAL], GOAL_BY_HAND, atol=1e-6)
