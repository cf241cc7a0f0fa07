"""The study result cache (memlib.studies._cache): exact round trips, and a new key for any change to
code, data or parameters, so a stale result is never served."""

import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest

from memlib._cachefiles import CacheWarning
from memlib.learning import LearnResult
from memlib.studies import STUDIES, DataSpec, Study, _cache


@dataclass
class Result:
    table: pd.DataFrame
    extra: dict = field(default_factory=dict)


_cache.register(Result)  # a test's result type joins the cache's allow-list as memlib's own do


def rich_result():
    table = pd.DataFrame(
        {
            "policy": ["learned_V", "uniform_V", "random"],
            "mean": [0.123456789012345678, np.nan, 1 / 3],
            "n": np.array([3, 2, 1], dtype=np.int64),
            "ok": [True, False, True],
            "factor": ["goal_relevance", "", None],
        }
    )
    wide = table.set_index(["policy", "n"])
    learning = LearnResult(
        weights=np.array([0.1, 0.0, 2.5]),
        train_return=0.75,
        history=[np.arange(3.0), np.array([np.inf, -1.0])],
        restart_returns=[0.5, np.float64(0.75)],
        n_evaluations=12,
    )
    info = {"dataset": "locomo", "inert": ["task_utility"], "tiers": (0.2, 0.45), "k": np.int64(7), 3: None}
    return Result(table, {"wide": wide, "series": table["mean"], "learning": learning, "info": info})


def test_encode_decode_round_trips_exactly(tmp_path):
    r = rich_result()
    _cache.save(tmp_path / "r.npz", r)
    back = _cache.load(tmp_path / "r.npz")
    assert _cache.same(r, back)
    assert back.table["mean"].iloc[0] == r.table["mean"].iloc[0]  # bit for bit, not to 15 digits
    assert isinstance(back.extra["learning"], LearnResult) and isinstance(back.extra["info"]["tiers"], tuple)
    assert list(tmp_path.iterdir()) == [tmp_path / "r.npz"]  # no temporary file left behind
    for text in (pd.Series([None, None], dtype=object), pd.Series(["a", None], dtype="str"), pd.Series([], dtype=str)):
        one = Result(pd.DataFrame({"t": text}))
        _cache.save(tmp_path / "t.npz", one)
        assert _cache.same(one, _cache.load(tmp_path / "t.npz"))


def test_a_study_folder_keeps_the_latest_results_only(tmp_path):
    for i in range(_cache.MAX_ENTRIES + 3):
        _cache.save(tmp_path / f"{i:032x}.npz", Result(pd.DataFrame({"i": [i]})))
        os.utime(tmp_path / f"{i:032x}.npz", ns=(i, i))
    _cache.prune(tmp_path)
    assert sorted(p.stem for p in tmp_path.glob("*.npz")) == [f"{i:032x}" for i in range(3, _cache.MAX_ENTRIES + 3)]


def test_same_tells_results_apart():
    a, b = rich_result(), rich_result()
    assert _cache.same(a, b)
    b.table.loc[1, "n"] = 5
    assert not _cache.same(a, b)


def test_a_result_holding_an_arbitrary_object_is_not_cached(tmp_path):
    with pytest.raises(_cache.Uncacheable):
        _cache.save(tmp_path / "r.npz", Result(pd.DataFrame({"x": [object()]})))
    with pytest.raises(_cache.Uncacheable):
        _cache.save(tmp_path / "r.npz", Result(pd.DataFrame(), {"f": len}))
    assert not list(tmp_path.iterdir())


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """A study that counts its runs, cached under a temporary cache root."""
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MEMLIB_RESULT_CACHE", raising=False)
    calls = []

    def study(data, keep_fraction: float = 0.3, seed: int = 0, progress: bool = False):
        calls.append((data, keep_fraction, seed))
        return Result(pd.DataFrame({"keep": [keep_fraction], "seed": [seed]}))

    data = tmp_path / "data.jsonl"
    data.write_text("one\n")
    return Study("toy", study, "table", "00_toy.md"), calls, data


