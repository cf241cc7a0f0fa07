"""Studies: each returns tidy pandas DataFrames computed from scratch.

>>> res = synthetic_confounds(seed=0, n_train=10, n_test=10, quick=True)
>>> list(res.table.columns)
['policy', 'retention', 'n_cases']
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS, synthetic
from memlib._checks import check_fraction, check_int
from memlib.learning import LearnResult, hill_climb
from memlib.metrics import RetentionEvaluator, expected_random_retention
from memlib.policies import REGIME_FREE, policy_scores

#: Policies of Table 2 (the paper's list), plus the random baseline.
SYNTHETIC_POLICIES = ("learned_V", "uniform_V", "emotion_only", "self_only", "recency_only", "random")


@dataclass
class SyntheticResult:
    """Result of :func:`synthetic_confounds`.

    Attributes
    ----------
    table : DataFrame
        One row per policy: ``policy``, ``retention`` (mean over test cases), ``n_cases``.
    weights : DataFrame
        ``factor``, ``weight`` (learned; 0 on dead factors), ``live``.
    learning : LearnResult
        The learner's trace.
    params : dict
        The parameters the study ran with.
    """

    table: pd.DataFrame
    weights: pd.DataFrame
    learning: LearnResult
    params: dict = field(default_factory=dict)


def learner_settings(quick: bool) -> dict:
    """Hill-climb settings: the defaults, or a cheaper search in quick mode."""
    from memlib import learning

    return dict(n_iter=100, restarts=1) if quick else dict(n_iter=learning.N_ITER, restarts=learning.RESTARTS)


def synthetic_confounds(
    seed: int = 0,
    n_train: int = 60,
    n_test: int = 60,
    keep_fraction: float = 0.4,
    quick: bool = False,
) -> SyntheticResult:
    """The synthetic confound study (Table 2): learn on ``n_train`` cases, test on ``n_test``.

    Training and test cases are drawn from independent random streams derived
    from ``seed``, so they are disjoint. The ``random`` row is the expected
    retention of a uniformly random keep set (``k / n``).
    """
    seed = check_int("seed", seed, minimum=0)
    n_train = check_int("n_train", n_train, minimum=1)
    n_test = check_int("n_test", n_test, minimum=1)
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    train_seed, test_seed, learn_seed = np.random.SeedSequence(seed).generate_state(3)
    train = synthetic.make_cases(n_train, seed=int(train_seed))
    test = synthetic.make_cases(n_test, seed=int(test_seed))

    learned = hill_climb(
        RetentionEvaluator(train, keep_fraction).objective,
        live=train.live_factors,
        seed=int(learn_seed),
        **learner_settings(quick),
    )
    ev = RetentionEvaluator(test, keep_fraction)
    rows = []
    for name in SYNTHETIC_POLICIES:
        if name == "random":
            r = expected_random_retention(test, keep_fraction)
        else:
            r = ev.mean(policy_scores(name, test, weights=learned.weights))
        rows.append({"policy": name, "retention": r, "n_cases": n_test})
    weights = pd.DataFrame({"factor": FACTORS, "weight": learned.weights, "live": train.live_factors})
    params = dict(seed=seed, n_train=n_train, n_test=n_test, keep_fraction=keep_fraction, quick=quick)
    return SyntheticResult(pd.DataFrame(rows), weights, learned, params)


# --------------------------------------------------------------------------- factor overview (notebook 02)


def turn_factors(ds, ann) -> pd.DataFrame:
    """One row per unique haystack turn of an annotation, with its factors and metadata.

    A turn that appears in several haystacks (several histories) keeps its first occurrence.
    """
    parts = []
    seen = set()
    for g in range(ann.cases.n_haystacks):
        t = ann.turn_table(ds, g)
        t["row"] = ann.turn_rows[g, : ann.cases.length[g]]
        t = t[~t["row"].isin(seen)]
        seen.update(t["row"])
        parts.append(t)
    out = pd.concat(parts, ignore_index=True)
    gold_rows = set()
    cs = ann.cases
    gold_rows.update(ann.turn_rows[cs.case_haystack[cs.gold_case], cs.gold_pos].tolist())
    out["gold_for_any_question"] = out["row"].isin(gold_rows)
    return out


def factor_correlations(table: pd.DataFrame, live) -> pd.DataFrame:
    """Tidy Pearson correlations between the live factor columns (``a``, ``b``, ``r``)."""
    live = [f for f in FACTORS if f in set(live)]
    corr = table[live].corr()
    return corr.rename_axis("a").reset_index().melt(id_vars="a", var_name="b", value_name="r")


def goal_relevance_by_gold(blind, oracle) -> pd.DataFrame:
    """How well goal relevance singles out gold turns in each regime.

    For every case, the percentile rank of each gold turn's goal relevance among
    its haystack (0 = lowest, 1 = highest; ties count half) is averaged. Chance is
    0.5. Returns one row per regime with the mean goal relevance of gold and
    non-gold turns and the mean gold percentile.
    """
    rows = []
    gi = FACTORS.index("goal_relevance")
    for regime, ann in (("blind", blind), ("oracle", oracle)):
        cs = ann.cases
        goal = cs.factors[..., gi]
        valid = cs.valid
        h = cs.case_haystack[cs.gold_case]
        g = goal[h, cs.gold_pos]
        below = np.array([np.count_nonzero(goal[hh, : cs.length[hh]] < v) for hh, v in zip(h, g)])
        equal = np.array([np.count_nonzero(goal[hh, : cs.length[hh]] == v) for hh, v in zip(h, g)])
        pct = (below + 0.5 * (equal - 1)) / np.maximum(cs.length[h] - 1, 1)
        per_case = np.bincount(cs.gold_case, weights=pct, minlength=cs.n_cases) / np.maximum(cs.n_gold, 1)
        gold_sum = np.bincount(cs.gold_case, weights=g, minlength=cs.n_cases)
        case_sum = np.where(valid, goal, 0).sum(axis=1)[cs.case_haystack]
        nongold_mean = (case_sum - gold_sum) / (cs.length[cs.case_haystack] - cs.n_gold)
        rows.append({
            "regime": regime,
            "goal_relevance_gold": float(np.mean(g)),
            "goal_relevance_non_gold": float(np.mean(nongold_mean)),
            "gold_percentile": float(np.mean(per_case[cs.n_gold > 0])),
            "cases": int(cs.n_cases),
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- real data (section 4.2)

#: Conversations (or questions) used in quick mode, shared by every real-data notebook so
#: the embedding cache built by one serves the others.
QUICK_LIMIT = 4
#: Policies of Table 3, in the paper's order.
REAL_POLICIES = ("learned_V", "uniform_V", "self_only", "reliability_only", "goal_only", "emotion_only",
                 "recency_only", "random")
SWEEP_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5)


def load_regimes(dataset, quick: bool = False, limit: int | None = None, progress: bool = False):
    """Load a dataset and its cached blind and oracle factor tables.

    Returns ``(ds, {"blind": Annotation, "oracle": Annotation})``; ``quick`` limits
    the data to :data:`QUICK_LIMIT` groups.
    """
    from memlib import datasets, factors

    ds = datasets.load(dataset)
    if quick and limit is None:
        limit = QUICK_LIMIT
    if limit is not None:
        ds = ds.limit(check_int("limit", limit, minimum=1))
    anns = {r: factors.annotate(ds, r, progress=progress) for r in ("blind", "oracle")}
    if not np.array_equal(anns["blind"].cases.case_ids, anns["oracle"].cases.case_ids):
        raise RuntimeError("blind and oracle annotations disagree on the cases")
    return ds, anns


def group_splits(groups, n_splits: int, seed: int = 0, train_share: float = 0.5):
    """Resampled train/test splits that keep each group on one side.

    Returns a list of ``(train_idx, test_idx)`` arrays of case indices. With ``G``
    groups, ``round(train_share * G)`` (at least 1, at most ``G - 1``) go to training.
    """
    n_splits = check_int("n_splits", n_splits, minimum=2)
    train_share = check_fraction("train_share", train_share)
    groups = np.asarray(groups)
    uniq = np.unique(groups)
    if len(uniq) < 2:
        from memlib._checks import ParameterError

        raise ParameterError(
            f"too few usable cases to split: {len(groups)} cases in {len(uniq)} group(s); "
            "a train/test split needs at least 2 groups (conversations or questions)")
    n_train = min(max(1, int(round(train_share * len(uniq)))), len(uniq) - 1)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_splits):
        perm = rng.permutation(uniq)
        train = np.isin(groups, perm[:n_train])
        out.append((np.flatnonzero(train), np.flatnonzero(~train)))
    return out


@dataclass
class RealDataResult:
    """Result of :func:`oracle_vs_blind` (and the other real-data studies).

    Attributes
    ----------
    summary : DataFrame
        ``policy, regime, keep_fraction, mean, std, n_splits``.
    per_split : DataFrame
        ``policy, regime, keep_fraction, split, retention``.
    per_case : DataFrame
        ``policy, regime, split, case_id, group, retention`` (test cases only).
    weights : DataFrame
        ``regime, split, factor, weight``.
    bootstrap : DataFrame
        Paired gaps of learned_V against other policies with 95% intervals.
    info : dict
    """

    summary: pd.DataFrame
    per_split: pd.DataFrame
    per_case: pd.DataFrame = None
    weights: pd.DataFrame = None
    bootstrap: pd.DataFrame = None
    info: dict = field(default_factory=dict)


def _summarise(per_split: pd.DataFrame, keys) -> pd.DataFrame:
    g = per_split.groupby(list(keys), sort=False)["retention"]
    out = g.agg(mean="mean", std=lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0, n_splits="count")
    return out.reset_index()


def evaluate_splits(regimes: dict, keep_fraction: float = 0.3, n_splits: int = 20, seed: int = 0,
                    quick: bool = False, policies=REAL_POLICIES, progress: bool = False):
    """Learn on each split's training cases and score every policy on its test cases.

    Parameters
    ----------
    regimes : dict of str to CaseSet
        The same cases (same order) annotated in each regime.

    Returns
    -------
    per_case : DataFrame
        ``policy, regime, split, case_id, group, retention``.
    weights : DataFrame
        ``regime, split, factor, weight``.
    """
    from tqdm import tqdm

    from memlib._checks import check_choice
    from memlib.policies import POLICIES

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    seed = check_int("seed", seed, minimum=0)
    for p in policies:
        check_choice("policy", p, POLICIES)
    first = next(iter(regimes.values()))
    splits = group_splits(first.groups, n_splits, seed)
    learn_seeds = np.random.SeedSequence(seed).generate_state(n_splits)
    rows, wrows = [], []
    bar = tqdm(total=n_splits * len(regimes), desc="splits", disable=not progress)
    for s, (train_idx, test_idx) in enumerate(splits):
        for regime, cases in regimes.items():
            train, test = cases.subset(train_idx), cases.subset(test_idx)
            learned = hill_climb(RetentionEvaluator(train, keep_fraction).objective, train.live_factors,
                                 seed=int(learn_seeds[s]), **learner_settings(quick))
            wrows += [{"regime": regime, "split": s, "factor": f, "weight": w}
                      for f, w in zip(FACTORS, learned.weights)]
            ev = RetentionEvaluator(test, keep_fraction)
            for name in policies:
                if regime != "blind" and name in REGIME_FREE:
                    continue
                r = ev.per_case(policy_scores(name, test, weights=learned.weights, seed=int(learn_seeds[s])))
                rows.append(pd.DataFrame({"policy": name, "regime": regime, "split": s,
                                          "case_id": test.case_ids, "group": test.groups, "retention": r}))
            bar.update()
    bar.close()
    per_case = pd.concat(rows, ignore_index=True).dropna(subset=["retention"])
    return per_case, pd.DataFrame(wrows)


def bootstrap_gaps(per_case: pd.DataFrame, baselines=("uniform_V", "recency_only", "reliability_only"),
                   n_boot: int = 1000, seed: int = 0, regime: str = "blind") -> pd.DataFrame:
    """Paired per-case bootstrap of learned_V minus each baseline, plus split wins.

    Each case's retention is averaged over the splits where it was a test case;
    the gap is learned minus baseline per case; cases are resampled (the paper's
    protocol) and, as a stricter check, whole groups (conversations) too.
    """
    from memlib.metrics import paired_bootstrap

    d = per_case[per_case["regime"] == regime]
    by_case = d.groupby(["policy", "case_id", "group"], sort=False)["retention"].mean().unstack("policy")
    by_split = d.groupby(["policy", "split"])["retention"].mean().unstack("policy")
    out = []
    for b in baselines:
        gap = (by_case["learned_V"] - by_case[b]).dropna()
        groups = gap.index.get_level_values("group")
        for resample, grp in (("cases", None), ("groups", groups)):
            m, lo, hi = paired_bootstrap(gap.to_numpy(), n_boot=n_boot, seed=seed, groups=grp)
            out.append({"comparison": f"learned_V - {b}", "regime": regime, "resample": resample,
                        "mean_gap": m, "ci_low": lo, "ci_high": hi,
                        "learned_wins_splits": int((by_split["learned_V"] > by_split[b]).sum()),
                        "n_splits": int(len(by_split)), "n_cases": int(len(gap)), "n_groups": int(groups.nunique())})
    return pd.DataFrame(out)


def oracle_vs_blind(dataset="locomo", keep_fraction: float = 0.3, n_splits: int = 20, seed: int = 0,
                    quick: bool = False, limit: int | None = None, n_boot: int = 1000,
                    progress: bool = False) -> RealDataResult:
    """Table 3 / Figure 2: every policy in both regimes over resampled group-aware 50/50 splits.

    Recency and random read no goal anchor, so they appear in the blind regime only.
    """
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    n_splits = check_int("n_splits", n_splits, minimum=2)
    ds, anns = load_regimes(dataset, quick=quick, limit=limit, progress=progress)
    regimes = {r: a.cases for r, a in anns.items()}
    per_case, weights = evaluate_splits(regimes, keep_fraction, n_splits, seed, quick, progress=progress)
    per_split = (per_case.groupby(["policy", "regime", "split"], sort=False)["retention"].mean().reset_index()
                 .assign(keep_fraction=keep_fraction))
    summary = _summarise(per_split, ["policy", "regime", "keep_fraction"])
    boot = bootstrap_gaps(per_case, n_boot=n_boot, seed=seed)
    info = {**ds.stats(), "usable_cases_used": int(anns["blind"].cases.n_cases),
            "inert_factors": anns["blind"].inert,
            "expected_random": expected_random_retention(anns["blind"].cases, keep_fraction)}
    return RealDataResult(summary, per_split, per_case, weights, boot, info)


def _regime_splits(dataset, regime: str, n_splits: int, seed: int, quick: bool, limit, progress: bool):
    """Load one regime's cases and draw the group-aware splits and per-split learner seeds."""
    from memlib._checks import check_choice

    check_choice("regime", regime, ("blind", "oracle"))
    ds, anns = load_regimes(dataset, quick=quick, limit=limit, progress=progress)
    cases = anns[regime].cases
    splits = group_splits(cases.groups, n_splits, seed)
    return ds, cases, splits, np.random.SeedSequence(seed).generate_state(n_splits)


