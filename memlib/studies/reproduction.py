"""Chapter 08: the paper's own benchmark, LongMemEval-S, reproduced and explained.

The paper's Table 3, Figure 2, Figure 3, MLP tie and mean blind weights come from
the other studies run on ``longmemeval_s``; this module adds what a reproduction
needs beyond them:

* :func:`reading_table`: each single factor under every reasonable reading of its
  Table 1 definition that the paper leaves open (what arousal is; whether the
  running user centroid holds the turn itself; how ties at the cut are broken),
  beside the paper's figure. Every reading is reported; none is picked.
* :func:`tie_readings`: a single-factor ranking under four tie rules.
* :func:`session_overlap`: how much test histories share sessions with training
  histories under per-question splits, and whether connected components of
  shared sessions allow a grouped split.
* :func:`variant_table`: the learned and uniform values under each reading,
  including how the factors are put on one scale (:data:`SCALINGS`).
* :func:`embedding_check`: the ``fast`` and ``int8`` embedding settings against
  the ``reference`` one on a slice: per-text cosine and Table 3 under each.

Our figures beside the paper's, and each gap explained, are in :mod:`~.paper_gaps`
(:func:`~.paper_gaps.paper_comparison`, :func:`~.paper_gaps.explain_gaps`).

>>> import numpy as np
>>> from memlib.cases import CaseSet
>>> cs = CaseSet.from_cases([np.eye(7)[[5, 5, 0, 0]]], [np.arange(4.0)], gold=[[1]])
>>> tie_readings(cs, "reliability_only", keep_fraction=0.25).set_index("ties")["retention"].to_dict()
{'random': 0.5, 'never favour gold': 0.0, 'newest first': 1.0, 'oldest first': 0.0}
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import check_fraction, check_int
from memlib.cases import CaseSet
from memlib.metrics import RetentionEvaluator, expected_random_retention
from memlib.scoring import SINGLE_FACTOR, policy_scores
from memlib.studies.data_spec import DataSpec
from memlib.studies.paper_gaps import explain_gaps, paper_comparison

_SELF_WORDS = {
    "earlier": "the user's earlier turns",
    "inclusive": "earlier turns and the turn itself",
    "through_session": "the user's turns up to the end of its session",
    "history": "all the user's turns of the history",
}
#: Tie rules of :func:`tie_readings`.
TIE_RULES = ("random", "never favour gold", "newest first", "oldest first")


def _rank_with_ties_by_time(f: np.ndarray, t: np.ndarray, length: np.ndarray, newest_first: bool) -> np.ndarray:
    """Integer scores that order each haystack by ``f``, ties broken by time (newest or oldest first)."""
    out = np.zeros(f.shape)
    for g in range(f.shape[0]):
        n = int(length[g])
        order = np.lexsort((t[g, :n] if newest_first else -t[g, :n], f[g, :n]))
        out[g, order] = np.arange(1, n + 1)
    return out


def tie_readings(cases: CaseSet, policy: str, keep_fraction: float = 0.3) -> pd.DataFrame:
    """Mean retention of a single-factor policy under each tie rule (:data:`TIE_RULES`).

    ``random`` is the exact expectation over uniformly random tie orders (what
    :func:`memlib.scoring.policy_scores` draws once per seed); ``never favour
    gold`` is the metric's own pessimistic rule with no tie-breaking; ``newest
    first`` and ``oldest first`` break ties by turn time.
    """
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    f = cases.factors[..., FACTORS.index(SINGLE_FACTOR[policy])].astype(np.float64)
    ev = RetentionEvaluator(cases, keep_fraction)
    t = cases.time.astype(np.float64)
    rows = [
        ("random", ev.mean(f, ties="expected")),
        ("never favour gold", ev.mean(f)),
        ("newest first", ev.mean(_rank_with_ties_by_time(f, t, cases.length, True))),
        ("oldest first", ev.mean(_rank_with_ties_by_time(f, t, cases.length, False))),
    ]
    return pd.DataFrame(rows, columns=["ties", "retention"]).assign(policy=policy)


def reading_table(ds, keep_fraction: float = 0.3, embedding_setting="fast", progress: bool = False) -> pd.DataFrame:
    """Blind single-factor retention on every usable case under each reading of Table 1.

    Rows: ``policy, reading, retention, default`` (whether it is memlib's
    default reading), plus ``paper_blind`` where the dataset is the paper's. Readings:
    arousal (structural / constant / lexical) for ``emotion_only``; the user
    centroid over earlier turns, earlier turns and the turn, or the whole history
    for ``self_only``; the
    four tie rules for the provenance-only ``reliability_only`` of the paper's
    factor set; one reading each for ``goal_only`` (session user-turn centroid)
    and ``recency_only``. No weights are learned, so no split is needed.
    """
    from memlib import factors, paper

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    kw = dict(factor_set="paper", embedding_setting=embedding_setting, progress=progress)
    base = factors.annotate(ds, "blind", **kw).cases
    ev = RetentionEvaluator(base, keep_fraction)
    rows = []
    for arousal in factors.AROUSAL_READINGS:
        cs = factors.annotate(ds, "blind", arousal=arousal, **kw).cases if arousal != "structural" else base
        rows.append(
            ("emotion_only", f"arousal: {arousal}", ev.mean(policy_scores("emotion_only", cs)), arousal == "structural")
        )
    for reading in factors.SELF_READINGS:
        cs = factors.annotate(ds, "blind", self_reading=reading, **kw).cases if reading != "earlier" else base
        rows.append(
            (
                "self_only",
                f"centroid: {_SELF_WORDS[reading]}",
                ev.mean(policy_scores("self_only", cs)),
                reading == "earlier",
            )
        )
    for _, r in tie_readings(base, "reliability_only", keep_fraction).iterrows():
        rows.append(("reliability_only", f"ties: {r['ties']}", r["retention"], r["ties"] == "random"))
    rows.append(("goal_only", "anchor: session user-turn centroid", ev.mean(policy_scores("goal_only", base)), True))
    rows.append(("recency_only", "newest kept", ev.mean(policy_scores("recency_only", base)), True))
    rows.append(("random", "expected", expected_random_retention(base, keep_fraction), True))
    out = pd.DataFrame(rows, columns=["policy", "reading", "retention", "default"])
    if ds.name == paper.PAPER_DATASET:
        out["paper_blind"] = out["policy"].map(lambda p: paper.PAPER_TABLE3[p]["blind"][0])
    return out


def session_overlap(ds, n_splits: int = 20, seed: int = 0) -> dict:
    """How much per-question test histories share sessions with training histories.

    Sessions are matched by their id in the source file. Returns the mean share
    of a test history's sessions that also occur in some training history, the
    same for the test question's evidence sessions (those holding a gold turn),
    and the number of connected components of the question graph in which two
    questions are joined when they share a session: a grouped split exists only
    when there are at least two.
    """
    from memlib.factors import content_keys
    from memlib.studies._common import group_splits

    check_int("n_splits", n_splits, minimum=2)
    cases = ds.usable().cases
    label = dict(zip(ds.sessions["session"], ds.sessions["label"]))
    gold_session = ds.turns["session"].to_numpy()
    hay = [{label[s] for s in h} for h in cases["haystack"]]
    evid = [{label[gold_session[g]] for g in gold} for gold in cases["gold"]]
    share, ev_share = [], []
    for train, test in group_splits(cases["group"].to_numpy(), n_splits, seed, keys=content_keys(cases)):
        seen = set().union(*(hay[i] for i in train))
        share.append(np.mean([len(hay[i] & seen) / len(hay[i]) for i in test]))
        ev_share.append(np.mean([len(evid[i] & seen) / len(evid[i]) for i in test]))
    return {
        "questions": int(len(cases)),
        "distinct_sessions": int(len(set().union(*hay))),
        "test_sessions_seen_in_training": float(np.mean(share)),
        "test_evidence_sessions_seen_in_training": float(np.mean(ev_share)),
        "components": _components(hay),
    }


def _components(sets) -> int:
    """Count the connected components of items joined when their sets share an element (union-find)."""
    parent = list(range(len(sets)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict = {}
    for i, s in enumerate(sets):
        for e in s:
            if e in owner:
                parent[find(i)] = find(owner[e])
            else:
                owner[e] = i
    return len({find(i) for i in range(len(sets))})


def embedding_agreement(ds, progress: bool = False, settings=("fast",)) -> pd.DataFrame:
    """Per-text cosine between each setting's embeddings and the ``reference`` ones, by role.

    Rows: ``setting, role, texts, mean, p5, min``. Every setting comes from (or
    goes to) its embedding cache.
    """
    from memlib.embeddings import embed_cached

    used = ds.turns["session"].isin(set().union(*ds.usable().cases["haystack"]))
    first = ds.turns.loc[used].drop_duplicates("text_id")
    texts = [ds.texts[i] for i in first["text_id"]]
    ref = embed_cached(texts, "reference", progress=progress)
    rows = []
    for setting in settings:
        cos = np.einsum("ij,ij->i", embed_cached(texts, setting, progress=progress), ref)
        for role, mask in (
            ("all", np.ones(len(cos), bool)),
            *((r, (first["role"] == r).to_numpy()) for r in ("user", "assistant")),
        ):
            if mask.any():
                c = cos[mask]
                rows.append(
                    {
                        "setting": setting,
                        "role": role,
                        "texts": int(mask.sum()),
                        "mean": float(c.mean()),
                        "p5": float(np.percentile(c, 5)),
                        "min": float(c.min()),
                    }
                )
    return pd.DataFrame(rows)


#: Questions :func:`embedding_check` samples unless told.
CHECK_SAMPLE = 60
#: Blind annotations that change one reading of Table 1 at a time (label, annotate options).
VARIANTS = (
    ("as memlib reads Table 1", {}),
    ("arousal: constant (|valence| only)", {"arousal": "constant"}),
    ("arousal: lexical (VADER's sentiment share)", {"arousal": "lexical"}),
    ("self centroid: earlier turns and the turn itself", {"self_reading": "inclusive"}),
    ("self centroid: all the user's turns of the history", {"self_reading": "history"}),
    ("reliability: extended with our cues", {"factor_set": "extended"}),
)


def minmax_within_history(cases: CaseSet) -> CaseSet:
    """Each factor rescaled to [0, 1] over the real turns of each haystack (a constant one becomes 0).

    A reading of how the factors meet on one scale before they are summed: the
    paper states each factor's range, not whether it is rescaled per history.

    >>> cs = CaseSet.from_cases([np.eye(7)[[0, 1]] * 0.5 + 0.25], [np.arange(2.0)], gold=[[0]])
    >>> minmax_within_history(cs).factors[0, :, :2].tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    F = cases.factors.astype(np.float64)
    real = np.arange(F.shape[1])[None, :] < cases.length[:, None]
    lo = np.where(real[..., None], F, np.inf).min(axis=1, keepdims=True)
    hi = np.where(real[..., None], F, -np.inf).max(axis=1, keepdims=True)
    span = hi - lo
    out = np.where(span > 0, (F - lo) / np.where(span > 0, span, 1.0), 0.0) * real[..., None]
    return dataclasses.replace(cases, factors=out.astype(np.float32))


