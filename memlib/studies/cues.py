"""Chapter 09: what to remember, learned from many cheap cues (issue 9).

The paper's value mixes seven fixed factors. Here a linear value mixes the blind
cues of :mod:`memlib.cues`, with signed weights, and we ask how much retention
that buys, which learner finds it, how much a non-linear model over the same
cues would add, whether it transfers across datasets, and which cues carry it.

Pure functions over a :class:`CueData` (blind cases and their cue table),
unit-tested on planted data, do the work: :func:`evaluate` (every learner on the
same splits), :func:`ablation`, :func:`weight_table`, :func:`transfer`,
:func:`keep_fraction_curve`; :func:`cue_study` loads a dataset and runs them all.

Every model is fit on the training cases of a split and scored on its test cases.
Linear learners see the cues standardised by the training turns' mean and
standard deviation (an affine map: the same class of linear values, better
conditioned for the search); *calibrated* cues are percentile ranks within each
history (:meth:`memlib.cues.CueTable.calibrated`).

>>> LINEAR_LEARNERS
('hill_climb', 'cma_es', 'surrogate', 'surrogate+hill_climb')
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pandas as pd

from memlib._checks import ParameterError, check_choice, check_fraction, check_int
from memlib.cases import CaseSet
from memlib.cues import CUES, POSITION_GROUP, CueTable, compute_cues
from memlib.learning import (
    N_ITER,
    RESTARTS,
    _standardise,
    cma_es_signed,
    fit_gbm_ranker,
    fit_mlp,
    fit_pairwise_logistic,
    hill_climb,
    hill_climb_signed,
    retention_mass,
)
from memlib.metrics import RetentionEvaluator, expected_random_retention, paired_bootstrap
from memlib.studies._common import group_splits, require_cases, split_plan

#: Linear learners of the cue value (signed weights).
LINEAR_LEARNERS = ("hill_climb", "cma_es", "surrogate", "surrogate+hill_climb")
#: Non-linear ceilings over the same cues.
NONLINEAR_LEARNERS = ("mlp", "gbm")
LEARNERS = LINEAR_LEARNERS + NONLINEAR_LEARNERS
#: The paper's value: seven factors, non-negative weights, Algorithm 1.
PAPER_MODEL = "paper_factors"
#: The cue models: every cue, and every cue but the position group.
CUE_MODELS = ("cues", "cues_no_position", "cues_user")
#: Models fit by some learners only (the others by every learner of :data:`LEARNERS`).
MODEL_LEARNERS = {"cues_user": ("surrogate",)}
#: Keep fractions of the curve against the paper's value.
CURVE_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5)
#: At most this many groups: also run leave-one-group-out (LoCoMo: 10 conversations).
LOGO_MAX_GROUPS = 30


@dataclass
class CueData:
    """The blind cases of a dataset and their cues (raw and calibrated), aligned."""

    name: str
    cases: CaseSet
    raw: CueTable
    calibrated: CueTable = None
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.raw.values.shape[:2] != self.cases.time.shape:
            raise ParameterError("cue table and cases must share their (G, N) layout")
        if self.calibrated is None:
            self.calibrated = self.raw.calibrated()

    def table(self, calibrated: bool, model: str = "cues") -> CueTable:
        """The cue table a model reads.

        ``cues``: every cue; ``cues_no_position`` drops the position group; ``cues_user`` drops
        it too and adds each remaining cue times ``is_user`` (raw, 0 or 1), so that a user's
        turn and an assistant's can weigh a cue differently (a constant ``is_user``, as in
        person-person chat, makes the products copies of the cues).
        """
        check_choice("model", model, CUE_MODELS)
        t = self.calibrated if calibrated else self.raw
        if model == "cues":
            return t
        t = t.select(drop_groups=(POSITION_GROUP,))
        if model == "cues_no_position":
            return t
        user = self.raw.values[..., self.raw.names.index("is_user")][..., None]
        others = [i for i, n in enumerate(t.names) if n != "is_user"]
        values = np.concatenate([t.values, user * t.values[..., others]], axis=-1)
        names = t.names + tuple(f"user*{t.names[i]}" for i in others)
        return CueTable(values, names, t.length, t.calibrated_, t.seconds, t.n_turns)

    def subset(self, idx) -> tuple[CaseSet, CueData]:
        """The cases at ``idx`` and their histories' cues."""
        idx = np.asarray(idx, dtype=np.int64)
        used = np.unique(self.cases.case_haystack[idx])
        cs = self.cases.subset(idx)
        return cs, CueData(self.name, cs, self.raw.subset(used), self.calibrated.subset(used), self.info)


