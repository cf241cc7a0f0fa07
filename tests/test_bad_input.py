"""Bad input, tried as a hostile user would (issue 11, part 4): each test names one row of the reliability table.

A user error is one line naming the file, the record and the field (``DatasetError`` or ``ParameterError``; the
command line prints ``memlib: error: ...`` and exits 2); a damaged or unusable cache is a warning, never lost work.
"""

import copy
import json
import os
import warnings

import numpy as np
import pytest

from fixtures import FakeModel, jsonl_records, longmemeval_records, one_error_line, write_jsonl, write_longmemeval
from fixtures import run_memlib as run
from memlib import ParameterError
from memlib import datasets as D
from memlib import embeddings as Emb
from memlib import factors as Fm


def locomo_records():
    """Two tiny LoCoMo conversations (two sessions each), in the schema of ``locomo10.json``."""

    def conv(sid, d1="1:56 pm on 8 May, 2023", d2="10:00 am on 9 May, 2023"):
        return {
            "sample_id": sid,
            "conversation": {
                "speaker_a": "Ana",
                "speaker_b": "Ben",
                "session_1_date_time": d1,
                "session_1": [
                    {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a cat called Miso."},
                    {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely name!"},
                ],
                "session_2_date_time": d2,
                "session_2": [
                    {"speaker": "Ana", "dia_id": "D2:1", "text": "Miso broke a vase today."},
                    {"speaker": "Ben", "dia_id": "D2:2", "text": "Oh no."},
                ],
            },
            "qa": [{"question": "What is Ana's cat called?", "answer": "Miso", "evidence": ["D1:1"], "category": 1}],
        }

    return [conv("conv-a"), conv("conv-b")]


def write_locomo(tmp_path, records):
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(records))
    return path


def load_error(loader, path) -> str:
    with pytest.raises(D.DatasetError) as err:
        loader(path)
    msg = str(err.value)
    assert str(path) in msg and "\n" not in msg
    return msg


# --------------------------------------------------------------------------- silent misreads


@pytest.mark.parametrize("value", ["false", "true", 1, 0, None])
def test_has_answer_must_be_a_json_boolean(tmp_path, value):
    recs = longmemeval_records()
    recs[0]["haystack_sessions"][1][0]["has_answer"] = value
    msg = load_error(D.load_longmemeval, write_longmemeval(tmp_path / "lme.json", recs))
    assert (
        f"record 0 (q1) haystack_sessions[1] turn 0: has_answer must be true or false, got {json.dumps(value)}" in msg
    )


def test_has_answer_true_and_false_still_read(tmp_path):
    recs = longmemeval_records()
    recs[0]["haystack_sessions"][1][1]["has_answer"] = False
    ds = D.load_longmemeval(write_longmemeval(tmp_path / "lme.json", recs))
    assert [len(g) for g in ds.cases["gold"]] == [1, 2, 0]


@pytest.mark.parametrize("value", [None, "", "NaT", "now", 1700000000])
def test_missing_empty_or_numeric_dates_are_errors(tmp_path, value):
    recs = longmemeval_records()
    recs[0]["haystack_dates"][2] = value
    msg = load_error(D.load_longmemeval, write_longmemeval(tmp_path / "lme.json", recs))
    assert f"record 0 (q1) haystack_dates[2]: cannot read date {value!r}" in msg
    recs = longmemeval_records()
    recs[1]["question_date"] = value
    msg = load_error(D.load_longmemeval, write_longmemeval(tmp_path / "lme.json", recs))
    assert f"record 1 (q2) question_date: cannot read date {value!r}" in msg

    recs = jsonl_records()
    recs[0]["sessions"][1]["date"] = value
    msg = load_error(D.load_jsonl, write_jsonl(tmp_path / "c.jsonl", recs))
    assert f"line 1 session 1 (s1): cannot read date {value!r}" in msg

    recs = locomo_records()
    recs[1]["conversation"]["session_2_date_time"] = value
    msg = load_error(D.load_locomo, write_locomo(tmp_path, recs))
    assert f"record 1 (conv-b) session_2: cannot read session date {value!r}" in msg


def test_numeric_jsonl_date_is_not_read_as_nanoseconds(tmp_path):
    recs = jsonl_records()
    recs[0]["sessions"][0]["date"] = 1704448800
    msg = load_error(D.load_jsonl, write_jsonl(tmp_path / "c.jsonl", recs))
    assert "a number is not a date (seconds? nanoseconds?): write an ISO 8601 string" in msg


@pytest.mark.parametrize("index", [True, False, 0.0, "0"])
def test_evidence_index_must_be_an_integer_not_a_bool(tmp_path, index):
    recs = jsonl_records()
    recs[0]["questions"][0]["evidence"] = [["s1", index]]
    msg = load_error(D.load_jsonl, write_jsonl(tmp_path / "c.jsonl", recs))
    assert f"line 1 question 0: evidence ['s1', {index!r}] does not resolve to a turn" in msg


def test_duplicate_conversation_and_question_ids_are_errors(tmp_path):
    recs = jsonl_records()
    msg = load_error(D.load_jsonl, write_jsonl(tmp_path / "c.jsonl", recs + copy.deepcopy(recs)))
    assert "line 2: conversation_id 'c1' repeats line 1" in msg

    recs = jsonl_records()
    recs[0]["questions"][1]["question_id"] = "q1"
    msg = load_error(D.load_jsonl, write_jsonl(tmp_path / "c.jsonl", recs))
    assert "line 1 question 1: question_id 'q1' repeats question 0" in msg

    recs = longmemeval_records()
    recs[2]["question_id"] = "q1"
    msg = load_error(D.load_longmemeval, write_longmemeval(tmp_path / "lme.json", recs))
    assert "record 2 (q1): question_id 'q1' repeats record 0" in msg

    recs = locomo_records()
    recs[1]["sample_id"] = "conv-a"
    msg = load_error(D.load_locomo, write_locomo(tmp_path, recs))
    assert "record 1 (conv-a): sample_id 'conv-a' repeats record 0" in msg


def test_duplicate_session_ids_are_errors(tmp_path):
    recs = jsonl_records()
    recs[0]["sessions"][1]["session_id"] = "s2"
    msg = load_error(D.load_jsonl, write_jsonl(tmp_path / "c.jsonl", recs))
    assert "line 1 session 1: session_id 's2' repeats session 0" in msg

    # one LongMemEval record holding the very same session twice (same id, date and turns)
    recs = longmemeval_records()
    r = recs[1]
    r["haystack_session_ids"].append("travel_b")
    r["haystack_dates"].append(r["haystack_dates"][1])
    r["haystack_sessions"].append(copy.deepcopy(r["haystack_sessions"][1]))
    msg = load_error(D.load_longmemeval, write_longmemeval(tmp_path / "lme.json", recs))
    assert "record 1 (q2) haystack_session_ids[3]: session 'travel_b' repeats haystack_session_ids[1]" in msg

    recs = locomo_records()
    recs[0]["conversation"]["session_2"][1]["dia_id"] = "D2:1"
    msg = load_error(D.load_locomo, write_locomo(tmp_path, recs))
    assert "record 0 (conv-a) session_2 turn 1: dia_id 'D2:1' repeats session_2 turn 0" in msg


def test_a_longmemeval_session_id_reused_at_another_date_is_kept(tmp_path):
    """The cleaned LongMemEval-S repeats a session id at two dates in 13 records: both are kept, in time order."""
    recs = longmemeval_records()
    r = recs[1]
    r["haystack_session_ids"].append("filler_a")
    r["haystack_dates"].append("2023/05/26 (Fri) 08:00")
    r["haystack_sessions"].append(copy.deepcopy(r["haystack_sessions"][0]))
    ds = D.load_longmemeval(write_longmemeval(tmp_path / "lme.json", recs))
    labels = ds.sessions.set_index("session").loc[list(ds.cases["haystack"].iloc[1]), "label"].tolist()
    assert labels == ["filler_a", "travel_b", "answer_q2", "filler_a"]


# --------------------------------------------------------------------------- tracebacks instead of errors


def test_a_latin1_file_is_named_with_its_line(tmp_path):
    text = json.dumps(longmemeval_records(), indent=1, ensure_ascii=False).replace("Lisbon", "Lisb\u00f6n")
    path = tmp_path / "lme.json"
    path.write_bytes(text.encode("latin-1"))
    line = text[: text.index("Lisb\u00f6n")].count("\n") + 1
    msg = load_error(D.load_longmemeval, path)
    assert f"line {line}: not UTF-8 text (byte 0xf6); save the file as UTF-8" in msg

    path = tmp_path / "c.jsonl"
    lines = [json.dumps(r, ensure_ascii=False) for r in jsonl_records()]
    path.write_bytes(("\n".join(lines) + "\n").replace("Ana", "An\u00e4").encode("latin-1"))
    msg = load_error(D.load_jsonl, path)
    assert "line 1: not UTF-8 text (byte 0xe4); save the file as UTF-8" in msg


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "lme.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(longmemeval_records()).encode())
    assert len(D.load_longmemeval(path).cases) == 3


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda r: r[0].update(sessions=None), "line 1: sessions must be a list, got null"),
        (lambda r: r[0].update(questions=None), "line 1: questions must be a list, got null"),
        (lambda r: r[0]["sessions"][0].update(turns=None), "line 1 session 0 (s2): turns must be a list, got null"),
        (lambda r: r[0]["questions"][1].update(evidence=None), "line 1 question 1: evidence must be a list, got null"),
        (lambda r: r[0]["questions"][1].update(question=None), "line 1 question 1: question must be a string"),
    ],
)
def test_null_lists_in_jsonl_are_errors(tmp_path, mutate, where):
    recs = jsonl_records()
    mutate(recs)
    assert where in load_error(D.load_jsonl, write_jsonl(tmp_path / "c.jsonl", recs))


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda r: r[0].update(haystack_sessions=None), "record 0 (q1): haystack_session_ids, haystack_dates and"),
        (lambda r: r[0]["haystack_sessions"].__setitem__(1, None), "record 0 (q1) haystack_sessions[1]: a session"),
        (lambda r: r[2].update(question=None), "record 2 (q3_abs): question must be a string, got null"),
    ],
)
def test_null_lists_in_longmemeval_are_errors(tmp_path, mutate, where):
    recs = longmemeval_records()
    mutate(recs)
    assert where in load_error(D.load_longmemeval, write_longmemeval(tmp_path / "lme.json", recs))


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda r: r[0].update(conversation=None), "record 0 (conv-a): conversation must be an object, got null"),
        (lambda r: r[0].update(qa=None), "record 0 (conv-a): qa must be a list, got null"),
        (lambda r: r[0]["conversation"].update(session_2=None), "record 0 (conv-a): session_2 must be a list"),
        (lambda r: r[0]["qa"][0].update(evidence=None), "record 0 (conv-a) qa 0: evidence must be a list, got null"),
        (lambda r: r[1]["qa"][0].update(question=None), "record 1 (conv-b) qa 0: question must be a string, got null"),
    ],
)
def test_null_lists_in_locomo_are_errors(tmp_path, mutate, where):
    recs = locomo_records()
    mutate(recs)
    assert where in load_error(D.load_locomo, write_locomo(tmp_path, recs))


