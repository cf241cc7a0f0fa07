"""Haystacks as padded rows for the retention evaluators: their factor columns, and rows grouped by length.

:class:`Columns` sums factor columns into per-turn scores with :func:`~memlib.value.linear_score`'s
arithmetic (each turn's score the same float wherever its row sits). :func:`length_buckets` groups
haystacks of similar length, so that :class:`~memlib.metrics.RetentionEvaluator` pads and
partitions each group to its own width instead of every row to the longest: corpora pooled for
learning (RealMem's nested histories, from a few turns to 1,793, beside LongMemEval-S's 500) filled
about 36% of one common width, and the partition of the padding was most of a hill-climb's time
(issue 33). Which bucket a row sits in changes no score and no threshold (a NaN score is read as ``-inf``).

>>> [b.tolist() for b in length_buckets(np.array([5, 900, 7, 880, 6]), np.array([2, 270, 3, 264, 2]), cost=100)]
[[0, 4, 2], [3, 1]]
"""

from __future__ import annotations

import itertools

import numpy as np

from memlib.value import linear_score

#: What one more group costs, in padded elements: a group's evaluation is a dozen numpy calls (about 60 us on
#: these cores, the time of partitioning some 30,000 elements), so rows are split only where that much padding goes.
BUCKET_COST = 32768
#: Candidate boundaries between groups: every ``1 / CANDIDATES`` of the rows sorted by length.
CANDIDATES = 64


def length_buckets(length, k, cost: int | None = None) -> list:
    """Group rows by length so that padding each group to its own width costs least: the rows of each group.

    Rows are sorted by length (stable: equal lengths keep their order) and cut at some of
    :data:`CANDIDATES` evenly spaced places, chosen (by dynamic programming) to minimise
    ``sum(cost + rows * width)`` over the groups, where a group's width is what
    :class:`~memlib.metrics.RetentionEvaluator` pads it to: ``max(length - k) + max(k)`` over its
    rows (each row is followed by ``max(k) - k`` entries that are always kept).

    Parameters
    ----------
    length, k : ndarray of int, shape (G,)
        Real turns and keep count of each row.
    cost : int, optional
        What one more group costs, in padded elements (default: :data:`BUCKET_COST`, read at each call).

    Returns
    -------
    list of ndarray of int
        The rows of each group, shortest group first; together every row once.
    """
    cost = BUCKET_COST if cost is None else cost
    length, k = np.asarray(length, dtype=np.int64), np.asarray(k, dtype=np.int64)
    order = np.argsort(length, kind="stable")
    G = len(order)
    if G <= 1:
        return [order]
    cuts = np.unique(np.linspace(0, G, min(CANDIDATES, G) + 1).round().astype(np.int64))
    slack, keep = (length - k)[order], k[order]
    m = len(cuts)
    best = np.full(m, np.inf)
    best[0] = 0.0
    back = np.zeros(m, dtype=np.int64)
    for i in range(m - 1):  # groups from cut i: the widest slack and keep count up to each later cut
        a = cuts[i]
        width = np.maximum.accumulate(slack[a:]) + np.maximum.accumulate(keep[a:])
        ends = cuts[i + 1 :]
        total = best[i] + cost + (ends - a) * width[ends - a - 1]
        better = total < best[i + 1 :]
        best[i + 1 :][better] = total[better]
        back[i + 1 :][better] = i
    groups, j = [], m - 1
    while j > 0:
        groups.append(order[cuts[back[j]] : cuts[j]])
        j = back[j]
    return groups[::-1]


def padding(length, k) -> tuple:
    """Return the padding of rows of ``length`` real turns and keep counts ``k``, all padded to one width.

    Each row holds 0 for its real turns, then ``max(k) - k`` entries of ``+inf`` (always kept), then
    ``-inf``: every row's ``k``-th best real score sits at position ``width - max(k)`` of an
    ascending partition. Returns ``(pad, real)``: the float32 padding and the mask of real turns,
    both (rows, width).

    >>> pad, real = padding(np.array([1, 3]), np.array([1, 2]))
    >>> pad.tolist(), real.sum(axis=1).tolist()
    ([[0.0, inf, -inf], [0.0, 0.0, 0.0]], [1, 3])
    """
    length, k = np.asarray(length), np.asarray(k)
    n_plus = (int(k.max()) if len(k) else 0) - k
    width = int((length + n_plus).max()) if len(k) else 0
    pos = np.arange(width)[None, :]
    real = pos < length[:, None]
    plus = ~real & (pos < (length + n_plus)[:, None])
    return np.where(real, 0.0, np.where(plus, np.inf, -np.inf)).astype(np.float32), real


