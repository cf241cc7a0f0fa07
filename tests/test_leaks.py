"""Leak checks on the data itself (issue 19, part 5): identifiers that give the answer away.

In LongMemEval-S every gold session's id begins with ``answer_``. No factor or cue may read an id:
renaming every session and question id at random, and shuffling the order of the questions in the
file, must leave each question's factor table, cues, times and gold positions exactly as they were.
(LongMemEval marks an abstention by the suffix ``_abs`` of its question id; that suffix is part of
the data's meaning and is kept.) RealMem's identifiers are checked in ``tests/test_realmem.py``.
"""

import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from fixtures import HashModel, longmemeval_records
from memlib import datasets as D
from memlib import embeddings as Emb
from memlib import factors as Fm
from memlib.cues import compute_cues

SHARED = Path(os.environ.get("MEMLIB_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "datasets"))


def renamed(records, seed):
    """The records with every session and question id replaced at random, in shuffled order."""
    rng = random.Random(seed)
    sessions, out = {}, []

    def new_session(sid):
        if sid not in sessions:
            sessions[sid] = f"s{rng.getrandbits(40):010x}"
        return sessions[sid]

    qids = {}
    for rec in records:
        rec = json.loads(json.dumps(rec))
        old = rec["question_id"]
        qids[old] = f"q{rng.getrandbits(40):010x}" + ("_abs" if old.endswith("_abs") else "")
        rec["question_id"] = qids[old]
        rec["haystack_session_ids"] = [new_session(s) for s in rec["haystack_session_ids"]]
        rec["answer_session_ids"] = [new_session(s) for s in rec["answer_session_ids"]]
        out.append(rec)
    rng.shuffle(out)
    return out, qids


def per_question(ann, ds, cues=None):
    """Each question's factor rows, times, gold mask (and cues) over its history, by question id."""
    cs = ann.cases
    out = {}
    for c, qid in enumerate(cs.case_ids):
        h, n = cs.case_haystack[c], cs.length[cs.case_haystack[c]]
        row = {"factors": cs.factors[h, :n], "time": cs.time[h, :n], "gold": cs.gold_mask(c)}
        if cues is not None:
            row["cues"] = cues.values[h, :n]
        out[str(qid)] = row
    return out


def check_unchanged(tmp_path, monkeypatch, records, factor_sets=("paper", "extended")):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: HashModel())
    other, qids = renamed(records, seed=3)
    (tmp_path / "a.json").write_text(json.dumps(records))
    (tmp_path / "b.json").write_text(json.dumps(other))
    a, b = D.load(tmp_path / "a.json"), D.load(tmp_path / "b.json")
    assert len(a.cases) == len(b.cases)
    compared = 0
    for factor_set in factor_sets:
        for regime in ("blind", "oracle"):
            x, y = (Fm.annotate(d, regime, factor_set=factor_set, progress=False) for d in (a, b))
            cx, cy = (compute_cues(d, ann) if regime == "blind" else None for d, ann in ((a, x), (b, y)))
            px, py = per_question(x, a, cx), per_question(y, b, cy)
            assert {qids[q] for q in px} == set(py)
            for q, row in px.items():
                for name, value in row.items():
                    np.testing.assert_array_equal(value, py[qids[q]][name], err_msg=f"{factor_set} {regime} {q} {name}")
                    compared += 1
    return compared


def test_renaming_ids_and_shuffling_questions_changes_no_factor_or_cue(tmp_path, monkeypatch):
    assert check_unchanged(tmp_path, monkeypatch, longmemeval_records()) > 0


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(not (SHARED / "longmemeval").is_dir(), reason="the shared LongMemEval-S copy is not here")
def test_on_longmemeval_s_the_answer_ids_reach_no_factor(tmp_path, monkeypatch):
    """Six real questions, whose gold sessions are named ``answer_...``."""
    path = next((SHARED / "longmemeval").glob("longmemeval_s*.json*"))
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        records = json.load(f)[:6]
    assert any(s.startswith("answer_") for r in records for s in r["haystack_session_ids"])
    assert check_unchanged(tmp_path, monkeypatch, records, factor_sets=("extended",)) > 0


def more_questions(records, n=6):
    """The fixture's records plus copies of its usable questions asked in other words, for real splits."""
    out = list(records)
    for i in range(n):
        rec = json.loads(json.dumps(records[i % 2]))
        rec["question_id"] = f"{rec['question_id']}_again{i}"
        rec["question"] = f"{rec['question']} (asked again, {i})"
        out.append(rec)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("factor_set", ["paper", "released"])
def test_renaming_ids_and_shuffling_questions_changes_no_split_or_study_result(tmp_path, monkeypatch, factor_set):
    """Splits follow the questions' content, so every Table 3 figure, per-question retention and
    bootstrap interval is the same after the ids are renamed and the file is reordered."""
    from memlib.studies import DataSpec
    from memlib.studies.oracle_blind import oracle_vs_blind

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MEMLIB_RESULT_CACHE", "0")
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: HashModel())
    records = more_questions(longmemeval_records())
    other, qids = renamed(records, seed=5)
    (tmp_path / "a.json").write_text(json.dumps(records))
    (tmp_path / "b.json").write_text(json.dumps(other))
    specs = (DataSpec(str(tmp_path / f"{x}.json"), factor_set=factor_set) for x in "ab")
    a, b = (oracle_vs_blind(data, n_splits=4, n_boot=200) for data in specs)
    cols = ["policy", "regime", "mean", "std"]
    assert a.summary[cols].equals(b.summary[cols])
    assert a.bootstrap.drop(columns=[]).equals(b.bootstrap)
    pa = a.per_case.assign(case_id=a.per_case["case_id"].map(qids)).drop(columns=["group"])
    pb = b.per_case.drop(columns=["group"])
    keys = ["policy", "regime", "split", "case_id"]
    pa, pb = (p.sort_values(keys).reset_index(drop=True) for p in (pa, pb))
    assert pa.equals(pb)
