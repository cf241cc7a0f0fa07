"""Benchmark the stream study on a RealMem-shaped user with many tiny sessions (issue 32).

A RealMem user once had 10,000 tiny sessions, and ``python -m memlib study stream --quick``
did not finish on it in 11 minutes (1,000 sessions: 35 s). Target: 10,000 sessions in under
2 minutes, or a refusal up front that says why and what to do.

This writes one persona file in RealMem's shape (:func:`memlib.datasets.load_realmem`) to a
temporary folder: ``--sessions`` sessions of two turns (the user states a small fact, the
assistant acknowledges it), a few sessions a day, and ``--questions`` questions spread evenly
over the stream, each opening its session and asking about the facts of two earlier sessions
(its gold). A first fresh process fills the embedding cache (under the temporary folder) with
every turn and question, and is timed apart; then a second one runs the study as a user would,

    MEMLIB_RESULT_CACHE=0 python -m memlib study stream --quick --dataset FOLDER --json

and the benchmark prints its wall time, its peak resident memory
(``os.wait4``'s ``ru_maxrss``: that process alone) and how it ended (the table's rows, or
the error line).

Measured on the 2-core development machine under a load average of about 4 (6 questions):
before the fix (16bbe9a), 1,000 sessions took 8.6 s and 3,000 about 75 s (quadratic: per
session, every policy's replay scanned and counted every turn held); after it, 1,000 take
2.8 s and 10,000 take 51 s (peak 0.85 GB). Embedding the 20,000 turns once is apart: 166 s here.

Run: .venv/bin/python benchmarks/stream_sessions.py [--sessions 1000 10000] [--questions 6]
(from the work tree, with ``PYTHONPATH=.`` so that its ``memlib`` is the one that runs).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WORDS = ["peanuts", "piano", "Lisbon", "budget", "marathon", "thesis", "garden", "salsa", "tax", "visa", "bike"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

WARM = """
import sys, time
from memlib import datasets
from memlib.embeddings import embed_cached
t0 = time.perf_counter()
ds = datasets.load(sys.argv[1])
embed_cached(list(ds.texts), "fast", progress=False)
embed_cached(ds.cases["question"].tolist(), "fast", progress=False)
print(round(time.perf_counter() - t0, 1))
"""


def persona(n_sessions: int, n_questions: int, per_day: int = 4, seed: int = 0) -> dict:
    """A RealMem persona record: ``n_sessions`` two-turn sessions and ``n_questions`` questions over them."""
    rng = np.random.default_rng(seed)
    day0 = np.datetime64("2020-01-06")  # a Monday
    asked = set(np.linspace(2, n_sessions - 1, n_questions).astype(int).tolist()) if n_questions else set()
    dialogues = []
    for s in range(n_sessions):
        uuid = f"{s:08x}"
        fact = f"my {WORDS[s % len(WORDS)]} plan is number {int(rng.integers(1000))} ({s})."
        turns = []
        if s in asked:
            earlier = sorted({int(rng.integers(s)), s - 1})
            turns += [
                {"speaker": "User", "content": f"What was my {WORDS[earlier[0] % 11]} plan?", "is_query": True},
                {
                    "speaker": "Assistant",
                    "content": "Here is what you told me.",
                    "memory_used": [{"session_uuid": f"{k:08x}", "content": f"fact {k}"} for k in earlier],
                },
            ]
            turns[0]["query_id"] = f"Q{s}"
        turns += [
            {"speaker": "User", "content": fact, "is_query": False},
            {"speaker": "Assistant", "content": f"Noted ({s}).", "is_query": False},
        ]
        day = day0 + np.timedelta64(s // per_day, "D")
        dialogues.append(
            {
                "session_identifier": f"Topic_{s % 11}:S{s}",
                "session_uuid": uuid,
                "current_time": f"{day} ({WEEKDAYS[int((day - day0).astype(int)) % 7]})",
                "dialogue_turns": turns,
                "extracted_memory": [
                    {"content": f"fact {s}", "source_content_snapshot": fact, "session_uuid": uuid, "source_turn": 0}
                ],
            }
        )
    return {"_metadata": {"person_name": "Tiny_Sessions"}, "dialogues": dialogues}


def run(n_sessions: int, n_questions: int, root: Path) -> dict:
    """Write the user, fill the embedding cache, then run the study quick in a fresh process; its figures."""
    folder = root / f"tiny{n_sessions}"
    folder.mkdir()
    (folder / "Tiny_Sessions_dialogues_256k.json").write_text(json.dumps(persona(n_sessions, n_questions)))
    here = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, MEMLIB_CACHE_DIR=str(root / "cache"), MEMLIB_RESULT_CACHE="0", PYTHONPATH=here)
    warm = subprocess.run([sys.executable, "-c", WARM, str(folder)], env=env, capture_output=True, text=True)
    if warm.returncode:
        raise SystemExit(warm.stderr)
    cmd = [sys.executable, "-m", "memlib", "study", "stream", "--quick", "--dataset", str(folder), "--json"]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, cwd=here)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    figures = {
        "sessions": n_sessions,
        "questions": n_questions,
        "embedding_s (cache filled first, not in the study's time)": float(warm.stdout.strip()),
        "study_s": round(seconds, 1),
        "peak_rss_gb": round(usage.ru_maxrss / 1e6, 3),  # kB on Linux
        "exit": child.returncode,
    }
    if child.returncode == 0:
        figures["rows"] = len(json.loads(stdout))
    else:
        figures["error"] = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    return figures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, nargs="+", default=[1000, 10000], help="sessions of the user, per run")
    p.add_argument("--questions", type=int, default=6, help="questions spread over the stream")
    args = p.parse_args()
    print(f"{os.cpu_count()} cores, load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as root:
        for n in args.sessions:
            print(json.dumps(run(n, args.questions, Path(root))), flush=True)
    print("load average after: " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
