"""The need study (chapter 11): references by age, their AUC for gold, and each stream's exponent, on planted data."""

import numpy as np
import pytest

from memlib.studies import need as N
from memlib.studies.corpora import Corpus


def planted(back: int, n_sessions: int = 12, per: int = 4, gold_back: int | None = None, texts=None):
    """One history of ``n_sessions`` sessions of ``per`` turns; the first user turn of each session from
    ``back`` on repeats (same embedding) the second user turn of the session ``back`` before it; one
    question, asked after the history, whose gold is the second user turn of the session ``gold_back``
    before it."""
    from memlib.cases import CaseSet
    from memlib.studies.corpora import Corpus

    n = n_sessions * per
    rng = np.random.default_rng(0)
    E = rng.normal(size=(n, 384)).astype(np.float32)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    for s in range(back, n_sessions):
        E[s * per] = E[(s - back) * per + 2]
    session = np.repeat(np.arange(n_sessions), per)
    gold = [(n_sessions - (gold_back or back)) * per + 2]
    cases = CaseSet.from_haystacks([rng.random((n, 7))], [session.astype(float)], [0], [gold])
    cues = np.zeros((1, n, 12))
    cues[0, ::2, 0] = 1.0  # turns 0, 2, ... are the user's: the first turn of each session among them
    return Corpus("p", cases, cues, session[None], np.arange(n)[None], E, np.zeros(n), E[:1], np.zeros(1), texts)


def test_references_peak_at_the_lag_users_reach_back_to():
    h = N.hazard_table(planted(back=3)).set_index(["kind", "sessions_ago"])
    refs = h.loc["references"]
    assert refs.loc["3-4", "events"] == 9  # sessions 3..11 each refer to the session 3 before
    assert refs["events"].drop("3-4").sum() == 0
    # every user turn is at risk against every turn of each earlier session, once
    assert refs["at_risk"].sum() == sum(2 * 4 * s for s in range(12))
    assert h.loc[("gold", "3-4"), "events"] == 1 and h.loc["gold", "events"].sum() == 1


def test_the_exponent_is_positive_for_a_user_who_reaches_back_little_and_zero_without_references():
    near = N.exponent_table(planted(back=2, n_sessions=40)).iloc[0]
    assert near["references"] == 38 and near["exponent_best"] > 0 and near["exponent_used"] > 0
    assert near["exponent_used"] <= near["exponent_best"]  # the interval only pulls toward 0
    none = planted(back=2, n_sessions=40)
    none.embeddings[:] = np.eye(384, dtype=np.float32)[np.arange(len(none.embeddings)) % 384]
    flat = N.exponent_table(none).iloc[0]
    assert flat["references"] == 0 and flat["exponent_used"] == 0.0


def test_a_gold_turn_that_is_referred_back_to_ranks_above_the_rest():
    # sessions 0..8 each have one turn referred to once (3 sessions later); the gold (session 6) is one
    # of them: it ranks above the 39 others and ties with 8
    auc = N.reference_auc(planted(back=3, gold_back=6)).set_index("kind")["auc"]
    assert auc["embedding"] == pytest.approx((39 + 0.5 * 8) / 47)
    unreferred = N.reference_auc(planted(back=3, gold_back=1)).set_index("kind")["auc"]
    assert unreferred["embedding"] < 0.5


def test_lexical_references_count_rare_shared_words_only():
    counts = N.shared_rare_words(["my dog Rex", "Rex is a dog", "hello"] + ["the dog"] * 297)
    assert counts[0, 1] == 1  # rex: rare; dog: in nearly every text
    assert counts[0, 2] == 0 and counts[2, 2] == 1  # a text shares its own rare word with itself
    assert counts.shape == (300, 300) and (counts == counts.T).all()


def test_the_study_needs_a_dataset():
    with pytest.raises(N.ParameterError, match="datasets must name at least one dataset"):
        N.need_study(datasets=" , ")


