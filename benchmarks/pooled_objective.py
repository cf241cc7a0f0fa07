"""The learner's objective on pooled corpora: one common padded width against rows grouped by length.

The transfer, usage and defaults studies learn on corpora pooled together (``memlib.studies.transfer.concat``):
RealMem's nested histories run from a few turns to 1,793, LongMemEval-S's about 500. ``RetentionEvaluator``
pads and partitions rows of similar length together (``memlib.padded_rows.length_buckets``); this times one
objective call both ways on the same rows, in one run (the machine is shared: read the ratio), and checks that
both give the same objective for every weight vector it times.

Run: .venv/bin/python benchmarks/pooled_objective.py [--sample 10] [--keep 0.3]
(``--sample 0``: every question, user and conversation; needs the corpora's annotations, cached or computed.)
"""

import argparse
import json
import os
import timeit

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sample", type=int, default=10, help="groups of each corpus (0: all)")
    p.add_argument("--keep", type=float, default=0.3)
    args = p.parse_args()
    import memlib.padded_rows as padded_rows
    from memlib.metrics import RetentionEvaluator
    from memlib.studies.cue_data import load_cue_data
    from memlib.studies.data_spec import DataSpec
    from memlib.studies.transfer import CORPORA, concat

    sample = args.sample or None
    datas = {n: load_cue_data(DataSpec(dataset=n, sample=sample)) for n in CORPORA}
    rng = np.random.default_rng(0)
    out = {"sample": sample, "keep_fraction": args.keep}
    pools = {n: [n] for n in CORPORA} | {"+".join(o): o for o in ([c for c in CORPORA if c != t] for t in CORPORA)}
    default_cost = padded_rows.BUCKET_COST
    for name, members in pools.items():
        cs = concat([datas[n] for n in members]).cases if len(members) > 1 else datas[members[0]].cases
        evs = {}
        for label, cost in (("one_width", 10**15), ("by_length", default_cost)):
            padded_rows.BUCKET_COST = cost
            evs[label] = RetentionEvaluator(cs, args.keep)
        padded_rows.BUCKET_COST = default_cost
        ws = [rng.random(7) for _ in range(5)]
        same = all(evs["one_width"].objective(w) == evs["by_length"].objective(w) for w in ws)
        ms = {
            label: min(timeit.repeat(lambda ev=ev, ws=ws: [ev.objective(w) for w in ws], repeat=5, number=10))
            / 10
            / len(ws)
            * 1e3
            for label, ev in evs.items()
        }
        padded = {label: int(sum(b.pad.size for b in ev._buckets)) for label, ev in evs.items()}
        out[name] = {
            "haystacks": int(cs.n_haystacks),
            "groups": len(evs["by_length"]._buckets),
            "padded_elements": padded,
            "ms_per_call": {k: round(v, 3) for k, v in ms.items()},
            "speed_up": round(ms["one_width"] / ms["by_length"], 2),
            "same_objective": same,
        }
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
