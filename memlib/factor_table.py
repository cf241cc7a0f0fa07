"""The factor table of a dataset in one regime (:class:`Annotation`) and its ``.npz`` file.

:func:`memlib.factors.annotate` returns an :class:`Annotation` and keeps it in
its cache with :func:`save_annotation` (one ``.npz`` of plain arrays and a JSON
header, written atomically; no pickle); :func:`load_annotation` reads it back
and refuses, naming the file, a table that is damaged or holds values no
annotation holds (:func:`_check_table`).

>>> import numpy as np
>>> from memlib.cases import CaseSet
>>> cs = CaseSet.from_haystacks([np.full((2, 7), 0.5, np.float32)], [np.zeros(2)], [0], [[1]])
>>> _check_table(cs, np.array([[0, 1]]))
>>> _check_table(cs, np.array([[0.0, 1.0]]))
Traceback (most recent call last):
...
ValueError: turn rows of shape (1, 2) and dtype float64 do not match the factors
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._cachefiles import CORRUPT_ERRORS, atomic_savez, read_npz
from memlib.cases import CaseSet
from memlib.datasets import Dataset, DatasetError


@dataclass
class Annotation:
    """Factor tables of a dataset in one regime.

    Attributes
    ----------
    cases : CaseSet
        Factors per haystack turn, ready for retention and learning.
    turn_rows : ndarray, shape (G, N)
        Row in ``dataset.turns`` of each haystack position (-1 for padding).
    inert : list of str
        Factors that are identically zero because their input was not given.
    info : dict
        Counts and timings of the run.
    """

    dataset: str
    regime: str
    cases: CaseSet
    turn_rows: np.ndarray
    inert: list
    info: dict = field(default_factory=dict)

    def turn_table(self, ds: Dataset, haystack: int = 0) -> pd.DataFrame:
        """One haystack's turns with their factor values (for reading and plotting)."""
        n = int(self.cases.length[haystack])
        rows = self.turn_rows[haystack, :n]
        t = ds.turns.iloc[rows][["session", "turn", "role", "speaker", "text", "timestamp"]].reset_index(drop=True)
        return pd.concat([t, pd.DataFrame(self.cases.factors[haystack, :n], columns=list(FACTORS))], axis=1)


def save_annotation(ann: Annotation, path) -> None:
    """Write an annotation as one ``.npz`` (atomic; no pickle)."""
    cs = ann.cases
    atomic_savez(
        path,
        factors=cs.factors,
        time=cs.time,
        length=cs.length,
        case_haystack=cs.case_haystack,
        gold_case=cs.gold_case,
        gold_pos=cs.gold_pos,
        case_ids=cs.case_ids.astype(str),
        groups=cs.groups.astype(str),
        keys=cs.keys.astype(str),
        turn_rows=ann.turn_rows,
        meta=np.array(json.dumps({"dataset": ann.dataset, "regime": ann.regime, "inert": ann.inert, "info": ann.info})),
    )


def load_annotation(path) -> Annotation:
    """Read an annotation written by :func:`save_annotation`.

    A damaged file (truncated, overwritten, missing arrays, or values no annotation
    holds: NaN or out-of-range factors, see :func:`_check_table`) raises a
    :class:`~memlib.datasets.DatasetError` that names it.
    """
    names = ("factors", "time", "length", "case_haystack", "gold_case", "gold_pos", "case_ids", "groups", "keys")
    try:
        z = read_npz(path, (*names, "turn_rows", "meta"))
        meta = json.loads(str(z["meta"]))
        cs = CaseSet(*(z[name] for name in names))
        _check_table(cs, z["turn_rows"])
        return Annotation(meta["dataset"], meta["regime"], cs, z["turn_rows"], meta["inert"], meta["info"])
    except CORRUPT_ERRORS + (TypeError,) as exc:
        raise DatasetError(f"{path}: not a readable factor table ({type(exc).__name__}: {exc})") from exc


def _check_table(cs: CaseSet, turn_rows: np.ndarray) -> None:
    """Raise ValueError unless a factor table read back holds what :func:`annotate` writes.

    Factors are finite and in [0, 1] (each factor is), times finite, and ``turn_rows`` one
    integer row per haystack position (-1 for padding): a table of NaN factors would
    otherwise be read as valid and give NaN retention without a word.
    """
    F = cs.factors
    if F.dtype.kind != "f" or not np.isfinite(F).all():
        raise ValueError(f"{int(np.size(F) - np.isfinite(F).sum())} factor values are not finite (NaN or infinite)")
    if F.size and (F.min() < 0 or F.max() > 1):
        raise ValueError(f"factor values run from {F.min():g} to {F.max():g}, outside [0, 1]")
    if cs.time.dtype.kind != "f" or not np.isfinite(cs.time).all():
        raise ValueError("turn times are not all finite")
    if turn_rows.dtype.kind not in "iu" or turn_rows.shape != F.shape[:2]:
        raise ValueError(f"turn rows of shape {turn_rows.shape} and dtype {turn_rows.dtype} do not match the factors")


__all__ = ["Annotation", "load_annotation", "save_annotation"]
