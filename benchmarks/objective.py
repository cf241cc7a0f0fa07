"""Benchmark one evaluation of the learner's objective against the bare numpy floor.

The floor is what any implementation must do: one matrix-vector product of the training
factors with w, and one per-row partition to find each haystack's keep threshold. The
objective adds the tie-aware gold counting. Also prints the full study cost per case, so a
reader can predict a LongMemEval-S run (479 cases, about 500 turns each).

Run: .venv/bin/python benchmarks/objective.py [--dataset locomo]
"""

import argparse
import json
import time

import numpy as np


def best_of(fn, repeat=7, number=20):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return min(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", default="locomo")
    p.add_argument("--skip-study", action="store_true")
    args = p.parse_args()
    from memlib.metrics import RetentionEvaluator
    from memlib.studies import DataSpec
    from memlib.studies.mlp import mlp_ablation
    from memlib.studies.oracle_blind import oracle_vs_blind

    ds, anns = DataSpec(args.dataset).load()
    out = {"dataset": args.dataset}
    rng = np.random.default_rng(0)
    for regime, ann in anns.items():
        cs = ann.cases
        train = cs.subset(np.flatnonzero(np.isin(cs.groups, np.unique(cs.groups)[::2])))
        ev = RetentionEvaluator(train, 0.3)
        w = rng.random(7) * train.live_factors
        live = train.live_factors
        F = np.ascontiguousarray(train.factors[..., live]).reshape(-1, int(live.sum()))
        G, N = train.factors.shape[:2]
        wl = w[live].astype(np.float32)
        kth = N - int(np.ceil(0.3 * N))

        def floor(F=F, wl=wl, G=G, N=N, kth=kth):
            s = (F @ wl).reshape(G, N)
            np.partition(s, kth, axis=1)

        t_floor = best_of(floor)
        t_obj = best_of(lambda ev=ev, w=w: ev.objective(w))
        out[regime] = {
            "haystacks": int(G),
            "turns_per_haystack": int(N),
            "cases": int(train.n_cases),
            "floor_ms": round(t_floor * 1e3, 3),
            "objective_ms": round(t_obj * 1e3, 3),
            "objective_over_floor": round(t_obj / t_floor, 2),
        }
    if not args.skip_study:
        t = time.perf_counter()
        oracle_vs_blind(args.dataset)
        study = time.perf_counter() - t
        t = time.perf_counter()
        mlp_ablation(args.dataset)
        mlp = time.perf_counter() - t
        n = int(anns["blind"].cases.n_cases)
        turns = int(anns["blind"].cases.length[anns["blind"].cases.case_haystack].sum())
        out["oracle_vs_blind_seconds"] = round(study, 1)
        out["mlp_ablation_seconds"] = round(mlp, 1)
        out["cases"] = n
        out["oracle_vs_blind_ms_per_case"] = round(study / n * 1e3, 2)
        out["oracle_vs_blind_us_per_case_turn"] = round(study / turns * 1e6, 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
