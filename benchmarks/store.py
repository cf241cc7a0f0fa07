"""Benchmark the memory store: replay a whole dataset through it, session by session.

Prints the wall time of replaying every history of the dataset (default: all of LoCoMo)
into a MemoryStore with the value policy, consolidating at every session end, from cached
embeddings; and how large the store gets against its budget and the history length, with
the bytes its arrays hold at the peak.

Run: .venv/bin/python benchmarks/store.py [--dataset locomo] [--budget 0.3]
"""

import argparse
import json
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", default="locomo")
    p.add_argument("--budget", type=float, default=0.3)
    args = p.parse_args()
    from memlib import experiments
    from memlib.embeddings import embed
    from memlib.factors import emotional_intensity
    from memlib.store import MemoryStore, ValuePolicy

    ds, anns = experiments.load_regimes(args.dataset)
    usable = ds.usable()
    histories = {}
    for c, hay in enumerate(usable.cases["haystack"]):
        histories.setdefault(hay, c)
    E = embed(ds.turns["text"].tolist(), progress=False)  # from the cache
    emotion = emotional_intensity(ds.turns["text"].tolist())

    sizes = []
    t0 = time.perf_counter()
    for hay, c in histories.items():
        rows = usable.haystack_rows(c)
        budget = int(np.ceil(args.budget * len(rows)))
        st = MemoryStore(policy=ValuePolicy())
        turns = ds.turns
        ts = ((turns["timestamp"].to_numpy()[rows] - np.datetime64("1970-01-01")) / np.timedelta64(1, "D"))
        sess = turns["session"].to_numpy()[rows]
        peak, peak_bytes = 0, 0
        for i, r in enumerate(rows):
            st.add(turns["text"].iat[r], role=turns["role"].iat[r], time=float(ts[i]), speaker=turns["speaker"].iat[r],
                   session=sess[i], embedding=E[r], emotion=float(emotion[r]))
            if i == len(rows) - 1 or sess[i + 1] != sess[i]:
                if len(st) > peak:
                    peak = len(st)
                    peak_bytes = st.embeddings.nbytes + st.factors.nbytes + 5 * 8 * len(st)
                st.consolidate(budget)
        sizes.append({"history": len(rows), "budget": budget, "peak_items": peak, "final_items": len(st),
                      "peak_bytes": peak_bytes})
    seconds = time.perf_counter() - t0
    s = {k: [d[k] for d in sizes] for k in sizes[0]}
    out = {
        "dataset": args.dataset, "histories": len(histories), "turns_replayed": int(sum(s["history"])),
        "budget_share": args.budget, "replay_seconds": round(seconds, 2),
        "turns_per_second": round(sum(s["history"]) / seconds, 1),
        "max_history": max(s["history"]), "max_budget": max(s["budget"]),
        "max_peak_items": max(s["peak_items"]), "max_final_items": max(s["final_items"]),
        "peak_items_over_budget_max": round(max(p / b for p, b in zip(s["peak_items"], s["budget"])), 2),
        "max_peak_bytes": max(s["peak_bytes"]),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
