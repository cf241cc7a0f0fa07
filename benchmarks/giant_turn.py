"""Benchmark a giant turn: peak memory and time to annotate a dataset with one 200 MB turn (issue 22).

Writes a gzip-compressed JSON Lines dataset to a temporary folder: one conversation whose
sessions hold a few ordinary turns and one turn of ``--mb`` megabytes (ordinary words,
repeated: a few hundred kB compressed), with a question whose gold is an ordinary turn. A
fresh process (so that the figure is its own) loads it and annotates it with
``memlib.factors.annotate`` (the blind regime, empty caches under the temporary folder),
then prints its peak resident memory (``resource.getrusage(...).ru_maxrss``) and seconds.

Before the text was cut for the tokenizer (``memlib._text.cut_to_word_pieces``) and for the
text heuristics (``memlib._text.bounded``), the tokenizer took such a process past 12 GB and
the machine killed it. Target: at most 2 GB.

Run: .venv/bin/python benchmarks/giant_turn.py [--mb 200] [--embedding reference|fast|int8]
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, resource, sys, time
import numpy as np
t0 = time.perf_counter()
from memlib import datasets, factors
ds = datasets.load(sys.argv[1])
t_load = time.perf_counter() - t0
ann = factors.annotate(ds, "blind", embedding_setting=sys.argv[2], progress=False)
peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux
figures = {
    "peak_rss_gb": round(peak_kb / 1e6, 3),
    "seconds": round(time.perf_counter() - t0, 1),
    "seconds_loading": round(t_load, 1),
    "longest_turn_chars": max(len(t) for t in ds.texts),
    "haystacks": ann.cases.n_haystacks,
    "factors_finite": bool(np.isfinite(ann.cases.factors).all()),
}
print(json.dumps(figures))
"""


def write_dataset(folder: Path, megabytes: float) -> Path:
    """A gzip JSON Lines file with one turn of ``megabytes`` MB of words and a few ordinary turns."""
    words = "the agent will remember what matters and forget what does not, said Ana on Tuesday. "
    giant = (words * (int(megabytes * 1e6) // len(words) + 1))[: int(megabytes * 1e6)]
    record = {
        "conversation_id": "giant",
        "sessions": [
            {
                "session_id": "s1",
                "date": "2024-01-05T10:00:00",
                "turns": [
                    {"role": "user", "speaker": "Ana", "text": "I am allergic to peanuts."},
                    {"role": "assistant", "text": "Noted: no peanuts."},
                    {"role": "user", "speaker": "Ana", "text": giant},
                    {"role": "assistant", "text": "That was a long message!"},
                ],
            },
            {
                "session_id": "s2",
                "date": "2024-01-06T09:00:00",
                "turns": [
                    {"role": "user", "speaker": "Ana", "text": "My sister Eva visits on Friday."},
                    {"role": "assistant", "text": "Have a lovely visit."},
                ],
            },
        ],
        "questions": [{"question_id": "q1", "question": "What is Ana allergic to?", "evidence": [["s1", 0]]}],
    }
    path = folder / "giant.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
        f.write(json.dumps(record) + "\n")
    return path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=float, default=200.0, help="size of the giant turn in MB (default 200)")
    p.add_argument("--embedding", default="reference", choices=["reference", "fast", "int8"])
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="memlib-giant-") as tmp:
        t0 = time.perf_counter()
        path = write_dataset(Path(tmp), args.mb)
        print(
            f"wrote {path.name}: a {args.mb:g} MB turn, {path.stat().st_size / 1e6:.2f} MB gzip, "
            f"in {time.perf_counter() - t0:.1f} s"
        )
        env = {"MEMLIB_CACHE_DIR": str(Path(tmp) / "cache"), "PATH": "/usr/bin:/bin"}
        env.update({k: os.environ[k] for k in ("HOME", "LANG", "PYTHONPATH", "MEMLIB_DEVICE") if k in os.environ})
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(path), args.embedding], capture_output=True, text=True, env=env
        )
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"the annotating process failed (exit status {out.returncode})")
        figures = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"annotate ({args.embedding}): peak RSS {figures['peak_rss_gb']:.2f} GB, {figures['seconds']:.1f} s "
        f"({figures['seconds_loading']:.1f} s loading); target <= 2 GB"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
