"""What a study reads, as one object: :class:`DataSpec`, its quick rule and its loader.

A real-data study reads a dataset (a name of :data:`memlib.datasets.DATASETS` or a path), all of
it or part of it (``limit``: the first groups; ``sample``: a seeded sample of them; ``histories``: at
most so many of each group's histories, for RealMem, whose users ask many questions inside one stream), annotated with
one factor set under one embedding setting. Quick mode is one rule, :meth:`DataSpec.resolved`: the
first :data:`QUICK_LIMIT` groups (or ``limit``), whatever sample was asked for, so that every
quick run of a dataset reads the same groups and the embedding cache one fills serves the others.
(The studies also search less in quick mode: :func:`~._common.learner_settings`,
:func:`~._common.quick_splits`.) :meth:`DataSpec.load` is the one loader.

>>> DataSpec("locomo", quick=True, sample=8).resolved()
DataSpec(dataset='locomo', quick=True, limit=4, sample=None, histories=None, factor_set='paper',
         embedding_setting='fast', readings=None, quick_limit=4)
>>> DataSpec("locomo", limit=2, sample=3)
Traceback (most recent call last):
...
memlib._checks.ParameterError: pass limit or sample, not both (limit=2, sample=3)
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from memlib._checks import ParameterError, check_choice, check_int
from memlib.factors import REGIMES

#: Quick mode reads the first ``QUICK_LIMIT`` groups (conversations or questions) of a dataset.
QUICK_LIMIT = 4
#: Factor-set names that stand for several sets (a study that runs each, :attr:`DataSpec.factor_sets`).
FACTOR_SET_GROUPS = {"both": ("paper", "extended"), "all": ("paper", "extended", "released")}


@dataclass(frozen=True)
class DataSpec:
    """The data of one study run: which dataset, how much of it, and how it is annotated.

    Attributes
    ----------
    dataset : str or path, optional
        A dataset name (:data:`memlib.datasets.DATASETS`) or a data file (or RealMem folder).
        None for a study that reads several datasets of its own and applies the rest of the
        spec to each (``defaults``, ``transfer``).
    quick : bool
        Quick mode: the first ``quick_limit`` groups (or ``limit``), whatever ``sample``
        (:meth:`resolved`); the studies also search less.
    limit : int, optional
        The first ``limit`` groups (conversations or questions).
    sample : int, optional
        A seeded random sample of ``sample`` groups (:meth:`memlib.datasets.Dataset.sample`).
    histories : int, optional
        At most ``histories`` histories of each group, evenly spread over its stream
        (:meth:`memlib.datasets.Dataset.spread_histories`): a RealMem user asks each question over
        the stream up to its date, so a user holds dozens of nested histories, each replayed by the
        studies that read every corpus. LoCoMo and LongMemEval hold one history a group. The main
        job (``make``) reads a few of each sampled user's; ``make paper`` all of them.
    factor_set : str
        ``paper``, ``extended`` or ``released`` (:data:`memlib.factors.ALL_FACTOR_SETS`); a study
        that runs several also takes ``both`` or ``all`` (:data:`FACTOR_SET_GROUPS`).
    embedding_setting : {'fast', 'reference', 'int8'}
        :data:`memlib.embeddings.SETTINGS`; ``fast`` (128 word pieces) unless told.
    readings : dict, optional
        Readings that override the factor set's (:data:`memlib.factors.READINGS`).
    quick_limit : int
        The groups quick mode reads: :data:`QUICK_LIMIT`, unless a study's default spec says
        fewer (``transfer`` reads two of each corpus).
    """

    dataset: str | os.PathLike | None = None
    quick: bool = False
    limit: int | None = None
    sample: int | None = None
    histories: int | None = None
    factor_set: str = "paper"
    embedding_setting: str = "fast"
    readings: dict | None = None
    quick_limit: int = QUICK_LIMIT

    def __post_init__(self):
        from memlib import datasets
        from memlib.embeddings import SETTINGS
        from memlib.factors import ALL_FACTOR_SETS, resolve_readings

        if self.dataset is not None:
            if not isinstance(self.dataset, str | os.PathLike):
                raise ParameterError(f"dataset must be a dataset name or a path, got {self.dataset!r}")
            if not (self.dataset in datasets.DATASETS or os.path.exists(self.dataset)):
                raise ParameterError(
                    f"unknown dataset {str(self.dataset)!r}: not one of {', '.join(datasets.DATASETS)} and not a file"
                )
        if not isinstance(self.quick, bool | np.bool_):
            raise ParameterError(f"quick must be True or False, got {self.quick!r}")
        object.__setattr__(self, "quick", bool(self.quick))
        check_int("quick_limit", self.quick_limit, minimum=1)
        for name in ("limit", "sample", "histories"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_int(name, getattr(self, name), minimum=1))
        if self.limit is not None and self.sample is not None:
            raise ParameterError(f"pass limit or sample, not both (limit={self.limit}, sample={self.sample})")
        check_choice("factor_set", self.factor_set, (*ALL_FACTOR_SETS, *FACTOR_SET_GROUPS))
        check_choice("embedding_setting", self.embedding_setting, tuple(SETTINGS))
        if self.readings is not None:
            if not isinstance(self.readings, dict):
                raise ParameterError(f"readings must be a dict of reading names, got {self.readings!r}")
            for fs in self.factor_sets:
                resolve_readings(fs, self.readings)
            object.__setattr__(self, "readings", dict(self.readings))

    @classmethod
    def of(cls, data, like: DataSpec | None = None) -> DataSpec:
        """Return ``data`` as a spec: a :class:`DataSpec` as it is; a dataset name or path as ``like`` on that dataset.

        A study's ``data`` parameter takes either; a name reads the dataset as the study's
        default spec (``like``; :class:`DataSpec`'s defaults without one) reads its own.

        >>> DataSpec.of("longmemeval_s", like=DataSpec("locomo", factor_set="both")).factor_set
        'both'
        """
        if isinstance(data, DataSpec):
            return data
        return dataclasses.replace(like or cls(), dataset=data)

    @property
    def factor_sets(self) -> tuple[str, ...]:
        """The single factor sets ``factor_set`` names (``both`` and ``all`` name several)."""
        return FACTOR_SET_GROUPS.get(self.factor_set, (self.factor_set,))

    def resolved(self) -> DataSpec:
        """Return the spec that runs: in quick mode the first ``quick_limit`` groups (or ``limit``), no sample.

        The one quick rule of the studies' data. Two specs that read the same data resolve equal.
        """
        if not self.quick:
            return self
        return dataclasses.replace(self, limit=self.limit or self.quick_limit, sample=None)

    def table(self) -> pd.DataFrame:
        """Show what runs (:meth:`resolved`), one row per field, for a chapter to show.

        >>> DataSpec("locomo", quick=True).table().loc[["quick", "limit"], "runs"].tolist()
        [True, 4]
        """
        runs = dataclasses.asdict(self.resolved())
        return pd.DataFrame({"runs": list(runs.values())}, index=pd.Index(list(runs), name="field"), dtype=object)

    def reads(self, study: str, *fields: str) -> DataSpec:
        """Return this spec, refused if it sets a field ``study`` does not read (a field at its default is not set).

        Every study reads ``quick_limit`` (the loader does).

        >>> DataSpec("locomo", factor_set="extended").reads("cues", "dataset", "quick")
        Traceback (most recent call last):
        ...
        memlib._checks.ParameterError: the cues study reads no factor_set (it reads dataset, quick), got 'extended'
        """
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name not in (*fields, "quick_limit") and value != f.default:
                raise ParameterError(
                    f"the {study} study reads no {f.name} (it reads {', '.join(fields)}), got {value!r}"
                )
        return self

    def load_dataset(self):
        """Load the part of the dataset the spec reads (:meth:`resolved`): a :class:`memlib.datasets.Dataset`."""
        from memlib import datasets

        if self.dataset is None:
            raise ParameterError("this data names no dataset")
        spec = self.resolved()
        ds = datasets.load(spec.dataset)
        if spec.limit is not None:
            ds = ds.limit(spec.limit)
        if spec.sample is not None:
            ds = ds.sample(spec.sample)
        if spec.histories is not None:
            ds = ds.spread_histories(spec.histories)
        return ds

    def load(self, progress: bool = False, regimes=REGIMES):
        """Load the data and its cached factor tables in each regime: ``(ds, {regime: Annotation})``.

        Refuses data without a usable case, and a ``factor_set`` that names several sets.
        """
        from memlib import factors

        if not regimes:
            raise ParameterError("load at least one regime (load_dataset reads the data alone)")
        if len(self.factor_sets) > 1:
            raise ParameterError(f"factor_set {self.factor_set!r} names several sets; load one at a time")
        for r in regimes:
            check_choice("regime", r, REGIMES)
        ds = self.load_dataset()
        anns = {
            r: factors.annotate(
                ds,
                r,
                factor_set=self.factor_set,
                embedding_setting=self.embedding_setting,
                readings=self.readings,
                progress=progress,
            )
            for r in regimes
        }
        first = anns[regimes[0]].cases
        require_cases(ds.name, first)
        if any(not np.array_equal(first.case_ids, a.cases.case_ids) for a in anns.values()):
            raise RuntimeError(f"the {' and '.join(regimes)} annotations disagree on the cases")
        return ds, anns

    def info(self) -> dict:
        """Return a result's ``info`` on the data that ran (:meth:`resolved`): sample, factor set, embedding."""
        spec = self.resolved()
        return {"sample": spec.sample, "factor_set": spec.factor_set, "embedding": spec.embedding_setting}


def require_cases(dataset_name: str, cases) -> None:
    """Refuse an annotation with no usable case, in one line naming the dataset.

    Every study needs at least one question with a gold turn in its history;
    without one, pandas and numpy would fail later with errors that name neither.
    """
    if cases.n_cases == 0:
        raise ParameterError(f"{dataset_name}: no usable question (none has a gold turn in its history)")


#: The data most studies read unless told: all of LoCoMo, the paper's factors, fast embeddings.
LOCOMO = DataSpec("locomo")
#: For a study that reads datasets of its own (``defaults``, ``transfer``): all of each, the same way.
EACH = DataSpec()

__all__ = ["EACH", "FACTOR_SET_GROUPS", "LOCOMO", "QUICK_LIMIT", "DataSpec", "require_cases"]
