"""Benchmark the defaults study's replays: every forgetting rule through ``kept`` on a RealMem sample (issue 33).

The defaults study (chapter 06) replays every history of each corpus through the store's
replay (:func:`memlib.store.held_after`) under 27 forgetting configurations, for 9 pairs of
training and tested corpora; RealMem's histories are nested (each question's history is a
prefix of its user's later ones), so most of its consolidations are replayed many times over.
This times one replay of every history of a seeded RealMem sample per rule, in one process:

* ``value`` (one sort serves every cut), ``eq3`` (the paper's rule: a decision per session end),
  ``adaptive`` (a decision per session end, and the stream's references);
* ``adaptive, table per history``: the adaptive store with its reference table counted for each
  history apart (what a replay does when it is not given one), beside the corpus's shared tables
  (:meth:`memlib.studies.corpora.Corpus.references`, counted once per user).

The held sets are compared too: every way of counting must keep the same turns. Load first
(the corpus comes from the result cache after its first load).

Run: PYTHONPATH=. .venv/bin/python benchmarks/replays.py [--users 2] [--repeats 3]
"""

import argparse
import json
import statistics
import time

import numpy as np


def main() -> None:
    from memlib.metrics import keep_count
    from memlib.store import held_after
    from memlib.studies.corpora import kept, load_corpus
    from memlib.studies.data_spec import DataSpec
    from memlib.studies.defaults import policy_of
    from memlib.value import load_defaults

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=2, help="RealMem users in the seeded sample (>= 2)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each (the median is printed)")
    p.add_argument("--keep", type=float, default=0.3, help="share of each history kept")
    args = p.parse_args()

    t0 = time.perf_counter()
    h = load_corpus(DataSpec("realmem", sample=args.users))
    load_s = time.perf_counter() - t0
    value = load_defaults()["value"]

    def per_history_tables(policy):
        out = np.zeros(h.session.shape, bool)
        for g in range(h.session.shape[0]):
            n = int(h.cases.length[g])
            b = int(keep_count([n], args.keep)[0])
            out[g, held_after(h.view(g, value), policy, h.session[g, :n], [(n, b)]).held[0]] = True
        return out

    runs = {
        "value": lambda: kept(h, value, policy_of("value"), args.keep),
        "eq3": lambda: kept(h, value, policy_of("eq3", beta=1.0), args.keep),
        "adaptive": lambda: kept(h, value, policy_of("adaptive", value_scale=1.0), args.keep),
        "adaptive, table per history": lambda: per_history_tables(policy_of("adaptive", value_scale=1.0)),
    }
    rows, held = [], {}
    for name, run in runs.items():
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            held[name] = run()
            times.append(time.perf_counter() - t)
        rows.append({"rule": name, "median_s": round(statistics.median(times), 3), "runs": args.repeats})
    same = bool(np.array_equal(held["adaptive"], held["adaptive, table per history"]))
    print(
        json.dumps(
            {
                "users": args.users,
                "histories": int(h.session.shape[0]),
                "load_s": round(load_s, 1),
                "replays": rows,
                "shared_tables_keep_the_same_turns": same,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
