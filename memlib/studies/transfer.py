"""Leave one corpus out (issue 20): learn a value on some corpora, test it on one it never saw.

An agent that ships a value never has gold labels for its own conversations: the value was learned
elsewhere. So the figure that decides whether "learning what to remember" works is transfer. For
each corpus (the *target*) this study scores, on the same test cases of the same grouped splits:

* ``in_domain``: the value learned on the training half of the target itself;
* ``<corpus>``: learned on all of one other corpus;
* ``others``: learned on all of every other corpus together (leave one corpus out);
* ``uniform``: the paper's seven factors with equal weights, learned on nothing;
* ``others_worst_case``: learned on every other corpus with the group-robust objective: the
  *worst* retention over those corpora, maximised (:func:`fit_worst_case`), so that no corpus the
  value was learned on can carry it alone.

:func:`weight_signs` fits each linear model on each corpus alone and flags the weights whose sign
differs between corpora: a cue whose meaning depends on how a corpus was built.

``cues_user`` multiplies each cue by ``is_user``, which is constant in person-person chat (LoCoMo),
so there its products are copies of the cues and a LoCoMo fit splits each weight between a cue and
its copy. ``cues_relative`` (:func:`memlib.studies.cue_data.role_products`) multiplies by the
relative role cue ``self_talk`` instead, centred within each history, so that no product has a
constant factor; a weight the training histories cannot see (its column is constant within every
one of them) is 0.

Every value model is fit the same way: the paper's factors by Algorithm 1 (non-negative weights),
the cue models of :mod:`memlib.studies.cues` by the pairwise surrogate on calibrated cues (signed
weights). :func:`transfer_matrix` does the work on loaded :class:`~memlib.studies.cues.CueData`
(pure, tested on planted data); :func:`transfer_study` loads the corpora.

Each figure's interval resamples whole conversations (LoCoMo), questions (LongMemEval-S) or users
(RealMem) of the target: the cases of a group share a history and are not independent.

>>> MODELS
('paper_factors', 'cues', 'cues_no_position', 'cues_user', 'cues_relative')
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib._checks import ParameterError, check_choice, check_fraction, check_int
from memlib.cases import CaseSet
from memlib.cues import CueTable
from memlib.learning import N_ITER, hill_climb
from memlib.metrics import RetentionEvaluator, expected_random_retention, paired_bootstrap
from memlib.studies._common import quick_splits, rank_by_worst_case, split_plan
from memlib.studies.cue_data import READS, load_cue_data
from memlib.studies.cues import (
    CUE_MODELS,
    PAPER_MODEL,
    CueData,
    _table_of,
    fit_cue_model,
    learner_budget,
    paper_weights,
)
from memlib.studies.data_spec import DataSpec
from memlib.value import LinearValue

#: The corpora a value is learned on and tested on.
CORPORA = ("locomo", "longmemeval_s", "realmem")
#: The value models compared.
MODELS = (PAPER_MODEL, *CUE_MODELS)
#: The learner of the cue models (deterministic, and the best linear learner of chapter 09).
CUE_LEARNER = "surrogate"
#: Where a value was learned: on the target's own training half, on nothing, on all other corpora
#: (pooled, or for the worst of them).
IN_DOMAIN, UNIFORM, OTHERS, WORST_CASE = "in_domain", "uniform", "others", "others_worst_case"
#: Groups (conversations, questions, users) per corpus in quick mode: two, so a split can hold one out.
QUICK_GROUPS = 2


def concat(datas, name: str = OTHERS) -> CueData:
    """Several corpora's cases and cues as one :class:`CueData` (histories padded to the longest).

    Groups and case ids are prefixed with their corpus's name, so that no two corpora share a group.
    Each corpus keeps its own calibration (cues are ranked within each history).

    >>> from memlib.cues import CueTable
    >>> def tiny(n, name):
    ...     cs = CaseSet.from_cases([np.full((n, 7), 0.5)], [np.arange(n, dtype=float)], gold=[[0]])
    ...     t = CueTable(np.ones((1, n, 2), np.float32), ("a", "b"), np.array([n]))
    ...     return CueData(name, cs, t)
    >>> both = concat([tiny(3, "x"), tiny(5, "y")])
    >>> both.cases.factors.shape, both.raw.values.shape, both.cases.groups.tolist()
    ((2, 5, 7), (2, 5, 2), ['x:0', 'y:0'])
    """
    datas = list(datas)
    if not datas:
        raise ParameterError("concat needs at least one corpus")
    names = datas[0].raw.names
    for d in datas[1:]:
        if d.raw.names != names:
            raise ParameterError(f"corpora {datas[0].name} and {d.name} have different cues")
    N = max(d.cases.factors.shape[1] for d in datas)

    def pad(a):
        width = [(0, 0)] * a.ndim
        width[1] = (0, N - a.shape[1])
        return np.pad(a, width)

    offsets = np.cumsum([0] + [d.cases.n_haystacks for d in datas])[:-1]
    case_offsets = np.cumsum([0] + [d.cases.n_cases for d in datas])[:-1]
    cases = CaseSet(
        factors=np.concatenate([pad(d.cases.factors) for d in datas]),
        time=np.concatenate([pad(d.cases.time) for d in datas]),
        length=np.concatenate([d.cases.length for d in datas]),
        case_haystack=np.concatenate([d.cases.case_haystack + o for d, o in zip(datas, offsets)]),
        gold_case=np.concatenate([d.cases.gold_case + o for d, o in zip(datas, case_offsets)]),
        gold_pos=np.concatenate([d.cases.gold_pos for d in datas]),
        case_ids=np.concatenate([np.char.add(f"{d.name}:", d.cases.case_ids.astype(str)) for d in datas]),
        groups=np.concatenate([np.char.add(f"{d.name}:", d.cases.groups.astype(str)) for d in datas]),
        keys=np.concatenate([np.char.add(f"{d.name}:", d.cases.keys.astype(str)) for d in datas]),
    )

    def table(attr):
        ts = [getattr(d, attr) for d in datas]
        return CueTable(
            np.concatenate([pad(t.values) for t in ts]),
            names,
            np.concatenate([t.length for t in ts]),
            ts[0].calibrated_,
            {},
            sum(t.n_turns for t in ts),
        )

    return CueData(name, cases, table("raw"), table("calibrated"), {"corpora": [d.name for d in datas]})


def fit_value(model: str, train: CueData, keep_fraction: float, seed: int = 0, quick: bool = False):
    """Fit one value model on ``train``; return ``score(data) -> (G, N)`` for any corpus with the same cues."""
    check_choice("model", model, MODELS)
    if model == PAPER_MODEL:
        w = paper_weights(train, keep_fraction, seed, quick)
        return lambda data: LinearValue(w).score(data.cases)
    score, _ = fit_cue_model(CUE_LEARNER, train, _table_of(True, model), keep_fraction, seed, quick)
    return score


def fit_worst_case(model: str, datas, keep_fraction: float, seed: int = 0, quick: bool = False):
    """Fit one linear value model to maximise its *worst* training retention over several corpora.

    The group-robust objective ``min_c mean retention on corpus c`` is searched by the signed
    hill-climb (Algorithm 1 without the clip at 0; for the paper's factors, with it) from the
    pooled fit of :func:`fit_value`, on cues standardised over all the corpora's turns. Returns
    ``(score, weights)`` as :func:`memlib.studies.cues.fit_cue_model` does.
    """
    from memlib.feature_fits import standardise
    from memlib.learning import hill_climb_signed

    check_choice("model", model, MODELS)
    datas = list(datas)
    pooled = concat(datas)
    n_iter = learner_budget(quick)["n_iter"] if quick else N_ITER
    if model == PAPER_MODEL:
        evs = [RetentionEvaluator(d.cases, keep_fraction) for d in datas]
        start = hill_climb(
            RetentionEvaluator(pooled.cases, keep_fraction).objective,
            pooled.cases.live_factors,
            n_iter=n_iter,
            restarts=1,
            seed=seed,
        ).weights
        live = pooled.cases.live_factors

        def worst(w):
            w = np.where(live, np.clip(w, 0, None), 0).astype(np.float32)
            return min(ev.mean(LinearValue(w).score(d.cases)) for ev, d in zip(evs, datas))

        w = hill_climb_signed(worst, np.where(live, start, 0), n_iter=n_iter, seed=seed).weights
        w = np.where(live, np.clip(w, 0, None), 0).astype(np.float32)
        return (lambda data: LinearValue(w).score(data.cases)), w
    table_of = _table_of(True, model)
    tab = table_of(pooled)
    mu, sd = standardise(tab.values, tab.valid)
    Zs = [((table_of(d).values - mu) / sd).astype(np.float32) for d in datas]
    evs = [RetentionEvaluator(d.cases, keep_fraction) for d in datas]
    _, w0 = fit_cue_model(CUE_LEARNER, pooled, table_of, keep_fraction, seed, quick)

    def worst(wz):
        wz = np.asarray(wz, dtype=np.float32)
        return min(ev.mean(Z @ wz) for ev, Z in zip(evs, Zs))

    wz = hill_climb_signed(worst, w0 * sd, n_iter=n_iter, seed=seed).weights
    w = np.where(unseen(tab), 0.0, wz / sd).astype(np.float32)  # the search moves what no history sees
    return (lambda data: table_of(data).values @ w), w


def unseen(table: CueTable) -> np.ndarray:
    """(K,) True for each column that is constant within every history of ``table``.

    Such a column cannot change the order of any history's turns, so no retention objective sees
    its weight: the surrogate leaves it at 0, a search would move it at random.

    >>> V = np.array([[[1, 0], [1, 1]], [[2, 5], [2, 3]]], np.float32)
    >>> unseen(CueTable(V, ("a", "b"), np.array([2, 2]))).tolist()
    [True, False]
    """
    valid = table.valid[..., None]
    hi = np.where(valid, table.values, -np.inf).max(axis=1)
    lo = np.where(valid, table.values, np.inf).min(axis=1)
    return np.all(hi <= lo, axis=0) if len(table.length) else np.ones(len(table.names), bool)


def weight_signs(corpora: dict, keep_fraction: float = 0.3, seed: int = 0, quick: bool = False, models=MODELS):
    """Each linear model fit on each corpus alone: its weights, and whether each weight's sign holds.

    Returns ``model, feature, <corpus>..., sign_stable``: a weight per corpus (the cue models' in
    units of standard deviations of the pooled turns, so that sizes compare across cues; the paper's
    factors as learned, non-negative) and ``sign_stable``, False where two corpora give the weight
    opposite signs (weights within 1% of the largest are taken as 0).
    """
    from memlib import FACTORS
    from memlib.feature_fits import standardise

    names = list(corpora)
    rows = []
    for model in models:
        if model == PAPER_MODEL:
            features = list(FACTORS)
            per = {n: paper_weights(corpora[n], keep_fraction, seed, quick) for n in names}
        else:
            table_of = _table_of(True, model)
            tab = table_of(concat([corpora[n] for n in names]))
            _, sd = standardise(tab.values, tab.valid)
            features = list(tab.names)
            per = {
                n: fit_cue_model(CUE_LEARNER, corpora[n], table_of, keep_fraction, seed, quick)[1] * sd for n in names
            }
        W = np.array([per[n] for n in names])  # (corpora, features)
        tol = 0.01 * np.abs(W).max(axis=1, keepdims=True)
        sign = np.where(np.abs(W) <= tol, 0, np.sign(W))
        stable = ~((sign > 0).any(axis=0) & (sign < 0).any(axis=0))
        for j, f in enumerate(features):
            rows.append(
                {
                    "model": model,
                    "feature": f,
                    **{n: float(W[i, j]) for i, n in enumerate(names)},
                    "sign_stable": bool(stable[j]),
                }
            )
    return pd.DataFrame(rows)


def _uniform(data: CueData) -> np.ndarray:
    return LinearValue(np.ones(7, np.float32)).score(data.cases)


def transfer_matrix(
    corpora: dict, keep_fraction=0.3, n_splits=10, seed=0, quick=False, models=MODELS, progress=False
) -> pd.DataFrame:
    """Per-case test retention of every model, learned in domain, on each other corpus and on all others.

    Parameters
    ----------
    corpora : dict of str to CueData
        At least two corpora, by name.
    keep_fraction, n_splits, seed, quick
        As in the other studies; each target's grouped splits come from ``seed``.
    models : sequence of str
        Of :data:`MODELS`.

    Returns
    -------
    DataFrame
        ``model, train, test, split, case_id, group, retention``: ``train`` is
        :data:`IN_DOMAIN`, :data:`UNIFORM`, :data:`OTHERS` or a corpus's name. Every row of a
        target and split scores the same test cases.
    """
    from tqdm import tqdm

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    if len(corpora) < 2:
        raise ParameterError(f"transfer needs at least two corpora, got {len(corpora)}")
    for m in models:
        check_choice("model", m, MODELS)
    names = list(corpora)
    fit_seed = int(np.random.SeedSequence(seed).generate_state(1)[0])
    # values learned on whole corpora, once each, then scored on every other corpus
    sources = {n: corpora[n] for n in names}
    for target in names:
        if len(names) > 2:
            sources[f"{OTHERS}:{target}"] = concat([corpora[n] for n in names if n != target])
    whole = {}
    n_robust = len(names) if len(names) > 2 else 0
    bar = tqdm(total=(len(sources) + n_robust) * len(models), desc="transfer fits", disable=not progress)
    for key, data in sources.items():
        for model in models:
            whole[key, model] = fit_value(model, data, keep_fraction, fit_seed, quick)
            bar.update()
    for target in names[:n_robust]:
        rest = [corpora[n] for n in names if n != target]
        for model in models:
            whole[f"{WORST_CASE}:{target}", model] = fit_worst_case(model, rest, keep_fraction, fit_seed, quick)[0]
            bar.update()
    bar.close()
    rows = []
    for target in names:
        data = corpora[target]
        splits, seeds = split_plan(data.cases.groups, n_splits, seed, data.cases.keys)
        for s, (tr, te) in enumerate(splits):
            _, train = data.subset(tr)
            _, test = data.subset(te)
            ev = RetentionEvaluator(test.cases, keep_fraction)
            here = {"test": target, "split": s, "case_id": test.cases.case_ids, "group": test.cases.groups}
            scored = [(PAPER_MODEL, UNIFORM, _uniform(test))]
            for model in models:
                scored.append((model, IN_DOMAIN, fit_value(model, train, keep_fraction, int(seeds[s]), quick)(test)))
                scored += [(model, src, whole[src, model](test)) for src in names if src != target]
                if len(names) > 2:
                    scored.append((model, OTHERS, whole[f"{OTHERS}:{target}", model](test)))
                    scored.append((model, WORST_CASE, whole[f"{WORST_CASE}:{target}", model](test)))
            for model, where, scores in scored:
                rows.append(pd.DataFrame({"model": model, "train": where, **here, "retention": ev.per_case(scores)}))
    return pd.concat(rows, ignore_index=True).dropna(subset=["retention"])


def summarise(per_case: pd.DataFrame, random_levels: dict, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Mean test retention of each (model, train, test) with a 95% interval over the target's groups.

    Each row also gives the share of the in-domain gain over uniform that survives.

    The mean is over every test case of every split (each split holds a different half of the groups);
    the interval resamples groups, each group's figure being its mean over the splits it was tested in.
    """
    uniform = per_case[per_case["train"] == UNIFORM].groupby("test")["retention"].mean()
    rows = []
    for (model, train, test), g in per_case.groupby(["model", "train", "test"], sort=False):
        by_group = g.groupby("group")["retention"].mean()
        _, lo, hi = paired_bootstrap(by_group.to_numpy(), n_boot=n_boot, seed=seed)
        rows.append(
            {
                "model": model,
                "train": train,
                "test": test,
                "mean": float(g["retention"].mean()),
                "low": lo,
                "high": hi,
                "n_groups": int(len(by_group)),
                "n_cases": int(g["case_id"].nunique()),
                "uniform": float(uniform[test]),
                "random": float(random_levels[test]),
            }
        )
    out = pd.DataFrame(rows)
    own = out[out["train"] == IN_DOMAIN].set_index(["model", "test"])["mean"]
    gain = np.array([own.get((m, t), np.nan) for m, t in zip(out["model"], out["test"])]) - out["uniform"]
    out["in_domain"] = gain + out["uniform"]
    out["share_of_in_domain_gain"] = np.where(gain > 0, (out["mean"] - out["uniform"]) / gain, np.nan)
    return out


def choose_by_worst_case(summary: pd.DataFrame) -> pd.DataFrame:
    """Every model and way of learning it elsewhere, ranked by its *worst* held-out corpus.

    A value an agent ships must hold on conversations nobody labelled, so a model is chosen by the
    lowest of its held-out figures (each corpus held out in turn), not by their mean, which can be the
    best of two corpora and fail on a third. Returns ``model, train, worst, worst_corpus, mean`` and
    ``chosen`` (True on the first row), best first.

    >>> s = pd.DataFrame({"model": ["a", "a", "b", "b"], "train": "others", "test": ["x", "y", "x", "y"],
    ...                   "mean": [0.9, 0.3, 0.5, 0.5]})
    >>> choose_by_worst_case(s)[["model", "worst", "worst_corpus", "mean", "chosen"]].values.tolist()
    [['b', 0.5, 'x', 0.5, True], ['a', 0.3, 'y', 0.6, False]]
    """
    held = summary[summary["train"].isin([OTHERS, WORST_CASE])]
    out = rank_by_worst_case(held, ["model", "train"], corpus="test")
    out["chosen"] = out.index == 0
    return out


@dataclass
class TransferResult:
    """The transfer study: ``summary`` (one row per model, train and test corpus), ``per_case``, ``info``."""

    summary: pd.DataFrame
    per_case: pd.DataFrame
    weights: pd.DataFrame = None
    info: dict = field(default_factory=dict)

    def matrix(self, model: str = "cues") -> pd.DataFrame:
        """Mean test retention of one model: a row per training source, a column per test corpus."""
        s = self.summary[self.summary["model"] == model]
        return s.pivot(index="train", columns="test", values="mean")


#: What the transfer study reads of each corpus unless told: all of it (quick mode: :data:`QUICK_GROUPS` groups).
DATA = DataSpec(quick_limit=QUICK_GROUPS)


def transfer_study(data: DataSpec = DATA, keep_fraction=0.3, n_splits=10, seed=0, progress=False) -> TransferResult:
    """Leave one corpus out over :data:`CORPORA` (see the module docstring).

    ``data`` says what to read of each corpus (it names no dataset): ``sample``, a seeded sample
    of at most this many groups per corpus (LongMemEval-S has 477 usable questions, each a group;
    LoCoMo and RealMem have 10 groups each); ``quick``, the first ``quick_limit`` groups of each
    corpus (:data:`QUICK_GROUPS` in :data:`DATA`), fit with the quick learner budgets.
    """
    data = DataSpec.of(data, like=DATA).reads("transfer", *READS[1:])
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    n_splits = check_int("n_splits", n_splits, minimum=2)
    if data.sample is not None:
        check_int("sample", data.sample, minimum=2)
    corpora = {n: load_cue_data(dataclasses.replace(data, dataset=n), progress=progress) for n in CORPORA}
    quick = data.quick
    per_case = transfer_matrix(corpora, keep_fraction, quick_splits(n_splits, quick), seed, quick, progress=progress)
    levels = {n: expected_random_retention(d.cases, keep_fraction) for n, d in corpora.items()}
    summary = summarise(per_case, levels, n_boot=200 if quick else 1000, seed=seed)
    weights = weight_signs(corpora, keep_fraction, seed, quick)
    info = {n: {k: v for k, v in d.info.items() if not k.startswith("seconds")} for n, d in corpora.items()}
    run = {"embedding": data.embedding_setting, "sample": data.resolved().sample}
    return TransferResult(summary, per_case, weights, {"corpora": info, **run})
