"""Datasets: one resolver for data files and loaders into one normalised form.

Normalised form (:class:`Dataset`)
----------------------------------
``turns``
    One row per unique stored turn: ``session`` (key), ``turn`` (index in the
    session), ``role`` (``user`` or ``assistant``), ``speaker``, ``text``,
    ``timestamp`` (pandas Timestamp; session time plus one second per turn, so
    turns keep their order) and ``text_id`` (index into ``texts``).
``sessions``
    One row per unique session: ``session``, ``label`` (the id in the source
    file), ``date``, ``first_turn`` / ``n_turns`` (its rows in ``turns``).
``cases``
    One row per question: ``case_id``, ``question``, ``question_type``,
    ``haystack`` (tuple of session keys in time order), ``gold`` (tuple of
    row indices into ``turns``), ``group`` (cases that share turns must stay on
    one side of a train/test split), ``usable`` (has at least one gold turn) and
    ``question_date`` (when the question is asked; NaT where the source has none).

Sessions that recur across questions (LongMemEval haystacks) are stored once:
a session key is its source id plus a hash of its content, so the same text is
never embedded twice and a reused id with different content is kept apart.

Loaders: :func:`load_locomo` (``locomo10.json``), :func:`load_longmemeval`
(LongMemEval S, M and oracle files share one schema), :func:`load_realmem`
(RealMem's ten persona files; questions asked inside the stream) and
:func:`load_jsonl` (the generic format documented there). :func:`load` takes a
dataset name or a path.

Resolver: :func:`resolve` looks for a data file in ``$MEMLIB_DATA_DIR`` (and
its sub-folders one level deep), then in ``data/raw/``, then downloads it to
``data/raw/`` when :data:`REGISTRY` pins a checksum for it.

Modules
-------
* :mod:`memlib.datasets.normalised`: :class:`Dataset`, :class:`DatasetError`,
  :class:`DatasetWarning` and the field checks every loader shares;
* :mod:`memlib.datasets.reading`: reading a data file (UTF-8, gzip, JSON) and
  repairing invalid Unicode in it;
* :mod:`memlib.datasets.resolver`: :data:`REGISTRY`, :data:`DATASETS` and
  :func:`resolve` (environment variable, then ``data/raw/``, then a checksummed download);
* :mod:`memlib.datasets.locomo`, :mod:`memlib.datasets.longmemeval`,
  :mod:`memlib.datasets.realmem`, :mod:`memlib.datasets.jsonl`: one loader per format;
* :mod:`memlib.datasets.loading`: :func:`load`, by name or path, once per process;
* :mod:`memlib.datasets.parsecache`: the parsed-dataset cache across processes.

Every name is used from here (``from memlib import datasets``). Setting one of them on
this package (``datasets.RAW_DIR = ...``, or ``monkeypatch.setattr`` in a test) sets it in
the modules that use it too, as it did when the package was one module.
"""

from __future__ import annotations

import sys
import types

from memlib.datasets import jsonl, loading, locomo, longmemeval, normalised, parsecache, reading, realmem, resolver
from memlib.datasets.jsonl import load_jsonl
from memlib.datasets.loading import _LOADED as _LOADED
from memlib.datasets.loading import dataset_files, load
from memlib.datasets.locomo import load_locomo, normalise_locomo_evidence
from memlib.datasets.longmemeval import LONGMEMEVAL_FIELDS, load_longmemeval
from memlib.datasets.longmemeval import _lme_date as _lme_date
from memlib.datasets.normalised import Dataset, DatasetError, DatasetWarning
from memlib.datasets.parsecache import PARSED_FORMAT, parsed_cache_enabled, source_files
from memlib.datasets.parsecache import _dataset_arrays as _dataset_arrays
from memlib.datasets.parsecache import _dataset_from_arrays as _dataset_from_arrays
from memlib.datasets.parsecache import _NotStorable as _NotStorable
from memlib.datasets.parsecache import _same_dataset as _same_dataset
from memlib.datasets.reading import open_text
from memlib.datasets.realmem import load_realmem, resolve_realmem
from memlib.datasets.resolver import (
    DATASETS,
    RAW_DIR,
    REALMEM_FILES,
    REGISTRY,
    ROOT,
    resolve,
    resolve_dataset,
    sha256_file,
)

# the private names above (``name as name``) are re-exported for the tests that use them
__all__ = [
    "DATASETS",
    "LONGMEMEVAL_FIELDS",
    "PARSED_FORMAT",
    "RAW_DIR",
    "REALMEM_FILES",
    "REGISTRY",
    "ROOT",
    "Dataset",
    "DatasetError",
    "DatasetWarning",
    "dataset_files",
    "load",
    "load_jsonl",
    "load_locomo",
    "load_longmemeval",
    "load_realmem",
    "normalise_locomo_evidence",
    "open_text",
    "parsed_cache_enabled",
    "resolve",
    "resolve_dataset",
    "resolve_realmem",
    "sha256_file",
    "source_files",
]

#: The modules whose names this package re-exports; a name set here is set in each that holds it.
_MODULES = (normalised, reading, resolver, locomo, longmemeval, jsonl, realmem, parsecache, loading)
_UNSET = object()


class _Package(types.ModuleType):
    """The package's module type: a name set on the package is set in every module that holds the same object."""

    def __setattr__(self, name, value):
        old = self.__dict__.get(name, _UNSET)
        if old is not _UNSET:
            for module in _MODULES:
                if vars(module).get(name, _UNSET) is old:
                    setattr(module, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
