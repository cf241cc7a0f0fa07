"""Gold-evidence retention under a keep budget, vectorised over many cases.

A *case* is one evaluation question over a *haystack* of stored turns; the
gold turns are the evidence the question needs (see :class:`memlib.cases.CaseSet`,
re-exported here). Cases may share a haystack (LoCoMo: every question of a
conversation; LongMemEval blind: any questions whose histories coincide), so
factors and scores live per haystack and the gold sets per case. Scoring a
weight vector is then one product over the unique haystacks plus work
proportional to the number of gold turns.

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

import numpy as np

from memlib._checks import ParameterError, check_choice, check_fraction
from memlib.cases import CaseSet
from memlib.intervals import group_bootstrap_means, grouped_summary, paired_bootstrap  # noqa: F401 - re-exported
from memlib.padded_rows import Bucket, Columns, length_buckets, padding

#: Ways to round ``keep_fraction * n`` to a keep count: memlib's ``ceil`` or the released experiment's ``floor``.
CUTS = ("ceil", "floor")


def keep_count(n, keep_fraction: float, cut: str = "ceil") -> np.ndarray:
    """Return the number of turns kept out of ``n`` at ``keep_fraction`` (at least 1).

    ``cut="ceil"`` (memlib's rule) rounds up, after rounding the product down by
    ``1e-9``; ``cut="floor"`` rounds down, as the released experiment's
    ``max(1, int(n * keep_fraction))`` does.

    >>> keep_count([10, 7, 1], 0.3).tolist(), keep_count([10, 7, 1], 0.3, cut="floor").tolist()
    ([3, 3, 1], [3, 2, 1])
    """
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    check_choice("cut", cut, CUTS)
    n = np.asarray(n, dtype=np.int64)
    if cut == "floor":
        k = np.floor(n * keep_fraction).astype(np.int64)
    else:
        k = np.ceil(n * keep_fraction - 1e-9).astype(np.int64)
    return np.clip(k, 1, np.maximum(n, 1))


def order_free_mean(values) -> float:
    """Return the mean, summed exactly (``math.fsum``), so it does not depend on the order of the values (NaN if none).

    A learner that keeps a step only when the mean strictly improves must not
    see a change in the last bit because the cases came in another order.

    >>> order_free_mean([0.1, 0.2, 0.3]) == order_free_mean([0.3, 0.1, 0.2])
    True
    """
    import math

    values = np.asarray(values, dtype=np.float64)
    return math.fsum(values.tolist()) / len(values) if len(values) else float("nan")


class RetentionEvaluator:
    """Mean gold retention of per-haystack scores at a fixed keep fraction.

    Precomputes everything that does not depend on the scores, so that one
    evaluation is a product over the factor columns in use, one partition of
    each haystack row at a single position, and work proportional to the
    number of gold turns. It is the learner's objective.

    Haystacks differ in length and so in keep count ``k``. Haystacks of similar
    length are grouped (:func:`memlib.padded_rows.length_buckets`); in each group
    every row is padded with ``kmax - k`` entries of ``+inf`` (always "kept") and
    ``-inf`` for the rest, which puts every row's ``k``-th best real score at the
    same position ``width - kmax`` of an ascending partition: one
    ``numpy.partition`` call with a single ``kth`` serves all rows of a group.

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
        N = cases.factors.shape[1]
        # what scores() returns outside the real turns: the padding of one common width (its layout before groups)
        self._outside, self.real = (a[:, :N] for a in padding(cases.length, self.k))
        self._N = N
        self.columns = cases.live_factors if columns is None else np.asarray(columns, dtype=bool)
        self._gold_h = cases.case_haystack[cases.gold_case]
        self._has_gold = cases.n_gold > 0
        self._per_gold = np.where(self._has_gold, cases.n_gold, 1)  # a case without gold: NaN, not 0 / 0
        factors = cases.factors[..., self.columns]
        self._buckets = [
            Bucket(rows, cases.length, self.k, factors, self._gold_h, cases.gold_pos)
            for rows in length_buckets(cases.length, self.k)
        ]
        self._buffers = None  # the objective's scores, allocated on its first call

    def scores(self, w) -> np.ndarray:
        """Per-turn scores ``F @ w`` (:func:`~memlib.value.linear_score`), a float32 array (G, N) (padding infinite).

        A real turn holds its score; past a haystack's end, ``+inf`` for its ``max(k) - k`` first
        entries and ``-inf`` after (the padding of one width for every haystack).
        """
        out = self._outside.copy()
        for b, s in zip(self._buckets, self._padded_scores(w)):
            n = min(s.shape[1], out.shape[1])
            out[b.rows, :n] = np.where(b.real[:, :n], s[:, :n], out[b.rows, :n])
        return out

    def _padded_scores(self, w, out=None) -> list:
        """Scores of ``w`` summed from each turn's padding (0 for a real turn), group by group (in ``out``'s arrays)."""
        w = np.asarray(w, dtype=np.float32)[self.columns]
        # summed factor by factor (linear_score), so no result depends on the order of the cases; the weights
        # may be signed (the learners' objective)
        out = [np.empty_like(b.pad) for b in self._buckets] if out is None else out
        return [b.columns.add(o, w, b.columns.used(w), start=b.pad) for b, o in zip(self._buckets, out)]

    def _pad_scores(self, scores) -> list:
        s = np.asarray(scores, dtype=np.float64 if np.asarray(scores).dtype == np.float64 else np.float32)
        G = self.cases.n_haystacks
        if s.shape != (G, self._N):
            raise ParameterError(f"scores must have shape {(G, self._N)}, got {s.shape}")
        out = []
        for b in self._buckets:
            p = np.zeros(b.pad.shape, dtype=s.dtype)
            n = min(p.shape[1], self._N)
            p[:, :n] = s[b.rows, :n]
            np.copyto(p, -np.inf, where=np.isnan(p))  # no score: the first to go (in any group of rows)
            p[~b.real] = 0
            out.append(p + b.pad)
        return out

    def _retention(self, parts: list, expected_ties: bool = False) -> np.ndarray:
        """Per-case retention of each group's padded scores ``parts``, which it partitions in place.

        Only rows where a gold turn ties the threshold need the counts above and at it (:meth:`_with_ties`).
        """
        cs = self.cases
        above = np.zeros(len(self._gold_h), dtype=bool)
        tied = np.zeros(len(self._gold_h), dtype=bool)
        thresholds = []
        for b, s in zip(self._buckets, parts):
            if s.shape[1] == 0:  # rows with no turn: no gold, no threshold
                thresholds.append(np.full(len(s), np.nan, dtype=s.dtype))
                continue
            gs = s[b.gold_row, b.gold_pos]
            s.partition(b.kth, axis=1)
            thr = s[:, b.kth]
            gt = thr[b.gold_row]
            above[b.gold], tied[b.gold] = gs > gt, gs == gt
            thresholds.append(thr)
        C = cs.n_cases
        kept = np.bincount(cs.gold_case, weights=above, minlength=C)
        if tied.any():
            gold_equal = np.bincount(cs.gold_case, weights=tied, minlength=C)
            kept = self._with_ties(parts, thresholds, kept, gold_equal, expected_ties)
        return np.where(self._has_gold, kept / self._per_gold, np.nan)

    def _with_ties(self, parts, thresholds, gold_above, gold_equal, expected_ties: bool) -> np.ndarray:
        """Kept gold turns per case when some gold turns tie the threshold of their partitioned row."""
        h = self.cases.case_haystack
        tie = np.bincount(h, weights=gold_equal, minlength=self.cases.n_haystacks) > 0
        n_above = np.zeros(len(tie), dtype=np.int64)
        n_equal = np.zeros(len(tie), dtype=np.int64)
        for b, part, thr in zip(self._buckets, parts, thresholds):
            local = np.flatnonzero(tie[b.rows])
            if len(local):
                n_above[b.rows[local]], n_equal[b.rows[local]] = b.counts_at(part, local, thr[local])
        slots = self.k[h] - n_above[h]
        nongold_equal = n_equal[h] - gold_equal
        if expected_ties:
            with np.errstate(invalid="ignore", divide="ignore"):
                share = np.where(n_equal[h] > 0, np.clip(slots, 0, None) / n_equal[h], 0.0)
            return gold_above + gold_equal * np.minimum(share, 1.0)
        return gold_above + np.clip(slots - nongold_equal, 0, gold_equal)

    def per_case(self, scores, ties: str = "pessimistic") -> np.ndarray:
        """Retention of every case (NaN for a case without gold) for (G, N) scores.

        ``ties``: ``pessimistic`` (the metric's rule: a tie at the cut never
        favours gold) or ``expected`` (the exact expectation when the tied turns
        are ordered uniformly at random: each tied gold turn is kept with
        probability free slots / tied turns). A NaN score counts as ``-inf``.

        >>> import numpy as np
        >>> cs = CaseSet.from_cases([np.eye(7)[[0, 0, 0, 1]]], [np.arange(4.0)], gold=[[2]])
        >>> ev = RetentionEvaluator(cs, keep_fraction=0.5)
        >>> ev.per_case(cs.factors[..., 0]).tolist(), ev.per_case(cs.factors[..., 0], ties="expected").tolist()
        ([0.0], [0.6666666666666666])
        """
        check_choice("ties", ties, ("pessimistic", "expected"))
        return self._retention(self._pad_scores(scores), expected_ties=ties == "expected")

    def mean(self, scores, ties: str = "pessimistic") -> float:
        """Mean retention over cases that have gold (``ties`` as in :meth:`per_case`)."""
        return self._mean(self.per_case(scores, ties))

    def _mean(self, r) -> float:
        return order_free_mean(r[self._has_gold])

    def objective(self, w) -> float:
        """Mean retention of the linear value with weights ``w`` (summed into an array it keeps: not for threads)."""
        if self._buffers is None:
            self._buffers = [np.empty_like(b.pad) for b in self._buckets]
        return self._mean(self._retention(self._padded_scores(w, out=self._buffers)))


class StableOrderEvaluator:
    """Gold retention when ties at the cut go to the turn that comes first: the released experiment's rule.

    Each haystack keeps its ``k`` best turns in the order of a stable sort on
    the score, descending: among equal scores the turn earlier in the haystack
    (as the case set lists it) is kept first, whether it is gold or not. The
    linear value is summed factor by factor in float64, in factor order, as a
    plain Python sum would. Same interface as :class:`RetentionEvaluator`
    (``objective``, ``per_case``, ``mean``), for the learner and the studies.

    Parameters
    ----------
    cases : CaseSet
    keep_fraction : float
    cut : {'ceil', 'floor'}
        How the keep count rounds (:func:`keep_count`).

    >>> cs = CaseSet.from_cases([np.eye(7)[[0, 0, 0, 1]]], [np.arange(4.0)], gold=[[2]])
    >>> StableOrderEvaluator(cs, 0.5).per_case(cs.factors[..., 0]).tolist()   # turns 0 and 1 come first
    [0.0]
    >>> StableOrderEvaluator(cs, 0.75).per_case(cs.factors[..., 0]).tolist()
    [1.0]
    """

    def __init__(self, cases: CaseSet, keep_fraction: float, cut: str = "ceil"):
        self.cases = cases
        self.keep_fraction = check_fraction("keep_fraction", keep_fraction)
        self.k = keep_count(cases.length, keep_fraction, cut)
        G, N, _ = cases.factors.shape
        self._N = N
        self.real = np.arange(N)[None, :] < cases.length[:, None]
        self._F = np.ascontiguousarray(np.moveaxis(cases.factors, -1, 0), dtype=np.float64)  # (7, G, N): columns stream
        self._gold_h = cases.case_haystack[cases.gold_case]
        self._has_gold = cases.n_gold > 0
        self._per_gold = np.where(self._has_gold, cases.n_gold, 1)  # a case without gold: NaN, not 0 / 0
        self._columns = Columns(self._F)
        self._padding = ~self.real
        self._key = None  # the objective's sort keys, allocated on its first call
        # the rows of each keep count, and the columns that can hold their k-th smallest key (the rest is padding)
        self._by_k = [
            (int(k), rows, min(N, max(int(k), int(cases.length[rows].max()))))
            for k in np.unique(self.k[self.k > 0])
            for rows in [np.flatnonzero(self.k == k)]
        ]

    def per_case(self, scores) -> np.ndarray:
        """Retention of every case (NaN for a case without gold) for (G, N) scores."""
        s = np.asarray(scores, dtype=np.float64)
        if s.shape != (self.cases.n_haystacks, self._N):
            raise ParameterError(f"scores must have shape {(self.cases.n_haystacks, self._N)}, got {s.shape}")
        return self._retention(s)

    def _retention(self, s: np.ndarray) -> np.ndarray:
        if s.shape[1] == 0:
            return np.full(self.cases.n_cases, np.nan)
        return self._retention_of_keys(np.where(self.real, -s, np.inf))

    def _retention_of_keys(self, key: np.ndarray) -> np.ndarray:
        """Per-case retention of the ascending sort keys ``key`` (the negated scores, padding at ``+inf``)."""
        cs = self.cases
        kept = self._kept_gold(key) if not np.isnan(key).any() else self._kept_gold_sorted(key)
        n_kept = np.bincount(cs.gold_case, weights=kept, minlength=cs.n_cases)
        return np.where(self._has_gold, n_kept / self._per_gold, np.nan)

    def _kept_gold(self, key: np.ndarray) -> np.ndarray:
        """Whether each gold turn ranks below ``k`` in a stable ascending sort of ``key`` (no NaN), unsorted.

        With ``t`` the ``k``-th smallest key of a row, a turn below ``t`` is kept, one above is not, and one
        equal to ``t`` is kept while the keys below ``t`` and the equal ones up to it number at most ``k``.
        """
        t = np.full(len(key), -np.inf)  # rows that keep nothing: no key is below -inf, none is kept
        for k, rows, width in self._by_k:  # past ``width`` a row holds padding only, never below its k-th key
            part = key[rows, :width]
            part.partition(k - 1, axis=1)
            t[rows] = part[:, k - 1]
        h, p = self._gold_h, self.cases.gold_pos
        gk, gt = key[h, p], t[h]
        kept = gk < gt
        tie = np.flatnonzero((gk == gt) & (self.k[h] > 0))
        if len(tie):
            rows, at = np.unique(h[tie], return_inverse=True)
            n_below = np.count_nonzero(key[rows] < t[rows, None], axis=1)
            n_equal = np.cumsum(key[rows] == t[rows, None], axis=1)  # equal keys up to each position
            kept[tie] = n_below[at] + n_equal[at, p[tie]] <= self.k[h[tie]]
        return kept

    def _kept_gold_sorted(self, key: np.ndarray) -> np.ndarray:
        """:meth:`_kept_gold` by a stable sort, for keys with NaN (sorted last, after the padding)."""
        rank = np.argsort(np.argsort(key, axis=1, kind="stable"), axis=1)  # the inverse permutation
        return rank[self._gold_h, self.cases.gold_pos] < self.k[self._gold_h]

    def mean(self, scores) -> float:
        """Mean retention over cases that have gold."""
        return self._mean(self.per_case(scores))

    def _mean(self, r) -> float:
        return order_free_mean(r[self._has_gold])

    def scores(self, w, out=None) -> np.ndarray:
        """Return the value ``sum_i w_i f_i``, in factor order in float64 (:func:`~memlib.value.linear_score`).

        With finite factors a weight of 0 adds nothing to a sum that starts at +0, so its column is left
        out. ``out``: a (G, N) float64 array to sum into, from zeros (default: a new one).
        """
        w = np.asarray(w, dtype=np.float64)
        out = np.empty(self.real.shape) if out is None else out
        return self._columns.add(out, w, self._columns.used(w), start=0.0)

    def objective(self, w) -> float:
        """Mean retention of the linear value with weights ``w`` (its keys fill an array it keeps: not for threads)."""
        if self._N == 0:
            return self._mean(self._retention(self.scores(w)))
        if self._key is None:
            self._key = np.empty(self.real.shape)
        key = np.negative(self.scores(w, out=self._key), out=self._key)
        np.copyto(key, np.inf, where=self._padding)
        return self._mean(self._retention_of_keys(key))


#: Tie rules at the cut: memlib's (a tie never favours gold) or the released experiment's (first come).
TIE_RULES = ("pessimistic", "stable")


def evaluator(cases: CaseSet, keep_fraction: float, ties: str = "pessimistic", cut: str = "ceil"):
    """Return the retention evaluator of a tie rule (:data:`TIE_RULES`) and cut (:data:`CUTS`)."""
    check_choice("ties", ties, TIE_RULES)
    if ties == "stable":
        return StableOrderEvaluator(cases, keep_fraction, cut)
    if cut != "ceil":
        raise ParameterError("memlib's pessimistic tie rule is defined with its ceil cut only")
    return RetentionEvaluator(cases, keep_fraction)


def retention(cases: CaseSet, scores, keep_fraction: float) -> np.ndarray:
    """Per-case gold retention of (G, N) scores at ``keep_fraction`` (see module rules)."""
    return RetentionEvaluator(cases, keep_fraction).per_case(scores)


def mean_retention(cases: CaseSet, scores, keep_fraction: float) -> float:
    """Mean gold retention over the cases that have gold."""
    return RetentionEvaluator(cases, keep_fraction).mean(scores)


def expected_random_retention(cases: CaseSet, keep_fraction: float, cut: str = "ceil") -> float:
    """Return the expected retention of a uniformly random keep set: mean of ``k / n`` over cases with gold.

    >>> import numpy as np
    >>> cs = CaseSet.from_cases([np.zeros((10, 7))], [np.zeros(10)], gold=[[0]])
    >>> expected_random_retention(cs, 0.3)
    0.3
    """
    k = keep_count(cases.length, keep_fraction, cut)
    h = cases.case_haystack[cases.n_gold > 0]
    return float(np.mean(k[h] / cases.length[h]))


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
    "StableOrderEvaluator",
    "evaluator",
    "keep_count",
    "retention",
    "mean_retention",
    "expected_random_retention",
    "paired_bootstrap",
    "dcg",
    "retrieval_metrics",
]
