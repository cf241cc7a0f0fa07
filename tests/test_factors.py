import warnings

import numpy as np
import pytest

from fixtures import longmemeval_records, write_jsonl, write_longmemeval
from memlib import FACTORS, ParameterError
from memlib import datasets as D
from memlib import factors as Fm
from memlib import text_cues as TC
from memlib._cachefiles import safe_name


@pytest.fixture(scope="module")
def lme(tmp_path_factory):
    return D.load(str(write_longmemeval(tmp_path_factory.mktemp("lme") / "lme.json")))


def replace_questions(ds):
    cases = ds.cases.copy()
    cases["question"] = [f"Completely unrelated question number {i} about volcanoes?" for i in range(len(cases))]
    return ds.with_cases(cases)


@pytest.mark.slow
def test_blind_factors_do_not_change_when_questions_change(lme):
    a = Fm.annotate(lme, "blind", use_cache=False, progress=False)
    b = Fm.annotate(replace_questions(lme), "blind", use_cache=False, progress=False)
    np.testing.assert_array_equal(a.cases.factors, b.cases.factors)  # bit-identical
    # the oracle regime does read the question, so the same change moves it
    o1 = Fm.annotate(lme, "oracle", use_cache=False, progress=False)
    o2 = Fm.annotate(replace_questions(lme), "oracle", use_cache=False, progress=False)
    goal = FACTORS.index("goal_relevance")
    assert not np.array_equal(o1.cases.factors[..., goal], o2.cases.factors[..., goal])
    others = [i for i in range(7) if i != goal]
    np.testing.assert_array_equal(o1.cases.factors[..., others], o2.cases.factors[..., others])


@pytest.mark.slow
def test_blind_factors_on_locomo_ignore_questions():
    try:
        ds = D.load("locomo").limit(1)
    except D.DatasetError as exc:
        pytest.skip(f"LoCoMo not available: {exc}")
    a = Fm.annotate(ds, "blind", progress=False)
    b = Fm.annotate(replace_questions(ds), "blind", progress=False)
    np.testing.assert_array_equal(a.cases.factors, b.cases.factors)
    assert a.cases.n_haystacks == 1  # every question of the conversation shares one history


@pytest.mark.slow
def test_factor_values_in_unit_interval_and_inert_columns(lme):
    for regime in ("blind", "oracle"):
        ann = Fm.annotate(lme, regime, use_cache=False, progress=False)
        F = ann.cases.factors[ann.cases.valid]
        assert F.min() >= 0 and F.max() <= 1
        assert ann.inert == ["value_alignment", "task_utility", "usage_history"]
        assert ann.cases.n_cases == 2  # the abstention question has no gold


@pytest.mark.slow
def test_optional_factors_become_live(lme):
    r = np.arange(len(lme.turns))
    ann = Fm.annotate(
        lme,
        "blind",
        value_profile="I care about my pets' health.",
        task_utility=lambda texts: np.full(len(texts), 0.25),
        retrievals=r,
        use_cache=False,
        progress=False,
    )
    assert ann.inert == []
    F = ann.turn_table(lme, 0)
    rows = ann.turn_rows[0, : ann.cases.length[0]]
    np.testing.assert_allclose(F["usage_history"], r[rows] / (1 + r[rows]), rtol=1e-6)
    np.testing.assert_allclose(F["task_utility"], 0.25)
    with pytest.raises(ParameterError, match="task_utility must return one value in"):
        Fm.annotate(lme, "blind", task_utility=lambda t: np.full(len(t), 2.0), use_cache=False, progress=False)


@pytest.mark.slow
def test_self_relevance_is_causal(lme, tmp_path):
    ann = Fm.annotate(lme, "blind", use_cache=False, progress=False)
    t = ann.turn_table(lme, 0)
    assert t.loc[0, "self_relevance"] == 0.5  # the first user turn has no earlier user turn
    # appending a later session does not change earlier turns' self relevance
    recs = longmemeval_records()[:1]
    for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions"):
        recs[0][key] = [recs[0][key][0], recs[0][key][2]]  # filler and travel: the first two in time
    recs[0]["haystack_sessions"][0] = [dict(t, has_answer=True) for t in recs[0]["haystack_sessions"][0]]
    short = D.load_longmemeval(write_longmemeval(tmp_path / "short.json", recs))
    s = Fm.annotate(short, "blind", use_cache=False, progress=False).turn_table(short, 0)
    n = len(s)
    # the shorter history is a prefix of the longer one: its turns' self relevance is unchanged
    np.testing.assert_allclose(s["self_relevance"].to_numpy(), t["self_relevance"].to_numpy()[:n])