def learner_budget(quick: bool) -> dict:
    """Objective evaluations of the searches and MLP epochs: the defaults, or fewer in quick mode."""
    return dict(n_iter=40, epochs=20, gbm_iter=20) if quick else dict(n_iter=N_ITER, epochs=200, gbm_iter=200)


# --------------------------------------------------------------------------- fitting one model


@contextmanager
def single_thread():
    """Run torch and the OpenMP/BLAS pools on one thread, then restore them.

    The non-linear fits here are small (thousands of rows): on a shared two-core machine their
    thread pools spent more time contending than computing (an MLP fit took 13 s on two threads
    and 0.3 s on one).
    """
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(before)


def fit_cue_model(learner: str, train: CueData, table_of, keep_fraction: float, seed: int = 0, quick: bool = False):
    """Fit one learner on ``train`` and return ``(score, weights)``.

    ``table_of(data)`` picks the cue table of a :class:`CueData` (raw or calibrated, which
    cues). ``score(data)`` maps any :class:`CueData` with the same cues to (G, N) scores;
    ``weights`` are the linear weights per cue in the units of the table (None for the
    non-linear learners).
    """
    check_choice("learner", learner, LEARNERS)
    budget = learner_budget(quick)
    tab = table_of(train)
    X = tab.values
    mu, sd = _standardise(X, tab.valid)
    Z = ((X - mu) / sd).astype(np.float32)
    target = retention_mass(train.cases)
    if learner in NONLINEAR_LEARNERS:
        with single_thread():
            return _fit_nonlinear(learner, X, Z, mu, sd, tab, target, train, table_of, budget, seed)

    ev = RetentionEvaluator(train.cases, keep_fraction)

    def objective(w):
        return ev.mean(Z @ np.asarray(w, dtype=np.float32))

    n_iter = budget["n_iter"]
    if learner == "hill_climb":
        wz = hill_climb_signed(objective, np.ones(Z.shape[-1]), n_iter=n_iter, restarts=1, seed=seed).weights
    elif learner == "cma_es":
        wz = cma_es_signed(objective, np.ones(Z.shape[-1]), max_evals=n_iter, seed=seed).weights
    else:
        wz = fit_pairwise_logistic(Z, tab.length, target)
        if learner == "surrogate+hill_climb":
            wz = hill_climb_signed(objective, wz, n_iter=n_iter, restarts=1, seed=seed).weights
    w = wz / sd

    def score(data):
        return table_of(data).values @ w.astype(np.float32)

    return score, w


def _fit_nonlinear(learner, X, Z, mu, sd, tab, target, train, table_of, budget, seed):
    if learner == "mlp":
        view = SimpleNamespace(
            factors=Z,
            case_haystack=train.cases.case_haystack,
            gold_case=train.cases.gold_case,
            gold_pos=train.cases.gold_pos,
            length=train.cases.length,
        )
        net = fit_mlp(view, np.ones(Z.shape[-1], bool), epochs=budget["epochs"], seed=seed)

        def score(data):
            with single_thread():
                return net(((table_of(data).values - mu) / sd).astype(np.float32))

        return score, None
    gbm = fit_gbm_ranker(X, tab.length, target, seed=seed, max_iter=budget["gbm_iter"])

    def score(data):
        with single_thread():
            return gbm(table_of(data).values)

    return score, None


