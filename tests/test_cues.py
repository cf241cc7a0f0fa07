"""The cue library (memlib.cues), its learners and the cue study (memlib.studies.cues)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from fixtures import longmemeval_records, write_longmemeval
from memlib import ParameterError
from memlib import cues as C
from memlib import datasets as D
from memlib import factors as Fm
from memlib.cases import CaseSet
from memlib.learning import fit_pairwise_logistic, retention_mass
from memlib.studies import cues as S


@pytest.fixture(scope="module")
def lme(tmp_path_factory):
    return D.load(str(write_longmemeval(tmp_path_factory.mktemp("lme") / "lme.json")))


def replace_questions(ds, seed):
    cases = ds.cases.copy()
    rng = np.random.default_rng(seed)
    cases["question"] = [f"Unrelated question {rng.integers(1e9)} about volcanoes on Friday 2021?" for _ in cases.index]
    return ds.with_cases(cases)


def blind_cues(ds):
    ann = Fm.annotate(ds, "blind", embedding_setting="fast", use_cache=False, progress=False)
    return C.compute_cues(ds, ann, embedding_setting="fast")


@pytest.mark.slow
def test_every_blind_cue_ignores_every_question(lme):
    """The leak test: replacing the questions (one at a time and all at once) changes no cue."""
    base = blind_cues(lme)
    assert base.names == C.CUE_NAMES  # every cue of the library is covered
    variants = [replace_questions(lme, 0)]
    for i in range(len(lme.cases)):  # each question alone
        cases = lme.cases.copy()
        cases.loc[i, "question"] = "What did I say about the weather in Lisbon?"
        variants.append(lme.with_cases(cases))
    for ds in variants:
        other = blind_cues(ds)
        assert other.names == base.names
        np.testing.assert_array_equal(other.values, base.values)


@pytest.mark.slow
def test_cues_refuse_the_oracle_annotation(lme):
    ann = Fm.annotate(lme, "oracle", embedding_setting="fast", use_cache=False, progress=False)
    with pytest.raises(ParameterError, match="blind"):
        C.compute_cues(lme, ann)


@pytest.mark.slow
def test_cue_values_point_at_their_turns(lme):
    ann = Fm.annotate(lme, "blind", embedding_setting="fast", use_cache=False, progress=False)
    t = C.compute_cues(lme, ann)
    col = {n: i for i, n in enumerate(t.names)}
    for g in range(ann.cases.n_haystacks):
        n = int(ann.cases.length[g])
        rows = ann.turn_rows[g, :n]
        turns = lme.turns.iloc[rows]
        np.testing.assert_array_equal(t.values[g, :n, col["is_user"]], (turns["role"] == "user").to_numpy())
        np.testing.assert_array_equal(t.values[g, :n, col["first_in_session"]], (turns["turn"] == 0).to_numpy())
        np.testing.assert_allclose(t.values[g, :n, col["goal"]], ann.cases.factors[g, :n, 1])
        assert t.values[g, 0, col["novelty"]] == 1.0  # nothing earlier to resemble
        assert np.all(t.values[g, n:] == 0)  # padding
    # a store given the same turns in order holds the same item cues (what it keeps beside its factors)
    from memlib.store import MemoryStore

    item = [col[c] for c in C.ITEM_CUES]
    for g in range(ann.cases.n_haystacks):
        n = int(ann.cases.length[g])
        st = MemoryStore(merge_threshold=None)
        for j, r in enumerate(ann.turn_rows[g, :n]):
            turn = lme.turns.iloc[r]
            st.add(turn["text"], turn["role"], time=float(j), session=str(turn["session"]), embedding=np.eye(384)[j])
        np.testing.assert_array_equal(st.cues[:, : len(C.ITEM_CUES)], t.values[g, :n][:, item])
    # the half-marathon turn: a first-person statement with a number, not a question
    i = lme.turns.index[lme.turns["text"].str.contains("half marathon")][0]
    g, pos = np.argwhere(ann.turn_rows == i)[0]
    v = t.values[g, pos]
    assert v[col["first_person"]] == 1 and v[col["numbers"]] > 0 and v[col["is_question"]] == 0


def test_novelty_is_causal_and_redundancy_stays_in_its_session():
    rng = np.random.default_rng(0)
    E = rng.normal(size=(12, 8)).astype(np.float32)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    full = C.novelty(E)
    for k in range(1, 12):  # later turns never change an earlier turn's novelty
        np.testing.assert_array_equal(C.novelty(E[:k]), full[:k])
    assert np.all((full >= 0) & (full <= 2))
    sess = np.repeat([0, 1, 2], 4)
    red = C.redundancy(E, sess)
    E2 = E.copy()
    E2[8:] = rng.normal(size=(4, 8))  # another session's turns change
    E2[8:] /= np.linalg.norm(E2[8:], axis=1, keepdims=True)
    np.testing.assert_array_equal(C.redundancy(E2, sess)[:8], red[:8])


def test_text_cues_on_known_sentences():
    t = C.text_cues(["Is it on Monday?", "I think my sister Ana moved in 2019.", "ok"])
    q, hedge, first, numbers, dates, names, length = t.T
    assert q.tolist() == [1, 0, 0]
    assert hedge.tolist() == [0, 1, 0]
    assert first.tolist() == [0, 1, 0]  # a question is not a first-person statement
    assert numbers[1] > 0 and numbers[0] == 0
    assert dates[0] > 0 and dates[1] > 0 and dates[2] == 0
    assert names[1] > 0 and names[2] == 0  # "Ana"; the sentence's first word does not count
    assert length[1] > length[0] > length[2]


def test_the_text_cues_and_reliability_read_one_set_of_word_lists():
    from memlib import text_cues as TC

    assert C.text_cues is TC.text_cues and C.TEXT_CUES is TC.TEXT_CUES
    hedges = [*TC.HEDGE_WORDS, *(p.replace("'?", "'") for p in TC.HEDGE_PHRASES)]
    texts = [f"Well, {h} it rains." for h in hedges]
    assert C.text_cues(texts)[:, 1].tolist() == [1.0] * len(hedges)
    np.testing.assert_allclose(Fm.reliability(["assistant"] * len(texts), texts), 0.2)
    texts = [f"So {w.capitalize()} went." for w in TC.FIRST_PERSON_WORDS]
    assert C.text_cues(texts)[:, 2].tolist() == [1.0] * len(texts)
    assert Fm.reliability(["user"] * len(texts), texts).tolist() == [1.0] * len(texts)
    # the two readings of the lists (module docstring): a search in the text, whole words
    assert Fm.reliability(["assistant"], ["maybe's fine"])[0] == 0.2 and C.text_cues(["maybe's fine"])[0, 1] == 0
    assert Fm.reliability(["assistant"], ["maybe_x"])[0] == 0.4 and C.text_cues(["maybe_x"])[0, 1] == 1


def test_calibration_is_a_within_history_percentile():
    rng = np.random.default_rng(1)
    V = rng.normal(size=(3, 9, 2)).astype(np.float32)
    length = np.array([9, 5, 1])
    V[1, 5:] = 0
    V[2, 1:] = 0
    cal = C.CueTable(V, ("length", "names"), length).calibrated()
    assert cal.calibrated_
    for g, n in enumerate(length):
        x = cal.values[g, :n]
        assert np.all((x >= 0) & (x <= 1)) and np.all(cal.values[g, n:] == 0)
        for k in range(2):  # the order within the history is kept
            order = np.argsort(V[g, :n, k])
            assert np.all(np.diff(x[order, k]) >= 0)
    assert cal.values[2, 0].tolist() == [0.5, 0.5]
    # an increasing transform of one history's cue changes nothing
    V2 = V.copy()
    V2[0] = np.exp(V2[0])
    np.testing.assert_allclose(C.CueTable(V2, ("length", "names"), length).calibrated().values[0], cal.values[0])


def test_select_drops_a_group():
    t = C.CueTable(np.zeros((1, 2, len(C.CUE_NAMES)), np.float32), C.CUE_NAMES, np.array([2]))
    sub = t.select(drop_groups=("position",))
    assert "first_in_session" not in sub.names and "novelty" in sub.names
    assert sub.values.shape[-1] == len(C.CUE_NAMES) - 2
    with pytest.raises(ParameterError):
        t.select(drop_groups=("nonsense",))


# --------------------------------------------------------------------------- learners and the study on planted data


def planted(n_groups=8, per_group=4, n=40, seed=0):
    """Gold turns carry many numbers (a strong signal) and fewer hedges (a weak one); the rest is noise."""
    rng = np.random.default_rng(seed)
    G = n_groups * per_group
    V = rng.random((G, n, len(C.CUE_NAMES))).astype(np.float32)
    col = {c: i for i, c in enumerate(C.CUE_NAMES)}
    gold = []
    for g in range(G):
        gp = rng.choice(n, 3, replace=False)
        V[g, gp, col["numbers"]] += 0.8
        V[g, gp, col["hedge"]] -= 0.3
        gold.append(gp)
    factors = [rng.random((n, 7)) * np.array([1, 1, 0, 1, 0, 1, 0]) for _ in range(G)]
    cs = CaseSet.from_cases(
        factors,
        [np.arange(n, dtype=float)] * G,
        gold,
        case_ids=[f"c{i}" for i in range(G)],
        groups=[f"g{i // per_group}" for i in range(G)],
    )
    return S.CueData("planted", cs, C.CueTable(V, C.CUE_NAMES, cs.length.copy()))


def test_surrogate_is_deterministic_and_signed():
    data = planted()
    X = data.calibrated.values
    t = retention_mass(data.cases)
    w1 = fit_pairwise_logistic(X, data.cases.length, t)
    w2 = fit_pairwise_logistic(X, data.cases.length, t)
    np.testing.assert_array_equal(w1, w2)
    col = {c: i for i, c in enumerate(C.CUE_NAMES)}
    assert w1[col["numbers"]] > 0 > w1[col["hedge"]]
    assert np.argmax(np.abs(w1)) in (col["numbers"], col["hedge"])


@pytest.mark.slow
def test_study_on_planted_cues_finds_the_planted_signal():
    data = planted()
    res = S.cue_study_on_data(data, n_splits=3, quick=True, n_boot=50, weight_boot=10)
    s = res.summary
    assert {"model", "learner", "calibrated", "regime", "keep_fraction", "mean", "std"} <= set(s)
    g = s[s["evaluation"] == "grouped"].set_index(["model", "learner", "calibrated"])["mean"]
    assert g[("cues", "surrogate", True)] > 0.9  # the planted cues separate gold almost perfectly
    assert g[("cues", "surrogate", True)] > g[(S.PAPER_MODEL, "hill_climb", False)] + 0.3
    assert set(s["evaluation"]) == {"grouped", "leave_one_group_out"}
    w = res.weight_table.set_index("cue")
    assert w.loc["numbers", "sign"] == "+" and w.loc["hedge", "sign"] == "-"
    assert np.isclose(w["weight"].abs().sum(), 1.0)
    ab = res.ablation.set_index("dropped")
    # numbers live in the density group: dropping it costs retention; position is noise here
    assert ab.loc["density", "ci_high"] < 0 and ab.loc["density", "change"] < -0.05
    assert abs(ab.loc["position", "change"]) < 0.02
    assert set(res.curve["model"]) == {S.PAPER_MODEL, *S.CUE_MODELS}


def test_transfer_keeps_a_shared_signal():
    src, tgt = planted(seed=1), planted(seed=2)
    splits, _ = S.split_plan(tgt.cases.groups, 2, 0)
    pc = S.transfer(src, tgt, splits, learners=("surrogate",), models=("cues",))
    assert pc["retention"].mean() > 0.9


def test_logo_splits_cover_every_group_once():
    groups = np.array(["a", "b", "a", "c", "b"])
    sp = S.logo_splits(groups)
    assert len(sp) == 3
    assert sorted(np.concatenate([te for _, te in sp]).tolist()) == list(range(5))
    assert all(not set(tr) & set(te) for tr, te in sp)


@pytest.mark.slow
def test_cli_prints_cue_rows(tmp_path):
    recs = longmemeval_records()
    for i in range(4):
        recs.append(dict(recs[i % 2], question_id=f"extra{i}"))
    path = write_longmemeval(tmp_path / "lme.json", recs)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "memlib",
            "study",
            "cues",
            "--dataset",
            str(path),
            "--quick",
            "--n-splits",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    need = {"model", "learner", "calibrated", "regime", "keep_fraction", "mean", "std"}
    assert rows and all(need <= set(r) for r in rows)
    assert {r["learner"] for r in rows} >= set(S.LEARNERS)
    assert {r["calibrated"] for r in rows} == {True, False}
    assert all(0 <= r["mean"] <= 1 for r in rows)


# --------------------------------------------------------------------------- the relative role cue and its model


def person_person(names=("Ana", "Ben"), roles=("user", "user"), extra_session=False):
    """One conversation of two speakers: the first talks about herself, the second about the world."""
    ana = ["I moved to Lisbon last May and my new job starts soon.", "I love my morning runs by the river."]
    ben = ["The river floods every spring, they say.", "Did the trains run late today?"]
    sessions = []
    for s in range(2):
        turns = [{"role": roles[0], "speaker": names[0], "text": ana[s]}]
        turns.append({"role": roles[1], "speaker": names[1], "text": ben[s]})
        sessions.append({"session_id": f"s{s}", "date": f"2024-01-0{s + 1}T10:00:00", "turns": turns})
    if extra_session:  # later, the second speaker talks only about himself
        text = "I I I my me mine: I sold my bike and I bought my boat."
        turns = [{"role": roles[1], "speaker": names[1], "text": text}]
        sessions.append({"session_id": "s9", "date": "2024-01-09T10:00:00", "turns": turns})
    question = {"question_id": "q1", "question": "Where did Ana move?", "evidence": [["s0", 0]]}
    return [{"conversation_id": "c1", "sessions": sessions, "questions": [question]}]


def relative_cues(tmp_path, records):
    from fixtures import write_jsonl

    ds = D.load(str(write_jsonl(tmp_path / f"pp{len(list(tmp_path.iterdir()))}.jsonl", records)))
    ann = Fm.annotate(ds, "blind", use_cache=False, progress=False)
    t = C.compute_cues(ds, ann)
    n = int(t.length[0])
    speakers = ds.turns["speaker"].to_numpy()[ann.turn_rows[0, :n]]
    return t.values[0, :n, t.names.index("self_talk")], t.values[0, :n, t.names.index("is_user")], speakers


def test_self_talk_names_the_speaker_who_talks_about_themselves(tmp_path, monkeypatch, fake_model):
    """Person-person chat: both speakers are ``user``; the one who talks about herself gets 1."""
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    talk, user, speakers = relative_cues(tmp_path, person_person())
    assert np.all(user == 1)  # is_user says nothing here
    assert np.all(talk[speakers == "Ana"] == 1.0) and np.all(talk[speakers == "Ben"] < 0.5)
    # the cue reads the speakers' turns, not their names or roles
    for names, roles in ((("Zoe", "Abe"), ("user", "user")), (("Ana", "Ben"), ("assistant", "user"))):
        again, _, _ = relative_cues(tmp_path, person_person(names, roles))
        np.testing.assert_array_equal(again, talk)
    # causal: a later session (where the second speaker talks only about himself) changes no earlier turn
    later, _, later_speakers = relative_cues(tmp_path, person_person(extra_session=True))
    np.testing.assert_array_equal(later[: len(talk)], talk)
    assert later[-1] == 1.0 and later_speakers[-1] == "Ben"


def test_self_talk_is_relative_causal_and_sees_the_whole_session():
    fp, words = [1, 0, 0, 3], [4, 4, 4, 4]
    talk = C.self_talk(["u", "a", "u", "a"], fp, words, [0, 0, 1, 1])
    # session 0: only u speaks of itself; by the end of session 1, a's 3 of 8 words beat u's 1 of 8
    np.testing.assert_allclose(talk, [1.0, 0.0, 1 / 3, 1.0])
    # the labels do not matter, only who says what
    np.testing.assert_array_equal(C.self_talk(["x", "y", "x", "y"], fp, words, ["b", "b", "a", "a"]), talk)
    # the past of a turn ends with its session: a later session changes nothing before it
    np.testing.assert_array_equal(C.self_talk(["u", "a"], fp[:2], words[:2], [0, 0]), talk[:2])
    # a turn sees its whole session (the agent consolidates a session when it ends)
    assert C.self_talk(["u", "a"], [0, 2], [4, 4], [0, 0]).tolist() == [0.0, 1.0]
    # nobody has spoken of themselves: nobody stands out; one speaker alone is always 1
    assert C.self_talk(["u", "a"], [0, 0], [4, 4], [0, 0]).tolist() == [1.0, 1.0]
    assert C.self_talk(["u", "u"], [0, 1], [4, 0], [0, 1]).tolist() == [1.0, 1.0]
    assert C.self_talk([], [], [], []).shape == (0,)


def test_calibration_maps_a_constant_cue_to_a_constant_that_carries_nothing():
    V = np.zeros((2, 6, 2), np.float32)
    V[0, :, 0] = 1.0  # is_user in person-person chat: 1 on every turn
    V[1, :4, 0] = 3.0  # constant too, at another level, in a shorter history
    V[:, :, 1] = np.arange(6)
    length = np.array([6, 4])
    cal = C.CueTable(V, ("is_user", "length"), length).calibrated()
    assert np.all(cal.values[0, :, 0] == 0.5) and np.all(cal.values[1, :4, 0] == 0.5)
    assert np.all(cal.values[1, 4:] == 0)  # padding stays 0
    # whatever its level, a constant cue gets no weight: it cannot order any history's turns
    target = np.zeros((2, 6))
    target[:, 3] = 1.0
    w = fit_pairwise_logistic(cal.values, length, target)
    assert w[0] == 0.0 and w[1] != 0.0


def relative_planted(user_constant, n_groups=4, n=30, seed=0):
    """Histories of two speakers; ``user_constant``: both are ``user`` (person-person), else user and assistant."""
    data = planted(n_groups=n_groups, per_group=1, n=n, seed=seed)
    V = data.raw.values
    col = {c: i for i, c in enumerate(C.CUE_NAMES)}
    speaker = np.tile([0, 1], n // 2)
    V[:, :, col["is_user"]] = 1.0 if user_constant else (speaker == 0)
    V[:, :, col["self_talk"]] = np.where(speaker == 0, 1.0, 0.3 + 0.01 * np.arange(n))
    return S.CueData("relative", data.cases, C.CueTable(V, C.CUE_NAMES, data.raw.length))


def test_the_relative_model_has_no_product_with_a_constant():
    from memlib.studies.cue_data import role_products

    data = relative_planted(user_constant=True)
    for calibrated in (False, True):
        t = data.table(calibrated, "cues_relative")
        base = data.table(calibrated, "cues_no_position")
        assert t.names[: len(base.names)] == base.names
        products = [i for i, n in enumerate(t.names) if "*" in n]
        assert [t.names[i] for i in products] == [f"self_talk*{n}" for n in base.names if n != "self_talk"]
        for i in products:
            x = t.values[..., i]
            cue = base.values[..., base.names.index(t.names[i].split("*")[1])]
            for g, n in enumerate(t.length):
                col, c = x[g, :n], cue[g, :n]
                if np.ptp(col) == 0:  # a constant product column is a zero one: a dropped product
                    assert np.all(col == 0), t.names[i]
                else:  # a varying one is no copy of its cue within the history
                    assert abs(np.corrcoef(col, c)[0, 1]) < 0.999, t.names[i]
        # the product with the constant is_user is dropped, and the fit gives it no weight
        assert np.all(t.values[..., t.names.index("self_talk*is_user")] == 0)
        score, w = S.fit_cue_model("surrogate", data, lambda d, c=calibrated: d.table(c, "cues_relative"), 0.3)
        assert w[t.names.index("self_talk*is_user")] == 0.0 and w[t.names.index("is_user")] == 0.0
    # cues_user, by contrast, adds copies of the cues when is_user is constant
    u = data.table(True, "cues_user")
    np.testing.assert_array_equal(u.values[..., u.names.index("user*length")], u.values[..., u.names.index("length")])
    # in user-assistant chat the same product varies
    ua = relative_planted(user_constant=False).table(True, "cues_relative")
    assert np.ptp(ua.values[..., ua.names.index("self_talk*is_user")]) > 0
    with pytest.raises(ParameterError, match="self_talk"):
        role_products(C.CueTable(np.zeros((1, 2, 1), np.float32), ("length",), np.array([2])))