def mlp_ablation(dataset="locomo", keep_fraction: float = 0.3, n_splits: int = 20, seed: int = 0,
                 quick: bool = False, limit: int | None = None, regime: str = "blind",
                 progress: bool = False) -> RealDataResult:
    """The nonlinear ablation: an MLP ``[16, 16]`` over the live factors against the linear value.

    Both are fit on the same training cases of each split and scored on its test
    cases. ``summary`` has rows ``learned_V``, ``mlp`` and ``mlp_minus_linear``
    (the paired per-split difference; ``win_share`` is the share of splits the MLP wins).
    """
    from tqdm import tqdm

    from memlib.learning import fit_mlp

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    ds, cases, splits, learn_seeds = _regime_splits(dataset, regime, n_splits, seed, quick, limit, progress)
    rows = []
    for s, (tr, te) in enumerate(tqdm(splits, desc="splits", disable=not progress)):
        train, test = cases.subset(tr), cases.subset(te)
        live = train.live_factors
        lin = hill_climb(RetentionEvaluator(train, keep_fraction).objective, live, seed=int(learn_seeds[s]),
                         **learner_settings(quick))
        mlp = fit_mlp(train, live, epochs=60 if quick else 200, seed=int(learn_seeds[s]))
        ev = RetentionEvaluator(test, keep_fraction)
        r_lin = ev.mean(policy_scores("learned_V", test, weights=lin.weights))
        r_mlp = ev.mean(mlp(test.factors))
        rows += [{"policy": "learned_V", "regime": regime, "keep_fraction": keep_fraction, "split": s,
                  "retention": r_lin},
                 {"policy": "mlp", "regime": regime, "keep_fraction": keep_fraction, "split": s,
                  "retention": r_mlp},
                 {"policy": "mlp_minus_linear", "regime": regime, "keep_fraction": keep_fraction, "split": s,
                  "retention": r_mlp - r_lin}]
    per_split = pd.DataFrame(rows)
    summary = _summarise(per_split, ["policy", "regime", "keep_fraction"])
    diff = per_split[per_split["policy"] == "mlp_minus_linear"]["retention"]
    summary["win_share"] = np.where(summary["policy"] == "mlp_minus_linear", float((diff > 0).mean()), np.nan)
    return RealDataResult(summary, per_split, info={**ds.stats(), "regime": regime})