def paper_weights(train: CueData, keep_fraction: float, seed: int, quick: bool) -> np.ndarray:
    """The paper's value (seven factors, Algorithm 1) learned on ``train``: its float32 weights."""
    n_iter = learner_budget(quick)["n_iter"] if quick else N_ITER
    res = hill_climb(
        RetentionEvaluator(train.cases, keep_fraction).objective,
        train.cases.live_factors,
        n_iter=n_iter,
        restarts=1 if quick else RESTARTS,
        seed=seed,
    )
    return res.weights.astype(np.float32)


def _paper_scores(train: CueData, test: CueData, keep_fraction: float, seed: int, quick: bool) -> np.ndarray:
    """The paper's value learned on ``train`` (:func:`paper_weights`), scored on ``test``."""
    return test.cases.factors @ paper_weights(train, keep_fraction, seed, quick)


# --------------------------------------------------------------------------- the learner comparison


def _table_of(calibrated: bool, model: str):
    return lambda data: data.table(calibrated, model)


def evaluate(
    data: CueData,
    splits,
    seeds,
    keep_fraction: float = 0.3,
    learners=LEARNERS,
    models=CUE_MODELS,
    calibrations=(False, True),
    paper: bool = True,
    quick: bool = False,
    evaluation: str = "grouped",
    progress: bool = False,
):
    """Every learner x model x calibration fit on each split's training cases, scored on its test cases.

    Returns
    -------
    per_case : DataFrame
        ``evaluation, model, learner, calibrated, split, case_id, group, retention``.
    weights : DataFrame
        ``model, learner, calibrated, split, cue, weight`` for the linear learners.
    """
    from tqdm import tqdm

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    rows, wrows = [], []
    for s, (tr, te) in enumerate(tqdm(splits, desc=f"{evaluation} splits", disable=not progress)):
        _, train = data.subset(tr)
        _, test = data.subset(te)
        ev = RetentionEvaluator(test.cases, keep_fraction)

        def add(model, learner, calibrated, scores, s=s, test=test, ev=ev):
            rows.append(
                pd.DataFrame(
                    {
                        "evaluation": evaluation,
                        "model": model,
                        "learner": learner,
                        "calibrated": calibrated,
                        "split": s,
                        "case_id": test.cases.case_ids,
                        "group": test.cases.groups,
                        "retention": ev.per_case(scores),
                    }
                )
            )

        if paper:
            add(PAPER_MODEL, "hill_climb", False, _paper_scores(train, test, keep_fraction, int(seeds[s]), quick))
        for calibrated in calibrations:
            for model in models:
                for learner in learners:
                    if learner not in MODEL_LEARNERS.get(model, LEARNERS):
                        continue
                    score, w = fit_cue_model(
                        learner, train, _table_of(calibrated, model), keep_fraction, int(seeds[s]), quick
                    )
                    add(model, learner, calibrated, score(test))
                    if w is not None:
                        names = data.table(calibrated, model).names
                        wrows += [
                            {
                                "model": model,
                                "learner": learner,
                                "calibrated": calibrated,
                                "split": s,
                                "cue": c,
                                "weight": float(x),
                            }
                            for c, x in zip(names, w)
                        ]
    per_case = pd.concat(rows, ignore_index=True).dropna(subset=["retention"])
    return per_case, pd.DataFrame(wrows)


def logo_splits(groups):
    """Leave-one-group-out: one split per group, the group as the test side.

    >>> [(tr.tolist(), te.tolist()) for tr, te in logo_splits(["a", "b", "a"])]
    [([1], [0, 2]), ([0, 2], [1])]
    """
    groups = np.asarray(groups)
    return [(np.flatnonzero(groups != g), np.flatnonzero(groups == g)) for g in np.unique(groups)]