def test_mixed_time_zones_are_an_error_and_offsets_are_read_as_utc(tmp_path):
    recs = jsonl_records()
    recs[0]["sessions"][1]["date"] = "2024-01-05T10:00:00+02:00"
    msg = load_error(D.load_jsonl, write_jsonl(tmp_path / "c.jsonl", recs))
    assert (
        "line 1 session 1 (s1): date '2024-01-05T10:00:00+02:00' has a time zone but line 1 session 0 (s2) has none"
        in msg
    )
    recs[0]["sessions"][0]["date"] = "2024-01-05T09:30:00+01:00"  # 08:30 UTC: after s1's 08:00 UTC
    ds = D.load_jsonl(write_jsonl(tmp_path / "c.jsonl", recs))
    assert ds.turns["timestamp"].dt.tz is None
    assert ds.sessions.set_index("label").loc["c1/s1", "date"] == np.datetime64("2024-01-05T08:00")
    assert ds.turns.loc[ds.haystack_rows(0), "text"].iloc[0] == "I am allergic to nuts."


def test_an_empty_dataset_says_so(tmp_path):
    msg = load_error(D.load_longmemeval, write_longmemeval(tmp_path / "lme.json", []))
    assert "holds no records" in msg
    (tmp_path / "c.jsonl").write_text("\n\n")
    assert "holds no records" in load_error(D.load_jsonl, tmp_path / "c.jsonl")
    assert "holds no records" in load_error(D.load_locomo, write_locomo(tmp_path, []))


