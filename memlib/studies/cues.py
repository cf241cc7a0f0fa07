"""Chapter 09: what to remember, learned from many cheap cues (issue 9).

The paper's value mixes seven fixed factors. Here a linear value mixes the blind
cues of :mod:`memlib.cues`, with signed weights, and we ask how much retention
that buys, which learner finds it, how much a non-linear model over the same
cues would add, whether it transfers across datasets, and which cues carry it.

The work is split by concept: :mod:`memlib.studies.cue_data` holds :class:`CueData` (blind cases
and their cue table) and its loader :func:`load_cue_data`; :mod:`memlib.studies.cue_learners`
fits one value model (:func:`fit_cue_model`, the paper's value :func:`paper_weights`);
:mod:`memlib.studies.cue_analyses` holds the pure functions over a :class:`CueData`, unit-tested
on planted data: :func:`evaluate` (every learner on the same splits), :func:`ablation`,
:func:`weight_table`, :func:`transfer`, :func:`keep_fraction_curve`. This module reads their
results (:func:`headline`, :func:`learner_table`, :func:`read_weights`...) and runs them all:
:func:`cue_study` loads its data and calls :func:`cue_study_on_data`. It re-exports the names
of the three.

Every model is fit on the training cases of a split and scored on its test cases.
Linear learners see the cues standardised by the training turns' mean and
standard deviation (an affine map: the same class of linear values, better
conditioned for the search); *calibrated* cues are percentile ranks within each
history (:meth:`memlib.cues.CueTable.calibrated`).

>>> LINEAR_LEARNERS
('hill_climb', 'cma_es', 'surrogate', 'surrogate+hill_climb')
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib._checks import ParameterError, check_fraction, check_int
from memlib.learning import retention_mass
from memlib.metrics import expected_random_retention
from memlib.studies._common import group_splits, quick_splits, split_plan
from memlib.studies.cue_analyses import (
    CURVE_FRACTIONS,
    KEYS,
    ablation,
    evaluate,
    keep_fraction_curve,
    logo_splits,
    paired_gap,
    summarise_cases,
    transfer,
    transfer_share,
    weight_table,
)
from memlib.studies.cue_data import CUE_MODELS, READS, CueData, load_cue_data
from memlib.studies.cue_learners import (
    LEARNERS,
    LINEAR_LEARNERS,
    MODEL_LEARNERS,
    NONLINEAR_LEARNERS,
    PAPER_MODEL,
    fit_cue_model,
    learner_budget,
    paper_weights,
    shared_fits,
    single_thread,
)
from memlib.studies.cue_learners import _table_of as _table_of  # re-exported: memlib.studies.transfer reads it
from memlib.studies.data_spec import LOCOMO, DataSpec

#: At most this many groups: also run leave-one-group-out (LoCoMo: 10 conversations).
LOGO_MAX_GROUPS = 30

# --------------------------------------------------------------------------- reading the results

#: The headline cue value, declared before the full runs: every cue, calibrated, the convex
#: surrogate (deterministic; the model of the weight table). It was chosen after a quick
#: three-conversation LoCoMo run, in which it and its hill-climb refinement were level.
HEADLINE = {"model": "cues", "learner": "surrogate", "calibrated": True}


def headline(summary: pd.DataFrame, evaluation: str = "grouped") -> pd.Series:
    """Return the :data:`HEADLINE` row of ``summary`` for one evaluation."""
    d = summary[summary["evaluation"] == evaluation]
    for k, v in HEADLINE.items():
        d = d[d[k] == v]
    if len(d) != 1:
        raise ParameterError(f"no single headline row for evaluation {evaluation!r}")
    return d.iloc[0]


def learner_table(summary: pd.DataFrame, evaluation: str = "grouped") -> pd.DataFrame:
    """One row per model and learner; raw and calibrated ``mean [ci_low, ci_high]`` side by side."""
    d = summary[summary["evaluation"] == evaluation].copy()
    d["cell"] = [f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in zip(d["mean"], d["ci_low"], d["ci_high"])]
    d["cues"] = np.where(d["calibrated"], "calibrated", "raw")
    out = d.pivot_table(index=["model", "learner"], columns="cues", values="cell", aggfunc="first", sort=False)
    return out.reset_index().rename_axis(columns=None).fillna("—")


def gold_profile(data: CueData) -> pd.DataFrame:
    """For each binary cue: its share among gold turns and among all turns of the histories.

    A cue far more common among gold turns than among turns in general is a strong signal;
    when the cue is about *where* a turn sits (``first_in_session``) rather than what it says,
    the signal is more likely how the benchmark placed its evidence than how people talk.
    """
    cs = data.cases
    t = retention_mass(cs) > 0
    valid = data.raw.valid
    rows = []
    for name in ("is_user", "first_in_session", "is_question", "first_person", "hedge"):
        if name not in data.raw.names:
            continue
        v = data.raw.values[..., data.raw.names.index(name)] > 0.5
        rows.append(
            {
                "cue": name,
                "share_of_gold_turns": float(v[t].mean()) if t.any() else np.nan,
                "share_of_all_turns": float(v[valid].mean()),
            }
        )
    out = pd.DataFrame(rows)
    out["ratio"] = out["share_of_gold_turns"] / out["share_of_all_turns"].where(out["share_of_all_turns"] > 0)
    return out


def read_weights(table: pd.DataFrame, top: int = 4) -> str:
    """Put the weight table in words.

    It names the cues that mark turns to keep, those that mark turns to forget, and those whose sign the
    data do not settle (95% intervals).
    """

    def names(d):
        d = d.reindex(d["weight"].abs().sort_values(ascending=False).index).head(top)
        return ", ".join(f"{c} ({w:+.2f})" for c, w in zip(d["cue"], d["weight"])) or "none"

    keep = table[table["sign"] == "+"]
    drop = table[table["sign"] == "-"]
    unsure = table[table["sign"] == "?"]
    constant = table[table["sign"] == "constant"]
    text = (
        f"keep turns high on {names(keep)}; forget turns high on {names(drop)}; "
        f"{len(unsure)} cue(s) have no settled sign ({', '.join(unsure['cue']) or 'none'})"
    )
    if len(constant):
        text += f"; {', '.join(constant['cue'])} do(es) not vary in these data"
    return text


def curve_table(curve: pd.DataFrame) -> pd.DataFrame:
    """Put the keep-fraction curve in the layout of :func:`memlib.plots.sweep_lines` (``policy`` column)."""
    return curve.rename(columns={"model": "policy"})


# --------------------------------------------------------------------------- the whole study


@dataclass
class CueStudyResult:
    """Result of :func:`cue_study`.

    Attributes
    ----------
    summary : DataFrame
        The published table: ``evaluation, model, learner, calibrated, regime, keep_fraction, mean,
        std, ci_low, ci_high, n_splits`` (and ``source`` for transfer rows).
    per_case : DataFrame
    weights : DataFrame
        Per-split linear weights (``model, learner, calibrated, split, cue, weight``).
    weight_table : DataFrame
        :func:`weight_table` (calibrated cues, surrogate, all cases, bootstrap intervals).
    ablation : DataFrame
    transfer : DataFrame
        :func:`transfer_share` (empty without a transfer dataset).
    curve : DataFrame
        :func:`keep_fraction_curve`.
    cues : DataFrame
        The cue table with measured costs (:meth:`memlib.cues.CueTable.cost_table`).
    gaps : DataFrame
        Paired gaps with intervals: best linear minus best non-linear, and others.
    gold_profile : DataFrame
        :func:`gold_profile`.
    info : dict
    """

    summary: pd.DataFrame
    per_case: pd.DataFrame
    weights: pd.DataFrame
    weight_table: pd.DataFrame
    ablation: pd.DataFrame
    transfer: pd.DataFrame
    curve: pd.DataFrame
    cues: pd.DataFrame
    gaps: pd.DataFrame
    gold_profile: pd.DataFrame = None
    info: dict = field(default_factory=dict)


@shared_fits()  # one surrogate fit per training table for the whole study
def cue_study_on_data(
    data, keep_fraction=0.3, n_splits=10, seed=0, quick=False, source=None, n_boot=1000, weight_boot=50, progress=False
) -> CueStudyResult:
    """Run the whole cue study on loaded :class:`CueData` (``source``: another one to transfer from)."""
    import time

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    n_splits = check_int("n_splits", n_splits, minimum=2)
    t0 = time.perf_counter()
    splits, seeds = split_plan(data.cases.groups, n_splits, seed, data.cases.keys)
    per_case, weights = evaluate(data, splits, seeds, keep_fraction, quick=quick, progress=progress)
    parts = [per_case]
    n_groups = len(np.unique(data.cases.groups))
    if n_groups <= LOGO_MAX_GROUPS:
        lsplits = logo_splits(data.cases.groups)
        lseeds = np.random.SeedSequence(seed + 1).generate_state(len(lsplits))
        logo, _ = evaluate(
            data,
            lsplits,
            lseeds,
            keep_fraction,
            learners=("surrogate", "surrogate+hill_climb"),
            calibrations=(True,),
            quick=quick,
            evaluation="leave_one_group_out",
            progress=progress,
        )
        parts.append(logo)
    if source is not None:
        parts.append(
            transfer(
                source,
                data,
                splits,
                keep_fraction,
                learners=("surrogate", "surrogate+hill_climb"),
                seed=seed,
                quick=quick,
            )
        )
    per_case = pd.concat(parts, ignore_index=True)
    summary = summarise_cases(per_case, keep_fraction, n_boot=n_boot, seed=seed)
    if source is not None:
        summary["source"] = np.where(summary["evaluation"] == "transfer", source.name, data.name)
    random_level = expected_random_retention(data.cases, keep_fraction)
    gaps = _gaps(per_case, summary, n_boot, seed)
    result = CueStudyResult(
        summary=summary,
        per_case=per_case,
        weights=weights,
        weight_table=weight_table(data, n_boot=weight_boot, seed=seed, keep_fraction=keep_fraction, quick=quick),
        ablation=ablation(data, splits, seeds, keep_fraction, n_boot=n_boot, seed=seed, quick=quick),
        transfer=transfer_share(summary, random_level) if source is not None else pd.DataFrame(),
        curve=keep_fraction_curve(data, splits, seeds, quick=quick),
        cues=data.raw.cost_table(),
        gaps=gaps,
        gold_profile=gold_profile(data),
        info={
            **data.info,
            "expected_random": random_level,
            "n_groups": n_groups,
            "source": None if source is None else source.name,
            "seconds_study": time.perf_counter() - t0,
        },
    )
    return result


def _gaps(per_case, summary, n_boot, seed) -> pd.DataFrame:
    """Paired gaps on the grouped splits.

    The best linear cue value minus the best non-linear one and the paper's value; every model with
    position cues minus without. ``gap`` names the kind of each row (``linear_vs_nonlinear``,
    ``linear_vs_paper``, ``position_cues``); ``comparison`` says what it compares.
    """
    g = summary[summary["evaluation"] == "grouped"]
    lin = g[g["learner"].isin(LINEAR_LEARNERS) & (g["model"] == "cues")].sort_values("mean").iloc[-1]
    non = g[g["learner"].isin(NONLINEAR_LEARNERS) & (g["model"] == "cues")].sort_values("mean").iloc[-1]
    base = {"evaluation": "grouped"}

    def sel(r):
        return {**base, "model": r["model"], "learner": r["learner"], "calibrated": r["calibrated"]}

    def name(r):
        return f"{r['model']}/{r['learner']}/{'calibrated' if r['calibrated'] else 'raw'}"

    rows = [
        {
            "gap": "linear_vs_nonlinear",
            "comparison": f"{name(lin)} - {name(non)}",
            **paired_gap(per_case, sel(lin), sel(non), n_boot, seed),
        },
        {
            "gap": "linear_vs_paper",
            "comparison": f"{name(lin)} - {PAPER_MODEL}",
            **paired_gap(per_case, sel(lin), {**base, "model": PAPER_MODEL}, n_boot, seed),
        },
    ]
    for learner in LEARNERS:
        for cal in (False, True):
            a = {**base, "model": "cues", "learner": learner, "calibrated": cal}
            b = {**a, "model": "cues_no_position"}
            rows.append(
                {
                    "gap": "position_cues",
                    "comparison": f"position cues: {learner}/{'calibrated' if cal else 'raw'}",
                    **paired_gap(per_case, a, b, n_boot, seed),
                }
            )
    return pd.DataFrame(rows)


def cue_study(
    data: DataSpec | str = LOCOMO,
    keep_fraction: float = 0.3,
    n_splits: int = 10,
    seed: int = 0,
    transfer_from: DataSpec | str | None = None,
    progress: bool = False,
) -> CueStudyResult:
    """Run the cue study on ``data`` (see the module docstring).

    ``transfer_from`` is data to learn on and test here (a dataset name reads it as ``data`` reads its
    own: quick mode, embedding).
    """
    data = DataSpec.of(data).reads("cues", *READS)
    here = load_cue_data(data, progress=progress)
    source = None
    if transfer_from is not None:
        like = DataSpec(quick=data.quick, embedding_setting=data.embedding_setting)
        spec = DataSpec.of(transfer_from, like=like)
        source = load_cue_data(spec, progress=progress)
    return cue_study_on_data(
        here,
        keep_fraction,
        quick_splits(n_splits, data.quick),
        seed,
        data.quick,
        source,
        n_boot=200 if data.quick else 1000,
        weight_boot=5 if data.quick else 50,
        progress=progress,
    )


#: Everything before the split into cue_data, cue_learners and cue_analyses is still importable from here.
__all__ = [
    "CURVE_FRACTIONS",
    "CUE_MODELS",
    "CueData",
    "CueStudyResult",
    "KEYS",
    "LEARNERS",
    "LINEAR_LEARNERS",
    "MODEL_LEARNERS",
    "NONLINEAR_LEARNERS",
    "PAPER_MODEL",
    "ablation",
    "cue_study",
    "cue_study_on_data",
    "evaluate",
    "fit_cue_model",
    "group_splits",
    "keep_fraction_curve",
    "learner_budget",
    "load_cue_data",
    "logo_splits",
    "paired_gap",
    "paper_weights",
    "single_thread",
    "summarise_cases",
    "transfer",
    "transfer_share",
    "weight_table",
]
