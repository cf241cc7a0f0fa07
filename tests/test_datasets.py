import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fixtures import longmemeval_records, write_jsonl, write_longmemeval
from memlib import ParameterError
from memlib import datasets as D


def test_longmemeval_fixture_loads_counts_usable_and_shares_sessions(tmp_path):
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json")))
    st = ds.stats()
    assert st["cases"] == 3 and st["usable_cases"] == 2
    # 3 + 3 + 2 haystack sessions, but filler_a and travel_b are stored once
    assert st["sessions"] == 4
    assert st["turns"] == 2 + 2 + 2 + 3
    assert st["turn_occurrences"] == 6 + 7 + 4
    q1 = ds.cases.iloc[0]
    # haystack in time order: filler (05/20), travel (05/21), answer (05/22)
    assert [ds.sessions.set_index("session").loc[s, "label"] for s in q1["haystack"]] == [
        "filler_a",
        "travel_b",
        "answer_q1",
    ]
    gold_text = ds.turns.loc[list(q1["gold"]), "text"].tolist()
    assert gold_text == ["My dog Biscuit is allergic to chicken, so I buy salmon kibble."]
    assert len(ds.cases.iloc[1]["gold"]) == 2
    assert not ds.cases.iloc[2]["usable"]
    assert st["unique_texts"] == 9
    recs = {r["question_id"]: r for r in longmemeval_records()}
    assert ds.cases["answer"].tolist() == [str(recs[q]["answer"]) for q in ds.cases["case_id"]]


