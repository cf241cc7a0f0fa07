"""Live usage history (issue 20): what the replayed usage factor adds to the paper's value, blind.

The paper holds usage history at 0 (it needs access logs). :mod:`memlib.usage` replays the
retrievals an agent makes before it answers each user turn, and gives each turn its factor
``r / (1 + r)``. This study learns the paper's value (seven factors, Algorithm 1,
:func:`~memlib.studies.cues.paper_weights`) on the same cases with the usage factor
held at 0 as today (``zero``) and set to the replayed factor (``replayed``), and compares
their gold retention at a keep fraction of 30%, blind. A third variant, ``shuffled``, is a
placebo: the replayed values permuted at random within each history, so that the search has
the same extra dimension and the same values but no turn keeps its own count. Its gap to
``zero`` is what one more live factor gives the hill-climb by chance (its random draws, and
so its result, change with the number of live factors), the floor against which the gap of
``replayed`` reads.

Two evaluations:

* ``in_domain``: on grouped splits of each corpus (learned on half its groups, tested on the rest);
* ``across``: learned on all of the other corpora together, tested on all of the held-out one.

Each figure's 95% interval resamples the held-out corpus's groups (conversations, questions or
users: the cases of a group share a history), and ``delta`` is the paired gap to ``zero`` over
the same test cases (:func:`memlib.metrics.paired_bootstrap`). :func:`usage_per_case`
and :func:`summarise` are the pure core, tested on planted corpora; :func:`usage_study` loads
:data:`~memlib.studies.transfer.CORPORA` and replays their usage.

>>> VARIANTS, EVALUATIONS
(('zero', 'replayed', 'shuffled'), ('in_domain', 'across'))
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_choice, check_fraction, check_int
from memlib.cases import CaseSet
from memlib.cues import CueTable
from memlib.metrics import RetentionEvaluator, expected_random_retention, paired_bootstrap
from memlib.studies._common import quick_splits, split_plan
from memlib.studies.cue_data import CueData
from memlib.studies.cues import paper_weights
from memlib.studies.data_spec import DataSpec
from memlib.studies.transfer import CORPORA, QUICK_GROUPS, concat
from memlib.usage import DEFAULT_K, USAGE_COLUMN, replay_annotation, with_usage
from memlib.value import LinearValue

#: The usage factor held at 0 (the paper's API-free setting), set to the replayed ``r / (1 + r)``, and
#: set to the replayed values permuted within each history (a placebo).
ZERO, REPLAYED, SHUFFLED = "zero", "replayed", "shuffled"
VARIANTS = (ZERO, REPLAYED, SHUFFLED)
#: Learned on the held-out corpus's own training groups, or on every other corpus.
IN_DOMAIN, ACROSS = "in_domain", "across"
EVALUATIONS = (IN_DOMAIN, ACROSS)
#: What the study reads of its data (:meth:`~memlib.studies.data_spec.DataSpec.reads`): the paper set, blind.
READS = ("quick", "limit", "sample", "histories", "embedding_setting")
#: What the study reads of each corpus unless told: all of it (quick mode: two groups, as ``transfer``).
DATA = DataSpec(quick_limit=QUICK_GROUPS)


@dataclass
class UsageCorpus:
    """A corpus's blind cases and the usage factor replayed over its histories, aligned.

    Attributes
    ----------
    name : str
    cases : CaseSet
        As annotated (the paper set: the usage column is 0).
    usage : ndarray, shape (G, N)
        The replayed factor ``r / (1 + r)`` of every position (:func:`memlib.usage.replay_usage`).
    info : dict
    """

    name: str
    cases: CaseSet
    usage: np.ndarray
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        if np.shape(self.usage) != self.cases.time.shape:
            raise ParameterError(
                f"{self.name}: usage must have the (G, N) shape {self.cases.time.shape} of the cases, "
                f"got {np.shape(self.usage)}"
            )

    def variant(self, usage: str, seed: int = 0) -> CueData:
        """Return the cases with the usage factor of one of :data:`VARIANTS`, as the learners read them.

        A :class:`~memlib.studies.cue_data.CueData` with no cues, so that
        :func:`~memlib.studies.cues.paper_weights` and :func:`~memlib.studies.transfer.concat` serve it.
        ``seed`` draws the permutations of ``shuffled``.
        """
        check_choice("usage", usage, VARIANTS)
        if usage == ZERO:
            f = np.zeros(self.cases.time.shape)
        elif usage == REPLAYED:
            f = self.usage
        else:
            f = np.array(self.usage, dtype=float)
            rng = np.random.default_rng(check_int("seed", seed, minimum=0))
            for g, n in enumerate(self.cases.length):
                f[g, :n] = rng.permutation(f[g, :n])
        cs = with_usage(self.cases, f)
        no_cues = CueTable(np.zeros((*cs.time.shape, 0), np.float32), (), cs.length.copy())
        return CueData(self.name, cs, no_cues, no_cues)


def usage_per_case(corpora: dict, keep_fraction=0.3, n_splits=10, seed=0, quick=False, across_seeds=3):
    """Per-case test retention of the paper's value learned with each usage variant (:data:`VARIANTS`).

    Parameters
    ----------
    corpora : dict of str to UsageCorpus
        At least two corpora, by name.
    keep_fraction : float
    n_splits : int
        Grouped splits of each corpus for ``in_domain`` (at most 3 in quick mode).
    seed : int
        Seeds the splits, the learner (one learner seed per fit, which every variant of the fit
        shares) and the placebo's permutations.
    quick : bool
        The quick learner budget and at most 3 splits.
    across_seeds : int
        Fits of each ``across`` value, one per learner seed: the search's result changes with its
        random draws, and the figures average over them.

    Returns
    -------
    per_case : DataFrame
        ``evaluation, corpus, trained_on, fit, usage, case_id, group, retention``: ``fit`` is the
        split (``in_domain``) or the learner seed (``across``); the variants of an evaluation,
        corpus and fit score the same test cases.
    weights : DataFrame
        ``evaluation, corpus, trained_on, fit, usage`` and the learned weight of each factor.
    """
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    n_splits = quick_splits(check_int("n_splits", n_splits, minimum=2), quick)
    seed = check_int("seed", seed, minimum=0)
    across_seeds = check_int("across_seeds", across_seeds, minimum=1)
    if len(corpora) < 2:
        raise ParameterError(f"the usage study needs at least two corpora, got {len(corpora)}")
    names = list(corpora)
    data = {(n, v): corpora[n].variant(v, seed) for n in names for v in VARIANTS}
    rows, wrows = [], []

    def record(evaluation, target, trained_on, fit, usage, w, test: CueData):
        where = {"evaluation": evaluation, "corpus": target, "trained_on": trained_on, "fit": fit, "usage": usage}
        scores = LinearValue(w).score(test.cases)
        retention = RetentionEvaluator(test.cases, keep_fraction).per_case(scores)
        rows.append(
            pd.DataFrame({**where, "case_id": test.cases.case_ids, "group": test.cases.groups, "retention": retention})
        )
        wrows.append({**where, **{f: float(x) for f, x in zip(FACTORS, w)}})

    for target in names:
        cs = corpora[target].cases
        splits, seeds = split_plan(cs.groups, n_splits, seed, cs.keys)
        for s, (tr, te) in enumerate(splits):
            for v in VARIANTS:
                _, train = data[target, v].subset(tr)
                _, test = data[target, v].subset(te)
                record(IN_DOMAIN, target, target, s, v, paper_weights(train, keep_fraction, int(seeds[s]), quick), test)
    fit_seeds = np.random.SeedSequence(seed).generate_state(across_seeds)
    for target in names:
        others = [n for n in names if n != target]
        for v in VARIANTS:
            train = concat([data[n, v] for n in others])
            for s, fit_seed in enumerate(fit_seeds):
                w = paper_weights(train, keep_fraction, int(fit_seed), quick)
                record(ACROSS, target, "+".join(others), s, v, w, data[target, v])
    per_case = pd.concat(rows, ignore_index=True).dropna(subset=["retention"]).reset_index(drop=True)
    return per_case, pd.DataFrame(wrows)


def summarise(per_case: pd.DataFrame, weights: pd.DataFrame | None = None, n_boot=1000, seed=0) -> pd.DataFrame:
    """Mean retention of each variant with a 95% interval over the held-out groups, and its paired gap to ``zero``.

    Parameters
    ----------
    per_case : DataFrame
        As :func:`usage_per_case` returns.
    weights : DataFrame, optional
        As :func:`usage_per_case` returns; adds ``usage_weight``, the mean share of the learned
        weight on usage history (0 where it is held at 0).
    n_boot, seed
        Of :func:`memlib.metrics.paired_bootstrap`, which resamples whole groups.

    Returns
    -------
    DataFrame
        ``evaluation, corpus, trained_on, usage, mean, low, high, delta, delta_low, delta_high,
        usage_weight, n_groups, n_cases, n_fits``: one row per variant; ``delta`` (the variant
        minus ``zero``, over the same test cases of the same fits), NaN on the ``zero`` rows.
        ``mean`` is over every test case of every fit (split or learner seed).

    >>> pc = pd.DataFrame({"evaluation": "across", "corpus": "a", "trained_on": "b", "fit": 0,
    ...                    "usage": ["zero", "replayed"] * 2, "case_id": ["1", "1", "2", "2"],
    ...                    "group": ["g1", "g1", "g2", "g2"], "retention": [0.5, 0.75, 0.5, 0.5]})
    >>> summarise(pc, n_boot=50)[["usage", "mean", "delta", "n_groups"]].values.tolist()
    [['zero', 0.5, nan, 2], ['replayed', 0.625, 0.125, 2]]
    """
    keys = ["evaluation", "corpus", "trained_on"]
    share = {}
    if weights is not None and len(weights):
        w = weights[list(FACTORS)].to_numpy(dtype=float)
        total = w.sum(axis=1)
        frac = np.divide(w[:, USAGE_COLUMN], total, out=np.zeros(len(w)), where=total > 0)
        share = pd.Series(frac).groupby([weights[k] for k in [*keys, "usage"]]).mean().to_dict()
    rows = []
    for key, g in per_case.groupby(keys, sort=False):
        parts = {v: g[g["usage"] == v].set_index(["fit", "case_id"]) for v in VARIANTS}
        for v in VARIANTS:
            p = parts[v]
            if not len(p):
                continue
            mean, lo, hi = paired_bootstrap(p["retention"].to_numpy(), n_boot=n_boot, seed=seed, groups=p["group"])
            both = parts[ZERO][["group", "retention"]].join(p["retention"].rename("variant"), how="inner")
            d = (np.nan,) * 3
            if v != ZERO and len(both):
                gap = (both["variant"] - both["retention"]).to_numpy()
                d = paired_bootstrap(gap, n_boot=n_boot, seed=seed, groups=both["group"].to_numpy())
            rows.append(
                {
                    **dict(zip(keys, key)),
                    "usage": v,
                    "mean": mean,
                    "low": lo,
                    "high": hi,
                    "delta": d[0],
                    "delta_low": d[1],
                    "delta_high": d[2],
                    "usage_weight": float(share.get((*key, v), np.nan)),
                    "n_groups": int(p["group"].nunique()),
                    "n_cases": int(p.index.get_level_values("case_id").nunique()),
                    "n_fits": int(p.index.get_level_values("fit").nunique()),
                }
            )
    return pd.DataFrame(rows)


def gold_positions(cases: CaseSet) -> np.ndarray:
    """Return the (G, N) mask of positions that are gold for at least one case over their history.

    >>> cs = CaseSet.from_haystacks([np.zeros((3, 7))], [np.zeros(3)], [0, 0], gold=[[0], [2]])
    >>> gold_positions(cs).tolist()
    [[True, False, True]]
    """
    mask = np.zeros(cases.time.shape, bool)
    mask[cases.case_haystack[cases.gold_case], cases.gold_pos] = True
    return mask


def describe_usage(corpus: UsageCorpus, keep_fraction: float = 0.3) -> dict:
    """Return what the replay gave a corpus: the factor on gold turns and on the others, usage alone.

    ``usage_only`` is the retention of ranking by the replayed factor alone (pessimistic ties:
    the many turns never retrieved tie at 0), beside ``random``, a random keep set's.
    ``corr_with_age`` is the mean over histories of the correlation of the factor with a
    turn's age in positions (an older turn has had more user turns after it to be retrieved by).
    """
    cs, f = corpus.cases, np.asarray(corpus.usage, dtype=float)
    valid, gold = cs.valid, gold_positions(cs)
    live = corpus.variant(REPLAYED).cases
    corr = [
        np.corrcoef(f[g, :n], np.arange(n, 0, -1))[0, 1] for g, n in enumerate(cs.length) if n > 2 and np.ptp(f[g, :n])
    ]
    return {
        "turn_occurrences": int(valid.sum()),
        "share_retrieved": float((f[valid] > 0).mean()) if valid.any() else np.nan,
        "mean_usage_gold": float(f[gold].mean()) if gold.any() else np.nan,
        "mean_usage_other": float(f[valid & ~gold].mean()) if (valid & ~gold).any() else np.nan,
        "usage_only": RetentionEvaluator(live, keep_fraction).mean(live.factors[..., USAGE_COLUMN]),
        "random": expected_random_retention(cs, keep_fraction),
        "corr_with_age": float(np.mean(corr)) if corr else np.nan,
    }


def load_usage_corpus(data: DataSpec, k: int = DEFAULT_K, progress: bool = False) -> UsageCorpus:
    """Load the blind (paper) annotation of ``data`` and replay its usage with ``k`` retrievals per user turn."""
    t0 = time.perf_counter()
    ds, anns = data.load(progress, regimes=("blind",))
    ann = anns["blind"]
    t1 = time.perf_counter()
    _, factor = replay_annotation(ds, ann, k=k, embedding_setting=data.embedding_setting, progress=progress)
    info = {
        "histories": int(ann.cases.n_haystacks),
        "usable_cases_used": int(ann.cases.n_cases),
        "groups": int(len(np.unique(ann.cases.groups))),
        "seconds_annotation": round(t1 - t0, 3),
        "seconds_replay": round(time.perf_counter() - t1, 3),
    }
    return UsageCorpus(ds.name, ann.cases, factor, info)


@dataclass
class UsageResult:
    """The usage study: ``table`` (:func:`summarise`), ``per_case``, ``weights`` and ``info``."""

    table: pd.DataFrame
    per_case: pd.DataFrame
    weights: pd.DataFrame = None
    info: dict = field(default_factory=dict)


def usage_study_on(corpora: dict, keep_fraction=0.3, n_splits=10, seed=0, quick=False, across_seeds=3) -> UsageResult:
    """Run the study on loaded corpora (:class:`UsageCorpus` by name): the pure core of :func:`usage_study`."""
    per_case, weights = usage_per_case(corpora, keep_fraction, n_splits, seed, quick, across_seeds)
    table = summarise(per_case, weights, n_boot=200 if quick else 1000, seed=seed)
    info = {
        "keep_fraction": keep_fraction,
        "corpora": {n: {**c.info, **describe_usage(c, keep_fraction)} for n, c in corpora.items()},
    }
    return UsageResult(table, per_case, weights, info)


def usage_study(
    data: DataSpec = DATA, keep_fraction=0.3, k=DEFAULT_K, n_splits=10, across_seeds=3, seed=0, progress=False
) -> UsageResult:
    """Measure what live usage adds to the learned paper value, blind, in domain and across corpora.

    Parameters
    ----------
    data : DataSpec
        What to read of each corpus of :data:`~memlib.studies.transfer.CORPORA` (it names no
        dataset): ``sample``, a seeded sample of at most this many groups per corpus; ``quick``,
        the first ``quick_limit`` groups (two in :data:`DATA`) and the quick learner budget;
        ``embedding_setting``, of the factors and of the replay.
    keep_fraction : float
        Share of each history kept (0.3: the paper's budget).
    k : int
        Turns each user turn retrieves in the replay (:data:`memlib.usage.DEFAULT_K`).
    n_splits : int
        Grouped splits of each corpus for the in-domain figures (at most 3 in quick mode).
    across_seeds : int
        Learner seeds of each value learned across corpora (its figures average over them).
    seed : int
    progress : bool

    Returns
    -------
    UsageResult
        ``table``: one row per evaluation, held-out corpus, training source and variant
        (:func:`summarise`); ``info``: the data that ran, ``k``, and per corpus what the
        replay gave (:func:`describe_usage`) and its seconds.
    """
    data = DataSpec.of(data, like=DATA).reads("usage", *READS)
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    k = check_int("k", k, minimum=1)
    n_splits = check_int("n_splits", n_splits, minimum=2)
    across_seeds = check_int("across_seeds", across_seeds, minimum=1)
    if data.sample is not None:
        check_int("sample", data.sample, minimum=2)
    corpora = {n: load_usage_corpus(dataclasses.replace(data, dataset=n), k, progress) for n in CORPORA}
    result = usage_study_on(corpora, keep_fraction, n_splits, seed, data.quick, across_seeds)
    result.info = {**data.info(), "k": k, "across_seeds": across_seeds, **result.info}
    return result


__all__ = [
    "ACROSS",
    "DATA",
    "EVALUATIONS",
    "IN_DOMAIN",
    "READS",
    "REPLAYED",
    "VARIANTS",
    "ZERO",
    "UsageCorpus",
    "UsageResult",
    "describe_usage",
    "gold_positions",
    "load_usage_corpus",
    "summarise",
    "usage_per_case",
    "usage_study",
    "usage_study_on",
]