def test_the_adaptive_store_keeps_the_same_turns_whatever_the_question_its_gold_or_the_ids():
    """Blind: what the adaptive store holds before a question reads the stream, never the question."""
    from memlib.cases import CaseSet
    from memlib.studies.corpora import kept
    from memlib.studies.defaults import policy_of
    from memlib.value import LinearValue

    h = planted(back=2, n_sessions=30)
    policy, value = policy_of("adaptive", value_scale=0.5), LinearValue(np.eye(7)[0])
    before = kept(h, value, policy, 0.3)
    assert 0 < before.sum() < before.size  # something was forgotten
    assert (before != kept(h, value, policy_of("value"), 0.3)).any()  # and the need moved what
    rng = np.random.default_rng(1)
    cs = h.cases
    other = CaseSet.from_haystacks(
        [cs.factors[0, : cs.length[0]]],
        [cs.time[0, : cs.length[0]]],
        [0],
        [[3, 17]],  # another gold
        case_ids=["renamed"],
        groups=["another group"],
    )
    changed = Corpus(
        h.name, other, h.cues, h.session, h.text_id, h.embeddings, h.valence,
        rng.normal(size=h.questions.shape).astype(np.float32), np.ones(1), h.texts,
    )  # fmt: skip
    np.testing.assert_array_equal(kept(changed, value, policy, 0.3), before)


def test_a_stream_that_reaches_back_to_the_old_more_than_the_new_is_read_as_flat():
    """The exponent is never below 0: need may stay flat with age, never rise."""
    from memlib.references import Need

    old = Need()
    for s in range(40):  # references at the longest lags far more often than their pairs at risk say
        old = old.counted([0, 0, 0, 0, 1, 3, 6, 9], [10, 50, 50, 50, 50, 50, 50, 50], boundary=s + 1)
    assert old.exponent(0.0) == 0.0 and old.exponent(2.0) == 0.0
    assert old.loglik.argmax() < list(np.round(np.arange(-1.0, 2.0 + 1e-9, 0.05), 2)).index(0.0)  # the fit is < 0
    near = Need()
    for s in range(40):
        near = near.counted([0, 9, 3, 1, 0, 0, 0, 0], [10, 50, 50, 50, 50, 50, 50, 50], boundary=s + 1)
    assert near.exponent(0.0) >= near.exponent(2.0) > 0


def test_a_replay_reads_the_reference_table_as_the_store_counts_references():
    """The table counted once per history gives every consolidation what count_references gives it."""
    from memlib.references import count_references, reference_table
    from memlib.store import session_ends

    h = planted(back=2, n_sessions=12)
    n = int(h.cases.length[0])
    E, session, user = h.embeddings, h.session[0, :n], h.cues[0, :n, 0] > 0.5
    table = reference_table(E, session_ends(session), user)
    rng = np.random.default_rng(3)
    found = 0
    for s in range(12):
        held = np.sort(rng.choice(n, size=20, replace=False))
        ask = np.flatnonzero((session == s) & user)
        old = held[session[held] < s]
        want = count_references(E[ask], session[ask], E[old], session[old])
        got = table.session_counts(s, held)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        found += want[0].sum()
    assert found > 0  # some references were held


def test_nested_histories_share_the_table_of_the_longest_and_a_cut_inside_a_session_does_not():
    from memlib.cases import CaseSet
    from memlib.references import reference_table
    from memlib.store import held_after, session_ends
    from memlib.studies.corpora import kept
    from memlib.studies.defaults import policy_of
    from memlib.value import LinearValue

    h = planted(back=2, n_sessions=12)
    n, per = int(h.cases.length[0]), 4
    lengths = [n, 8 * per, 5 * per + 2]  # the whole history, one ending with session 7, one inside session 5
    cs = h.cases
    cases = CaseSet.from_haystacks(
        [cs.factors[0, :m] for m in lengths], [cs.time[0, :m] for m in lengths], [0, 1, 2], [[2], [2], [2]]
    )
    nested = Corpus(
        "nested", cases, np.repeat(h.cues, 3, 0), np.repeat(h.session, 3, 0), np.repeat(h.text_id, 3, 0),
        h.embeddings, h.valence, np.repeat(h.questions, 3, 0), np.zeros(3),
    )  # fmt: skip
    assert [nested._longest_with_prefix(g) for g in range(3)] == [0, 0, 2]
    for g, m in enumerate(lengths):
        own = reference_table(h.embeddings[:m], session_ends(h.session[0, :m]), h.cues[0, :m, 0] > 0.5)
        np.testing.assert_array_equal(nested.references(g).counts, own.counts)
        np.testing.assert_array_equal(nested.references(g).asks, own.asks)
    policy, value = policy_of("adaptive", value_scale=0.5), LinearValue(np.eye(7)[0])
    masks = kept(nested, value, policy, 0.3)
    for g, m in enumerate(lengths):  # each replayed alone, the table counted on its own
        b = int(np.ceil(0.3 * m))
        alone = held_after(nested.view(g, value), policy, nested.session[g, :m], [(m, b)]).held[0]
        assert np.flatnonzero(masks[g]).tolist() == alone.tolist()