def keep_fraction_sweep(dataset="locomo", fractions=SWEEP_FRACTIONS, n_splits: int = 20, seed: int = 0,
                        quick: bool = False, limit: int | None = None, progress: bool = False) -> RealDataResult:
    """Figure 3: blind retention against the keep fraction.

    Policies: learned_V, uniform_V, the best single factor (chosen on each split's
    training cases, named in ``factor``), reliability_only and recency_only.
    """
    from tqdm import tqdm

    from memlib.policies import SINGLE_FACTOR

    fractions = [check_fraction("keep_fraction", f) for f in fractions]
    if not fractions:
        from memlib._checks import ParameterError

        raise ParameterError("fractions must hold at least one keep fraction")
    ds, cases, splits, learn_seeds = _regime_splits(dataset, "blind", n_splits, seed, quick, limit, progress)
    live = cases.live_factors
    singles = [p for p, f in SINGLE_FACTOR.items() if live[FACTORS.index(f)]]
    rows = []
    bar = tqdm(total=len(fractions) * n_splits, desc="sweep", disable=not progress)
    for kappa in fractions:
        for s, (tr, te) in enumerate(splits):
            train, test = cases.subset(tr), cases.subset(te)
            ev_tr, ev_te = RetentionEvaluator(train, kappa), RetentionEvaluator(test, kappa)
            lin = hill_climb(ev_tr.objective, train.live_factors, seed=int(learn_seeds[s]), **learner_settings(quick))
            best = max(singles, key=lambda p: ev_tr.mean(policy_scores(p, train)))
            for name, label in (("learned_V", "learned_V"), ("uniform_V", "uniform_V"),
                                (best, "best_single_factor"), ("reliability_only", "reliability_only"),
                                ("recency_only", "recency_only")):
                rows.append({"policy": label, "factor": name if label == "best_single_factor" else "",
                             "regime": "blind", "keep_fraction": kappa, "split": s,
                             "retention": ev_te.mean(policy_scores(name, test, weights=lin.weights))})
            bar.update()
    bar.close()
    per_split = pd.DataFrame(rows)
    summary = _summarise(per_split, ["policy", "regime", "keep_fraction"])
    chosen = (per_split[per_split["policy"] == "best_single_factor"].groupby("keep_fraction")["factor"]
              .agg(lambda x: x.value_counts().index[0]))
    summary["factor"] = summary.apply(lambda r: chosen.get(r["keep_fraction"], "")
                                      if r["policy"] == "best_single_factor" else "", axis=1)
    return RealDataResult(summary, per_split, info=ds.stats())


