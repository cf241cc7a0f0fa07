"""RealMem (issue 20, part 1): the loader, its quirks, its counts, and that identifiers cannot leak.

SOURCE.md of the shared copy lists what the loader must handle: questions asked inside the stream
(a history is every session before the question's), gold reached through the memory points the
assistant used, 250 references that resolve to no turn, 5 that point forward, ``source_turn`` that
is not reliable, and session identifiers that give the answer away (``Enhanced:`` sessions never
hold gold).
"""

import copy
import json
import os
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fixtures import HashModel
from memlib import ParameterError
from memlib import datasets as D

SHARED = Path(os.environ.get("MEMLIB_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "datasets"))
REAL = SHARED / "realmem"


def turn(speaker, content, **kw):
    return {"speaker": speaker, "is_query": False, "content": content, "query_id": None, **kw}


def persona(name="Ana_Lima"):
    """A tiny persona file: a fact, a filler session, a question that uses the fact, a later session."""
    fact = "I am allergic to peanuts, so please keep that in mind for recipes."
    return {
        "_metadata": {"person_name": name, "total_sessions": 4, "total_tokens": 100},
        "dialogues": [
            {
                "session_identifier": "Health_1:S1_01",
                "session_uuid": "aa000001",
                "current_time": "2025-12-01 (Monday)",
                "dialogue_turns": [
                    turn("User", "Hi, I want to plan my meals."),
                    turn("Assistant", "Happy to help with meal plans."),
                    turn("User", fact),
                    turn("Assistant", "Noted: no peanuts."),
                ],
                "extracted_memory": [
                    {
                        "index": "Health_1-DM-S1_01-01",
                        "type": "Static",
                        "content": "User is allergic to peanuts.",
                        "source_turn": 0,  # wrong on purpose: the release's source_turn is not reliable
                        "source_content_snapshot": fact,
                        "source_role_snapshot": "User",
                        "session_uuid": "aa000001",
                    },
                    {
                        "index": "Health_1-DM-S1_01-02",
                        "type": "Static",
                        "content": "User wants meal plans.",
                        "source_turn": 1,
                        "source_content_snapshot": "a text that is in no turn",
                        "source_role_snapshot": "User",
                        "session_uuid": "aa000001",
                    },
                ],
            },
            {
                "session_identifier": "Enhanced:Filler_1",
                "session_uuid": "bb000002",
                "current_time": "2025-12-03 (Wednesday)",
                "dialogue_turns": [turn("User", "What is the weather like?"), turn("Assistant", "Sunny.")],
                "extracted_memory": [],
            },
            {
                "session_identifier": "Health_1:S2_01",
                "session_uuid": "cc000003",
                # a day earlier than the session before, as 111 sessions of the release are
                "current_time": "2025-12-02 (Tuesday)",
                "dialogue_turns": [
                    turn(
                        "User",
                        "Can you suggest a snack for me?",
                        is_query=True,
                        query_id="Q-0001",
                        topic="Health",
                        category_name="Static Fact",
                        session_type="single_session",
                    ),
                    turn(
                        "Assistant",
                        "Try apple slices (no peanut butter).",
                        memory_used=[
                            {"session_uuid": "aa000001", "content": "User is allergic to peanuts."},
                            {"session_uuid": "aa000001", "content": "User wants meal plans."},  # unresolved
                            {"session_uuid": "dd000004", "content": "User likes apples."},  # forward
                        ],
                        memory_session_uuids=["aa000001", "dd000004"],
                    ),
                ],
                "extracted_memory": [],
            },
            {
                "session_identifier": "Health_1:S3_01",
                "session_uuid": "dd000004",
                "current_time": "2025-12-05 (Friday)",
                "dialogue_turns": [turn("User", "I like apples."), turn("Assistant", "Good to know.")],
                "extracted_memory": [
                    {
                        "index": "Health_1-DM-S3_01-01",
                        "type": "Static",
                        "content": "User likes apples.",
                        "source_turn": 1,
                        "source_content_snapshot": "I like apples.",
                        "source_role_snapshot": "User",
                        "session_uuid": "dd000004",
                    }
                ],
            },
        ],
    }


def write(folder, *records):
    folder.mkdir(parents=True, exist_ok=True)
    for rec in records:
        (folder / f"{rec['_metadata']['person_name']}_dialogues_256k.json").write_text(json.dumps(rec))
    return folder


def test_a_question_sees_the_sessions_before_its_own_and_its_resolved_gold(tmp_path):
    ds = D.load(write(tmp_path / "rm", persona()))
    assert ds.name == "rm"  # a folder given by path is named after it, as a file is after its stem
    assert len(ds.cases) == 1
    case = ds.cases.iloc[0]
    assert case["case_id"] == "Ana_Lima/Q-0001" and case["group"] == "Ana_Lima"
    assert case["question"] == "Can you suggest a snack for me?" and case["question_type"] == "Static Fact"
    history = ds.sessions.set_index("session").loc[list(case["haystack"])]
    assert history["label"].tolist() == ["Ana_Lima/aa000001", "Ana_Lima/bb000002"]
    gold = ds.turns.iloc[list(case["gold"])]
    assert gold["text"].tolist() == ["I am allergic to peanuts, so please keep that in mind for recipes."]
    assert gold["role"].tolist() == ["user"] and gold["speaker"].tolist() == ["Ana_Lima"]
    assert ds.skipped == {"references_unresolved": 1, "references_forward": 1}
    stats = ds.stats()
    assert stats["skipped_references_unresolved"] == 1 and stats["skipped_references_forward"] == 1


def test_time_runs_forward_in_file_order_and_the_question_is_asked_at_its_turn(tmp_path):
    ds = D.load(write(tmp_path / "rm", persona()))
    ts = ds.turns["timestamp"]
    assert ts.is_monotonic_increasing and ts.is_unique
    third = ds.sessions.iloc[2]  # dated 2025-12-02, after a session of 2025-12-03: it starts after that one
    assert third["date"] > ds.sessions.iloc[1]["date"]
    q = ds.cases.iloc[0]["question_date"]
    assert q == ds.turns.loc[ds.turns["session"] == third["session"], "timestamp"].iloc[0]
    assert ds.turns.loc[list(ds.cases.iloc[0]["gold"]), "timestamp"].max() < q


def test_no_identifier_reaches_a_text_or_a_label(tmp_path):
    ds = D.load(write(tmp_path / "rm", persona()))
    assert not ds.sessions["label"].str.contains("Enhanced|Health_1").any()
    assert not any("Enhanced" in t for t in ds.texts)


def renamed(rec, rng):
    """The same persona with every session uuid, session identifier and query id replaced at random."""
    rec = copy.deepcopy(rec)
    new = {s["session_uuid"]: f"{rng.getrandbits(32):08x}" for s in rec["dialogues"]}
    for s in rec["dialogues"]:
        s["session_uuid"] = new[s["session_uuid"]]
        s["session_identifier"] = f"S{rng.getrandbits(32):08x}"
        for p in s.get("extracted_memory", []):
            p["session_uuid"] = new[p["session_uuid"]]
            p["index"] = f"I{rng.getrandbits(32):08x}"
        for t in s["dialogue_turns"]:
            if t.get("query_id") is not None and t.get("is_query"):
                t["query_id"] = f"Q{rng.getrandbits(32):08x}"
            for m in t.get("memory_used", []) or []:
                m["session_uuid"] = new.get(m["session_uuid"], m["session_uuid"])
            if "memory_session_uuids" in t:
                t["memory_session_uuids"] = [new.get(u, u) for u in t["memory_session_uuids"]]
    return rec


def content_of(ds):
    """What a factor, cue or split may read, with identifiers replaced by positions."""
    turns = ds.turns.drop(columns=["session"]).reset_index(drop=True)
    order = {k: i for i, k in enumerate(ds.sessions["session"])}
    cases = pd.DataFrame(
        {
            "question": ds.cases["question"],
            "question_type": ds.cases["question_type"],
            "haystack": [tuple(order[k] for k in h) for h in ds.cases["haystack"]],
            "gold": ds.cases["gold"],
            "group": ds.cases["group"],
            "question_date": ds.cases["question_date"],
        }
    )
    return turns, ds.sessions[["date", "first_turn", "n_turns"]], cases, ds.skipped


def test_renaming_every_identifier_changes_nothing_a_study_reads(tmp_path):
    rng = random.Random(7)
    a = D.load(write(tmp_path / "a", persona(), persona("Ben_Cruz")))
    b = D.load(write(tmp_path / "b", renamed(persona(), rng), renamed(persona("Ben_Cruz"), rng)))
    for x, y in zip(content_of(a), content_of(b)):
        if isinstance(x, pd.DataFrame):
            pd.testing.assert_frame_equal(x, y)
        else:
            assert x == y


def test_bad_realmem_records_are_one_line(tmp_path):
    rec = persona()
    rec["dialogues"][1]["current_time"] = "sometime"
    with pytest.raises(D.DatasetError, match=r"Ana_Lima_dialogues_256k.json: dialogues\[1\] current_time: cannot read"):
        D.load(write(tmp_path / "a", rec))
    rec = persona()
    rec["dialogues"][3]["session_uuid"] = "aa000001"
    with pytest.raises(D.DatasetError, match=r"dialogues\[3\]: session_uuid 'aa000001' repeats dialogues\[0\]"):
        D.load(write(tmp_path / "b", rec))
    rec = persona()
    rec["dialogues"][0]["dialogue_turns"][0]["speaker"] = "Bot"
    with pytest.raises(D.DatasetError, match=r"dialogues\[0\] turn 0: a turn needs speaker 'User' or 'Assistant'"):
        D.load(write(tmp_path / "c", rec))
    (tmp_path / "d").mkdir()
    with pytest.raises(D.DatasetError, match="holds no RealMem persona file"):
        D.load_realmem(tmp_path / "d")


@pytest.mark.slow
@pytest.mark.skipif(not REAL.is_dir(), reason="the shared RealMem copy is not here")
def test_the_release_loads_with_the_counts_source_md_gives(monkeypatch):
    monkeypatch.setenv("MEMLIB_DATA_DIR", str(SHARED))
    ds = D.load("realmem")
    assert ds.cases["group"].nunique() == 10
    assert len(ds.sessions) == 2055 and len(ds.turns) == 14028 and len(ds.cases) == 1415
    assert ds.skipped == {"references_unresolved": 250, "references_forward": 5}
    n_gold = ds.cases["gold"].map(len)
    # 2,802 references resolve, 5 of them forward; several references of a question can share a turn
    assert n_gold.sum() <= 2802 - 5 and ds.cases["usable"].sum() == (n_gold > 0).sum()
    gold = ds.turns.iloc[np.concatenate([list(g) for g in ds.cases["gold"] if g])]
    assert not gold.merge(ds.sessions, on="session")["label"].str.contains("Enhanced").any()
    for _, case in ds.cases.iterrows():  # every gold turn lies in the question's history
        assert set(ds.turns.iloc[list(case["gold"])]["session"]) <= set(case["haystack"])


@pytest.mark.slow
@pytest.mark.skipif(not REAL.is_dir(), reason="the shared RealMem copy is not here")
def test_a_few_histories_of_each_user_reach_from_the_stream_start_to_its_end(monkeypatch):
    from memlib.studies import DataSpec

    monkeypatch.setenv("MEMLIB_DATA_DIR", str(SHARED))
    full = D.load("realmem").sample(4)
    few = DataSpec("realmem", sample=4, histories=8).load_dataset()
    assert set(few.cases["group"]) == set(full.cases["group"])  # the same users, fewer of their histories
    for user, cases in full.cases.groupby("group"):
        lengths = sorted(set(cases["haystack"].map(len)))
        mine = few.cases[few.cases["group"] == user]
        kept = sorted(set(mine["haystack"].map(len)))
        assert len(kept) == 8 < len(lengths)
        assert kept[0] == lengths[0] and kept[-1] == lengths[-1]  # the first history and the whole stream
        # every question over a kept history is kept with it, and nothing else
        assert len(mine) == cases["haystack"].map(len).isin(kept).sum()
    with pytest.raises(ParameterError, match="histories must be an integer >= 1, got 0"):
        DataSpec("realmem", histories=0)


@pytest.mark.parametrize("factor_set", ["paper", "extended"])
def test_renaming_every_identifier_leaves_factors_and_cues_identical(tmp_path, monkeypatch, factor_set):
    from memlib import embeddings as Emb
    from memlib import factors as Fm
    from memlib.cues import compute_cues

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: HashModel())
    rng = random.Random(11)
    a = D.load(write(tmp_path / "a", persona(), persona("Ben_Cruz")))
    b = D.load(write(tmp_path / "b", renamed(persona(), rng), renamed(persona("Ben_Cruz"), rng)))
    for regime in ("blind", "oracle"):
        x = Fm.annotate(a, regime, factor_set=factor_set, progress=False)
        y = Fm.annotate(b, regime, factor_set=factor_set, progress=False)
        for name in ("factors", "time", "length", "case_haystack", "gold_case", "gold_pos", "groups"):
            np.testing.assert_array_equal(getattr(x.cases, name), getattr(y.cases, name), err_msg=name)
        if regime == "blind":
            np.testing.assert_array_equal(compute_cues(a, x).values, compute_cues(b, y).values)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(not REAL.is_dir(), reason="the shared RealMem copy is not here")
def test_a_study_runs_on_a_slice_of_realmem_from_the_command_line():
    """CI's quick mode on RealMem: two personas (one to learn on, one to test), Table 3's rows."""
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "memlib",
            "study",
            "oracle-blind",
            "--dataset",
            "realmem",
            "--limit",
            "2",
            "--quick",
            "--n-splits",
            "2",
            "--factor-set",
            "paper",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "MEMLIB_DATA_DIR": str(SHARED)},
    )
    assert out.returncode == 0, out.stderr
    table = pd.DataFrame(json.loads(out.stdout)).set_index(["policy", "regime"])["mean"]
    assert set(table.index.get_level_values("regime")) == {"blind", "oracle"}
    assert table.between(0, 1).all()
    # a question's gold lies in the sessions before it, so an oracle of the question finds it best
    assert table[("learned_V", "oracle")] > table[("learned_V", "blind")] > table[("random", "blind")]