KEYS = ["evaluation", "model", "learner", "calibrated"]


def summarise_cases(per_case: pd.DataFrame, keep_fraction: float, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Mean and std over splits of the test-case mean, and a 95% group-bootstrap interval of the mean.

    The interval resamples groups (conversations; questions on LongMemEval) of the per-case
    retention averaged over the splits in which the case was tested.
    """
    out = []
    for key, d in per_case.groupby(KEYS, sort=False):
        by_split = d.groupby("split")["retention"].mean()
        by_case = d.groupby(["case_id", "group"])["retention"].mean()
        m, lo, hi = paired_bootstrap(
            by_case.to_numpy(), n_boot=n_boot, seed=seed, groups=by_case.index.get_level_values("group")
        )
        out.append(
            {
                **dict(zip(KEYS, key)),
                "regime": "blind",
                "keep_fraction": keep_fraction,
                "mean": float(by_split.mean()),
                "std": float(by_split.std(ddof=1)) if len(by_split) > 1 else 0.0,
                "ci_low": lo,
                "ci_high": hi,
                "n_splits": int(len(by_split)),
            }
        )
    return pd.DataFrame(out)


def paired_gap(per_case: pd.DataFrame, a: dict, b: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    """Mean per-case gap ``a - b`` (rows selected by column values) with a 95% group-bootstrap interval."""

    def pick(sel):
        d = per_case
        for k, v in sel.items():
            d = d[d[k] == v]
        return d.groupby(["case_id", "group"])["retention"].mean()

    gap = (pick(a) - pick(b)).dropna()
    m, lo, hi = paired_bootstrap(gap.to_numpy(), n_boot=n_boot, seed=seed, groups=gap.index.get_level_values("group"))
    return {"mean_gap": m, "ci_low": lo, "ci_high": hi, "n_cases": int(len(gap))}


# --------------------------------------------------------------------------- weights, ablation, transfer, curve


def weight_table(
    data: CueData,
    learner: str = "surrogate",
    model: str = "cues",
    n_boot: int = 200,
    seed: int = 0,
    keep_fraction: float = 0.3,
    quick: bool = False,
) -> pd.DataFrame:
    """Signed weights of the calibrated cue value fit on all cases, with 95% group-bootstrap intervals.

    Weights are per percentile of the cue within its history, normalised to ``sum |w| = 1``
    in every fit, so a weight is the cue's share of the value's influence and its sign says
    whether high values mark turns to keep (+) or to forget (-). ``sign`` is ``+`` or ``-`` when
    the interval excludes 0, ``constant`` for a cue that does not vary in the data (``is_user`` in
    person-person chat), else ``?``.
    """
    n_boot = check_int("n_boot", n_boot, minimum=1)
    tof = _table_of(True, model)
    names = data.table(True, model).names

    def fit(d, w0=None):
        if learner == "surrogate":  # bootstrap refits start from the full fit (same minimum, fewer steps)
            tab = tof(d)
            w = fit_pairwise_logistic(tab.values, tab.length, retention_mass(d.cases), w0=w0)
        else:
            _, w = fit_cue_model(learner, d, tof, keep_fraction, seed, quick)
        return w

    w_full = fit(data)
    w_all = w_full / max(np.abs(w_full).sum(), 1e-12)
    groups = data.cases.groups
    uniq = np.unique(groups)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        pick = rng.choice(uniq, len(uniq), replace=True)
        idx = np.concatenate([np.flatnonzero(groups == g) for g in pick])
        _, d = data.subset(idx)
        w = fit(d, w_full)
        boots.append(w / max(np.abs(w).sum(), 1e-12))
    B = np.array(boots)
    tab = data.table(True, model)
    real = tab.values[tab.valid]
    constant = real.min(axis=0) == real.max(axis=0) if len(real) else np.ones(len(names), bool)
    lo, hi = np.percentile(B, [2.5, 97.5], axis=0)
    meta = {c.name: c for c in CUES}
    return pd.DataFrame(
        {
            "cue": names,
            "group": [meta[n].group for n in names],
            "refines": [meta[n].factor for n in names],
            "weight": w_all,
            "ci_low": lo,
            "ci_high": hi,
            "sign": np.where(constant, "constant", np.where(lo > 0, "+", np.where(hi < 0, "-", "?"))),
        }
    )


def ablation(
    data: CueData,
    splits,
    seeds,
    keep_fraction: float = 0.3,
    learner: str = "surrogate",
    n_boot: int = 1000,
    seed: int = 0,
    quick: bool = False,
) -> pd.DataFrame:
    """Retention lost when one cue group is dropped (calibrated cues, ``learner``), on the same splits.

    ``change`` is mean(ablated - full) per case (negative: the group helps), with a 95%
    group-bootstrap interval.
    """
    from memlib.cues import CUE_GROUPS

    rows = []
    for s, (tr, te) in enumerate(splits):
        _, train = data.subset(tr)
        _, test = data.subset(te)
        ev = RetentionEvaluator(test.cases, keep_fraction)
        for drop in (None, *CUE_GROUPS):

            def tof(d, drop=drop):
                return d.table(True).select(drop_groups=() if drop is None else (drop,))

            if drop is not None and not tof(train).names:
                continue
            score, _ = fit_cue_model(learner, train, tof, keep_fraction, int(seeds[s]), quick)
            rows.append(
                pd.DataFrame(
                    {
                        "dropped": drop or "none",
                        "split": s,
                        "case_id": test.cases.case_ids,
                        "group": test.cases.groups,
                        "retention": ev.per_case(score(test)),
                    }
                )
            )
    pc = pd.concat(rows, ignore_index=True).dropna(subset=["retention"])
    full = pc[pc["dropped"] == "none"].groupby(["case_id", "group"])["retention"].mean()
    out = []
    for drop, d in pc[pc["dropped"] != "none"].groupby("dropped", sort=False):
        gap = (d.groupby(["case_id", "group"])["retention"].mean() - full).dropna()
        m, lo, hi = paired_bootstrap(
            gap.to_numpy(), n_boot=n_boot, seed=seed, groups=gap.index.get_level_values("group")
        )
        cues = [c.name for c in CUES if c.group == drop]
        out.append({"dropped": drop, "cues": ", ".join(cues), "change": m, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(out)


def transfer(
    source: CueData,
    target: CueData,
    splits,
    keep_fraction: float = 0.3,
    learners=("surrogate",),
    models=CUE_MODELS,
    seed: int = 0,
    quick: bool = False,
) -> pd.DataFrame:
    """Models fit on all of ``source`` (calibrated cues), scored on the test cases of each split of ``target``.

    Returns per-case rows as :func:`evaluate` does, with ``evaluation = "transfer"``.
    """
    rows = []
    for model in models:
        for learner in learners:
            score, _ = fit_cue_model(learner, source, _table_of(True, model), keep_fraction, seed, quick)
            for s, (_, te) in enumerate(splits):
                _, test = target.subset(te)
                rows.append(
                    pd.DataFrame(
                        {
                            "evaluation": "transfer",
                            "model": model,
                            "learner": learner,
                            "calibrated": True,
                            "split": s,
                            "case_id": test.cases.case_ids,
                            "group": test.cases.groups,
                            "retention": RetentionEvaluator(test.cases, keep_fraction).per_case(score(test)),
                        }
                    )
                )
    return pd.concat(rows, ignore_index=True).dropna(subset=["retention"])


def transfer_share(summary: pd.DataFrame, random_level: float) -> pd.DataFrame:
    """In-domain and transfer means side by side and the share of the in-domain gain over random that survives."""
    t = summary[summary["evaluation"] == "transfer"]
    g = summary[summary["evaluation"] == "grouped"].set_index(["model", "learner", "calibrated"])["mean"]
    out = []
    for _, r in t.iterrows():
        key = (r["model"], r["learner"], r["calibrated"])
        if key not in g.index:
            continue
        gain = g[key] - random_level
        out.append(
            {
                "model": r["model"],
                "learner": r["learner"],
                "in_domain": g[key],
                "transfer": r["mean"],
                "random": random_level,
                "share_of_gain": (r["mean"] - random_level) / gain if gain > 0 else np.nan,
            }
        )
    return pd.DataFrame(out)


def keep_fraction_curve(data: CueData, splits, seeds, fractions=CURVE_FRACTIONS, quick: bool = False):
    """Test retention against the keep fraction: the paper's value (learned at each fraction) and the
    calibrated cue value (the surrogate, which does not depend on the fraction), on the same splits.

    Returns ``model, keep_fraction, mean, std`` over splits.
    """
    rows = []
    for s, (tr, te) in enumerate(splits):
        _, train = data.subset(tr)
        _, test = data.subset(te)
        fits = {
            m: fit_cue_model("surrogate", train, _table_of(True, m), 0.3, int(seeds[s]), quick)[0] for m in CUE_MODELS
        }
        for f in fractions:
            ev = RetentionEvaluator(test.cases, f)
            rows.append(
                {
                    "model": PAPER_MODEL,
                    "keep_fraction": f,
                    "split": s,
                    "retention": ev.mean(_paper_scores(train, test, f, int(seeds[s]), quick)),
                }
            )
            for m, score in fits.items():
                rows.append({"model": m, "keep_fraction": f, "split": s, "retention": ev.mean(score(test))})
    d = pd.DataFrame(rows)
    return (
        d.groupby(["model", "keep_fraction"], sort=False)["retention"]
        .agg(mean="mean", std=lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0)
        .reset_index()
    )


# --------------------------------------------------------------------------- reading the results

#: The headline cue value, declared before the full runs: every cue, calibrated, the convex
#: surrogate (deterministic; the model of the weight table). It was chosen after a quick
#: three-conversation LoCoMo run, in which it and its hill-climb refinement were level.
HEADLINE = {"model": "cues", "learner": "surrogate", "calibrated": True}


def headline(summary: pd.DataFrame, evaluation: str = "grouped") -> pd.Series:
    """The :data:`HEADLINE` row of ``summary`` for one evaluation."""
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
    """The weight table in words: the cues that mark turns to keep, those that mark turns to forget,
    and those whose sign the data do not settle (95% intervals)."""

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
    """The keep-fraction curve in the layout of :func:`memlib.plots.sweep_lines` (``policy`` column)."""
    return curve.rename(columns={"model": "policy"})


# --------------------------------------------------------------------------- loading and the whole study


#: Conversations (or questions) of quick mode.
QUICK_LIMIT = 3


def load_cue_data(
    dataset="locomo",
    quick: bool = False,
    limit: int | None = None,
    sample: int | None = None,
    embedding: str = "fast",
    progress: bool = False,
) -> CueData:
    """Load a dataset, its cached blind (paper) annotation and its cues."""
    import time

    from memlib import datasets, factors

    t0 = time.perf_counter()
    ds = datasets.load(dataset)
    if quick and limit is None and sample is None:
        limit = QUICK_LIMIT
    if limit is not None:
        ds = ds.limit(check_int("limit", limit, minimum=1))
    if sample is not None:
        ds = ds.sample(check_int("sample", sample, minimum=1))
    ann = factors.annotate(ds, "blind", factor_set="paper", embedding=embedding, progress=progress)
    require_cases(ds.name, ann.cases)
    t1 = time.perf_counter()
    raw = compute_cues(ds, ann, embedding=embedding, progress=progress)
    t2 = time.perf_counter()
    data = CueData(ds.name, ann.cases, raw)
    data.info = {
        **ds.stats(),
        "usable_cases_used": int(ann.cases.n_cases),
        "histories": int(ann.cases.n_haystacks),
        "turn_occurrences_in_histories": int(ann.cases.length.sum()),
        "seconds_annotation": t1 - t0,
        "seconds_cues": t2 - t1,
        "seconds_calibration": time.perf_counter() - t2,
        "cue_seconds": raw.seconds,
        "embedding": embedding,
    }
    return data


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


def cue_study_on_data(
    data: CueData,
    keep_fraction: float = 0.3,
    n_splits: int = 10,
    seed: int = 0,
    quick: bool = False,
    source: CueData | None = None,
    n_boot: int = 1000,
    weight_boot: int = 50,
    progress: bool = False,
) -> CueStudyResult:
    """The whole cue study on loaded data (``source``: another dataset to transfer from)."""
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
    """Paired gaps on the grouped splits: best linear cue value minus the best non-linear one and the
    paper's value; every model with position cues minus without."""
    g = summary[summary["evaluation"] == "grouped"]
    lin = g[g["learner"].isin(LINEAR_LEARNERS) & (g["model"] == "cues")].sort_values("mean").iloc[-1]
    non = g[g["learner"].isin(NONLINEAR_LEARNERS) & (g["model"] == "cues")].sort_values("mean").iloc[-1]
    base = {"evaluation": "grouped"}

    def sel(r):
        return {**base, "model": r["model"], "learner": r["learner"], "calibrated": r["calibrated"]}

    def name(r):
        return f"{r['model']}/{r['learner']}/{'calibrated' if r['calibrated'] else 'raw'}"

    rows = [
        {"comparison": f"{name(lin)} - {name(non)}", **paired_gap(per_case, sel(lin), sel(non), n_boot, seed)},
        {
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
                    "comparison": f"position cues: {learner}/{'calibrated' if cal else 'raw'}",
                    **paired_gap(per_case, a, b, n_boot, seed),
                }
            )
    return pd.DataFrame(rows)


def cue_study(
    dataset="locomo",
    keep_fraction: float = 0.3,
    n_splits: int = 10,
    seed: int = 0,
    quick: bool = False,
    limit: int | None = None,
    sample: int | None = None,
    embedding: str = "fast",
    transfer_from: str | None = None,
    transfer_sample: int | None = None,
    progress: bool = False,
) -> CueStudyResult:
    """The cue study on a dataset (see the module docstring); ``transfer_from`` names a dataset to
    learn on and test here (``transfer_sample``: a seeded sample of its groups)."""
    data = load_cue_data(dataset, quick=quick, limit=limit, sample=sample, embedding=embedding, progress=progress)
    source = None
    if transfer_from is not None:
        source = load_cue_data(transfer_from, sample=transfer_sample, embedding=embedding, progress=progress)
    return cue_study_on_data(
        data,
        keep_fraction,
        n_splits if not quick else min(n_splits, 2),
        seed,
        quick,
        source,
        n_boot=200 if quick else 1000,
        weight_boot=5 if quick else 50,
        progress=progress,
    )


def cue_rows(
    dataset="locomo",
    keep_fraction: float = 0.3,
    n_splits: int = 10,
    seed: int = 0,
    quick: bool = False,
    limit: int | None = None,
    sample: int | None = None,
    embedding: str = "fast",
    progress: bool = False,
) -> CueStudyResult:
    """The command line's entry (``python -m memlib study cues``): :func:`cue_study` without transfer."""
    return cue_study(dataset, keep_fraction, n_splits, seed, quick, limit, sample, embedding, None, None, progress)


__all__ = [
    "CUE_MODELS",
    "CueData",
    "CueStudyResult",
    "LEARNERS",
    "ablation",
    "cue_study",
    "cue_study_on_data",
    "evaluate",
    "fit_cue_model",
    "group_splits",
    "keep_fraction_curve",
    "load_cue_data",
    "logo_splits",
    "transfer",
    "transfer_share",
    "weight_table",
]
