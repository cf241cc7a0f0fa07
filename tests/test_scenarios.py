"""A scenario suite a person can read: does the default store keep what a person would keep?

Each scenario is a short hand-written conversation with what a person would keep and what
they would ask later. The tests check two things with the store's defaults
(``MemoryStore()``): at a tight budget (as many items as facts) the store keeps the facts
and so drops the filler; and with nothing forgotten, a direct question retrieves its fact
first.

This is a sanity suite, like the synthetic study of chapter 01: it is not the benchmark, and
the defaults were not tuned on it. They were chosen by leaving one of LoCoMo, LongMemEval-S
and RealMem out at a time (``memlib.studies.defaults``, ``memlib/defaults.json``) before these
scenarios were run against them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from memlib._checks import ParameterError
from memlib.store import MemoryStore, replay_history

pytestmark = pytest.mark.slow  # the store on the real sentence model (its load alone: 5 s on 2 cores)


@dataclass
class Scenario:
    name: str
    turns: list  # (text, role, time, session)
    keep: list  # texts a person would keep
    questions: list  # (question, the text that answers it)


ADVICE = (
    "There are many ways to make travel less stressful. Pack the night before, keep your documents "
    "in one place, and check in online if you can. Arrive at the airport early, bring a reusable "
    "water bottle, and download entertainment in advance. Consistency and preparation matter more "
    "than anything else, and a little planning goes a long way."
)

SCENARIOS = [
    Scenario(
        "allergy and a name (the README example)",
        [
            ("I am allergic to peanuts.", "user", "2024-05-01 10:00", "s1"),
            ("Noted, no peanuts.", "assistant", "2024-05-01 10:01", "s1"),
            ("My daughter's name is Lina and she starts school in September.", "user", "2024-05-02 09:00", "s2"),
            ("lol ok", "user", "2024-05-02 09:01", "s2"),
            ("Great, good luck to Lina!", "assistant", "2024-05-02 09:02", "s2"),
        ],
        ["I am allergic to peanuts.", "My daughter's name is Lina and she starts school in September."],
        [
            ("What can't the user eat?", "I am allergic to peanuts."),
            (
                "When does the user's daughter start school?",
                "My daughter's name is Lina and she starts school in September.",
            ),
        ],
    ),
    Scenario(
        "a birthday and an appointment among greetings",
        [
            ("Hi there!", "user", "2024-03-01 18:00", "a"),
            ("Hello! How can I help you today?", "assistant", "2024-03-01 18:00", "a"),
            ("My brother Tom's birthday is on March 14.", "user", "2024-03-01 18:01", "a"),
            ("Thanks for telling me.", "assistant", "2024-03-01 18:01", "a"),
            ("haha yeah", "user", "2024-03-01 18:02", "a"),
            ("ok cool", "user", "2024-03-04 08:00", "b"),
            ("I have a dentist appointment on Friday at 3pm.", "user", "2024-03-04 08:01", "b"),
            ("Got it.", "assistant", "2024-03-04 08:01", "b"),
            ("thanks!", "user", "2024-03-04 08:02", "b"),
        ],
        ["My brother Tom's birthday is on March 14.", "I have a dentist appointment on Friday at 3pm."],
        [
            ("When is Tom's birthday?", "My brother Tom's birthday is on March 14."),
            ("When is the user's dentist appointment?", "I have a dentist appointment on Friday at 3pm."),
        ],
    ),
    Scenario(
        "a commitment and a new job among chit-chat",
        [
            ("nice weather today huh", "user", "2024-06-01 12:00", "a"),
            ("It does sound lovely outside!", "assistant", "2024-06-01 12:00", "a"),
            ("I promised my mom I'd call her every Sunday evening.", "user", "2024-06-01 12:01", "a"),
            ("lol", "user", "2024-06-01 12:02", "a"),
            ("I'm starting a new job at Siemens on June 3.", "user", "2024-06-02 09:00", "b"),
            ("Congratulations!", "assistant", "2024-06-02 09:00", "b"),
            ("yeah", "user", "2024-06-02 09:01", "b"),
        ],
        ["I promised my mom I'd call her every Sunday evening.", "I'm starting a new job at Siemens on June 3."],
        [
            ("When does the user call their mother?", "I promised my mom I'd call her every Sunday evening."),
            ("Where does the user start working?", "I'm starting a new job at Siemens on June 3."),
        ],
    ),
    Scenario(
        "a preference that changes",
        [
            ("I love sushi, it's my favourite food.", "user", "2024-01-10 19:00", "a"),
            ("Sushi is a great choice!", "assistant", "2024-01-10 19:00", "a"),
            ("ok", "user", "2024-01-10 19:01", "a"),
            ("hey", "user", "2024-02-20 19:00", "b"),
            ("Actually I've gone vegan since last month, so no more sushi for me.", "user", "2024-02-20 19:01", "b"),
            ("That's a big change, good for you!", "assistant", "2024-02-20 19:01", "b"),
            ("haha thanks", "user", "2024-02-20 19:02", "b"),
        ],
        [
            "I love sushi, it's my favourite food.",
            "Actually I've gone vegan since last month, so no more sushi for me.",
        ],
        [
            (
                "What diet does the user follow now?",
                "Actually I've gone vegan since last month, so no more sushi for me.",
            ),
        ],
    ),
    Scenario(
        "a flight among long generic advice",
        [
            ("My flight to Tokyo leaves on 12 October at 9:40.", "user", "2024-10-01 08:00", "a"),
            (ADVICE, "assistant", "2024-10-01 08:01", "a"),
            ("ok thanks", "user", "2024-10-01 08:02", "a"),
            ("Any other tips for long flights?", "user", "2024-10-02 08:00", "b"),
            (ADVICE.replace("travel", "long flights"), "assistant", "2024-10-02 08:01", "b"),
            ("cool", "user", "2024-10-02 08:02", "b"),
        ],
        ["My flight to Tokyo leaves on 12 October at 9:40."],
        [("When does the user's flight to Tokyo leave?", "My flight to Tokyo leaves on 12 October at 9:40.")],
    ),
]


def replay(s: Scenario, budget: int | None) -> MemoryStore:
    """The scenario into a default store, consolidated at every session end (no forgetting without a budget)."""
    store = MemoryStore()
    turns = [{"text": text, "role": role, "time": time, "session": session} for text, role, time, session in s.turns]
    replay_history(store, turns, budget)
    return store


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.name)
def test_tight_budget_keeps_the_facts(s):
    store = replay(s, budget=len(s.keep))
    kept = [item["text"] for item in store.items()]
    assert sorted(kept) == sorted(s.keep), f"kept {kept}; a person keeps {s.keep}"


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.name)
def test_a_direct_question_retrieves_its_fact_first(s):
    store = replay(s, budget=None)
    assert len(store) == len(s.turns)
    for question, answer in s.questions:
        got = [r["text"] for r in store.retrieve(question, k=3, update=False)]
        assert got[0] == answer, f"{question!r} retrieved {got}"


def test_the_default_tiers_spread_over_a_conversation():
    """Encoding tiers say something: the default value's V-bar is its place among the training turns'
    values, so a conversation's turns fall into several tiers, and the facts sit deeper than the filler
    on average. (Not every fact: a short one like "I am allergic to peanuts." is shallow; the budget,
    relative to the other items, is what keeps it.)"""
    store = MemoryStore()
    turns = [(text, role, f"{s.name}/{session}") for s in SCENARIOS for text, role, _, session in s.turns]
    for k, (text, role, session) in enumerate(turns):  # one conversation after another, a minute apart
        store.add(text, role=role, time=k / 1440, session=session)
    tiers = {item["text"]: item["tier"] for item in store.items()}
    assert len(set(tiers.values())) >= 3
    order = {"shallow": 0, "semantic": 1, "schematic": 2, "meta": 3}
    facts = [order[tiers[t]] for s in SCENARIOS for t in s.keep]
    filler = [order[tiers[t]] for t in ("lol ok", "lol", "ok cool", "haha yeah") if t in tiers]
    assert max(filler) == 0 and sum(facts) / len(facts) > 2


def test_replay_history_consolidates_at_each_session_end_and_names_a_bad_turn():
    turns = [{"text": f"turn {i}", "time": float(i), "session": i // 2, "embedding": np.eye(384)[i]} for i in range(5)]
    sizes = []
    store = MemoryStore()
    consolidate = store.consolidate

    def spy(budget, now=None):
        sizes.append((len(store), now))
        return consolidate(budget, now=now)

    store.consolidate = spy
    assert replay_history(store, turns, budget=2) == 4 and len(store) == 2
    assert sizes == [(2, 1.0), (4, 3.0), (3, 4.0)]  # after turns 1, 3 and the last, at the last turn's time
    assert replay_history(MemoryStore(), turns) == 5  # no budget: nothing is forgotten
    with pytest.raises(ParameterError, match="turn 1 of the history needs 'text' and 'session'"):
        replay_history(MemoryStore(), [turns[0], {"text": "x"}])


def test_an_echo_follows_the_users_words_and_the_first_k_start_the_whole_order():
    """The README's allergy: the assistant's echo is the turn most like the question (by 0.01 of cosine),
    yet the user's own words come first, for every k, and the first k are the start of the whole order."""
    from memlib.store import rank

    s = SCENARIOS[0]
    store = replay(s, budget=None)
    q = store._embedder(["What can't the user eat?"])[0]
    scores = store.policy.retrieval_scores(store.view, q, 0.0, store.view.now)
    texts = [item["text"] for item in store.items()]
    by_score = [texts[i] for i in np.argsort(-scores, kind="stable")]
    assert by_score[:2] == ["Noted, no peanuts.", "I am allergic to peanuts."]  # the echo scores higher
    whole = rank(store.view, store.policy, q).tolist()
    assert [texts[i] for i in whole[:2]] == ["I am allergic to peanuts.", "Noted, no peanuts."]
    assert [texts[i] for i in whole[2:]] == by_score[2:]  # nothing else moved
    for k in range(1, len(texts) + 1):
        assert rank(store.view, store.policy, q, k=k).tolist() == whole[:k]