class Columns:
    """Factor columns, (d, G, W), summed into per-turn scores with :func:`~memlib.value.linear_score`'s arithmetic.

    A column whose rows come in runs of identical rows (oracle haystacks of one conversation share all
    factors but the goal) is kept once per run: its products are rounded once per run and added to each
    row, the same floats. A zero weight's column adds nothing to a sum from +0: left out if finite.

    >>> F = np.array([[[1.0, 2.0], [1.0, 2.0], [3.0, 4.0]]])   # one column, rows 0 and 1 alike
    >>> cols = Columns(F, min_share=1)
    >>> out = np.zeros((3, 2)); cols.add(out, np.array([0.5]), cols.used(np.array([0.5]))).tolist()
    [[0.5, 1.0], [0.5, 1.0], [1.5, 2.0]]
    """

    def __init__(self, F: np.ndarray, min_share: int = 4):
        self.F = F
        self._X = np.moveaxis(F, 0, -1)  # (G, W, d): the layout linear_score reads, column j being F[j]
        d, G = F.shape[:2]
        self.finite = bool(np.isfinite(F).all())
        self.runs = {}  # column -> (first row of each run, its end, the run's row)
        for j in range(d) if self.finite and G > 1 else ():
            starts = np.flatnonzero(np.r_[True, np.any(F[j, 1:] != F[j, :-1], axis=1)])
            if len(starts) * min_share <= G:  # at least min_share rows per run on average
                self.runs[j] = (starts, np.r_[starts[1:], G], F[j, starts])

    def used(self, w) -> list:
        """Return the columns summed for weights ``w``: the nonzero ones with finite factors, else all."""
        return [j for j in range(len(self.F)) if w[j] != 0] if self.finite else list(range(len(self.F)))

    def add(self, out: np.ndarray, w, columns, start=None) -> np.ndarray:
        """Add ``F[j] * w[j]`` for each of ``columns``, in order, to ``out`` (G, W), or to ``start`` into ``out``."""
        columns = list(columns)
        if start is not None:  # the first column (or none) from ``start``
            j = columns.pop(0) if columns else None
            if j is None:
                out[...] = start
            elif j in self.runs:
                self._add_runs(start, out, j, w[j])
            else:  # linear_score's first step, from ``start``: the product, rounded, then added
                np.add(start, np.multiply(self.F[j], w[j], out=out), out=out)
        for whole, group in itertools.groupby(columns, lambda j: j not in self.runs):
            if whole:
                linear_score(self._X, w, list(group), out=out)
            else:
                for j in group:
                    self._add_runs(out, out, j, w[j])
        return out

    def _add_runs(self, base, out, j: int, wj) -> None:
        starts, ends, rows = self.runs[j]
        for a, b, row in zip(starts, ends, rows * wj):
            np.add(base if np.ndim(base) == 0 else base[a:b], row, out=out[a:b])
        return out


class Bucket:
    """Rows of one length group, padded as :class:`~memlib.metrics.RetentionEvaluator` partitions them.

    Each row holds its real scores, then ``max(k) - k`` entries of ``+inf`` (always kept), then
    ``-inf``: every row's ``k``-th best real score then sits at the one position :attr:`kth` of an
    ascending partition.

    Attributes
    ----------
    rows : ndarray of int
        The haystacks of the group.
    k, n_plus, n_minus : ndarray of int
        Each row's keep count, ``+inf`` pads and ``-inf`` pads.
    pad, real : ndarray, shape (rows, width)
        The rows' :func:`padding` (float32: 0 where a turn is real) and the mask of real turns.
    kth : int
    columns : Columns
        The factor columns the evaluator reads, padded to the group's width.
    gold : ndarray of int
        The gold turns (entries of the case set's gold lists) in the group's rows; ``gold_row``,
        ``gold_pos`` where each sits.
    """

    def __init__(self, rows, length, k, factors, gold_h, gold_pos):
        self.rows = rows
        self.k = k[rows]
        n = length[rows]
        kmax = int(self.k.max()) if len(rows) else 0
        self.n_plus = kmax - self.k
        self.pad, self.real = padding(n, self.k)
        width = self.pad.shape[1]
        self.n_minus = width - n - self.n_plus
        self.kth = width - kmax
        N = min(width, factors.shape[1])
        F = np.zeros((factors.shape[2], len(rows), width), np.float32)  # one contiguous row per factor column
        F[:, :, :N] = np.moveaxis(factors[rows, :N], -1, 0)
        self.columns = Columns(F)
        where = np.full(len(length), -1, dtype=np.int64)
        where[rows] = np.arange(len(rows))
        self.gold = np.flatnonzero(where[gold_h] >= 0)
        self.gold_row, self.gold_pos = where[gold_h[self.gold]], gold_pos[self.gold]

    def counts_at(self, part, local, t):
        """Real entries above and equal to ``t`` in the partitioned rows ``local`` (the padding left out)."""
        n_above = np.count_nonzero(part[local, self.kth + 1 :] > t[:, None], axis=1)
        n_equal = np.count_nonzero(part[local] == t[:, None], axis=1)
        plus, minus = self.n_plus[local], self.n_minus[local]
        n_above -= np.where(t < np.inf, plus, 0)  # every +inf pad is above a finite threshold
        n_equal -= np.where(t == np.inf, plus, 0) + np.where(t == -np.inf, minus, 0)
        return n_above, n_equal


__all__ = ["BUCKET_COST", "Bucket", "Columns", "length_buckets", "padding"]