def test_a_dataset_without_turns_annotates_to_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    recs = [{"conversation_id": "c", "sessions": [], "questions": [{"question_id": "q", "question": "Why?"}]}]
    ds = D.load_jsonl(write_jsonl(tmp_path / "c.jsonl", recs))
    assert ds.stats()["usable_cases"] == 0
    ann = Fm.annotate(ds, "blind", progress=False)
    assert ann.cases.n_cases == 0


@pytest.mark.slow
def test_no_usable_cases_is_one_line_for_a_study(tmp_path):
    recs = longmemeval_records()
    path = write_longmemeval(tmp_path / "lme.json", [recs[2], dict(recs[2], question_id="q4_abs")])
    out = run("study", "oracle-blind", "--dataset", str(path), "--quick", MEMLIB_CACHE_DIR=str(tmp_path / "cache"))
    one_error_line(out, "lme: no usable question (none has a gold turn in its history)")
    out = run("study", "stream", "--dataset", str(path), "--quick", MEMLIB_CACHE_DIR=str(tmp_path / "cache"))
    one_error_line(out, "lme: no usable question (none has a gold turn in its history)")


@pytest.mark.slow
@pytest.mark.parametrize("study", ["mlp", "sweep", "optimisers"])
def test_negative_seed_is_one_line(study):
    one_error_line(run("study", study, "--seed", "-1"), "seed must be an integer >= 0, got -1")


