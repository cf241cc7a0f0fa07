"""Chapter 08: the authors' released experiment, rebuilt, then taken apart one choice at a time.

The paper states Table 1; the authors' code (``zhibao-dev/Learning-Multi-Factor-Memory``,
``experiments/lme_blind_forgetting.py``) computes something more specific. memlib
rebuilds that computation as the ``released`` factor set
(:data:`memlib.factors.READINGS`) and the ``released`` protocol
(:data:`~._common.PROTOCOLS`), and this module measures:

* :func:`released_study`: Table 3 in both regimes, the mean blind weights, Figure 3
  (keep 0.1 to 0.5) and the MLP ablation, each beside the paper's figure and the
  authors' result file's (:mod:`memlib.paper`);
* the **ladder** (:data:`RUNGS`, :func:`ladder`): from the released reading to
  memlib's reading of Table 1, one change at a time, with the change in blind
  ``learned_V`` and a paired bootstrap interval over cases at each step;
* the **causality audit** (:func:`causality_table`, :data:`CAUSAL_VARIANTS`):
  which factors read turns after the turn or after its session's end, and what
  the released reading keeps when it may not;
* the share of kept gold turns that open their session, beside the base rate
  (:func:`opening_shares`).

>>> [label.split(":")[0] for label, *_ in RUNGS][:4]
['the released experiment', 'order', 'emotion', 'self']
>>> causality_table().set_index("reading").loc["released", "self_relevance"]
'every later session'
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_fraction, check_int
from memlib.metrics import evaluator, paired_bootstrap
from memlib.studies._common import (
    PROTOCOLS,
    RealDataResult,
    evaluate_splits,
    get_protocol,
    shared_learns,
    summarise,
)
from memlib.studies.data_spec import DataSpec

_R = PROTOCOLS["released"]
#: The released experiment's data: LongMemEval-S in its factor set, embedded at 256 word pieces.
DATA = DataSpec("longmemeval_s", factor_set="released", embedding_setting="reference")

#: The ladder from the released experiment to memlib's Table 1: ``(label, readings, protocol, embedding)``.
#: A rung's readings are the ones it changes (:func:`ladder` keeps every change above it); its protocol
#: and embedding are stated whole. Scales need no rung: both readings sum raw factor
#: values with raw weights and put similarities on [0, 1] as ``(1 + cos) / 2``.
RUNGS = (
    ("the released experiment", {}, _R, "reference"),
    # first the order, so that the causal readings below are causal in time, not in the file's order
    ("order: histories by date, the clock in days (not the file's order)", {"order": "time"}, _R, "reference"),
    ("emotion: VADER instead of the released rules", {"emotion": "vader"}, _R, "reference"),
    ("self: the running centroid of earlier turns, not the whole history", {"self": "earlier"}, _R, "reference"),
    ("goal: a session without user turns falls back to its own turns", {"goal": "session"}, _R, "reference"),
    ("reliability: 0.8 / 0.4 instead of 0.7 / 0.4", {"reliability": "paper"}, _R, "reference"),
    ("keep count: ceil instead of floor", {}, dataclasses.replace(_R, cut="ceil"), "reference"),
    ("ties: a tie never favours gold", {}, dataclasses.replace(_R, cut="ceil", ties="pessimistic"), "reference"),
    ("embedding: 128 word pieces instead of 256", {}, dataclasses.replace(_R, cut="ceil", ties="pessimistic"), "fast"),
    (
        "learner: memlib's hill climb (restarts, its settings, a seed per split)",
        {},
        dataclasses.replace(_R, cut="ceil", ties="pessimistic", learner="memlib"),
        "fast",
    ),
    ("splits: memlib's seeded splits (memlib's Table 1)", {}, PROTOCOLS["memlib"], "fast"),
)

#: Causal variants of the released reading: ``(name, what it may read, readings)``.
CAUSAL_VARIANTS = (
    # by date, so that "before" means earlier in time (the file's order differs in 203 of 477 histories)
    ("released, histories by date", "the whole history", {"order": "time"}),
    (
        "causal at each session's end",
        "its own session and the sessions before it",
        {"self": "through_session", "goal": "session", "order": "time"},
    ),
    (
        "causal at each turn",
        "the turns before it",
        {"self": "earlier", "goal": "earlier_in_session", "order": "time"},
    ),
)

#: What each reading of a factor reads beyond the turn itself: ``(reading key, value) -> words``.
_REACH = {
    ("self", "earlier"): "earlier turns only",
    ("self", "inclusive"): "earlier turns and itself",
    ("self", "through_session"): "later turns of its own session",
    ("self", "history"): "every later session",
    ("goal", "session"): "later turns of its own session",
    ("goal", "session_or_history"): "later turns of its session; every later session when its session has no user turn",
    ("goal", "earlier_in_session"): "earlier turns of its session only",
}


def causality_table() -> pd.DataFrame:
    """For each factor set and causal variant, what its blind factors read beyond the turn itself.

    ``emotional_intensity`` and ``reliability`` read the turn alone in every
    reading; the oracle anchor reads the future question and is not listed.
    """
    from memlib.factors import READINGS

    rows = []
    for name, readings in [
        *((fs, {}) for fs in ("paper", "extended", "released")),
        *((n, r) for n, _, r in CAUSAL_VARIANTS[1:]),
    ]:
        base = READINGS[name] if name in READINGS else READINGS["released"]
        read = {**base, **readings}
        rows.append(
            {
                "reading": name,
                "emotional_intensity": "the turn alone",
                "goal_relevance": _REACH[("goal", read["goal"])],
                "self_relevance": _REACH[("self", read["self"])],
                "reliability": "the turn alone",
                "causal_at_session_end": read["self"] in ("earlier", "inclusive", "through_session")
                and read["goal"] in ("session", "earlier_in_session"),
            }
        )
    return pd.DataFrame(rows)


def _blind(data: DataSpec, readings, embedding, protocol, *, keep_fraction, n_splits, progress, policies=None):
    """Blind per-case retention and weights of one reading and protocol on the dataset and part ``data`` names.

    ``readings`` are read over the released set.

    Readings that are the ``paper`` set's in every respect are that set (its table, its float32 storage).
    """
    from memlib.factors import READINGS, resolve_readings

    paper = resolve_readings("released", readings) == READINGS["paper"]
    factor_set, readings = ("paper", None) if paper else ("released", readings)
    spec = dataclasses.replace(data, factor_set=factor_set, embedding_setting=embedding, readings=readings)
    ds, anns = spec.load(progress, regimes=("blind",))
    kw = {} if policies is None else {"policies": policies}
    per_case, weights = evaluate_splits(
        {"blind": anns["blind"].cases},
        keep_fraction,
        n_splits,
        0,
        data.quick,
        progress=progress,
        protocol=protocol,
        **kw,
    )
    return ds, anns["blind"], per_case, weights


def _learned_summary(per_case: pd.DataFrame, ddof: int, against=None, n_boot: int = 1000):
    """Blind ``learned_V`` of one run: its mean and std over splits, and its change from ``against``.

    Returns ``(row, compare)``: ``row`` holds ``learned_V``, ``std``, ``delta``, ``delta_low`` and
    ``delta_high`` (a paired bootstrap over cases, each averaged over the splits that test it, in
    content-key order; NaN without ``against``); ``compare`` is what a later run is compared with.
    """
    split_means = per_case.groupby("split")["retention"].mean()
    by_case = per_case.groupby("key")["retention"].mean()  # by content key: no id decides the order
    row = {"learned_V": float(split_means.mean()), "std": float(np.std(split_means, ddof=ddof))}
    if against is None:
        row.update(delta=np.nan, delta_low=np.nan, delta_high=np.nan)
    else:
        _, lo, hi = paired_bootstrap((by_case - against[1]).dropna().to_numpy(), n_boot=n_boot, seed=0)
        row.update(delta=row["learned_V"] - against[0], delta_low=lo, delta_high=hi)
    return row, (row["learned_V"], by_case)


def ladder(data: DataSpec | str = DATA, keep_fraction=0.3, n_splits=20, n_boot=1000, progress=False, rungs=RUNGS):
    """Blind ``learned_V`` at each rung of :data:`RUNGS` on ``data``, and its change from the rung above.

    ``data`` gives the dataset and its part; each rung states its readings, protocol and embedding.

    Returns ``step, rung, learned_V, std, delta, delta_low, delta_high``: the mean
    over splits (std over splits), the change of that mean from the rung above
    (the deltas add up to the difference between the two ends), and a 95%
    paired bootstrap interval of the change over cases (each case's retention
    averaged over the splits that test it).
    """
    from memlib.factors import resolve_readings

    data = DataSpec.of(data, like=DATA)
    rows, prev, changed = [], None, {}
    for step, (label, readings, protocol, embedding) in enumerate(rungs):
        proto = get_protocol(protocol)
        changed.update(readings)  # the readings change cumulatively; each rung states its protocol whole
        read = resolve_readings("released", changed)  # all five readings, the changes laid over the released
        run = dict(keep_fraction=keep_fraction, n_splits=n_splits, progress=progress, policies=("learned_V",))
        _, _, per_case, _ = _blind(data, read, embedding, proto, **run)
        summary, prev = _learned_summary(per_case, proto.ddof, prev, n_boot)
        rows.append(
            {
                "step": step,
                "rung": label,
                **summary,
                "embedding": embedding,
                **{f"reading_{k}": v for k, v in read.items()},
            }
        )
    cols = ["step", "rung", "learned_V", "std", "delta", "delta_low", "delta_high", "embedding"]
    return pd.DataFrame(rows)[cols + [c for c in rows[0] if c.startswith("reading_")]]


def opening_shares(ds, ann, weights: pd.DataFrame, keep_fraction: float, protocol) -> dict:
    """Among kept turns and kept gold turns, the share that open their session, beside the base rates.

    ``weights`` is ``split, factor, weight`` for the blind annotation ``ann`` of
    ``ds``, learned on the splits of ``protocol`` (whose cut and stable tie rule
    choose the kept set).
    """
    from memlib.studies._common import shuffle_splits, split_plan

    cases = ann.cases
    proto = get_protocol(protocol)
    n_splits = int(weights["split"].nunique())  # the splits the weights were learned on
    turn_no = ds.usable().turns["turn"].to_numpy()  # the annotation's turn_rows index the usable turns
    rows = ann.turn_rows
    opens = np.where(rows >= 0, turn_no[np.clip(rows, 0, None)] == 0, False)
    gold = np.zeros_like(opens)
    gold[cases.case_haystack[cases.gold_case], cases.gold_pos] = True
    if proto.splits == "shuffle":
        splits = shuffle_splits(cases.groups, n_splits, keys=cases.keys)
    else:
        splits = split_plan(cases.groups, n_splits, 0, cases.keys)[0]
    kept_open = kept_all = gold_open = gold_all = 0
    for s, (_, test_idx) in enumerate(splits):
        test = cases.subset(test_idx)
        w = weights[weights["split"] == s].set_index("factor")["weight"].reindex(FACTORS).to_numpy()
        ev = evaluator(test, keep_fraction, "stable", proto.cut)
        order = np.argsort(np.where(ev.real, -ev.scores(w), np.inf), axis=1, kind="stable")
        kept = np.argsort(order, axis=1) < ev.k[:, None]
        hay = np.unique(cases.case_haystack[test_idx])
        o, g = opens[hay, : kept.shape[1]], gold[hay, : kept.shape[1]]
        kept_open += int((kept & o).sum())
        kept_all += int(kept.sum())
        gold_open += int((kept & o & g).sum())
        gold_all += int((kept & g).sum())
    real = rows >= 0
    return {
        "kept_turns_opening_share": kept_open / max(kept_all, 1),
        "kept_gold_opening_share": gold_open / max(gold_all, 1),
        "all_turns_opening_share": float(opens[real].mean()),
        "all_gold_opening_share": float(opens[gold].mean()) if gold.any() else float("nan"),
    }


@dataclasses.dataclass
class ReleasedResult:
    """Everything chapter 08 shows of the released experiment; ``table`` is Table 3 beside both references.

    Attributes
    ----------
    table : DataFrame
        ``policy, regime, mean, std, paper_mean, authors_mean, authors_std``.
    weights : DataFrame
        ``factor, mean, paper, authors``: the mean learned blind weights.
    figure3 : DataFrame
        ``keep_fraction, policy, mean, std, authors_mean``.
    mlp : DataFrame
        :func:`mlp_released`.
    ladder : DataFrame
        :func:`ladder`.
    causality : DataFrame
        :func:`causality_table`.
    causal : DataFrame
        ``variant, reads, learned_V, std, delta, delta_low, delta_high`` and the
        opening shares of :func:`opening_shares`, for each of :data:`CAUSAL_VARIANTS`.
    info : dict
    """

    table: pd.DataFrame
    weights: pd.DataFrame = None
    figure3: pd.DataFrame = None
    mlp: pd.DataFrame = None
    ladder: pd.DataFrame = None
    causality: pd.DataFrame = None
    causal: pd.DataFrame = None
    oracle_blind: RealDataResult = None
    info: dict = dataclasses.field(default_factory=dict)


#: Keep fractions of Figure 3 and the policies the authors' sweep reports.
FIGURE3_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5)
FIGURE3_POLICIES = ("learned_V", "uniform_V", "reliability_only", "recency_only")


#: The parts of :func:`released_study` besides Table 3.
PARTS = ("table3", "figure3", "mlp", "ladder", "causal")


@shared_learns()  # Table 3, Figure 3 at its keep fraction, the MLP ablation and the ladder learn the same cases
def released_study(
    data: DataSpec | str = DATA, keep_fraction=0.3, n_splits=20, n_boot=1000, parts=PARTS, progress=False
) -> ReleasedResult:
    """Run the released experiment on ``data`` (256 word pieces), beside the paper and the authors' files.

    ``data`` chooses the dataset and its part; the factor set and the embedding are the released
    experiment's (:data:`DATA`). ``parts`` chooses what to run besides Table 3: ``figure3``, ``mlp`` (the MLP
    ablation), ``ladder`` and ``causal`` (the causality audit's measured variants).
    """
    from memlib import paper
    from memlib.studies.oracle_blind import oracle_vs_blind

    data = DataSpec.of(data, like=DATA).reads(
        "released", "dataset", "quick", "limit", "sample", "factor_set", "embedding_setting"
    )
    if (data.factor_set, data.embedding_setting) != (DATA.factor_set, DATA.embedding_setting):
        raise ParameterError(
            f"the released study reads the released factor set at the reference embedding, "
            f"got {data.factor_set!r} at {data.embedding_setting!r}"
        )
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    n_splits = check_int("n_splits", n_splits, minimum=2)
    common = dict(n_splits=n_splits, progress=progress)
    ob = oracle_vs_blind(data, keep_fraction=keep_fraction, protocol="released", n_boot=n_boot, **common)
    s = ob.summary
    table = s[["policy", "regime", "mean", "std"]].copy()
    ours = data.dataset == paper.PAPER_DATASET or str(ob.info.get("dataset", "")).startswith(paper.PAPER_DATASET)
    means = paper.table3_means() if ours else {}
    table["paper_mean"] = [means.get(k, np.nan) for k in zip(table["policy"], table["regime"])]
    auth = paper.AUTHORS_TABLE3 if ours else {}
    table["authors_mean"] = [auth.get(k, (np.nan, np.nan))[0] for k in zip(table["policy"], table["regime"])]
    table["authors_std"] = [auth.get(k, (np.nan, np.nan))[1] for k in zip(table["policy"], table["regime"])]
    learned = s[(s["policy"] == "learned_V") & (s["regime"] == "blind")].iloc[0]
    live = [f for f in FACTORS if f in paper.AUTHORS_BLIND_WEIGHTS]
    weights = pd.DataFrame(
        {
            "factor": live,
            "mean": [float(learned[f"w_{f}"]) for f in live],
            "paper": [paper.PAPER_BLIND_WEIGHTS.get(f, np.nan) if ours else np.nan for f in live],
            "authors": [paper.AUTHORS_BLIND_WEIGHTS[f] if ours else np.nan for f in live],
        }
    )
    result = ReleasedResult(table=table, weights=weights, oracle_blind=ob, causality=causality_table())
    if "figure3" in parts:
        rows = []
        for kf in FIGURE3_FRACTIONS:
            _, _, per_case, _ = _blind(data, {}, "reference", _R, keep_fraction=kf, policies=FIGURE3_POLICIES, **common)
            per_split = per_case.groupby(["policy", "split"], sort=False)["retention"].mean().reset_index()
            summ = summarise(per_split, ["policy"], _R.ddof).assign(keep_fraction=kf)
            ref = paper.AUTHORS_FIGURE3.get(kf, {}) if ours else {}
            summ["authors_mean"] = [ref.get(p, (np.nan,))[0] for p in summ["policy"]]
            rows.append(summ)
        result.figure3 = pd.concat(rows, ignore_index=True)[
            ["keep_fraction", "policy", "mean", "std", "n_splits", "authors_mean"]
        ]
    if "mlp" in parts:
        blind = data.load(progress, regimes=("blind",))[1]["blind"]
        result.mlp = mlp_released(blind.cases, keep_fraction, n_splits, data.quick)
    if "ladder" in parts:
        result.ladder = ladder(data, keep_fraction, n_boot=n_boot, **common)
    if "causal" in parts:
        result.causal = causal_variants(data, keep_fraction, n_boot=n_boot, **common)
    result.info = {
        **ob.info,
        "n_questions_in_file": int(ob.info.get("cases", 0)),
        "keep_fraction": keep_fraction,
        "n_splits": n_splits,
        "authors_source": paper.AUTHORS_SOURCE,
    }
    return result


def mlp_released(cases, keep_fraction: float = 0.3, n_splits: int = 20, quick: bool = False) -> pd.DataFrame:
    """Run the released MLP ablation on blind ``cases``: the MLP and the linear value on the released splits.

    Returns ``policy, mean, std, win_share, paper_mean, authors_mean`` for ``learned_V``,
    ``mlp`` and ``mlp_minus_linear`` (the paired per-split difference; ``win_share``
    is the share of splits where the MLP keeps more), std over splits with ddof 0.
    """
    from memlib import paper
    from memlib.learning import fit_mlp_released
    from memlib.studies._common import learn, shuffle_splits

    rows = []
    for tr, te in shuffle_splits(cases.groups, n_splits, keys=cases.keys, quick=quick):
        train, test = cases.subset(tr), cases.subset(te)
        lin = learn(train, keep_fraction, _R, 1, quick)  # the released learner: its seed is its own (1)
        net = fit_mlp_released(train, train.live_factors, epochs=60 if quick else 200)
        ev = evaluator(test, keep_fraction, "stable", "floor")
        rows.append((ev.mean(ev.scores(lin.weights)), ev.mean(net(test.factors))))
    lin_r, mlp_r = np.array(rows).T
    diff = mlp_r - lin_r
    out = pd.DataFrame(
        {
            "policy": ["learned_V", "mlp", "mlp_minus_linear"],
            "mean": [lin_r.mean(), mlp_r.mean(), diff.mean()],
            "std": [np.std(lin_r), np.std(mlp_r), np.std(diff)],
            "win_share": [np.nan, np.nan, float(np.mean(diff > 0))],
        }
    )
    out["paper_mean"] = [paper.PAPER_MLP[p][0] for p in out["policy"]]
    out["authors_mean"] = [paper.AUTHORS_MLP[p][0] for p in out["policy"]]
    return out


def causal_variants(data: DataSpec | str = DATA, keep_fraction=0.3, n_splits=20, n_boot=1000, progress=False):
    """Blind ``learned_V`` of the released reading and its causal variants (:data:`CAUSAL_VARIANTS`) on ``data``.

    Each is run with the released protocol; ``delta`` is its change from the
    released reading with a paired bootstrap interval over cases, and the
    opening shares (:func:`opening_shares`) say how much of what it keeps opens
    a session.
    """
    data = DataSpec.of(data, like=DATA)
    rows, base = [], None
    for name, reads, readings in CAUSAL_VARIANTS:
        run = dict(keep_fraction=keep_fraction, n_splits=n_splits, progress=progress, policies=("learned_V",))
        ds, ann, per_case, weights = _blind(data, readings, "reference", _R, **run)
        summary, compare = _learned_summary(per_case, _R.ddof, base, n_boot)
        if base is None:  # the first variant is the one the others are measured against
            summary.update(delta=0.0, delta_low=0.0, delta_high=0.0)
            base = compare
        row = {"variant": name, "reads": reads, **summary}
        row.update(opening_shares(ds, ann, weights, keep_fraction, _R))
        rows.append(row)
    return pd.DataFrame(rows)
