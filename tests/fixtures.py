"""Schema-exact LongMemEval and generic JSONL fixtures written by the tests themselves, and planted cases."""

import json
import os
import subprocess
import sys

import numpy as np

from memlib.cases import CaseSet

FILLER = [
    {"role": "user", "content": "Can you suggest a good pasta recipe for a weeknight?"},
    {"role": "assistant", "content": "Sure! A quick garlic and olive oil spaghetti takes fifteen minutes."},
]
TRAVEL = [
    {"role": "user", "content": "I am planning a trip to Lisbon next spring."},
    {"role": "assistant", "content": "Lisbon is lovely in spring; the trams are a great way to see the hills."},
]


def longmemeval_records():
    """Three questions: two usable, sharing filler sessions; one abstention without gold."""
    answer_1 = [
        {
            "role": "user",
            "content": "My dog Biscuit is allergic to chicken, so I buy salmon kibble.",
            "has_answer": True,
        },
        {"role": "assistant", "content": "Salmon kibble is a good choice for dogs with poultry allergies."},
    ]
    answer_2 = [
        {"role": "user", "content": "I finally ran my first half marathon in 1:52!", "has_answer": True},
        {"role": "assistant", "content": "Congratulations, that is a great time for a first race!"},
        {"role": "user", "content": "Thanks, my knee hurt a bit though.", "has_answer": True},
    ]
    return [
        {
            "question_id": "q1",
            "question_type": "single-session-user",
            "question": "What is my dog allergic to?",
            "answer": "chicken",
            "question_date": "2023/06/01 (Thu) 10:00",
            "haystack_session_ids": ["filler_a", "answer_q1", "travel_b"],
            "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/22 (Mon) 09:00", "2023/05/21 (Sun) 11:30"],
            "haystack_sessions": [FILLER, answer_1, TRAVEL],
            "answer_session_ids": ["answer_q1"],
        },
        {
            "question_id": "q2",
            "question_type": "multi-session",
            "question": "What was my half marathon time?",
            "answer": "1:52",
            "question_date": "2023/06/02 (Fri) 10:00",
            "haystack_session_ids": ["filler_a", "travel_b", "answer_q2"],
            "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 11:30", "2023/05/25 (Thu) 18:45"],
            "haystack_sessions": [FILLER, TRAVEL, answer_2],
            "answer_session_ids": ["answer_q2"],
        },
        {
            "question_id": "q3_abs",
            "question_type": "single-session-user",
            "question": "What is the name of my cat?",
            "answer": "You did not mention a cat.",
            "question_date": "2023/06/03 (Sat) 10:00",
            "haystack_session_ids": ["filler_a", "travel_b"],
            "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 11:30"],
            "haystack_sessions": [FILLER, TRAVEL],
            "answer_session_ids": [],
        },
    ]


def write_longmemeval(path, records=None):
    path.write_text(json.dumps(longmemeval_records() if records is None else records))
    return path


def jsonl_records():
    return [
        {
            "conversation_id": "c1",
            "sessions": [
                {
                    "session_id": "s2",
                    "date": "2024-01-06T09:00:00",
                    "turns": [
                        {"role": "user", "speaker": "Ana", "text": "The project deadline moved to March 3."},
                        {"role": "assistant", "text": "Noted, March 3."},
                    ],
                },
                {
                    "session_id": "s1",
                    "date": "2024-01-05T10:00:00",
                    "turns": [
                        {"role": "user", "speaker": "Ana", "text": "I am allergic to nuts."},
                        {"role": "assistant", "text": "I will remember that."},
                    ],
                },
            ],
            "questions": [
                {"question_id": "q1", "question": "What is Ana allergic to?", "evidence": [["s1", 0]]},
                {"question_id": "q2", "question": "When is the deadline?", "evidence": [["s2", 0], ["s2", 1]]},
            ],
        }
    ]


def write_jsonl(path, records=None):
    path.write_text("\n".join(json.dumps(r) for r in (jsonl_records() if records is None else records)) + "\n")
    return path


def planted_regimes(n_groups=6, per_group=10, seed=0):
    """Gold turns are reliable and old; the oracle goal column points at gold, the blind one is noise."""
    out = {}
    for regime in ("blind", "oracle"):
        r = np.random.default_rng(seed)
        factors, times, gold, groups = [], [], [], []
        for g in range(n_groups):
            for _ in range(per_group):
                F = r.random((30, 7)) * 0.5
                F[:, [2, 4, 6]] = 0
                gp = r.choice(30, 3, replace=False)
                F[gp, 5] += 0.5
                if regime == "oracle":
                    F[gp, 1] = 1.0
                factors.append(F)
                times.append(np.arange(30.0))
                gold.append(gp)
                groups.append(f"g{g}")
        out[regime] = CaseSet.from_cases(
            factors, times, gold, case_ids=[f"c{i}" for i in range(len(gold))], groups=groups
        )
    return out


# --------------------------------------------------------------------------- the command line and a stand-in model


def run_memlib(*args, timeout=180, **env):
    """``python -m memlib *args`` in a subprocess, with ``env`` added to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "memlib", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


def one_error_line(out, message):
    """A refused command: exit status 2 and one line on stderr holding ``message``, no traceback."""
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in out.stderr, out.stderr


class FakeModel:
    """Deterministic stand-in for the sentence model (no weights, no CPU); records the texts it saw."""

    def __init__(self):
        self.seen = []

    def encode(self, texts, **kw):
        self.seen.extend(texts)
        out = np.array([[len(t), sum(map(ord, t)) % 97, 1.0] + [0.0] * 381 for t in texts], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class HashModel:
    """A stand-in for the sentence model whose vectors are spread like real ones: the same text (its
    first 64 characters), the same random unit vector."""

    def encode(self, texts, **kw):
        rows = [np.random.default_rng([ord(c) for c in t[:64]] or [0]).normal(size=384) for t in texts]
        out = np.asarray(rows, dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)
