"""Measure what the echo rule does to retrieval, each corpus held out: recall_any@10 with and without it (issue 31).

The store's retrieval (:func:`memlib.store.rank`) places a reply that restates the user's
turn just before it after that turn (:func:`memlib.store.retrieval.sources_first`: "Noted, no
peanuts." after "I am allergic to peanuts."). Issue 31 asks that this rule lower
``recall_any@10`` on no held-out corpus. For each corpus left out, this script:

* learns the shipped value model (the store cues with their user interactions,
  :func:`memlib.feature_fits.fit_cue_value`) on the other corpora, as the defaults study does;
* replays every history through the shipped store (:func:`memlib.store.default_policy`, the
  adaptive store of ``memlib/defaults.json``) at its budget (keep 30%);
* ranks each question over the kept turns twice: by the store's rule (:func:`memlib.store.rank`),
  and by the policy's retrieval scores alone (the highest first, ties to the older turn: the rule
  without its echo step);
* prints the mean recall_any@10 of each, the paired difference and its 95% interval over
  conversations / questions / users (:func:`memlib.metrics.grouped_summary`).

Blind: nothing here reads a question before the history is replayed; the question only ranks.

Run: MEMLIB_DATA_DIR=... PYTHONPATH=. .venv/bin/python benchmarks/echo_rule.py [--sample N] [--k 10]
(all data by default; the corpora come from the result cache after their first load).
"""

import argparse
import dataclasses
import json
import time

import numpy as np
import pandas as pd


def by_scores_alone(view, policy, query_vec, query_valence, k):
    """The store's order without its echo step: the policy's retrieval scores, the highest first, ties to the older."""
    scores = policy.retrieval_scores(view, query_vec, query_valence, view.now)  # a replay's views never expire
    return np.argsort(-scores, kind="stable")[:k]


def main() -> None:
    from memlib.feature_fits import fit_cue_value
    from memlib.learning import retention_mass
    from memlib.metrics import grouped_summary
    from memlib.store.policies import default_policy
    from memlib.studies.corpora import kept, load_corpus, recall_per_case
    from memlib.studies.data_spec import DataSpec
    from memlib.studies.defaults import DATASETS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sample", type=int, default=None, help="a seeded sample of groups of each corpus (default: all)")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--keep", type=float, default=0.3, help="share of each history kept")
    args = p.parse_args()

    t0 = time.perf_counter()
    spec = DataSpec(sample=args.sample)
    corpora = {d: load_corpus(dataclasses.replace(spec, dataset=d), progress=True) for d in DATASETS}
    load_s = time.perf_counter() - t0
    policy = default_policy()
    rows = []
    for held_out, h in corpora.items():
        train = [c for name, c in corpora.items() if name != held_out]
        value = fit_cue_value([(c.cues, c.cases.length, retention_mass(c.cases)) for c in train], interactions=True)
        masks = kept(h, value, policy, args.keep)
        (a,), _ = recall_per_case(h, value, masks, [policy], args.k)
        (b,), _ = recall_per_case(h, value, masks, [policy], args.k, ranking=by_scores_alone)
        ok = np.isin(np.arange(h.cases.n_cases), h.cases.gold_case)  # the questions with gold evidence
        for label, x in (("with echo rule", a), ("without", b), ("difference", a - b)):
            rows.append(
                pd.DataFrame({"dataset": held_out, "config": label, "value": x[ok], "group": h.cases.groups[ok]})
            )
    table = grouped_summary(pd.concat(rows, ignore_index=True), ["dataset", "config"], 1000, 0)
    changed = {
        d: int((r["value"] != 0).sum()) for d, r in pd.concat(rows).query("config == 'difference'").groupby("dataset")
    }
    print(
        json.dumps(
            {
                "metric": f"recall_any@{args.k}",
                "policy": type(policy).__name__,
                "keep": args.keep,
                "sample": args.sample,
                "load_s": round(load_s, 1),
                "questions_that_changed": changed,
                "table": table.round(4).to_dict(orient="records"),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
