"""Chapter 08's comparison: our Table 3 beside the paper's, and what explains each gap.

:func:`paper_comparison` puts our means beside the paper's figures (the only column that
holds one); :func:`explain_gaps` says, for each row, whether its gap is within a threshold,
within what the paper's two extra questions can move (:data:`MISSING_CASES_BOUND`), or closed
by some reading of Table 1 (:func:`memlib.studies.reproduction.reading_table`,
:func:`~memlib.studies.reproduction.variant_table`); otherwise it gives the range the readings span.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Bound on how far the paper's two extra usable questions (479 against our 477) can move a mean
#: retention: each case's retention lies in [0, 1], so at most 2 / 479.
MISSING_CASES_BOUND = 2 / 479


def explain_gaps(
    comparison: pd.DataFrame,
    readings: pd.DataFrame | None = None,
    threshold: float = 0.03,
    variants: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """For each row of ours beside the paper's, whether the gap exceeds ``threshold`` and what measures it.

    ``comparison`` has ``policy, regime, ours, paper``. The explanation is
    computed, not written: a gap within :data:`MISSING_CASES_BOUND` is covered by
    the two questions the cleaned file lacks; a single-factor gap that some
    reading of its definition closes to within ``threshold`` (``readings`` from
    :func:`~memlib.studies.reproduction.reading_table`), or a learned or uniform gap that some variant closes
    (``variants`` from :func:`~memlib.studies.reproduction.variant_table`, same regime), names that reading;
    otherwise the note gives the range the readings we tried span, so the reader
    sees that none reaches the paper's figure. Readings and variants are of the
    ``paper`` factor set, so rows of another ``factor_set`` get no reading.
    """
    out = comparison.copy()
    out["gap"] = out["ours"] - out["paper"]
    alternatives = []
    if readings is not None:
        alternatives.append(readings.assign(regime="blind")[["policy", "regime", "reading", "retention"]])
    if variants is not None:
        alternatives.append(
            variants.rename(columns={"variant": "reading", "mean": "retention"})[
                ["policy", "regime", "reading", "retention"]
            ]
        )
    alt = pd.concat(alternatives, ignore_index=True) if alternatives else None
    notes = []
    for _, r in out.iterrows():
        if not np.isfinite(r["gap"]):
            notes.append("")
            continue
        if abs(r["gap"]) <= threshold:
            notes.append(f"within {threshold:.2f}")
            continue
        if abs(r["gap"]) <= MISSING_CASES_BOUND:
            notes.append("within what the 2 missing questions can move")
            continue
        note = f"not explained by the 2 missing questions (at most {MISSING_CASES_BOUND:.3f})"
        # the readings and variants are of the paper's factor set: they explain only its rows
        if alt is not None and r.get("factor_set", "paper") == "paper":
            rr = alt[(alt["policy"] == r["policy"]) & (alt["regime"] == r["regime"])]
            if len(rr):
                best = rr.iloc[(rr["retention"] - r["paper"]).abs().argmin()]
                lo, hi = rr["retention"].min(), rr["retention"].max()
                if abs(best["retention"] - r["paper"]) <= threshold:
                    note += f"; the reading '{best['reading']}' gives {best['retention']:.3f}"
                else:
                    note += f"; no reading we tried reaches it ({len(rr)} readings, {lo:.3f} to {hi:.3f})"
        notes.append(note)
    out["explanation"] = notes
    return out


def paper_comparison(summary: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Our Table 3 means beside the paper's: ``factor_set, regime, policy, mean, std, paper_mean``.

    ``paper_mean`` is NaN where the paper reports nothing (or the dataset is not
    the paper's); it is the only column that holds a figure from the paper.
    """
    from memlib import paper

    cols = [c for c in ("factor_set", "regime", "policy", "mean", "std") if c in summary]
    out = summary[cols].copy()
    if dataset == paper.PAPER_DATASET:
        means = paper.table3_means()
        out["paper_mean"] = [means.get((p, r), np.nan) for p, r in zip(out["policy"], out["regime"])]
    else:
        out["paper_mean"] = np.nan
    return out.reset_index(drop=True)
