"""The data of the cue study (chapter 09, :mod:`memlib.studies.cues`).

:class:`CueData` holds a dataset's blind cases and their cue table (raw and calibrated) and serves the
cue models (:data:`CUE_MODELS`, :meth:`CueData.table`); :func:`load_cue_data` builds one from a dataset.

>>> CUE_MODELS
('cues', 'cues_no_position', 'cues_user', 'cues_relative')
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memlib._checks import ParameterError, check_choice
from memlib.cases import CaseSet
from memlib.cues import POSITION_GROUP, ROLE_CUE, CueTable, compute_cues
from memlib.studies import _cache
from memlib.studies.data_spec import LOCOMO, DataSpec

#: The cue models: every cue; every cue but the position group; and that with role products, by
#: ``is_user`` or by the relative role cue (:meth:`CueData.table`).
CUE_MODELS = ("cues", "cues_no_position", "cues_user", "cues_relative")
#: What the cue study reads of its data (:meth:`~.data_spec.DataSpec.reads`): the cues are over the paper set.
READS = ("dataset", "quick", "limit", "sample", "histories", "embedding_setting")


@dataclass
class CueData:
    """The blind cases of a dataset and their cues (raw and calibrated), aligned."""

    name: str
    cases: CaseSet
    raw: CueTable
    calibrated: CueTable = None
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.raw.values.shape[:2] != self.cases.time.shape:
            raise ParameterError("cue table and cases must share their (G, N) layout")
        if self.calibrated is None:
            self.calibrated = self.raw.calibrated()

    def table(self, calibrated: bool, model: str = "cues") -> CueTable:
        """Return the cue table a model reads.

        ``cues``: every cue; ``cues_no_position`` drops the position group; ``cues_user`` drops
        it too and adds each remaining cue times ``is_user`` (raw, 0 or 1), so that a user's
        turn and an assistant's can weigh a cue differently (a constant ``is_user``, as in
        person-person chat, makes the products copies of the cues). ``cues_relative`` replaces
        those by the products with the relative role cue ``self_talk``, both factors centred
        within their history (:func:`role_products`): a product with a factor that is constant
        in a history is 0 there, so a product whose factor is constant in a training corpus is
        a zero column and gets no weight; in a test history where it is constant, the main
        effects alone score the turns.
        """
        check_choice("model", model, CUE_MODELS)
        t = self.calibrated if calibrated else self.raw
        if model == "cues":
            return t
        t = t.select(drop_groups=(POSITION_GROUP,))
        if model == "cues_no_position":
            return t
        if model == "cues_relative":
            return role_products(t)
        user = self.raw.values[..., self.raw.names.index("is_user")][..., None]
        others = [i for i, n in enumerate(t.names) if n != "is_user"]
        values = np.concatenate([t.values, user * t.values[..., others]], axis=-1)
        names = t.names + tuple(f"user*{t.names[i]}" for i in others)
        return CueTable(values, names, t.length, t.calibrated_, t.seconds, t.n_turns)

    def subset(self, idx) -> tuple[CaseSet, CueData]:
        """Return the cases at ``idx`` and their histories' cues."""
        idx = np.asarray(idx, dtype=np.int64)
        used = np.unique(self.cases.case_haystack[idx])
        cs = self.cases.subset(idx)
        return cs, CueData(self.name, cs, self.raw.subset(used), self.calibrated.subset(used), self.info)


def role_products(t: CueTable, role: str = ROLE_CUE) -> CueTable:
    """``t`` plus, for every other cue, its product with ``role``, both centred within their history.

    The product of cue ``x`` and role cue ``r`` in history ``g`` is ``(x - mean_g x) * (r - mean_g r)``
    over the history's turns, and 0 where either is constant in the history: no product with a
    constant, which would be a copy of the other cue within the history (and, with the cue itself,
    split its weight by accident). Calibrated cues are ranks within the history, so there each
    mean is 0.5.

    >>> V = np.array([[[1.0, 0.0, 2.0], [0.0, 1.0, 2.0], [1.0, 1.0, 2.0]]], np.float32)
    >>> p = role_products(CueTable(V, ("is_question", "self_talk", "length"), np.array([3])))
    >>> p.names[3:], p.values[0, :, 3:].astype(float).round(2).tolist()
    (('self_talk*is_question', 'self_talk*length'), [[-0.22, 0.0], [-0.22, 0.0], [0.11, 0.0]])
    """
    if role not in t.names:
        raise ParameterError(f"role products need the cue {role!r}; the table has {', '.join(t.names)}")
    valid = t.valid[..., None]
    n = np.maximum(t.length, 1)[:, None, None]
    X = t.values.astype(np.float64)
    mean = np.where(valid, X, 0.0).sum(axis=1, keepdims=True) / n
    hi = np.where(valid, X, -np.inf).max(axis=1, keepdims=True)
    lo = np.where(valid, X, np.inf).min(axis=1, keepdims=True)
    C = np.where(valid & (hi > lo), X - mean, 0.0)
    j = t.names.index(role)
    others = [i for i, name in enumerate(t.names) if i != j]
    values = np.concatenate([t.values, (C[..., others] * C[..., [j]] + 0.0).astype(np.float32)], axis=-1)
    names = t.names + tuple(f"{role}*{t.names[i]}" for i in others)
    return CueTable(values, names, t.length, t.calibrated_, t.seconds, t.n_turns)


def load_cue_data(data: DataSpec | str = LOCOMO, progress: bool = False) -> CueData:
    """Load the blind (paper) annotation of ``data`` and its cues.

    Loaded once per data and code: the cue, transfer and usage studies that read the same corpus
    the same way read the first one's, from the result cache (:mod:`._cache`, keyed as a study's
    result is); its ``info`` keeps the seconds the computation took.
    """
    return _load_once(DataSpec.of(data).reads("cues", *READS), progress)


def _load(data: DataSpec, progress: bool = False) -> CueData:
    """:func:`load_cue_data`, computed."""
    import time

    t0 = time.perf_counter()
    ds, anns = data.load(progress, regimes=("blind",))
    ann = anns["blind"]
    embedding = data.embedding_setting
    t1 = time.perf_counter()
    raw = compute_cues(ds, ann, embedding_setting=embedding, progress=progress)
    t2 = time.perf_counter()
    out = CueData(ds.name, ann.cases, raw)
    out.info = {
        **ds.stats(),
        "usable_cases_used": int(ann.cases.n_cases),
        "histories": int(ann.cases.n_haystacks),
        "turn_occurrences_in_histories": int(ann.cases.length.sum()),
        "seconds_annotation": t1 - t0,
        "seconds_cues": t2 - t1,
        "seconds_calibration": time.perf_counter() - t2,
        "cue_seconds": raw.seconds,
        "embedding": embedding,
    }
    return out


_cache.register(CueData, CueTable, CaseSet)
_load_once = _cache.cached("cue-data", _load)

__all__ = ["CUE_MODELS", "READS", "CueData", "load_cue_data", "role_products"]