def raw_cosines(cases: CaseSet) -> CaseSet:
    """Goal and self relevance as raw cosines (``2 f - 1``) instead of memlib's ``(1 + cos) / 2``.

    Under equal weights this doubles the similarities' share of the sum; the
    paper writes both as a cosine without saying how it is put on [0, 1].

    >>> cs = CaseSet.from_cases([np.full((2, 7), 0.75)], [np.arange(2.0)], gold=[[0]])
    >>> raw_cosines(cs).factors[0, 0].tolist()
    [0.75, 0.5, 0.75, 0.5, 0.75, 0.75, 0.75]
    """
    F = cases.factors.copy()
    real = np.arange(F.shape[1])[None, :] < cases.length[:, None]
    for name in ("goal_relevance", "self_relevance"):
        j = FACTORS.index(name)
        F[..., j] = np.where(real, 2.0 * F[..., j] - 1.0, 0.0)
    return dataclasses.replace(cases, factors=F)


#: Readings of how the factors are put on one scale (label, transform of a CaseSet); both regimes.
SCALINGS = (
    ("factors min-max scaled within each history", minmax_within_history),
    ("goal and self as raw cosines", raw_cosines),
)


def variant_table(
    ds,
    keep_fraction: float = 0.3,
    n_splits: int = 20,
    seed: int = 0,
    quick: bool = False,
    embedding_setting="fast",
    progress: bool = False,
) -> pd.DataFrame:
    """Learned and uniform values when one reading of Table 1 changes.

    Blind: every annotation reading of :data:`VARIANTS`. Both regimes: memlib's
    reading and each scaling of :data:`SCALINGS`. Every variant is learned and
    scored on the same group-aware splits; rows are ``variant, regime, policy,
    mean, std, n_splits``.
    """
    from memlib import factors
    from memlib.studies._common import evaluate_splits, summarise

    def score(label, regime, cases):
        per_case, _ = evaluate_splits(
            {regime: cases}, keep_fraction, n_splits, seed, quick, policies=("learned_V", "uniform_V")
        )
        per_split = per_case.groupby(["policy", "split"], sort=False)["retention"].mean().reset_index()
        return summarise(per_split, ["policy"]).assign(variant=label, regime=regime)

    kw = {"factor_set": "paper", "embedding_setting": embedding_setting, "progress": progress}
    rows = []
    for label, options in VARIANTS:
        rows.append(score(label, "blind", factors.annotate(ds, "blind", **{**kw, **options}).cases))
    for regime in ("blind", "oracle"):
        base = factors.annotate(ds, regime, **kw).cases
        if regime == "oracle":
            rows.append(score(VARIANTS[0][0], regime, base))
        for label, transform in SCALINGS:
            rows.append(score(label, regime, transform(base)))
    out = pd.concat(rows, ignore_index=True)
    return out[["variant", "regime", "policy", "mean", "std", "n_splits"]]