def test_group_splits_checks_its_seed_and_bounds_its_splits():
    from memlib.studies._common import MAX_SPLITS, group_splits

    groups = np.repeat(["a", "b", "c"], 2)
    with pytest.raises(ParameterError, match="seed must be an integer >= 0, got -1"):
        group_splits(groups, 2, seed=-1)
    with pytest.raises(ParameterError, match=f"n_splits must be at most {MAX_SPLITS}, got 10000000"):
        group_splits(groups, 10**7)
    assert len(group_splits(groups, MAX_SPLITS)) == MAX_SPLITS


def test_n_splits_has_an_upper_bound_on_the_command_line():
    out = run("study", "oracle-blind", "--n-splits", str(10**20), timeout=60)
    one_error_line(out, f"n_splits must be at most 10000, got {10**20}")


@pytest.mark.slow
def test_sweep_on_a_file_that_is_not_a_notebook(tmp_path):
    data = write_longmemeval(tmp_path / "lme.json")
    one_error_line(run("sweep", str(data)), f"{data}: not a notebook: sweep runs a notebooks/NN_topic.md")
    text = tmp_path / "notes.md"
    text.write_text("# Notes\n\n```python\nprint(1)\n```\n")
    one_error_line(run("sweep", str(text)), f"{text}: not a memlib notebook: no cell is tagged 'parameters'")
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    one_error_line(run("sweep", str(broken)), f"{broken}: cannot be read as a notebook")


# --------------------------------------------------------------------------- LoCoMo dates


def test_locomo_dates_that_run_backwards_are_an_error(tmp_path):
    recs = locomo_records()
    recs[1]["conversation"]["session_2_date_time"] = "9:00 am on 1 May, 2023"
    msg = load_error(D.load_locomo, write_locomo(tmp_path, recs))
    assert (
        "record 1 (conv-b) session_2: date 2023-05-01 09:00:00 is not after session_1 (2023-05-08 13:56:00, "
        "its last turn 2023-05-08 13:56:01); LoCoMo sessions run forward in time" in msg
    )