@pytest.mark.slow
def test_second_run_is_served_from_cache(lme, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    a = Fm.annotate(lme, "oracle", progress=False)
    b = Fm.annotate(lme, "oracle", progress=False)
    assert not a.info["cached"] and b.info["cached"]
    np.testing.assert_array_equal(a.cases.factors, b.cases.factors)
    np.testing.assert_array_equal(a.cases.gold_pos, b.cases.gold_pos)
    # a change in the data gives a new key
    c = Fm.annotate(replace_questions(lme), "oracle", progress=False)
    assert not c.info["cached"]
    assert len(list((tmp_path / "cache" / "factors").glob("*.npz"))) == 2
    assert not list((tmp_path / "cache").rglob("*.tmp"))


@pytest.mark.slow
def test_gold_positions_point_at_gold_text(lme):
    ann = Fm.annotate(lme, "blind", use_cache=False, progress=False)
    cs = ann.cases
    texts = [lme.turns.loc[ann.turn_rows[cs.case_haystack[c], p], "text"] for c, p in zip(cs.gold_case, cs.gold_pos)]
    assert texts[0].startswith("My dog Biscuit")
    assert len(texts) == 3


@pytest.mark.slow
def test_jsonl_annotates(tmp_path):
    ds = D.load(str(write_jsonl(tmp_path / "c.jsonl")))
    ann = Fm.annotate(ds, "blind", use_cache=False, progress=False)
    assert ann.cases.n_haystacks == 1 and ann.cases.n_cases == 2


def test_emotion_and_reliability_heuristics():
    e = Fm.emotional_intensity(["ok.", "This is terrible!!!", "This is terrible."])
    assert e[0] == 0 and e[1] > e[2] > 0
    r = Fm.reliability(
        ["user", "assistant", "user", "user"],
        ["I live in Oslo.", "I live in Oslo.", "Maybe it was Oslo.", "Do you live in Oslo?"],
    )
    assert r[0] > r[1] and r[0] > r[2] and r[0] > r[3]
    assert all(0 <= x <= 1 for x in r)


@pytest.mark.slow
@pytest.mark.parametrize("factor_set", Fm.ALL_FACTOR_SETS)
def test_blind_factors_ignore_questions_in_every_factor_set_and_reading(lme, factor_set):
    for arousal, self_reading in (("structural", "earlier"), ("lexical", "inclusive"), ("constant", "history")):
        kw = dict(factor_set=factor_set, arousal=arousal, self_reading=self_reading, use_cache=False, progress=False)
        a = Fm.annotate(lme, "blind", **kw)
        b = Fm.annotate(replace_questions(lme), "blind", **kw)
        np.testing.assert_array_equal(a.cases.factors, b.cases.factors)


@pytest.mark.slow
def test_paper_reliability_is_provenance_only(lme):
    roles = ["user", "user", "assistant", "assistant"]
    texts = ["Maybe I like it?", "I work as a nurse.", "You might like it.", "Paris is in France."]
    assert Fm.reliability(roles, texts, cues=False).tolist() == [0.8, 0.8, 0.4, 0.4]
    assert Fm.reliability(roles, texts).tolist() == [pytest.approx(0.2), 1.0, pytest.approx(0.2), 0.4]
    paper = Fm.annotate(lme, "blind", factor_set="paper", use_cache=False, progress=False)
    rel = paper.turn_table(lme, 0)
    np.testing.assert_allclose(rel.loc[rel["role"] == "user", "reliability"], 0.8, rtol=1e-6)
    np.testing.assert_allclose(rel.loc[rel["role"] == "assistant", "reliability"], 0.4, rtol=1e-6)


def test_self_relevance_readings():
    rng = np.random.default_rng(0)
    E = rng.normal(size=(5, 384))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    roles = np.array(["user", "assistant", "user", "user", "assistant"])
    earlier = Fm.self_relevance(E, roles, roles)
    inclusive = Fm.self_relevance(E, roles, roles, "inclusive")
    history = Fm.self_relevance(E, roles, roles, "history")
    users = E[0] + E[2] + E[3]
    np.testing.assert_allclose(history, (1 + E @ users / np.linalg.norm(users)) / 2)
    assert earlier[0] == 0.5  # nothing earlier
    assert inclusive[0] == pytest.approx(1.0)  # the turn is its own centroid
    np.testing.assert_allclose(earlier[[1, 4]], inclusive[[1, 4]])  # assistant turns: earlier user turns only
    centroid = E[0] + E[2]
    assert inclusive[3] == pytest.approx((1 + E[3] @ (centroid + E[3]) / np.linalg.norm(centroid + E[3])) / 2)
    assert earlier[3] == pytest.approx((1 + E[3] @ centroid / np.linalg.norm(centroid)) / 2)


def test_arousal_readings():
    texts = ["The meeting is at noon.", "I LOVE this, it is SO amazing!!!", "good"]
    structural, compound = Fm.emotion_and_valence(texts)
    constant = Fm.emotional_intensity(texts, "constant")
    lexical = Fm.emotional_intensity(texts, "lexical")
    np.testing.assert_allclose(constant, np.abs(compound))
    assert structural[2] == pytest.approx(abs(compound[2]) * 0.5)  # no cues: arousal 0.5
    assert lexical[2] == pytest.approx(abs(compound[2]))  # its only word carries sentiment
    assert (structural[0], constant[0], lexical[0]) == (0.0, 0.0, 0.0)
    with pytest.raises(ParameterError, match="arousal"):
        Fm.emotional_intensity(texts, "loud")


@pytest.mark.slow
def test_vader_is_exact_on_short_texts_and_bounded_on_long_ones():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    sia = SentimentIntensityAnalyzer()
    short = ["Not bad at all :)", "I HATE waiting... but the food was great!", "kind of ok 😀 thanks", ""]
    for t in short:
        assert Fm.vader_scores(t) == sia.polarity_scores(t)
    sentence = "I am really happy with how this turned out, it is wonderful! "
    long = sentence * 4000  # 240 KB: VADER itself would take minutes
    pieces = TC._pieces(long.strip(), Fm.VADER_PIECE_CHARS)
    assert max(map(len, pieces)) <= Fm.VADER_PIECE_CHARS
    assert " ".join(pieces).split() == long.split()  # every word scored once
    assert Fm.vader_scores(long)["compound"] > 0.99
    unbroken = "x" * 5000  # no sentence end and no space: cut at the limit
    assert [len(p) for p in TC._pieces(unbroken, 2000)] == [2000, 2000, 1000]


def test_vader_scores_equal_polarity_scores_at_every_position_of_every_rule():
    # memlib scores each lexicon word on the words around it (text_cues._Near); VADER's rules read up to three
    # words back and two ahead ("no", "never so", "without doubt", "at least", "kind of", idioms, all caps, "but"):
    # texts built from those words, seeded, at every position, must score as VADER scores them whole
    from vaderSentiment.vaderSentiment import SPECIAL_CASES, SentimentIntensityAnalyzer

    sia = SentimentIntensityAnalyzer()
    words = (
        "no not never so this without doubt at least very kind of sort or nor but good GREAT bad hate love the "
        "really extremely isn't cut mustard bomb hand to mouth kiss death okay :) ? !"
    ).split()
    idioms = [w for k in sorted(SPECIAL_CASES) for w in k.split()]
    rng = np.random.default_rng(7)
    texts = [" ".join(rng.choice(words + idioms, size=rng.integers(1, 40))) for _ in range(600)]
    texts += [f"{'we ' * k}{idiom}{tail}" for idiom in SPECIAL_CASES for k in range(5) for tail in ("", " now", " !")]
    for t in texts:
        assert Fm.vader_scores(t) == sia.polarity_scores(t), t


def test_parallel_emotion_equals_serial():
    texts = [f"Day {i}: I am {'thrilled' if i % 3 else 'furious'}!!" for i in range(60)]
    a = Fm.emotion_and_valence(texts, workers=1)
    b = Fm.emotion_and_valence(texts, workers=2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.slow
def test_cache_path_stays_inside_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    ds = D.load_jsonl(write_jsonl(tmp_path / "conv.jsonl"), name="../../escaped")
    Fm.annotate(ds, "blind", progress=False)
    written = [p.resolve() for p in tmp_path.rglob("*.npz")]
    assert written and all(
        p.is_relative_to((tmp_path / "cache" / "factors").resolve())
        or p.is_relative_to((tmp_path / "cache" / "embeddings").resolve())
        for p in written
    )
    for name in ("../../x", "a/b/../c", "..", "/etc/passwd"):
        assert "/" not in safe_name(name) and not safe_name(name).startswith(".")


@pytest.mark.slow
def test_annotation_reports_options_and_peak_memory(lme):
    ann = Fm.annotate(lme, "blind", factor_set="extended", embedding_setting="fast", use_cache=False, progress=False)
    assert ann.info["factor_set"] == "extended" and ann.info["max_seq_length"] == 128
    assert ann.info["peak_rss_gb"] > 0 and ann.info["seconds_beyond_embedding"] >= 0
    with pytest.raises(ParameterError, match="factor_set"):
        Fm.annotate(lme, "blind", factor_set="fancy", use_cache=False, progress=False)


@pytest.mark.slow
def test_a_sample_annotates_like_its_part_of_the_whole(tmp_path):
    # annotate works on the turns the usable cases' haystacks hold (Dataset.used_turns) and maps
    # them back: a one-question dataset gives that question's rows of the whole annotation. Here q2's
    # history starts a day after the file's first turn, so times stay counted from the file's start,
    # and retrievals (per row of the whole turn table) and task utility must follow the remapping.
    recs = longmemeval_records()
    keep = [k for k, sid in enumerate(recs[1]["haystack_session_ids"]) if sid != "filler_a"]
    for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions"):
        recs[1][key] = [recs[1][key][k] for k in keep]
    ds = D.load_longmemeval(write_longmemeval(tmp_path / "lme.json", recs))
    part_ds = ds.with_cases(ds.cases.iloc[[1]])
    sub, rows = part_ds.used_turns()
    assert len(rows) < len(ds.turns) and sub.turns["text"].tolist() == ds.turns["text"].iloc[rows].tolist()
    options = dict(
        factor_set="extended",
        retrievals=np.arange(len(ds.turns)),
        task_utility=lambda texts: np.array([len(t) % 7 / 7 for t in texts]),
        use_cache=False,
        progress=False,
    )
    whole = Fm.annotate(ds, "blind", **options)
    part = Fm.annotate(part_ds, "blind", **options)
    c = list(whole.cases.case_ids).index(part.cases.case_ids[0])
    g, n = whole.cases.case_haystack[c], part.cases.length[0]
    assert n == whole.cases.length[g] and part.cases.time[0, 0] > 0.5  # a day after the file's first turn
    np.testing.assert_array_equal(part.turn_rows[0, :n], whole.turn_rows[g, :n])
    np.testing.assert_array_equal(part.cases.factors[0, :n], whole.cases.factors[g, :n])
    np.testing.assert_array_equal(part.cases.time[0, :n], whole.cases.time[g, :n])
    np.testing.assert_array_equal(part.cases.gold_pos, whole.cases.gold_pos[whole.cases.gold_case == c])
    assert part.info["cases"] == 1 and whole.info["cases"] == 3  # counts of the dataset passed in


def test_used_turns_keeps_empty_sessions_and_refuses_gold_outside_the_haystack():
    import pandas as pd

    turns = pd.DataFrame({"session": ["x", "x", "a", "a", "b", "b"], "text_id": range(6)})
    # "e" is empty: it starts where the next session does
    sessions = pd.DataFrame({"session": ["x", "a", "e", "b"], "first_turn": [0, 2, 4, 4], "n_turns": [2, 2, 0, 2]})
    cases = pd.DataFrame({"case_id": ["q"], "haystack": [("a", "e", "b")], "gold": [(3, 5)], "usable": [True]})
    sub, rows = D.Dataset("d", turns, sessions, cases, list("uvwxyz")).used_turns()
    assert rows.tolist() == [2, 3, 4, 5]
    assert sub.sessions["first_turn"].tolist() == [0, 2, 2] and sub.cases["gold"].tolist() == [(1, 3)]
    bad = cases.assign(gold=[(0,)])
    with pytest.raises(D.DatasetError, match="case 'q' has a gold turn outside its haystack"):
        D.Dataset("d", turns, sessions, bad, list("uvwxyz")).used_turns()


@pytest.mark.slow
def test_a_history_ending_in_an_empty_session_annotates(tmp_path):
    # the empty session is the last one the loader registers: it starts one past the last turn row
    recs = longmemeval_records()
    recs[1]["haystack_session_ids"].append("silent")
    recs[1]["haystack_dates"].append("2023/05/30 (Tue) 10:00")
    recs[1]["haystack_sessions"].append([])
    ds = D.load_longmemeval(write_longmemeval(tmp_path / "lme.json", recs))
    assert ds.sessions["first_turn"].iloc[-1] == len(ds.turns)
    part = Fm.annotate(ds.with_cases(ds.cases.iloc[[1]]), "blind", use_cache=False, progress=False)
    whole = Fm.annotate(ds, "blind", use_cache=False, progress=False)
    g, n = whole.cases.case_haystack[1], part.cases.length[0]
    np.testing.assert_array_equal(part.cases.factors[0, :n], whole.cases.factors[g, :n])


# --------------------------------------------------------------------------- the annotator's modules


def test_every_public_name_of_the_annotators_modules_is_importable_from_factors():
    from memlib import factor_key, factor_sets, factor_table, goal_anchors, self_readings

    word_lists_and_cues = {"FIRST_PERSON_WORDS", "HEDGE_PHRASES", "HEDGE_WORDS", "TEXT_CUES", "text_cues"}
    for module in (factor_key, factor_sets, factor_table, goal_anchors, self_readings, TC):
        for name in set(module.__all__) - word_lists_and_cues:
            assert name in Fm.__all__ and getattr(Fm, name) is getattr(module, name), name
    assert {n for n in Fm.__all__ if not hasattr(Fm, n)} == set()


def test_a_scorer_replaced_on_factors_is_the_one_annotate_reads(monkeypatch):
    seen = []
    vader = Fm.vader_scores
    monkeypatch.setattr(Fm, "vader_scores", lambda t, *a: seen.append(t) or vader(t, *a))
    texts = ["I LOVE it!!", "Fine.", "unused"]
    out = Fm._text_emotion(texts, np.array([0, 1]), "structural")
    assert seen == ["I LOVE it!!", "Fine."] and out[2] == 0.0
    np.testing.assert_array_equal(out[:2], Fm.emotional_intensity(texts[:2]))


def test_the_cache_key_hashes_every_module_the_annotator_runs():
    """An edit to any memlib module the annotator imports (but error messages, cache paths, threads) is a new key."""
    import subprocess
    import sys

    code = "import sys, memlib.factors; print(' '.join(m for m in sys.modules if m.startswith('memlib')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    files = {"datasets" if m.startswith("memlib.datasets") else m[len("memlib.") :] + ".py" for m in loaded}
    files = {"__init__.py" if f == ".py" else f for f in files}  # memlib itself: its FACTORS order the columns
    # not hashed: error messages, cache paths, the file writer, and how many threads compute (_cores: the int8
    # embedder's share of the cores), none of which is what a factor is
    assert files - {"_checks.py", "_cachefiles.py", "_safewrite.py", "_cores.py"} <= set(Fm.SOURCE_FILES)
    parts = {"text_cues.py", "goal_anchors.py", "factor_sets.py", "factor_table.py", "factor_key.py"}
    assert parts | {"self_readings.py", "history_factors.py"} <= set(Fm.SOURCE_FILES)


def test_annotate_names_its_setting_embedding_setting_only(lme, fake_model):
    """``embedding`` is a vector in MemoryStore.add; annotate's setting is ``embedding_setting`` (no other name)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the name warns about nothing
        ann = Fm.annotate(lme, "blind", embedding_setting="fast", use_cache=False, progress=False)
    assert ann.info["max_seq_length"] == 128
    for old in ({"embedding": "fast"}, {"max_seq_length": 128}):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{next(iter(old))}'"):
            Fm.annotate(lme, "blind", use_cache=False, progress=False, **old)


def test_text_valence_reads_the_annotations_vader_pass_and_equals_a_fresh_one(monkeypatch):
    from memlib import factors as F

    texts = ["I love this so much!!", "Terrible news today.", "ok", "We met at noon.", "Worst. Day. Ever."]
    fresh = F.emotion_features(texts)[:, 0]
    monkeypatch.setattr(F, "_EMOTION_MEMO", [])
    F._text_emotion(texts, np.array([0, 1, 3, 4]), "structural")  # what annotate runs on a corpus's used texts

    def no_second_pass(*a, **k):
        raise AssertionError("VADER ran again")

    monkeypatch.setattr(F, "emotion_features", no_second_pass)
    assert F.text_valence(texts, [4, 0, 1]).tolist() == fresh[[4, 0, 1]].tolist()  # bit for bit, from the memo
    with pytest.raises(AssertionError, match="VADER ran again"):
        F.text_valence(texts, [2])  # a text the pass did not score is scored now
    with pytest.raises(AssertionError, match="VADER ran again"):
        F.text_valence(list(texts), [0])  # another list (the memo keys on the list itself)
