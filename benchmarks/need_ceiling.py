"""How far the adaptive store's need term can take each held-out corpus: its estimate beside fixed exponents.

The adaptive store (:class:`memlib.store.AdaptivePolicy`) forgets the item with the lowest
``value_scale * V-bar - b * log(lag)``, where ``b`` is estimated from the stream's own
references and kept at 0 until a likelihood-ratio interval excludes 0. This script asks two
questions of that design, each corpus held out (the shipped value model learned on the other
corpora, as the defaults study learns it; keep 30%, blind):

* **the estimate against its ceiling**: gold retention of the store as shipped, of the same
  store with the point estimate (``z = 0``), and of the same form with a *fixed* exponent ``b``
  for every stream and every consolidation. The best fixed ``b`` per corpus is chosen with the
  gold labels: it is a ceiling for this form of the need term, not a configuration anyone can
  ship;
* **other interval widths**: the same store with each ``z`` of :data:`OTHER_Z` but the shipped one
  (a larger ``z`` moves away from the prior only on stronger evidence);
* **a placebo** of each estimating store: the corpus with its user turns shuffled in time, as
  the defaults study's placebo (it must keep what the prior keeps);
* **what the estimate reads**: the share of consolidations at which the stream's exponent was
  above 0, and its quartiles there.

Beside them: dropping the lowest value first (the adaptive store's prior), first in, first out,
and eq. 3 with ``beta = 1`` on the same value. Each figure is the mean over the corpus's
questions with a 95% interval over conversations / questions / users
(:func:`memlib.metrics.grouped_summary`).

Run: MEMLIB_DATA_DIR=... PYTHONPATH=. .venv/bin/python benchmarks/need_ceiling.py [--sample N]
(all data by default; ``--sample 40`` reads a seeded 40 LongMemEval-S questions, all of LoCoMo and
RealMem: about 5 minutes warm).
"""

import argparse
import dataclasses
import json
import time

import numpy as np
import pandas as pd

#: The fixed exponents the ceiling is taken over.
FIXED = (0.25, 0.5, 1.0, 2.0)
#: Interval widths beside the shipped one: how much of each corpus's gain (or loss) is the
#: consolidations whose evidence is weakest (``z = 2`` is about a 95% interval, ``z = 3`` 99.7%).
OTHER_Z = (2.0, 3.0, 4.0)


def main() -> None:
    from memlib.feature_fits import fit_cue_value
    from memlib.learning import retention_mass
    from memlib.metrics import grouped_summary
    from memlib.store import AdaptivePolicy, make_policy
    from memlib.store.policies import default_policy
    from memlib.studies.corpora import kept, load_corpus, retention_per_case
    from memlib.studies.data_spec import DataSpec
    from memlib.studies.defaults import DATASETS, policy_of

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sample", type=int, default=None, help="a seeded sample of groups of each corpus (default: all)")
    p.add_argument("--keep", type=float, default=0.3, help="share of each history kept")
    args = p.parse_args()

    shipped = default_policy()
    if not isinstance(shipped, AdaptivePolicy):
        raise SystemExit("memlib/defaults.json ships no adaptive store: nothing to measure")
    scale, z = shipped.value_scale, shipped.z
    seen = []  # the exponent of every consolidation of the recording replay

    class Recorded(AdaptivePolicy):
        """The shipped store, recording the exponent it reads at each consolidation."""

        def exponent(self, view):
            b = super().exponent(view)
            seen.append(b)
            return b

    class FixedExponent(AdaptivePolicy):
        """The adaptive store's form with one exponent for every stream: a ceiling, chosen with labels."""

        def __init__(self, b):
            super().__init__(value_scale=scale, z=z, value_weight=0.0, mood_weight=0.0)
            self.b = b

        def exponent(self, view):
            return self.b

    configs = {
        "drop lowest value (prior)": policy_of("value"),
        f"adaptive as shipped (z={z:g})": Recorded(value_scale=scale, z=z, value_weight=0.0, mood_weight=0.0),
        "adaptive, point estimate (z=0)": AdaptivePolicy(value_scale=scale, z=0.0, value_weight=0.0, mood_weight=0.0),
        **{
            f"adaptive (z={s:g})": AdaptivePolicy(value_scale=scale, z=s, value_weight=0.0, mood_weight=0.0)
            for s in OTHER_Z
            if s != z
        },
        **{f"fixed b={b:g}": FixedExponent(b) for b in FIXED},
        "first in, first out": make_policy("memgpt_fifo"),
        "eq. 3, beta=1": policy_of("eq3", 1.0),
    }
    t0 = time.perf_counter()
    spec = DataSpec(sample=args.sample)
    corpora = {d: load_corpus(dataclasses.replace(spec, dataset=d), progress=True) for d in DATASETS}
    rows, exponents = [], {}
    for held_out, h in corpora.items():
        train = [c for name, c in corpora.items() if name != held_out]
        value = fit_cue_value([(c.cues, c.cases.length, retention_mass(c.cases)) for c in train], interactions=True)
        seen.clear()
        placebo = h.shuffled_references(0)  # the defaults study's placebo, seed 0
        for label, policy in configs.items():
            r = retention_per_case(h.cases, kept(h, value, policy, args.keep))  # as the defaults study scores it
            rows.append(pd.DataFrame({"dataset": held_out, "config": label, "value": r, "group": h.cases.groups}))
        b = np.asarray(seen)  # read before the placebo replays record theirs
        for label, policy in configs.items():
            if isinstance(policy, AdaptivePolicy) and not isinstance(policy, FixedExponent):
                r = retention_per_case(h.cases, kept(placebo, value, policy, args.keep))
                frame = {"dataset": held_out, "config": f"placebo of {label}", "value": r, "group": h.cases.groups}
                rows.append(pd.DataFrame(frame))
        above = b[b > 0]
        exponents[held_out] = {
            "consolidations": int(len(b)),
            "share_above_0": round(float(np.mean(b > 0)), 3) if len(b) else None,
            "quartiles_above_0": np.quantile(above, [0.25, 0.5, 0.75]).round(2).tolist() if len(above) else None,
        }
    table = grouped_summary(pd.concat(rows, ignore_index=True), ["dataset", "config"], 1000, 0)
    wide = table.pivot(index="config", columns="dataset", values="mean").reindex(table["config"].unique())
    print(
        json.dumps(
            {
                "keep": args.keep,
                "sample": args.sample,
                "value_scale": scale,
                "z": z,
                "questions": {d: int(c.cases.n_cases) for d, c in corpora.items()},
                "seconds": round(time.perf_counter() - t0, 1),
                "exponent_read": exponents,
                "table": json.loads(table.round(4).to_json(orient="records")),
            },
            indent=1,
        )
    )
    print(wide.round(3).to_string())


if __name__ == "__main__":
    main()
