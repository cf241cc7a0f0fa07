"""Evaluation cases: questions over shared haystacks of factor-annotated turns.

A *case* is one evaluation question over a *haystack* of stored turns; its gold
turns are the evidence the question needs. Cases may share a haystack (LoCoMo:
every question of a conversation), so factors and times live per haystack and
the gold sets per case. :class:`CaseSet` holds many cases padded into arrays, so
that scoring a weight vector is one product over the unique haystacks.

>>> import numpy as np
>>> cs = CaseSet.from_cases([np.eye(7)[[0, 1, 2]], np.eye(7)[[3, 4]]], [np.arange(3.0), np.arange(2.0)],
...                         gold=[[0], [0, 1]])
>>> cs.n_cases, cs.n_haystacks, cs.n_gold.tolist()
(2, 2, [1, 2])
>>> cs.subset([1]).gold_mask(0).tolist()
[True, True]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError


@dataclass(frozen=True)
class CaseSet:
    """Evaluation cases over shared haystacks, padded to one array.

    Attributes
    ----------
    factors : ndarray, shape (G, N, 7), float32 (float64 for the released factor set)
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
    keys : ndarray, shape (C,) of str
        A key of each case's content that names no identifier (the annotator
        hashes its question and date). Splits order groups by their keys, so that
        renaming every id, or reordering the file, leaves every split as it was.
        Defaults to ``case_ids``.
    """

    factors: np.ndarray
    time: np.ndarray
    length: np.ndarray
    case_haystack: np.ndarray
    gold_case: np.ndarray
    gold_pos: np.ndarray
    case_ids: np.ndarray
    groups: np.ndarray
    keys: np.ndarray = None
    _n_gold: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        """Check that the arrays fit together (shapes, indices) and count each case's gold turns."""
        G, N, d = self.factors.shape
        if d != len(FACTORS):
            raise ParameterError(f"factors must have {len(FACTORS)} columns, got {d}")
        C = len(self.case_haystack)
        if self.time.shape != (G, N) or self.length.shape != (G,):
            raise ParameterError("time must be (G, N) and length (G,) for factors of shape (G, N, 7)")
        bad = np.flatnonzero((self.length < 0) | (self.length > N))
        if len(bad):
            h = int(bad[0])
            raise ParameterError(f"haystack {h}: length {self.length[h]} is outside [0, {N}], the padded width")
        if self.keys is None:
            object.__setattr__(self, "keys", np.asarray(self.case_ids))
        if len(self.case_ids) != C or len(self.groups) != C or len(self.keys) != C:
            raise ParameterError("case_ids, groups and keys need one entry per case")
        if C and (self.case_haystack.min() < 0 or self.case_haystack.max() >= G):
            raise ParameterError("case_haystack points outside the haystacks")
        if len(self.gold_pos) and np.any(self.gold_pos >= self.length[self.case_haystack[self.gold_case]]):
            raise ParameterError("a gold position lies outside its haystack")
        object.__setattr__(self, "_n_gold", np.bincount(self.gold_case, minlength=C))

    # ------------------------------------------------------------------ build
    @classmethod
    def from_cases(cls, factors, times, gold, case_ids=None, groups=None, keys=None) -> CaseSet:
        """One haystack per case: lists of (n_c, 7) factors, (n_c,) times and gold positions."""
        n = len(factors)
        return cls.from_haystacks(
            factors, times, case_haystack=np.arange(n), gold=gold, case_ids=case_ids, groups=groups, keys=keys
        )

    @classmethod
    def from_haystacks(
        cls, factors, times, case_haystack, gold, case_ids=None, groups=None, keys=None, dtype=np.float32
    ) -> CaseSet:
        """Build from per-haystack factor matrices and per-case gold positions.

        Parameters
        ----------
        factors : list of array_like, each (n_g, 7)
        times : list of array_like, each (n_g,)
        case_haystack : array_like of int, shape (C,)
        gold : list of C lists of int
            Gold positions of each case within its haystack (duplicates ignored).
        case_ids, groups, keys : sequences of str, optional
            Default: the case index; the haystack index.
        dtype : numpy dtype
            Of the factors: float32, or float64 where ties must be kept as the source computed them.
        """
        G = len(factors)
        if len(times) != G:
            raise ParameterError("factors and times need one entry per haystack")
        length = np.array([len(f) for f in factors], dtype=np.int64)
        N = int(length.max()) if G else 0
        F = np.zeros((G, N, len(FACTORS)), dtype=dtype)
        T = np.zeros((G, N), dtype=np.float64)
        for g, (f, t) in enumerate(zip(factors, times)):
            f = np.asarray(f, dtype=dtype).reshape(-1, len(FACTORS))
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
        groups = np.asarray([str(h) for h in case_haystack] if groups is None else [str(x) for x in groups])
        keys = case_ids if keys is None else np.asarray([str(x) for x in keys])
        return cls(F, T, length, case_haystack, gold_case, gold_pos, case_ids, groups, keys)

    # ------------------------------------------------------------- properties
    @property
    def n_cases(self) -> int:
        """Number of cases."""
        return len(self.case_haystack)

    @property
    def n_haystacks(self) -> int:
        """Number of unique haystacks (histories) the cases share."""
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

    def haystack_keys(self) -> np.ndarray:
        """Each haystack's content key: the smallest :attr:`keys` of the cases over it (``""`` for none).

        Work done haystack by haystack in this order, or seeded by these keys, does not depend
        on where a haystack sits in the case set.

        >>> cs = CaseSet.from_cases([np.zeros((1, 7))] * 2, [np.zeros(1)] * 2, gold=[[0], [0]], keys=["b", "a"])
        >>> cs.haystack_keys().tolist()
        ['b', 'a']
        """
        out = [""] * self.n_haystacks
        seen = np.zeros(self.n_haystacks, dtype=bool)
        for h, k in zip(self.case_haystack, self.keys):
            k = str(k)
            if not seen[h] or k < out[h]:
                out[h], seen[h] = k, True
        return np.asarray(out, dtype=object)

    def gold_mask(self, case: int) -> np.ndarray:
        """Boolean gold mask over the haystack of one case."""
        m = np.zeros(self.length[self.case_haystack[case]], dtype=bool)
        m[self.gold_pos[self.gold_case == case]] = True
        return m

    def subset(self, cases) -> CaseSet:
        """Return the cases at the given indices, keeping only the haystacks they use."""
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
            keys=self.keys[cases],
        )