def test_a_repeated_run_is_served_from_the_cache(counted):
    study, calls, data = counted
    first = study.run(str(data), keep_fraction=0.3)
    again = study.run(data=DataSpec(str(data)), progress=True)  # the same data and parameters, progress ignored
    assert len(calls) == 1 and _cache.same(first, again)
    assert study.run_table(data=DataSpec(data)).equals(first.table)  # a Path names the same file
    assert len(calls) == 1


def test_each_factor_set_runs_the_study_once_per_set_and_stacks_its_tables(counted):
    study, calls, data = counted
    table = study.each_factor_set(DataSpec(str(data)), ("paper", "released"), keep_fraction=0.2)
    assert [c[0].factor_set for c in calls] == ["paper", "released"]  # one run per set, the spec changed
    assert table.columns.tolist() == ["factor_set", "keep", "seed"]
    assert table["factor_set"].tolist() == ["paper", "released"] and table["keep"].tolist() == [0.2, 0.2]
    study.each_factor_set(DataSpec(str(data)), ("paper",), keep_fraction=0.2)
    assert len(calls) == 2  # served from the cache, as the command line's run would be


def test_data_that_resolve_alike_share_a_result(counted):
    study, calls, data = counted
    study.run(DataSpec(str(data), quick=True))
    study.run(DataSpec(str(data), quick=True, sample=3))  # quick mode reads the first groups, whatever the sample
    study.run(DataSpec(str(data), quick=True, limit=4))  # what quick mode reads anyway
    assert len(calls) == 1
    study.run(DataSpec(str(data), sample=3))
    study.run(DataSpec(str(data), quick=True, limit=2))
    assert len(calls) == 3


def test_parameters_code_and_data_each_invalidate(counted, monkeypatch):
    study, calls, data = counted
    study.run(str(data))
    study.run(str(data), seed=1)  # parameters
    assert len(calls) == 2
    with monkeypatch.context() as m:
        m.setattr(_cache, "code_version", lambda module: "another version of memlib")  # code
        study.run(str(data))
    assert len(calls) == 3
    data.write_text("one\ntwo\n")  # data
    os.utime(data, ns=(1, 1))
    study.run(str(data))
    assert len(calls) == 4
    study.run(str(data))
    assert len(calls) == 4
    data.write_text("one\ntwo\n")  # the same content copied again, at another time: still the same data
    os.utime(data, ns=(2, 2))
    study.run(str(data))
    assert len(calls) == 4


def test_a_damaged_cache_file_is_recomputed_with_a_warning(counted, tmp_path):
    study, calls, data = counted
    study.run(str(data))
    (path,) = (tmp_path / "cache" / "results" / "toy").glob("*.npz")
    path.write_bytes(b"not an npz")
    with pytest.warns(CacheWarning, match="unreadable cache file .*; moved to .*corrupt"):
        study.run(str(data))
    assert len(calls) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        study.run(str(data))  # rewritten whole
    assert len(calls) == 2


def test_the_cache_can_be_turned_off(counted, monkeypatch):
    study, calls, data = counted
    monkeypatch.setenv("MEMLIB_RESULT_CACHE", "0")
    study.run(str(data))
    study.run(str(data))
    assert len(calls) == 2


def test_where_every_result_is_expected_cached_a_miss_is_an_error_that_names_the_study(counted, monkeypatch):
    study, calls, data = counted
    study.run(str(data))
    monkeypatch.setenv("MEMLIB_EXPECT_CACHED", "1")  # what make sets while it builds the book after the main job
    study.run(str(data))  # cached: served
    with pytest.raises(_cache.NotCached, match=r"^toy: no cached result for these parameters \([0-9a-f]{32}\.npz\)"):
        study.run(str(data), seed=1)
    assert len(calls) == 1  # nothing computed
    monkeypatch.setenv("MEMLIB_EXPECT_CACHED", "0")
    study.run(str(data), seed=1)
    assert len(calls) == 2