@dataclasses.dataclass
class ReproductionResult:
    """Everything chapter 08 shows; ``table`` is the published one.

    A dataclass of tables and plain values, so the result cache can store it and
    the book reads what ``make studies`` computed. :func:`reproduce` fills the
    study parts (``oracle_blind`` ... ``overlap``); :func:`embedding_check` fills
    ``agreement`` and ``same_order``.
    """

    table: pd.DataFrame
    info: dict = dataclasses.field(default_factory=dict)
    oracle_blind: object = None
    mlp: object = None
    sweep: object = None
    readings: pd.DataFrame | None = None
    variants: pd.DataFrame | None = None
    overlap: dict | None = None
    agreement: pd.DataFrame | None = None
    same_order: dict | None = None


#: The data the reproduction reads unless told: LongMemEval-S, Table 3 in the paper and extended factor sets.
DATA = DataSpec("longmemeval_s", factor_set="both")


def reproduce(
    data: DataSpec | str = DATA, keep_fraction=0.3, n_splits=20, seed=0, readings=True, progress=False
) -> ReproductionResult:
    """Reproduce the paper's real-data results on ``data``, beside the paper's, with the gaps explained.

    Runs Table 3 / Figure 2 in the factor sets of ``data`` (:func:`~.oracle_blind.oracle_vs_blind`;
    paper and extended in :data:`DATA`), the MLP ablation and the keep-fraction sweep on the
    paper's factor set, and, with
    ``readings``, the reading and variant tables and the session-overlap check.
    ``table`` is the comparison of :func:`paper_comparison` with an ``explanation``
    column from :func:`explain_gaps` (gaps over 0.03).
    """
    from memlib.studies.mlp import mlp_ablation
    from memlib.studies.oracle_blind import oracle_vs_blind
    from memlib.studies.sweep import keep_fraction_sweep

    data = DataSpec.of(data, like=DATA).reads(
        "paper", "dataset", "quick", "limit", "sample", "factor_set", "embedding_setting"
    )
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    n_splits = check_int("n_splits", n_splits, minimum=2)
    common = dict(n_splits=n_splits, seed=seed, progress=progress)
    ob = oracle_vs_blind(data, keep_fraction=keep_fraction, **common)
    paper = dataclasses.replace(data, factor_set="paper")
    mlp = mlp_ablation(paper, keep_fraction=keep_fraction, **common)
    sweep = keep_fraction_sweep(paper, **common)
    ds = data.load_dataset()
    usable = ds.usable()
    read = var = overlap = None
    if readings:
        embedding, quick = data.embedding_setting, data.quick
        read = reading_table(usable, keep_fraction, embedding, progress)
        var = variant_table(usable, keep_fraction, n_splits, seed, quick, embedding, progress)
        overlap = session_overlap(ds, n_splits, seed)
    comparison = paper_comparison(ob.summary, ds.name)
    table = explain_gaps(
        comparison.rename(columns={"mean": "ours", "paper_mean": "paper"}),
        None if read is None else read.rename(columns={"paper_blind": "paper"}),
        variants=var,
    )
    table = table.rename(columns={"ours": "mean", "paper": "paper_mean"})
    return ReproductionResult(
        table=table,
        oracle_blind=ob,
        mlp=mlp,
        sweep=sweep,
        readings=read,
        variants=var,
        overlap=overlap,
        info={**ob.info, "dataset": ds.name},
    )


