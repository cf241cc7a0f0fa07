"""Gold-evidence retention under a keep budget, vectorised over many cases.

A *case* is one evaluation question over a *haystack* of stored turns; the
gold turns are the evidence the question needs. Cases may share a haystack
(LoCoMo: every question of a conversation; LongMemEval blind: any questions
whose histories coincide), so factors and scores live per haystack and the
gold sets per case. Scoring a weight vector is then one product over the
unique haystacks plus work proportional to the number of gold turns.

Rules, fixed here and used everywhere:

* **Keep count.** A haystack of ``n`` turns keeps ``k = ceil(keep_fraction * n)``
  turns (at least 1). The product is rounded down by ``1e-9`` before the
  ceiling so that, e.g., ``0.3 * 10`` keeps 3, not 4.
* **Ties never favour gold.** When the ``k``-th best score is shared by
  several turns, the non-gold turns among them are counted as kept before
  any gold turn. This is a pessimistic, deterministic convention: a policy
  earns gold only by scoring it strictly better, so a constant score retains
  nothing.
* **Cases without gold** are excluded from the mean and counted in
  :attr:`CaseSet.n_without_gold`.

>>> import numpy as np
>>> from memlib.metrics import CaseSet, retention
>>> cs = CaseSet.from_cases(
...     factors=[np.eye(7)[[0, 1, 2, 3]], np.eye(7)[[0, 1]]],
...     times=[np.arange(4.0), np.arange(2.0)],
...     gold=[[0], [1]])
>>> scores = cs.factors[..., 0]            # emotion only: turn 0 of each case scores 1
>>> retention(cs, scores, keep_fraction=0.5).tolist()
[1.0, 0.0]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError, check_fraction


def keep_count(n, keep_fraction: float) -> np.ndarray:
    """Number of turns kept out of ``n`` at ``keep_fraction`` (ceil, at least 1).

    >>> keep_count([10, 7, 1], 0.3).tolist()
    [3, 3, 1]
    """
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    n = np.asarray(n, dtype=np.int64)
    k = np.ceil(n * keep_fraction - 1e-9).astype(np.int64)
    return np.clip(k, 1, np.maximum(n, 1))


@dataclass(frozen=True)
class CaseSet:
    """Evaluation cases over shared haystacks, padded to one array.

    Attributes
    ----------
    factors : ndarray, shape (G, N, 7), float32
        Factor vectors of every haystack turn; padding rows are 0.
    time : ndarray, shape (G, N), float64
        Turn time in days (larger is more recent); padding is 0.
    length : ndarray, shape (G,)
        Number of real turns in each haystack.
    case_haystack : ndarray, shape (C,)
        Haystack index of each case.
    gold_case, gold_pos : ndarray, shape (M,)
        One entry per gold turn: its case and its position in the haystack.
    case_ids : ndarray, shape (C,) of str
    groups : ndarray, shape (C,) of str
        Cases in one group share turns and must stay on one side of a split.
    """

    factors: np.ndarray
    time: np.ndarray
    length: np.ndarray
    case_haystack: np.ndarray
    gold_case: np.ndarray
    gold_pos: np.ndarray
    case_ids: np.ndarray
    groups: np.ndarray
    _n_gold: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        G, N, d = self.factors.shape
        if d != len(FACTORS):
            raise ParameterError(f"factors must have {len(FACTORS)} columns, got {d}")
        C = len(self.case_haystack)
        if self.time.shape != (G, N) or self.length.shape != (G,):
            raise ParameterError("time must be (G, N) and length (G,) for factors of shape (G, N, 7)")
        if len(self.case_ids) != C or len(self.groups) != C:
            raise ParameterError("case_ids and groups need one entry per case")
        if C and (self.case_haystack.min() < 0 or self.case_haystack.max() >= G):
            raise ParameterError("case_haystack points outside the haystacks")
        if len(self.gold_pos) and np.any(self.gold_pos >= self.length[self.case_haystack[self.gold_case]]):
            raise ParameterError("a gold position lies outside its haystack")
        object.__setattr__(self, "_n_gold", np.bincount(self.gold_case, minlength=C))

    # ------------------------------------------------------------------ build
    @classmethod
    def from_cases(cls, factors, times, gold, case_ids=None, groups=None) -> "CaseSet":
        """One haystack per case: lists of (n_c, 7) factors, (n_c,) times and gold positions."""
        n = len(factors)
        return cls.from_haystacks(
            factors, times, case_haystack=np.arange(n), gold=gold, case_ids=case_ids, groups=groups
        )

    @classmethod
    def from_haystacks(cls, factors, times, case_haystack, gold, case_ids=None, groups=None) -> "CaseSet":
        """Build from per-haystack factor matrices and per-case gold positions.

        Parameters
        ----------
        factors : list of array_like, each (n_g, 7)
        times : list of array_like, each (n_g,)
        case_haystack : array_like of int, shape (C,)
        gold : list of C lists of int
            Gold positions of each case within its haystack (duplicates ignored).
        case_ids, groups : sequences of str, optional
            Default: the case index; the haystack index.
        """
        G = len(factors)
        if len(times) != G:
            raise ParameterError("factors and times need one entry per haystack")
        length = np.array([len(f) for f in factors], dtype=np.int64)
        N = int(length.max()) if G else 0
        F = np.zeros((G, N, len(FACTORS)), dtype=np.float32)
        T = np.zeros((G, N), dtype=np.float64)
        for g, (f, t) in enumerate(zip(factors, times)):
            f = np.asarray(f, dtype=np.float32).reshape(-1, len(FACTORS))
            t = np.asarray(t, dtype=np.float64)
            if len(t) != len(f):
                raise ParameterError(f"haystack {g}: {len(f)} factor rows but {len(t)} times")
            F[g, : len(f)] = f
            T[g, : len(t)] = t
        case_haystack = np.asarray(case_haystack, dtype=np.int64)
        C = len(case_haystack)
        if len(gold) != C:
            raise ParameterError("gold needs one list per case")
        gc, gp = [], []
        for c, g in enumerate(gold):
            pos = np.unique(np.asarray(g, dtype=np.int64))
            gc.append(np.full(len(pos), c, dtype=np.int64))
            gp.append(pos)
        gold_case = np.concatenate(gc) if gc else np.zeros(0, np.int64)
        gold_pos = np.concatenate(gp) if gp else np.zeros(0, np.int64)
        if len(gold_pos) and gold_pos.min() < 0:
            raise ParameterError("gold positions must be >= 0")
        case_ids = np.asarray([str(i) for i in range(C)] if case_ids is None else [str(x) for x in case_ids])
        groups = np.asarray(
            [str(h) for h in case_haystack] if groups is None else [str(x) for x in groups]
        )
        return cls(F, T, length, case_haystack, gold_case, gold_pos, case_ids, groups)

    # ------------------------------------------------------------- properties
    @property
    def n_cases(self) -> int:
        return len(self.case_haystack)

    @property
    def n_haystacks(self) -> int:
        return self.factors.shape[0]

    @property
    def n_gold(self) -> np.ndarray:
        """Number of gold turns per case."""
        return self._n_gold

    @property
    def n_without_gold(self) -> int:
        """Cases that carry no gold turn (excluded from retention means)."""
        return int(np.sum(self._n_gold == 0))

    @property
    def valid(self) -> np.ndarray:
        """(G, N) mask of real (non-padding) turns."""
        return np.arange(self.factors.shape[1])[None, :] < self.length[:, None]

    @property
    def live_factors(self) -> np.ndarray:
        """Boolean mask of the factors that are not identically zero."""
        return np.any(self.factors != 0, axis=(0, 1))

    def gold_mask(self, case: int) -> np.ndarray:
        """Boolean gold mask over the haystack of one case."""
        m = np.zeros(self.length[self.case_haystack[case]], dtype=bool)
        m[self.gold_pos[self.gold_case == case]] = True
        return m

    def subset(self, cases) -> "CaseSet":
        """The cases at the given indices, keeping only the haystacks they use."""
        cases = np.asarray(cases, dtype=np.int64)
        used, new_h = np.unique(self.case_haystack[cases], return_inverse=True)
        remap = np.full(self.n_cases, -1, dtype=np.int64)
        remap[cases] = np.arange(len(cases))
        sel = remap[self.gold_case] >= 0
        N = int(self.length[used].max()) if len(used) else 0
        return CaseSet(
            factors=np.ascontiguousarray(self.factors[used, :N]),
            time=np.ascontiguousarray(self.time[used, :N]),
            length=self.length[used],
            case_haystack=new_h.astype(np.int64),
            gold_case=remap[self.gold_case[sel]],
            gold_pos=self.gold_pos[sel],
            case_ids=self.case_ids[cases],
            groups=self.groups[cases],
        )


class RetentionEvaluator:
    """Mean gold retention of per-haystack scores at a fixed keep fraction.

    Precomputes everything that does not depend on the scores, so that one
    evaluation is a product over the factor columns in use, one partition of
    each haystack row at a single position, and work proportional to the
    number of gold turns. It is the learner's objective.

    Haystacks differ in length and so in keep count ``k``. Each row is padded
    with ``kmax - k`` entries of ``+inf`` (always "kept") and ``-inf`` for the
    rest, which puts every row's ``k``-th best real score at the same position
    ``N - kmax`` of an ascending partition: one ``numpy.partition`` call with a
    single ``kth`` serves all rows.

    Parameters
    ----------
    cases : CaseSet
    keep_fraction : float
    columns : array_like of bool, shape (7,), optional
        Factor columns :meth:`scores` reads (default: the live factors); the
        others must then have weight 0 or are ignored.

    >>> import numpy as np
    >>> cs = CaseSet.from_cases([np.eye(7)[[0, 1, 0, 1]]], [np.arange(4.0)], gold=[[2]])
    >>> ev = RetentionEvaluator(cs, keep_fraction=0.25)
    >>> ev.per_case(cs.factors[..., 0]).tolist()   # turns 0 and 2 tie at 1: non-gold kept first
    [0.0]
    >>> ev.objective(np.array([1, 0, 0, 0, 0, 0, 0.]))
    0.0
    """

    def __init__(self, cases: CaseSet, keep_fraction: float, columns=None):
        self.cases = cases
        self.keep_fraction = check_fraction("keep_fraction", keep_fraction)
        self.k = keep_count(cases.length, keep_fraction)
        G, N, _ = cases.factors.shape
        kmax = int(self.k.max()) if G else 0
        self._n_plus = kmax - self.k  # +inf pads per row
        width = int((cases.length + self._n_plus).max()) if G else 0
        self._width = width
        self._kth = width - kmax
        pos = np.arange(width)[None, :]
        real = pos < cases.length[:, None]
        plus = (pos >= cases.length[:, None]) & (pos < (cases.length + self._n_plus)[:, None])
        self._pad = np.where(real, 0.0, np.where(plus, np.inf, -np.inf)).astype(np.float32)
        self._real = real
        self._N = N
        self.columns = cases.live_factors if columns is None else np.asarray(columns, dtype=bool)
        F = np.zeros((G, width, int(self.columns.sum())), np.float32)
        F[:, :N] = cases.factors[..., self.columns]
        self._F = F.reshape(G * width, -1)
        self._gold_h = cases.case_haystack[cases.gold_case]
        self._has_gold = cases.n_gold > 0

    def scores(self, w) -> np.ndarray:
        """Per-turn values ``F @ w`` as a (G, N) float32 array (padding at -inf)."""
        return self._padded_scores(w)[:, : self._N]

    def _padded_scores(self, w) -> np.ndarray:
        w = np.asarray(w, dtype=np.float32)[self.columns]
        s = (self._F @ w).reshape(self._pad.shape)
        s += self._pad
        return s

    def _pad_scores(self, scores) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64 if np.asarray(scores).dtype == np.float64 else np.float32)
        G = self.cases.n_haystacks
        if s.shape != (G, self._N):
            raise ParameterError(f"scores must have shape {(G, self._N)}, got {s.shape}")
        out = np.empty((G, self._width), dtype=s.dtype)
        out[:, : self._N] = s
        out[:, self._N:] = 0
        out[~self._real] = 0
        out += self._pad
        return out

    def _retention(self, s: np.ndarray) -> np.ndarray:
        cs = self.cases
        if s.shape[1] == 0:
            return np.full(cs.n_cases, np.nan)
        part = np.partition(s, self._kth, axis=1)
        thr = part[:, self._kth]
        n_above = np.count_nonzero(part[:, self._kth + 1:] > thr[:, None], axis=1) - self._n_plus
        n_equal = np.count_nonzero(part == thr[:, None], axis=1)
        gs = s[self._gold_h, cs.gold_pos]
        gt = thr[self._gold_h]
        C = cs.n_cases
        gold_above = np.bincount(cs.gold_case, weights=gs > gt, minlength=C)
        gold_equal = np.bincount(cs.gold_case, weights=gs == gt, minlength=C)
        h = cs.case_haystack
        slots = self.k[h] - n_above[h]
        nongold_equal = n_equal[h] - gold_equal
        kept = gold_above + np.clip(slots - nongold_equal, 0, gold_equal)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self._has_gold, kept / cs.n_gold, np.nan)

    def per_case(self, scores) -> np.ndarray:
        """Retention of every case (NaN for a case without gold) for (G, N) scores."""
        return self._retention(self._pad_scores(scores))

    def mean(self, scores) -> float:
        """Mean retention over cases that have gold."""
        return self._mean(self.per_case(scores))

    def _mean(self, r) -> float:
        return float(np.mean(r[self._has_gold])) if self._has_gold.any() else float("nan")

    def objective(self, w) -> float:
        """Mean retention of the linear value with weights ``w``."""
        return self._mean(self._retention(self._padded_scores(w)))


def retention(cases: CaseSet, scores, keep_fraction: float) -> np.ndarray:
    """Per-case gold retention of (G, N) scores at ``keep_fraction`` (see module rules)."""
    return RetentionEvaluator(cases, keep_fraction).per_case(scores)


def mean_retention(cases: CaseSet, scores, keep_fraction: float) -> float:
    """Mean gold retention over the cases that have gold."""
    return RetentionEvaluator(cases, keep_fraction).mean(scores)


def expected_random_retention(cases: CaseSet, keep_fraction: float) -> float:
    """Expected retention of a uniformly random keep set: mean of ``k / n`` over cases with gold.

    >>> import numpy as np
    >>> cs = CaseSet.from_cases([np.zeros((10, 7))], [np.zeros(10)], gold=[[0]])
    >>> expected_random_retention(cs, 0.3)
    0.3
    """
    k = keep_count(cases.length, keep_fraction)
    h = cases.case_haystack[cases.n_gold > 0]
    return float(np.mean(k[h] / cases.length[h]))




def paired_bootstrap(gaps, n_boot: int = 1000, seed: int = 0, groups=None) -> tuple[float, float, float]:
    """Mean of per-case paired gaps and its 95% percentile bootstrap interval.

    Parameters
    ----------
    gaps : array_like, shape (C,)
        One paired difference per case (e.g. learned minus uniform retention).
    n_boot : int
        Bootstrap resamples (>= 1).
    seed : int
    groups : array_like, shape (C,), optional
        Resample whole groups instead of cases (a cluster bootstrap), for
        cases that share a history and so are not independent.

    Returns
    -------
    (mean, low, high)

    >>> m, lo, hi = paired_bootstrap(np.full(50, 0.1), n_boot=200)
    >>> round(m, 3), round(lo, 3), round(hi, 3)
    (0.1, 0.1, 0.1)
    """
    from memlib._checks import check_int

    n_boot = check_int("n_boot", n_boot, minimum=1)
    g = np.asarray(gaps, dtype=float)
    if len(g) == 0:
        raise ParameterError("paired_bootstrap needs at least one case")
    rng = np.random.default_rng(seed)
    if groups is None:
        idx = rng.integers(0, len(g), size=(n_boot, len(g)))
        means = g[idx].mean(axis=1)
    else:
        codes, inv = np.unique(np.asarray(groups), return_inverse=True)
        sums = np.bincount(inv, weights=g, minlength=len(codes))
        counts = np.bincount(inv, minlength=len(codes))
        pick = rng.integers(0, len(codes), size=(n_boot, len(codes)))
        means = sums[pick].sum(axis=1) / counts[pick].sum(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(g.mean()), float(lo), float(hi)


def dcg(relevances, k: int) -> float:
    """Discounted cumulative gain at ``k`` as LongMemEval defines it.

    Source: xiaowu0162/LongMemEval, ``src/retrieval/eval_utils.py`` (``dcg``): the
    first relevance counts in full, the one at rank ``i >= 2`` is divided by
    ``log2(i)``.

    >>> bool(dcg([1, 1, 1], 3) == 1 + 1 + 1 / np.log2(3))
    True
    """
    r = np.asarray(relevances, dtype=float)[:k]
    if not r.size:
        return 0.0
    return float(r[0] + np.sum(r[1:] / np.log2(np.arange(2, r.size + 1))))


def retrieval_metrics(ranking, gold, n_corpus_gold: int | None = None, k: int = 10) -> tuple[float, float, float]:
    """``recall_any@k``, ``recall_all@k`` and ``ndcg@k`` as in LongMemEval's ``evaluate_retrieval``.

    Parameters
    ----------
    ranking : sequence
        Retrieved item ids, best first (only retained items can appear).
    gold : collection
        The question's gold item ids over its *whole* history, forgotten or not.
    n_corpus_gold : int, optional
        Number of gold items for the ideal DCG (default ``len(gold)``). Using the
        full history's gold means a forgotten gold turn counts as a miss, where
        LongMemEval (which never forgets) computes the ideal over its corpus.

    >>> retrieval_metrics([7, 3, 9], gold={3, 4}, k=2)
    (1.0, 0.0, 0.5)
    """
    gold = set(gold)
    if not gold:
        raise ParameterError("retrieval_metrics needs at least one gold item")
    top = list(ranking)[:k]
    hit = [1.0 if x in gold else 0.0 for x in top]
    recall_any = float(any(hit))
    recall_all = float(gold <= set(top))
    ideal = dcg([1.0] * (len(gold) if n_corpus_gold is None else n_corpus_gold), k)
    return recall_any, recall_all, (dcg(hit, k) / ideal if ideal else 0.0)


__all__ = [
    "CaseSet",
    "RetentionEvaluator",
    "keep_count",
    "retention",
    "mean_retention",
    "expected_random_retention",
    "paired_bootstrap",
    "dcg",
    "retrieval_metrics",
]