def table3(summary: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Table 3 layout: one row per policy, ``oracle_mean/std`` and ``blind_mean/std`` columns.

    When ``dataset`` is the paper's (LongMemEval-S), ``paper_oracle`` and
    ``paper_blind`` columns hold the paper's means for comparison.
    """
    from memlib import paper

    wide = summary.pivot_table(index="policy", columns="regime", values=["mean", "std"], sort=False)
    wide.columns = [f"{regime}_{stat}" for stat, regime in wide.columns]
    order = [p for p in REAL_POLICIES if p in wide.index]
    cols = [c for c in ("oracle_mean", "oracle_std", "blind_mean", "blind_std") if c in wide.columns]
    out = wide.reindex(order)[cols].reset_index()
    if dataset == paper.PAPER_DATASET:
        out["paper_oracle"] = out["policy"].map(lambda p: paper.PAPER_TABLE3.get(p, {}).get("oracle", (np.nan,))[0])
        out["paper_blind"] = out["policy"].map(lambda p: paper.PAPER_TABLE3.get(p, {}).get("blind", (np.nan,))[0])
    return out


def mean_weights(weights: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Mean and std of the learned weights per factor and regime (plus the paper's blind means)."""
    from memlib import paper

    out = weights.pivot_table(index="factor", columns="regime", values="weight", aggfunc=["mean", "std"], sort=False)
    out.columns = [f"{regime}_{stat}" for stat, regime in out.columns]
    out = out.reindex(list(FACTORS)).reset_index()
    if dataset == paper.PAPER_DATASET:
        out["paper_blind"] = out["factor"].map(paper.PAPER_BLIND_WEIGHTS)
    return out


# --------------------------------------------------------------------------- streaming (encode -> forget -> retrieve)

#: Policies of the streaming comparison (see :mod:`memlib.baselines`).
STREAM_POLICIES = ("learned_V", "learned_V_keep", "generative_agents", "memorybank", "memgpt_fifo", "recency",
                   "rag_unbounded")
STREAM_BUDGETS = (0.1, 0.3, 0.5)
STREAM_KS = (5, 10, 30)


def make_policy(name: str, beta: float = 1.0):
    """A store policy by name: ``learned_V`` (eq. 3), ``learned_V_keep`` (drop lowest V) or a baseline."""
    from memlib import baselines, store
    from memlib._checks import check_choice

    check_choice("policy", name, STREAM_POLICIES)
    return {
        "learned_V": lambda: store.ValuePolicy(beta=beta),
        "learned_V_keep": lambda: store.ValuePolicy(keep_top_value=True),
        "generative_agents": baselines.GenerativeAgentsPolicy,
        "memorybank": baselines.MemoryBankPolicy,
        "memgpt_fifo": baselines.FIFOPolicy,
        "recency": baselines.RecencyPolicy,
        "rag_unbounded": baselines.UnboundedRAGPolicy,
    }[name]()


def _budget_count(budget, n_turns: int) -> int:
    """A budget given as a share of the history (float in (0, 1)) or as an absolute count (int >= 1)."""
    if isinstance(budget, (int, np.integer)) and not isinstance(budget, bool):
        return check_int("budget", int(budget), minimum=1)
    return max(1, int(np.ceil(check_fraction("budget", budget) * n_turns - 1e-9)))


def replay(ds, rows: np.ndarray, weights, policy, budget: int, E: np.ndarray, emotion: np.ndarray,
           stats: dict | None = None):
    """Replay one history into a fresh :class:`~memlib.store.MemoryStore`, consolidating at session ends.

    ``rows`` are the history's rows of ``ds.turns`` in time order; item ids in the
    store are positions in ``rows``. Returns the store after the last session.
    """
    from memlib.store import MemoryStore

    st = MemoryStore(weights=weights, policy=policy)
    turns = ds.turns
    ts = ((turns["timestamp"].to_numpy()[rows] - np.datetime64("1970-01-01")) / np.timedelta64(1, "D")).astype(float)
    roles = turns["role"].to_numpy()[rows]
    speakers = turns["speaker"].to_numpy()[rows]
    texts = turns["text"].to_numpy()[rows]
    sess = turns["session"].to_numpy()[rows]
    peak = 0
    for i in range(len(rows)):
        st.add(texts[i], role=roles[i], time=ts[i], speaker=speakers[i], session=sess[i],
               embedding=E[rows[i]], emotion=float(emotion[rows[i]]))
        if i == len(rows) - 1 or sess[i + 1] != sess[i]:
            peak = max(peak, len(st))
            st.consolidate(budget, now=ts[i])
    if stats is not None:
        stats["peak_items"] = max(stats.get("peak_items", 0), peak)
    return st


@dataclass
class StreamResult:
    """Result of :func:`stream`.

    Attributes
    ----------
    table : DataFrame
        ``policy, budget, k, retention, recall_any, recall_all, ndcg, n_questions`` (means over questions).
    per_question : DataFrame
        One row per (policy, budget, question) with retention and metrics at each k.
    weights : DataFrame
        Learned weights used for ``learned_V`` per fold and budget (learned on the other fold).
    info : dict
    """

    table: pd.DataFrame
    per_question: pd.DataFrame
    weights: pd.DataFrame
    info: dict = field(default_factory=dict)


def stream(dataset="locomo", budgets=STREAM_BUDGETS, ks=STREAM_KS, policies=STREAM_POLICIES, seed: int = 0,
           beta: float = 1.0, quick: bool = False, limit: int | None = None, progress: bool = False) -> StreamResult:
    """Encode -> forget -> retrieve over time, against published memory policies.

    Every history (a LoCoMo conversation, a LongMemEval question's haystack) is
    replayed session by session into a store with a fixed budget (a share of the
    history's turns, or an absolute count) and consolidated at each session end.
    After the last session each question is asked: gold *retention* is the share
    of its gold turns still stored; *recall_any@k*, *recall_all@k* and *ndcg@k*
    score the store's ranking for the question (LongMemEval's definitions, with
    the whole history's gold as the ideal, so forgotten gold counts as missed).
    Questions are asked on a snapshot (no retrieval-count updates between them).

    The weights of ``learned_V`` are learned with the blind keep/drop objective on
    the *other* half of the histories (a two-fold split by group), at a keep
    fraction equal to the budget share, so no test question informs them.
    """
    from tqdm import tqdm

    from memlib.embeddings import embed
    from memlib.factors import emotion_and_valence
    from memlib.metrics import retrieval_metrics
    from memlib.store import valence

    seed = check_int("seed", seed, minimum=0)
    ks = [check_int("k", k, minimum=1) for k in ks]
    budgets = list(budgets)
    if not budgets:
        from memlib._checks import ParameterError

        raise ParameterError("budgets must hold at least one budget")
    for p in policies:
        make_policy(p, beta)
    ds, anns = load_regimes(dataset, quick=quick, limit=limit, progress=progress)
    blind = anns["blind"].cases
    usable = ds.usable()
    cases = usable.cases

    # embeddings and text-level factors, from the caches the annotation filled
    used_rows = np.unique(np.concatenate([usable.haystack_rows(c) for c in range(len(cases))]))
    text_ids = ds.turns["text_id"].to_numpy()
    uniq = np.unique(text_ids[used_rows])
    E_text = np.zeros((len(ds.texts), 384), np.float32)
    E_text[uniq] = embed([ds.texts[i] for i in uniq], progress=progress)
    E = E_text[text_ids]
    emo_text = np.zeros(len(ds.texts))
    emo_text[uniq] = emotion_and_valence([ds.texts[i] for i in uniq])[0]
    emotion = emo_text[text_ids]
    Q = embed(cases["question"].tolist(), progress=progress)
    q_val = valence(cases["question"].tolist())

    # two folds of groups; learned_V for a history uses weights learned on the other fold
    groups = cases["group"].to_numpy()
    uniq_groups = np.random.default_rng(seed).permutation(np.unique(groups))
    fold_of_group = {g: i % 2 for i, g in enumerate(uniq_groups)}
    fold = np.array([fold_of_group[g] for g in groups])
    mean_len = float(np.mean(blind.length))
    wrows, weights = [], {}
    for b in budgets:
        share = b if not isinstance(b, (int, np.integer)) else min(max(b / mean_len, 1e-3), 0.999)
        share = check_fraction("budget", share)
        for f in (0, 1):
            train_idx = np.flatnonzero(fold != f)
            if len(train_idx) == 0:
                train_idx = np.flatnonzero(fold == f)  # a single group: learn on itself (reported in info)
            train = blind.subset(train_idx)
            res = hill_climb(RetentionEvaluator(train, share).objective, train.live_factors,
                             seed=seed, **learner_settings(quick))
            weights[(b, f)] = res.weights
            wrows += [{"budget": b, "fold": f, "factor": fac, "weight": w} for fac, w in zip(FACTORS, res.weights)]

    histories: dict = {}
    for c, hay in enumerate(cases["haystack"]):
        histories.setdefault(hay, []).append(c)
    rows = []
    stats: dict = {}
    total = len(histories) * len(policies) * len(budgets)
    bar = tqdm(total=total, desc="replay", disable=not progress)
    for hay, case_list in histories.items():
        hrows = usable.haystack_rows(case_list[0])
        pos_of_row = {r: i for i, r in enumerate(hrows)}
        golds = [{pos_of_row[g] for g in cases["gold"].iloc[c]} for c in case_list]
        for b in budgets:
            count = _budget_count(b, len(hrows))
            for name in policies:
                w = weights[(b, fold[case_list[0]])] if name.startswith("learned_V") else np.ones(len(FACTORS))
                policy = make_policy(name, beta)
                st = replay(ds, hrows, w, policy, count, E, emotion, stats if policy.bounded else None)
                kept = set(st.ids)
                ids = np.asarray(st.ids)
                for c, gold in zip(case_list, golds):
                    ranking = ids[st.rank(Q[c], q_val[c])]
                    row = {"policy": name, "budget": b, "case_id": cases["case_id"].iloc[c],
                           "group": groups[c], "retention": len(gold & kept) / len(gold),
                           "stored": len(st), "history": len(hrows)}
                    for k in ks:
                        ra, rall, nd = retrieval_metrics(ranking, gold, k=k)
                        row.update({f"recall_any@{k}": ra, f"recall_all@{k}": rall, f"ndcg@{k}": nd})
                    rows.append(row)
                bar.update()
    bar.close()
    per_q = pd.DataFrame(rows)
    long = []
    for k in ks:
        g = per_q.groupby(["policy", "budget"], sort=False)
        agg = g.agg(retention=("retention", "mean"), recall_any=(f"recall_any@{k}", "mean"),
                    recall_all=(f"recall_all@{k}", "mean"), ndcg=(f"ndcg@{k}", "mean"),
                    n_questions=("case_id", "count")).reset_index()
        long.append(agg.assign(k=k))
    table = pd.concat(long, ignore_index=True)[["policy", "budget", "k", "retention", "recall_any", "recall_all",
                                                 "ndcg", "n_questions"]]
    info = {**ds.stats(), "histories": len(histories), "beta": beta,
            "peak_items": stats.get("peak_items", 0),  # largest bounded store at a session end, before forgetting
            "max_history": int(per_q["history"].max())}
    return StreamResult(table, per_q, pd.DataFrame(wrows), info)


def store_demo(dataset="locomo", budget: float = 0.3, beta: float = 1.0, quick: bool = False, seed: int = 0):
    """Replay the first conversation into a value-driven store, with weights learned on the others.

    Returns ``(ds, store, info)``; ``info`` has the learned weights, the budget
    and the history's questions (rows of ``ds.cases``) with their gold positions.
    """
    from memlib.embeddings import embed
    from memlib.factors import emotional_intensity
    from memlib.store import ValuePolicy

    ds, anns = load_regimes(dataset, quick=quick)
    usable = ds.usable()
    blind = anns["blind"].cases
    first = usable.cases["group"].iloc[0]
    others = np.flatnonzero(blind.groups != first)
    train = blind.subset(others if len(others) else np.arange(blind.n_cases))
    learned = hill_climb(RetentionEvaluator(train, budget).objective, train.live_factors, seed=seed,
                         **learner_settings(quick))
    rows = usable.haystack_rows(0)
    texts = ds.turns["text"].to_numpy()[rows].tolist()
    E = np.zeros((len(ds.turns), 384), np.float32)
    E[rows] = embed(texts, progress=False)
    emotion = np.zeros(len(ds.turns))
    emotion[rows] = emotional_intensity(texts)
    store = replay(ds, rows, learned.weights, ValuePolicy(beta=beta), _budget_count(budget, len(rows)), E, emotion)
    questions = usable.cases[usable.cases["group"] == first]
    pos = {r: i for i, r in enumerate(rows)}
    questions = questions.assign(gold_positions=[tuple(pos[g] for g in gold) for gold in questions["gold"]])
    return ds, store, {"weights": learned.weights, "budget": _budget_count(budget, len(rows)),
                       "history": len(rows), "questions": questions, "trained_on_groups": int(len(np.unique(blind.groups[others])))}


def optimiser_comparison(dataset="locomo", keep_fraction: float = 0.3, n_splits: int = 20, seed: int = 0,
                         quick: bool = False, limit: int | None = None, regime: str = "blind",
                         progress: bool = False) -> RealDataResult:
    """The paper's limitation L5: Algorithm 1's hill-climb against CMA-ES on the same splits.

    Both optimisers get the same training cases and the same number of objective
    evaluations. ``per_split`` has one row per (optimiser, split) with
    ``train_retention``, ``retention`` (test) and ``evaluations``; ``weights``
    the weights each found; ``summary`` means and stds, plus a row
    ``cma_minus_hill_climb`` (paired test difference, with ``win_share``) and the
    mean cosine similarity between the two weight vectors (``weight_cosine``).
    """
    from tqdm import tqdm

    from memlib.learning import cma_es

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    ds, cases, splits, learn_seeds = _regime_splits(dataset, regime, n_splits, seed, quick, limit, progress)
    settings = learner_settings(quick)
    budget = settings["n_iter"] * settings["restarts"] + settings["restarts"]
    rows, wrows, cosines = [], [], []
    for s, (tr, te) in enumerate(tqdm(splits, desc="splits", disable=not progress)):
        train, test = cases.subset(tr), cases.subset(te)
        ev_tr, ev_te = RetentionEvaluator(train, keep_fraction), RetentionEvaluator(test, keep_fraction)
        found = {
            "hill_climb": hill_climb(ev_tr.objective, train.live_factors, seed=int(learn_seeds[s]), **settings),
            "cma_es": cma_es(ev_tr.objective, train.live_factors, max_evals=budget, seed=int(learn_seeds[s])),
        }
        for name, res in found.items():
            rows.append({"optimiser": name, "regime": regime, "keep_fraction": keep_fraction, "split": s,
                         "train_retention": res.train_return, "retention": ev_te.objective(res.weights),
                         "evaluations": res.n_evaluations})
            wrows += [{"optimiser": name, "split": s, "factor": f, "weight": w} for f, w in zip(FACTORS, res.weights)]
        a, b = found["hill_climb"].weights, found["cma_es"].weights
        cosines.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) if a.any() and b.any() else np.nan)
    per_split = pd.DataFrame(rows)
    wide = per_split.pivot(index="split", columns="optimiser", values="retention")
    diff = wide["cma_es"] - wide["hill_climb"]
    g = per_split.groupby("optimiser", sort=False)
    summary = pd.DataFrame({
        "optimiser": list(g.groups),
        "train_mean": g["train_retention"].mean().to_numpy(),
        "mean": g["retention"].mean().to_numpy(),
        "std": g["retention"].std(ddof=1).to_numpy() if n_splits > 1 else 0.0,
        "evaluations": g["evaluations"].mean().to_numpy(),
    })
    summary = pd.concat([summary, pd.DataFrame([{
        "optimiser": "cma_minus_hill_climb", "mean": float(diff.mean()), "std": float(diff.std(ddof=1)),
        "win_share": float((diff > 0).mean()), "weight_cosine": float(np.nanmean(cosines))}])], ignore_index=True)
    summary.insert(1, "regime", regime)
    summary.insert(2, "keep_fraction", keep_fraction)
    return RealDataResult(summary, per_split, weights=pd.DataFrame(wrows), info={**ds.stats(), "budget": budget})