def test_reused_session_id_with_other_content_is_kept_apart(tmp_path):
    recs = longmemeval_records()
    recs[1]["haystack_sessions"][0] = [{"role": "user", "content": "Different words, same id."}]
    ds = D.load_longmemeval(write_longmemeval(tmp_path / "lme.json", recs))
    assert (ds.sessions["label"] == "filler_a").sum() == 2


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: {"not": "a list"}, "expected a JSON list of records at the top level, got dict"),
        (
            lambda r: [{k: v for k, v in r[0].items() if k != "haystack_sessions"}],
            "record 0 (q1): missing required field 'haystack_sessions'",
        ),
        (
            lambda r: [
                dict(
                    r[0],
                    haystack_sessions=[[{"role": "user"}], r[0]["haystack_sessions"][1], r[0]["haystack_sessions"][2]],
                )
            ],
            "record 0 (q1) haystack_sessions[0] turn 0: a turn needs role",
        ),
        (lambda r: [dict(r[0], haystack_dates=["yesterday"] * 3)], "cannot read date 'yesterday'"),
        (lambda r: [dict(r[0], haystack_dates=r[0]["haystack_dates"][:2])], "haystack lists differ in length"),
    ],
)
def test_malformed_longmemeval_gives_clear_error(tmp_path, mutate, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(mutate(longmemeval_records())))
    with pytest.raises(D.DatasetError) as err:
        D.load_longmemeval(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_invalid_json_is_reported(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("[{")
    with pytest.raises(D.DatasetError, match="not valid JSON"):
        D.load_longmemeval(path)


def test_jsonl_format(tmp_path):
    ds = D.load(str(write_jsonl(tmp_path / "conv.jsonl")))
    assert ds.stats()["cases"] == 2 and ds.stats()["usable_cases"] == 2
    # sessions in date order: s1 before s2
    rows = ds.haystack_rows(0)
    assert ds.turns.loc[rows[0], "text"] == "I am allergic to nuts."
    assert ds.turns.loc[list(ds.cases.iloc[0]["gold"]), "text"].tolist() == ["I am allergic to nuts."]
    assert ds.turns.loc[rows[1], "speaker"] == "assistant"


def test_jsonl_unresolvable_evidence_is_an_error(tmp_path):
    from fixtures import jsonl_records

    recs = jsonl_records()
    recs[0]["questions"][0]["evidence"] = [["s9", 0]]
    with pytest.raises(D.DatasetError, match=r"line 1 question 0: evidence \['s9', 0\] does not resolve"):
        D.load_jsonl(write_jsonl(tmp_path / "c.jsonl", recs))


def test_locomo_evidence_normalisation():
    assert D.normalise_locomo_evidence(["D8:6; D9:17", "D9:1 D4:4 D4:6", "D:11:26", "D30:05", "D"]) == [
        "D8:6",
        "D9:17",
        "D9:1",
        "D4:4",
        "D4:6",
        "D11:26",
        "D30:5",
    ]


def test_locomo_malformed_turn(tmp_path):
    bad = [
        {
            "sample_id": "x",
            "qa": [],
            "conversation": {
                "speaker_a": "A",
                "speaker_b": "B",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [{"speaker": "A", "dia_id": "D1:1"}],
            },
        }
    ]
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(D.DatasetError, match=r"record 0 \(x\) session_1 turn 0: a turn needs 'speaker' and a 'text'"):
        D.load_locomo(path)


def test_locomo_counts():
    try:
        path = D.resolve("locomo10.json", download=False)
    except D.DatasetError as exc:
        pytest.skip(f"LoCoMo not available: {exc}")
    ds = D.load_locomo(path)
    st = ds.stats()
    assert st["conversations"] == 10 and st["turns"] == 5882 and st["sessions"] == 272
    assert st["cases"] == 1986 and st["usable_cases"] == 1982
    # 'D' is unparseable and D10:19 (conv-42) and D4:36 (conv-47) point past their sessions
    assert st["skipped_evidence_ids"] == 3
    assert ds.turns["role"].eq("user").all()
    assert ds.turns["text"].str.contains(r"\[shares a photo: ").sum() > 800
    assert np.all(np.diff(ds.turns["timestamp"].to_numpy()[ds.haystack_rows(0)]) > np.timedelta64(0))
    # answers as the file gives them (1,542 with an answer; the adversarial questions have none)
    assert (ds.cases["answer"] != "").sum() == 1542 and ds.cases["answer"].iloc[0] == "7 May 2023"


def test_resolver_order_and_offline_message(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_DATA_DIR", str(tmp_path))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "longmemeval_s.json").write_text("[]")
    assert D.resolve("longmemeval_s.json") == tmp_path / "sub" / "longmemeval_s.json"
    (tmp_path / "longmemeval_s.json").write_text("[]")
    assert D.resolve("longmemeval_s.json") == tmp_path / "longmemeval_s.json"
    monkeypatch.setattr(D, "RAW_DIR", tmp_path / "raw")
    with pytest.raises(D.DatasetError, match=r"longmemeval_m.json not found .* save it as .*raw/longmemeval_m.json"):
        D.resolve("longmemeval_m.json")


def test_download_checks_sha256(tmp_path, monkeypatch):
    src = tmp_path / "src.json"
    src.write_text("[1]")
    monkeypatch.delenv("MEMLIB_DATA_DIR", raising=False)
    monkeypatch.setattr(D, "RAW_DIR", tmp_path / "raw")
    monkeypatch.setitem(D.REGISTRY, "x.json", {"url": src.as_uri(), "sha256": "0" * 64, "license": "test"})
    with pytest.raises(D.DatasetError, match="has sha256"):
        D.resolve("x.json")
    assert not any((tmp_path / "raw").iterdir())  # nothing half-written left behind
    monkeypatch.setitem(D.REGISTRY, "x.json", {"url": src.as_uri(), "sha256": D.sha256_file(src), "license": "t"})
    assert D.resolve("x.json").read_text() == "[1]"


def test_unknown_dataset_name():
    with pytest.raises(ParameterError, match="unknown dataset 'nope'"):
        D.load("nope")


def test_gzipped_files_load_like_plain_ones(tmp_path):
    import gzip
    import shutil

    plain = write_longmemeval(tmp_path / "lme.json")
    with open(plain, "rb") as src, gzip.open(tmp_path / "lme_gz.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    a, b = D.load(str(plain)), D.load(str(tmp_path / "lme_gz.json.gz"))
    assert b.name == "lme_gz" and b.stats()["source"] == "lme_gz.json.gz"
    pd_cols = ["session", "role", "text"]
    assert a.turns[pd_cols].equals(b.turns[pd_cols]) and a.cases["gold"].equals(b.cases["gold"])
    jl = write_jsonl(tmp_path / "conv.jsonl")
    with open(jl, "rb") as src, gzip.open(tmp_path / "conv.jsonl.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    c = D.load(str(tmp_path / "conv.jsonl.gz"))
    assert c.name == "conv" and len(c.cases) == len(D.load(str(jl)).cases)


def test_corrupt_gzip_names_the_file(tmp_path):
    bad = tmp_path / "broken.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(D.DatasetError, match="broken.json.gz"):
        D.load(str(bad))


def test_longmemeval_question_dates_are_read(tmp_path):
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json")))
    recs = longmemeval_records()
    expected = [D._lme_date(r["question_date"], "x", "y") for r in recs]
    assert list(ds.cases["question_date"]) == expected
    assert ds.cases["question_date"].notna().all()


def test_dataset_name_prefers_the_full_release(tmp_path, monkeypatch):
    import gzip

    monkeypatch.setenv("MEMLIB_DATA_DIR", str(tmp_path))
    sub = tmp_path / "longmemeval"
    sub.mkdir()
    recs = longmemeval_records()
    with gzip.open(sub / "longmemeval_s_cleaned_498.json.gz", "wt") as f:
        json.dump(recs[:2], f)
    ds = D.load("longmemeval_s")
    assert ds.stats()["source"] == "longmemeval_s_cleaned_498.json.gz" and len(ds.cases) == 2
    write_longmemeval(tmp_path / "longmemeval_s_cleaned.json", recs)  # a user's full file wins
    ds = D.load("longmemeval_s")
    assert ds.stats()["source"] == "longmemeval_s_cleaned.json" and len(ds.cases) == 3
    assert ds.name == "longmemeval_s"


def test_sample_is_seeded_and_keeps_file_order(tmp_path):
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json")))
    a, b = ds.sample(2, seed=3), ds.sample(2, seed=3)
    assert list(a.cases["case_id"]) == list(b.cases["case_id"]) and len(a.cases) == 2
    order = list(ds.cases["case_id"])
    assert [order.index(c) for c in a.cases["case_id"]] == sorted(order.index(c) for c in a.cases["case_id"])
    assert len(ds.sample(10).cases) == 3
    with pytest.raises(ParameterError, match="sample size must be an integer >= 1, got 0"):
        ds.sample(0)


def test_spread_histories_keeps_nested_histories_evenly_and_every_question_over_them():
    sessions = [f"s{i}" for i in range(10)]
    haystacks = [tuple(sessions[: k + 1]) for k in range(10)] + [tuple(sessions[:5]), ("t0",)]
    cases = pd.DataFrame({"group": ["u"] * 11 + ["v"], "haystack": haystacks, "case_id": [f"q{i}" for i in range(12)]})
    ds = D.Dataset("toy", pd.DataFrame(), pd.DataFrame(), cases, [])
    few = ds.spread_histories(3).cases
    # u's ten nested histories: the shortest, the middle (two questions ask over it) and the longest; v's one
    assert few["haystack"].map(len).tolist() == [1, 5, 10, 5, 1]
    assert few["case_id"].tolist() == ["q0", "q4", "q9", "q10", "q11"]  # file order kept
    assert ds.spread_histories(10).cases.equals(ds.cases)  # as many as there are: all of them
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ParameterError, match="histories per group must be an integer >= 1"):
            ds.spread_histories(bad)


def test_sessions_sharing_a_minute_do_not_interleave(tmp_path):
    recs = longmemeval_records()[:1]
    recs[0]["haystack_dates"] = [recs[0]["haystack_dates"][0]] * len(recs[0]["haystack_dates"])
    ds = D.load_longmemeval(write_longmemeval(tmp_path / "lme.json", recs))
    times = ds.turns.loc[list(ds.haystack_rows(0)), "timestamp"]
    assert times.is_monotonic_increasing and times.is_unique


def _parses(monkeypatch):
    """Count calls of the LongMemEval parser behind D.load."""
    calls = []
    real = D.load_longmemeval

    def counting(path, name=None):
        calls.append(path)
        return real(path, name)

    monkeypatch.setattr(D, "load_longmemeval", counting)
    return calls


def test_a_parsed_dataset_is_cached_and_reads_back_equal(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    calls = _parses(monkeypatch)
    path = str(write_longmemeval(tmp_path / "lme.json"))
    first = D.load(path)
    D._LOADED.clear()  # a new process
    second = D.load(path)
    assert len(calls) == 1  # the second load read the cache
    assert second is not first
    _assert_same(first, second)
    assert second.cases["gold"].tolist() == first.cases["gold"].tolist()
    assert [p.name for p in (tmp_path / "cache" / "datasets").iterdir()] == [
        p.name for p in (tmp_path / "cache" / "datasets").glob("lme.json-*.npz")
    ]
    # another content under the same name: parsed again, and the stale parse is removed
    recs = longmemeval_records()
    recs[0]["question"] = "Which food is my dog allergic to, again?"
    write_longmemeval(tmp_path / "lme.json", recs)
    D._LOADED.clear()
    third = D.load(path)
    assert len(calls) == 2 and third.cases["question"].iloc[0] == recs[0]["question"]
    assert len(list((tmp_path / "cache" / "datasets").glob("*.npz"))) == 1
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_a_damaged_parse_is_set_aside_and_the_file_parsed_again(tmp_path, monkeypatch):
    from memlib.embeddings import CacheWarning

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    calls = _parses(monkeypatch)
    path = str(write_longmemeval(tmp_path / "lme.json"))
    first = D.load(path)
    (cached,) = (tmp_path / "cache" / "datasets").glob("*.npz")
    cached.write_bytes(cached.read_bytes()[:500])
    D._LOADED.clear()
    with pytest.warns(CacheWarning, match="unreadable cache file"):
        again = D.load(path)
    assert len(calls) == 2 and D._same_dataset(first, again)
    assert (cached.parent / (cached.name + ".corrupt")).is_file() and cached.is_file()


def test_the_parse_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MEMLIB_DATASET_CACHE", "0")
    calls = _parses(monkeypatch)
    path = str(write_longmemeval(tmp_path / "lme.json"))
    D.load(path)
    D._LOADED.clear()
    D.load(path)
    assert len(calls) == 2 and not (tmp_path / "cache" / "datasets").exists()


def _assert_same(a, b):
    assert (a.name, a.source, a.skipped, a.texts) == (b.name, b.source, b.skipped, b.texts)
    for x, y in ((a.turns, b.turns), (a.sessions, b.sessions), (a.cases, b.cases)):
        pd.testing.assert_frame_equal(x, y, check_exact=True, check_dtype=True)


@pytest.mark.parametrize("fmt", ["longmemeval", "jsonl", "locomo"])
def test_every_format_round_trips_through_the_parse_cache(tmp_path, fmt):
    if fmt == "locomo":
        ds = D.load_locomo(D.resolve_dataset("locomo"))
    else:
        write = write_longmemeval if fmt == "longmemeval" else write_jsonl
        ds = D.load(str(write(tmp_path / ("lme.json" if fmt == "longmemeval" else "conv.jsonl"))))
    _assert_same(ds, D._dataset_from_arrays(D._dataset_arrays(ds)))


def test_a_column_the_cache_cannot_store_is_refused():
    ds = D.load_longmemeval(write_longmemeval(Path(tempfile.mkdtemp()) / "lme.json"))
    ds.cases["question_date"] = ds.cases["question_date"].dt.tz_localize("UTC")  # an object array
    with pytest.raises(D._NotStorable, match="question_date"):
        D._dataset_arrays(ds)


def test_sha256_file_reads_in_full_or_once_per_process(tmp_path, monkeypatch):
    """One name, sha256_file: ``cached=True`` reads a file once per process while it is unchanged."""
    path = tmp_path / "data.json"
    path.write_bytes(b"[1, 2, 3]")
    digest = hashlib.sha256(b"[1, 2, 3]").hexdigest()
    assert D.sha256_file(path) == D.sha256_file(path, cached=True) == digest
    reads = []
    real = D.sha256_file
    monkeypatch.setattr(D, "sha256_file", lambda p, cached=False: reads.append(cached) or real(p, cached))
    for _ in range(3):  # remembered: the cached form reads the file no more
        assert real(path, cached=True) == digest
    assert reads == []
    path.write_bytes(b"[1, 2, 3, 4]")  # a changed file (another size) is read again
    assert real(path, cached=True) == hashlib.sha256(b"[1, 2, 3, 4]").hexdigest() and reads == [False]