#: The data of :func:`embedding_check` unless told: a seeded sample of 60 LongMemEval-S questions.
CHECK_DATA = DataSpec("longmemeval_s", sample=CHECK_SAMPLE)


def embedding_check(
    data: DataSpec | str = CHECK_DATA,
    keep_fraction: float = 0.3,
    n_splits: int = 20,
    seed: int = 0,
    progress: bool = False,
    settings=("fast", "int8"),
) -> ReproductionResult:
    """Compare the faster embedding settings against the ``reference`` one on part of ``data`` (a seeded sample).

    ``agreement`` is :func:`embedding_agreement` on that part; ``table`` holds
    Table 3 (paper factor set) under each setting: ``policy, regime, reference``,
    one column per setting and its ``difference_<setting>`` from the reference;
    ``same_order`` maps each setting to whether its blind policies rank in the
    reference's order. A dataset name reads a sample of :data:`CHECK_SAMPLE` questions.
    """
    from memlib.studies.oracle_blind import oracle_vs_blind

    data = DataSpec.of(data, like=CHECK_DATA).reads("embedding check", "dataset", "quick", "limit", "sample")
    if data.sample is not None:
        check_int("sample", data.sample, minimum=2)
    runs = {}
    for setting in ("reference", *settings):
        spec = dataclasses.replace(data, embedding_setting=setting)
        r = oracle_vs_blind(spec, keep_fraction=keep_fraction, n_splits=n_splits, seed=seed, progress=progress)
        runs[setting] = r.summary.set_index(["policy", "regime"])["mean"]
    table = pd.concat(runs, axis=1).reset_index()
    blind = table[table["regime"] == "blind"]
    same_order = {}
    for setting in settings:
        table[f"difference_{setting}"] = table[setting] - table["reference"]
        same_order[setting] = list(blind.sort_values(setting)["policy"]) == list(
            blind.sort_values("reference")["policy"]
        )
    ds = data.load_dataset()
    return ReproductionResult(
        table=table,
        agreement=embedding_agreement(ds, progress, settings),
        same_order=same_order,
        info={"dataset": ds.name, "sample": data.resolved().sample, "cases": int(ds.cases["usable"].sum())},
    )
