"""The cache key of a factor table: what :func:`memlib.factors.annotate` read, hashed, and where its table is kept.

A table is kept in the cache folder under ``factors/<dataset>-<regime>-<key>.npz``
(:func:`table_path`); the key (:func:`fingerprint`) hashes the annotator's source
(:data:`SOURCE_FILES`), the regime and options, and the cases and turns the table reads, so
a change to any of them computes the table again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from memlib._cachefiles import safe_name
from memlib.datasets import Dataset
from memlib.embeddings import cache_root

#: The source files of memlib/ whose code changes a factor table; the cache key (:func:`fingerprint`)
#: hashes them, so an edit to any of them invalidates the cached tables (``datasets``: that package;
#: ``__init__.py`` holds the column order, :data:`memlib.FACTORS`). Every module :mod:`memlib.factors` loads is
#: here but ``_checks.py`` (error messages), ``_cachefiles.py`` (cache paths), ``_safewrite.py``
#: (how a file is written, not what it holds) and ``_cores.py`` (how many threads compute).
SOURCE_FILES = (
    "__init__.py",
    "factors.py",
    "factor_key.py",
    "factor_sets.py",
    "factor_table.py",
    "goal_anchors.py",
    "history_factors.py",
    "online.py",
    "self_readings.py",
    "text_cues.py",
    "rule_emotion.py",
    "_text.py",
    "cases.py",
    "embeddings.py",
    "embedding_cache.py",
    "embedding_model.py",
    "embedding_onnx.py",
    "datasets",
)


def _source_version() -> str:
    from memlib.datasets import source_files

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in SOURCE_FILES:
        # the datasets package: every .py file of memlib/datasets/, sorted by name
        for path in source_files() if name == "datasets" else [here / name]:
            if path.is_file():  # a module not (or no longer) there runs no code
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


def fingerprint(ds: Dataset, regime: str, options: dict) -> str:
    """Cache key: annotator source, regime, options and the dataset's content."""
    h = hashlib.sha256()
    h.update(_source_version().encode())
    h.update(json.dumps([ds.name, regime, options], sort_keys=True, default=str).encode())
    c = ds.cases
    h.update(
        json.dumps(
            [
                list(c["case_id"]),
                list(c["question"]),
                [list(x) for x in c["haystack"]],
                [list(x) for x in c["gold"]],
                list(c["group"]),
            ]
        ).encode()
    )
    used = set().union(*c["haystack"]) if len(c) else set()
    turns = ds.turns[ds.turns["session"].isin(used)]  # only the turns the cases read
    h.update(
        pd.util.hash_pandas_object(turns[["session", "role", "speaker", "text", "timestamp"]], index=False)
        .to_numpy()
        .tobytes()
    )
    return h.hexdigest()[:24]


def table_path(ds: Dataset, usable: Dataset, regime: str, options: dict) -> Path:
    """Return where the table of ``ds`` in ``regime`` is cached: keyed by :func:`fingerprint` of its usable cases."""
    return cache_root() / "factors" / f"{safe_name(ds.name)}-{regime}-{fingerprint(usable, regime, options)}.npz"


__all__ = ["SOURCE_FILES", "fingerprint", "table_path"]
