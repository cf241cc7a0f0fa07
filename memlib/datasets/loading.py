"""Loading by name or path: :func:`load` picks the loader for a dataset and reads each file once per process.

A dataset name of :data:`~memlib.datasets.DATASETS` is resolved to its file, a path is read
by the loader its name calls for (a folder as RealMem persona files), and the parse is kept
in :data:`_LOADED` while the files are unchanged, or read back from the parsed-dataset cache
(:mod:`memlib.datasets.parsecache`).
"""

from __future__ import annotations

from pathlib import Path

from memlib._checks import ParameterError
from memlib.datasets.jsonl import load_jsonl
from memlib.datasets.locomo import load_locomo
from memlib.datasets.longmemeval import load_longmemeval
from memlib.datasets.normalised import Dataset
from memlib.datasets.parsecache import _parsed
from memlib.datasets.realmem import _REALMEM_NAME, _realmem_files, load_realmem, resolve_realmem
from memlib.datasets.resolver import DATASETS, resolve_dataset


def dataset_files(dataset) -> list[Path]:
    """Return the data files a dataset name or path reads: what :func:`load` parses, and what keys its caches.

    A name of :data:`DATASETS` is its resolved file (``realmem``: the ten persona files); a folder,
    the RealMem persona files in it; a file, itself.
    """
    if dataset == "realmem":
        return resolve_realmem()
    if isinstance(dataset, str) and dataset in DATASETS:
        return [resolve_dataset(dataset)]
    path = Path(dataset)
    if path.is_dir():  # a folder of RealMem persona files
        return _realmem_files(path)
    if not path.is_file():
        raise ParameterError(f"unknown dataset {str(dataset)!r}: not one of {', '.join(DATASETS)} and not a file")
    return [path]


def load(dataset) -> Dataset:
    """Load a dataset by name (:data:`DATASETS`) or by path.

    A path ending in ``.jsonl`` (or ``.jsonl.gz``) is read by :func:`load_jsonl`,
    ``locomo10.json`` by :func:`load_locomo`, and any other ``.json`` (or
    ``.json.gz``) as LongMemEval's schema; a folder as RealMem persona files
    (:func:`dataset_files`). ``Dataset.source`` names the file read.
    The same file is parsed once per process while it is unchanged (the result is
    shared: treat it as read-only; ``with_cases``, ``limit`` and ``sample`` copy),
    and across processes its parse is read back from the parsed-dataset cache
    (:func:`_parsed`; ``MEMLIB_DATASET_CACHE=0`` turns that off).
    """
    files = dataset_files(dataset)
    if dataset == "realmem":
        return _load_files(dataset, files, files[0].parent, lambda _: load_realmem(files))
    if isinstance(dataset, str) and dataset in DATASETS:
        reader = load_locomo if dataset == "locomo" else lambda p: load_longmemeval(p, name=dataset)
        return _load_files(dataset, files, files[0], reader)
    path = Path(dataset)
    if path.is_dir():
        return _load_files(dataset, files, path, lambda p: load_realmem(files, name=p.name))
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if _REALMEM_NAME.fullmatch(path.name):
        reader = lambda p: load_realmem([p], name=name.split("_dialogues_")[0])  # noqa: E731
    elif name.endswith(".jsonl"):
        reader = lambda p: load_jsonl(p, name=name[:-6])  # noqa: E731
    elif name == DATASETS["locomo"][0]:
        reader = load_locomo
    else:
        reader = lambda p: load_longmemeval(p, name=name[:-5] if name.endswith(".json") else name)  # noqa: E731
    return _load_files(dataset, files, path, reader)


def _load_files(dataset, files: list, path: Path, reader) -> Dataset:
    """``reader(path)`` over the data ``files``, once per process while they are unchanged (:func:`load`)."""
    versions = []
    for f in files:
        stat = Path(f).stat()
        versions.append((str(Path(f).resolve()), stat.st_mtime_ns, stat.st_size))
    key = (str(dataset), str(Path(path).resolve()), tuple(versions))
    if key not in _LOADED:
        if len(_LOADED) >= 2:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = _parsed(path, str(dataset), reader, files)
    return _LOADED[key]


#: The last datasets :func:`load` read, by name, file, modification time and size: the studies of
#: one process (a notebook runs several) parse a 256 MB file once. Treat a loaded Dataset as read-only.
_LOADED: dict = {}