def test_every_registered_study_is_cached_and_keeps_its_signature():
    for study in STUDIES.values():
        assert study.run.uncached is not study.run
        assert study.parameters == tuple(__import__("inspect").signature(study.run.uncached).parameters)


def test_the_code_version_covers_every_memlib_source():
    assert len(_cache.code_version()) == 64


def test_a_corpus_is_loaded_once_and_read_back_equal(tmp_path, monkeypatch, fake_model):
    """Studies that read the same corpus the same way (defaults, need) annotate it once per run."""
    from fixtures import write_longmemeval
    from memlib import cues
    from memlib.studies import corpora

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MEMLIB_RESULT_CACHE", raising=False)
    path = write_longmemeval(tmp_path / "lme.json")
    runs = []
    compute = cues.compute_cues
    monkeypatch.setattr(cues, "compute_cues", lambda *a, **k: runs.append(1) or compute(*a, **k))
    first = corpora.load_corpus(DataSpec(str(path)))
    again = corpora.load_corpus(str(path))  # the same data, named by its path
    assert len(runs) == 1 and _cache.same(first, again) and again.cases.n_cases == 2
    assert again.answers == ["chicken", "1:52"] and again.texts == first.texts
    write_longmemeval(path, records_with_another_answer())  # other data: loaded again
    assert corpora.load_corpus(str(path)).cases.n_cases == 2 and len(runs) == 2


def records_with_another_answer():
    from fixtures import longmemeval_records

    records = longmemeval_records()
    records[0]["answer"] = "salmon"
    return records


def test_a_result_read_again_outlives_newer_results_written_since(counted, tmp_path):
    """Pruning goes by last use: the main job's result, read by the book, is not pushed out by a test run's."""
    study, calls, data = counted
    study.run(str(data), keep_fraction=0.5)  # the result a reader keeps coming back to
    (entry,) = (tmp_path / "cache" / "results" / "toy").glob("*.npz")
    os.utime(entry, ns=(1, 1))  # written long ago
    study.run(str(data), keep_fraction=0.5)  # read: now the most recently used
    for i in range(_cache.MAX_ENTRIES - 1):
        before = set(entry.parent.glob("*.npz"))
        study.run(str(data), keep_fraction=round(0.01 * (i + 1), 2))
        (new,) = set(entry.parent.glob("*.npz")) - before
        os.utime(new, ns=(10 + i, 10 + i))  # written after the entry was first written, before it was read
    assert entry.exists() and entry.stat().st_mtime_ns > 10**9
    study.run(str(data), keep_fraction=0.5)
    assert len(calls) == _cache.MAX_ENTRIES  # served: each result computed once
    study.run(str(data), seed=1)
    study.run(str(data), seed=2)  # two more writes push the least recently used out, not the one read
    assert entry.exists() and len(list(entry.parent.glob("*.npz"))) == _cache.MAX_ENTRIES


def test_a_corpus_holds_the_texts_of_its_histories_and_no_other(tmp_path, monkeypatch, fake_model):
    """A sample of a corpus carries (and caches) the texts, vectors and valences its histories read, numbered anew."""
    from fixtures import write_longmemeval
    from memlib.studies import corpora

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    path = write_longmemeval(tmp_path / "lme.json")
    whole, first = corpora.load_corpus(str(path)), corpora.load_corpus(DataSpec(str(path), limit=1))
    n = int(first.cases.length[0])
    ids = first.text_id[0, :n]
    assert sorted(set(ids.tolist())) == list(range(len(first.texts))) and len(first.texts) < len(whole.texts)
    assert len(first.embeddings) == len(first.valence) == len(first.texts)
    same = whole.text_id[0, :n]  # the first history is the same history in both
    assert [first.texts[i] for i in ids] == [whole.texts[i] for i in same]
    np.testing.assert_array_equal(first.embeddings[ids], whole.embeddings[same])
    np.testing.assert_array_equal(first.valence[ids], whole.valence[same])