def test_locomo_own_file_still_loads():
    try:
        path = D.resolve("locomo10.json", download=False)
    except D.DatasetError as exc:
        pytest.skip(f"LoCoMo not available: {exc}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = D.load_locomo(path)
    assert len(ds.cases) == 1986


# --------------------------------------------------------------------------- minor


@pytest.mark.slow
@pytest.mark.parametrize("option", [["--n-splits", "3"], ["--limit", "2"], ["--dataset", "locomo"]])
def test_synthetic_rejects_options_it_does_not_take(option):
    one_error_line(run("study", "synthetic", *option), f"{option[0]} does not apply to the synthetic study")


def test_stream_names_keep_fraction_not_budget(tmp_path):
    out = run("study", "stream", "--keep-fraction", "1.5", "--dataset", str(write_longmemeval(tmp_path / "l.json")))
    one_error_line(out, "keep_fraction must be in (0, 1), got 1.5")
    from memlib.studies.stream import budget_count

    with pytest.raises(ParameterError, match="keep_fraction must be in"):
        budget_count(0.0, 10)
    with pytest.raises(ParameterError, match="budget must be an integer >= 1, got 0"):
        budget_count(0, 10)


# --------------------------------------------------------------------------- caches


@pytest.mark.parametrize("damage", ["truncate", "random", "empty"])
def test_corrupt_embedding_shard_is_named_moved_aside_and_recomputed(tmp_path, monkeypatch, fake_model, damage):
    monkeypatch.setattr(Emb, "SHARD_SIZE", 3)
    texts = [f"text {i}" for i in range(6)]
    Emb.embed_cached(texts, cache=Emb.EmbeddingCache(tmp_path), progress=False)
    shard = sorted((tmp_path / "all-MiniLM-L6-v2-256").glob("shard-*.npz"))[0]
    raw = shard.read_bytes()
    bad = {"truncate": raw[: len(raw) // 2], "random": np.random.default_rng(0).bytes(500), "empty": b""}[damage]
    shard.write_bytes(bad)
    with pytest.warns(Emb.CacheWarning, match=f"{shard}: unreadable cache file .* moved to {shard.name}.corrupt"):
        cache = Emb.EmbeddingCache(tmp_path)
    assert len(cache) == 3 and not shard.exists() and shard.with_name(shard.name + ".corrupt").read_bytes() == bad
    fake_model.seen.clear()
    out = Emb.embed_cached(texts, cache=cache, progress=False)
    assert len(fake_model.seen) == 3  # only the lost shard's texts
    np.testing.assert_allclose(out, FakeModel().encode(texts))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(Emb.EmbeddingCache(tmp_path)) == 6


def test_corrupt_factor_table_is_named_moved_aside_and_recomputed(tmp_path, monkeypatch, fake_model):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json")))
    first = Fm.annotate(ds, "blind", progress=False)
    (path,) = (tmp_path / "cache" / "factors").glob("*.npz")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(D.DatasetError, match=f"{path}: not a readable factor table"):
        Fm.load_annotation(path)
    with pytest.warns(Emb.CacheWarning, match=f"{path}: unreadable cache file .* moved to {path.name}.corrupt"):
        again = Fm.annotate(ds, "blind", progress=False)
    assert not again.info["cached"] and path.with_name(path.name + ".corrupt").exists()
    np.testing.assert_array_equal(first.cases.factors, again.cases.factors)
    assert Fm.annotate(ds, "blind", progress=False).info["cached"]


def _annotate_with_cache_warnings(tmp_path, monkeypatch, fake_model):
    """Annotate; return the cache warnings, checking each came before any text was embedded and the result is kept."""
    state = {"caught": []}
    warned_before_encode = []
    encode = fake_model.encode

    def spy(texts, **kw):
        warned_before_encode.append(any(issubclass(w.category, Emb.CacheWarning) for w in state["caught"]))
        return encode(texts, **kw)

    monkeypatch.setattr(fake_model, "encode", spy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state["caught"] = caught
        ds = D.load(str(write_longmemeval(tmp_path / "lme.json")))  # its parse is not cached either
        ann = Fm.annotate(ds, "oracle", progress=False)
    assert warned_before_encode and all(warned_before_encode), "the cache warning must come before the work"
    assert ann.cases.n_cases == 2 and not ann.info["cached"]
    return [str(w.message) for w in caught if issubclass(w.category, Emb.CacheWarning)]


def test_unusable_cache_folder_warns_first_and_keeps_the_work(tmp_path, monkeypatch, fake_model):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(blocker))
    messages = _annotate_with_cache_warnings(tmp_path, monkeypatch, fake_model)
    for folder in ("datasets", "embeddings", "factors"):
        assert any(f"cache folder {blocker / folder}" in m and "not writable" in m for m in messages), messages
    assert not any("unreadable cache file" in m for m in messages), messages  # a missing folder is no damage
    assert blocker.read_text().startswith("a file")


def test_read_only_cache_folder_warns_first_and_keeps_the_work(tmp_path, monkeypatch, fake_model):
    """Root ignores file modes, so the read-only folder is simulated where files are created (EACCES)."""
    import errno
    import tempfile

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*a, dir=None, **k):
        if dir is not None and str(dir).startswith(str(tmp_path / "cache")):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dir))
        return real_mkstemp(*a, dir=dir, **k)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    messages = _annotate_with_cache_warnings(tmp_path, monkeypatch, fake_model)
    assert any("Permission denied" in m and "results of this run are not cached" in m for m in messages), messages
    assert not list((tmp_path / "cache").rglob("*.npz"))
