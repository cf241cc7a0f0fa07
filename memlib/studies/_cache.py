"""A cache of study results, so that ``make studies`` and the book share one computation.

A result is stored under a key that hashes everything it read:

* the **code** it ran (:func:`code_version`): the source of the study's module and of every
  ``memlib`` module that module imports, transitively (an edit to the store invalidates the
  studies that import the store, not the synthetic study), the package data files those
  modules name (``defaults.json``), this module, and the versions of the libraries that
  compute (numpy, pandas, torch, ...);
* the **data** (:func:`data_fingerprint`): for each parameter that names data (a
  :class:`~.data_spec.DataSpec`, or a dataset name or path), every file it reads and the
  sha256 of its content (so a file copied again, with a new modification time, still hits; an
  edited one misses). A spec that names no dataset stands for the corpora a study reads of
  its own (``transfer``, ``usage``, ``defaults``: the ``corpora`` the study registers), and
  every file of each is fingerprinted; a study that reads corpora without saying which is
  not cached;
* the **parameters**: every keyword the study takes, defaults filled in (``progress``
  is left out: it changes nothing but the terminal). The ``data`` parameter counts as
  the :class:`~.data_spec.DataSpec` it stands for (a dataset name as the study's
  default spec on it) and as that spec resolves (:meth:`~.data_spec.DataSpec.resolved`),
  so two calls that read the same data share a result.

A change to any of them gives a new key, so a stale result is never served.

A cache file holds data, never code: an entry is one compressed ``.npz`` of plain arrays
(never pickled) and a JSON manifest, written by memlib's one safe writer
(:func:`memlib._safewrite.write_file`), with a sha256 of both (:func:`checksum`), so an entry
edited or truncated after it was written is caught. What a result may hold, and how it is split
into arrays and JSON and built again (never a type but memlib's registered results), is
:mod:`._codec`. Any entry that does not read is set aside as ``<name>.corrupt`` with one
:class:`~memlib._cachefiles.CacheWarning`, and the result is recomputed. The checksum is not a
signature: whoever can write the cache folder can rewrite the numbers and their hash together,
and the forged numbers are then shown; they cannot make memlib run code. A result is cached
only if it reads back equal to what was computed, so a study whose result holds something the
codec cannot store simply runs uncached.

The cache lives in ``memlib._cachefiles.cache_root() / "results"``, at most
:data:`MAX_ENTRIES` results per study (the least recently used are pruned, and only files named as
this cache names them); ``MEMLIB_RESULT_CACHE=0`` turns it off. With ``MEMLIB_EXPECT_CACHED=1`` a
result that is not cached is an error (:class:`NotCached`) instead of a computation.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import inspect
import json
import os
import re
import warnings
from pathlib import Path

import numpy as np

from memlib._cachefiles import CacheWarning, read_npz, set_aside
from memlib._checks import ParameterError
from memlib._safewrite import write_file
from memlib.studies._codec import (
    FORMAT,
    CorruptEntry,
    Uncacheable,
    decode,
    encode,
    register,  # noqa: F401 (re-exported: the study registry calls _cache.register)
    same,
)
from memlib.studies.data_spec import DataSpec

#: Parameters that change nothing in a result.
IGNORED_PARAMETERS = ("progress",)
#: Libraries whose version is part of the code version.
LIBRARIES = ("numpy", "pandas", "torch", "sentence-transformers", "transformers", "scikit-learn", "scipy", "cma")
#: Results kept per study; the least recently used (earlier code versions, other parameters) are deleted.
#: A test run shares the user's cache and writes many of its own: the main job's results must outlive it,
#: so reading an entry marks it used (:func:`_touch`), and the limit is several test runs' worth.
MAX_ENTRIES = 32
#: The memlib package, whose source the code version hashes.
PACKAGE = Path(__file__).resolve().parent.parent
#: How this cache names an entry: the first 32 hex digits of its key. Pruning deletes no other file.
ENTRY_NAME = re.compile(r"[0-9a-f]{32}\.npz")


def enabled() -> bool:
    """Return False when ``$MEMLIB_RESULT_CACHE`` is ``0``, ``false`` or ``off``."""
    return os.environ.get("MEMLIB_RESULT_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def expect_cached() -> bool:
    """Whether a result that is not cached is an error (``$MEMLIB_EXPECT_CACHED`` is ``1``).

    ``make`` sets it while it builds the book after the main job, so that a chapter whose
    parameters no run of the main job shares fails the build by name instead of computing its
    study again unseen.
    """
    return os.environ.get("MEMLIB_EXPECT_CACHED", "").strip().lower() in ("1", "true", "on", "yes")


class NotCached(RuntimeError):
    """A result was not cached where ``$MEMLIB_EXPECT_CACHED`` says every result is."""


def folder() -> Path:
    """Where results are cached: ``memlib._cachefiles.cache_root() / "results"``."""
    from memlib._cachefiles import cache_root

    return cache_root() / "results"


# -- the key: code, data and parameters ----------------------------------------------------------------------


@functools.cache
def code_version(module: str = "") -> str:
    """Hash the code a study in ``module`` runs (:func:`code_files`) and the computing libraries' versions."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256(f"format {FORMAT}\n".encode())
    for path in code_files(module):
        h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    for lib in LIBRARIES:
        try:
            h.update(f"{lib}=={version(lib)}\n".encode())
        except PackageNotFoundError:
            h.update(f"{lib} missing\n".encode())
    return h.hexdigest()


def code_files(module: str = "") -> list[Path]:
    """Return the files a study in ``module`` runs: the module, the memlib modules it imports (transitively), this one.

    Also the package's data files (not ``.py``) whose name one of those modules' source
    holds (``defaults.json``). A module outside memlib (a test's study) runs on all of memlib.

    >>> names = [str(p.relative_to(PACKAGE)) for p in code_files("memlib.studies.synthetic")]
    >>> "synthetic.py" in names, "store/memory.py" in names, "studies/_cache.py" in names
    (True, False, True)
    """
    if _module_path(module) is None:
        sources = sorted(PACKAGE.rglob("*.py"))
    else:
        todo, seen = [module, __name__], set()
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(_imports(name))
        sources = sorted(_module_path(name) for name in seen)
    text = b"".join(p.read_bytes() for p in sources)
    data = sorted(p for p in PACKAGE.rglob("*.json") if p.name.encode() in text and "__pycache__" not in p.parts)
    return sources + data


def _module_path(name: str) -> Path | None:
    """Return the source file of memlib module ``name`` (None for a name that is not one)."""
    parts = name.split(".")
    if parts[0] != "memlib" or not all(p.isidentifier() for p in parts):
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.parent / f"{base.name}.py"):
        if path.is_file():
            return path
    return None


@functools.cache
def _imports(name: str) -> frozenset:
    """Return the memlib modules that module ``name`` imports, at its top or inside a function (from its source)."""
    path = _module_path(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb level - 1 packages up from this module's package
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out.update(f"{base}.{a.name}" if _module_path(f"{base}.{a.name}") else base for a in node.names)
    return frozenset(m for m in out if _module_path(m) is not None and m != name)


def data_fingerprint(dataset) -> dict:
    """Return the files behind a ``dataset`` parameter: each one's resolved path and the sha256 of its content.

    The files are those :func:`memlib.datasets.load` reads (:func:`memlib.datasets.dataset_files`: the
    ten persona files of ``realmem``, every persona file of a RealMem folder). Each hash is computed
    once per process and file version (:func:`memlib.datasets.sha256_file`, ``cached=True``, as the
    parsed-dataset cache keys them). Raises :class:`Uncacheable` for a value that is neither a
    dataset name nor a path, or data that cannot be read (the study itself reports it).
    """
    from memlib import datasets

    if not isinstance(dataset, str | os.PathLike):
        raise Uncacheable(f"dataset of type {type(dataset).__name__}")
    try:
        files = datasets.dataset_files(dataset)
        return {
            "files": [{"path": str(Path(f).resolve()), "sha256": datasets.sha256_file(f, cached=True)} for f in files]
        }
    except Exception as exc:  # a missing or unreadable file: the study reports it
        raise Uncacheable(f"dataset {str(dataset)!r}: {exc}") from None


def key(name: str, func, args: tuple, kwargs: dict, corpora: tuple = ()) -> str:
    """Return the cache key of ``func(*args, **kwargs)`` run as study ``name``, which reads ``corpora`` of its own."""
    params = _parameters(func, args, kwargs)
    spec = {"study": name, "code": code_version(func.__module__), "params": params}
    for k, v in params.items():
        for dataset in _datasets_named(v, corpora):
            spec.setdefault("data", {}).setdefault(k, []).append(data_fingerprint(dataset))
    try:
        text = json.dumps(spec, sort_keys=True, default=_plain)
    except TypeError as exc:
        raise Uncacheable(str(exc)) from None
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _parameters(func, args: tuple, kwargs: dict) -> dict:
    """Every parameter of the call, defaults filled in, ``data`` as the :class:`DataSpec` it stands for."""
    signature = inspect.signature(func)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:  # the call itself reports a bad argument
        raise Uncacheable(str(exc)) from None
    bound.apply_defaults()
    params = {k: v for k, v in bound.arguments.items() if k not in IGNORED_PARAMETERS}
    if "data" in params and not isinstance(params["data"], DataSpec):
        default = signature.parameters["data"].default
        try:
            params["data"] = DataSpec.of(params["data"], like=default if isinstance(default, DataSpec) else None)
        except ParameterError as exc:  # the study reports it
            raise Uncacheable(str(exc)) from None
    return params


def _datasets_named(value, corpora: tuple) -> tuple:
    """Return the datasets a parameter value reads: a spec's dataset (naming none: ``corpora``), or a name or path."""
    from memlib import datasets

    if isinstance(value, DataSpec):
        if value.dataset is not None:
            return (value.dataset,)
        if not corpora:
            raise Uncacheable("the data name no dataset, and the study declares no corpora of its own")
        return tuple(corpora)
    if isinstance(value, str | os.PathLike) and (value in datasets.DATASETS or os.path.exists(value)):
        return (value,)  # a dataset named directly
    return ()


def _plain(value):
    """JSON for parameter values: a DataSpec as it resolves, paths as strings, numpy values as Python ones."""
    if isinstance(value, DataSpec):
        return {"DataSpec": dataclasses.asdict(value.resolved())}
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise TypeError(f"parameter value of type {type(value).__name__}")


# -- the cached loader ----------------------------------------------------------------------------------------


def cached(name: str, func, corpora: tuple = ()):
    """``func`` (a study's loader) with its results cached under study ``name``.

    ``corpora``: the datasets the study reads of its own when its ``data`` names none
    (:func:`key`). The wrapper has ``func``'s signature. A result that cannot be stored,
    or a cache that cannot be read or written, never stops the study: it runs, with a
    :class:`~memlib._cachefiles.CacheWarning` when a cache file was unreadable (it is set
    aside) or unwritable.
    """

    @functools.wraps(func)
    def run(*args, **kwargs):
        if not enabled():
            return func(*args, **kwargs)
        try:
            path = folder() / name / f"{key(name, func, args, kwargs, corpora)}.npz"
        except Uncacheable:
            return func(*args, **kwargs)
        if path.is_file():
            try:
                result = load(path)
                _touch(path)
                return result
            except Exception as exc:  # a damaged or foreign entry is set aside and recomputed, never fatal
                set_aside(path, exc)
        if expect_cached():
            raise NotCached(
                f"{name}: no cached result for these parameters ({path.name}), and $MEMLIB_EXPECT_CACHED is set: "
                "the main job (memlib.studies.main_job) did not compute it with them"
            )
        result = func(*args, **kwargs)
        try:
            save(path, result)
        except Uncacheable:
            pass
        except OSError as exc:
            warnings.warn(f"{path}: cannot cache the result ({exc.strerror or exc})", CacheWarning, stacklevel=2)
        return result

    run.uncached = func
    return run


def save(path, result, types: dict | None = None) -> None:
    """Write ``result`` to ``path`` (memlib's safe writer); :class:`Uncacheable` if it would not read back equal.

    The file holds the arrays, the manifest and their :func:`checksum`, compressed.
    """
    manifest, arrays = encode(result, types)
    try:
        back = decode(manifest, arrays, types)
    except CorruptEntry as exc:
        raise Uncacheable(str(exc)) from None
    if not same(result, back):
        raise Uncacheable("the result does not read back equal")
    text = json.dumps(manifest).encode()
    payload = {"__manifest__": _bytes_array(text), "__checksum__": _bytes_array(checksum(text, arrays).encode())}
    write_file(path, lambda f: np.savez_compressed(f, **payload, **arrays))
    prune(Path(path).parent)


def _bytes_array(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


def checksum(manifest: bytes, arrays: dict) -> str:
    """Return the sha256 of an entry: its manifest's bytes, then each array's name, dtype, shape and bytes, by name."""
    h = hashlib.sha256(manifest)
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _touch(path) -> None:
    """Mark an entry used now, so :func:`prune` keeps it before entries last used earlier (a read-only cache: no-op)."""
    try:
        os.utime(path)
    except OSError:
        pass


def prune(study_folder, keep: int = MAX_ENTRIES) -> None:
    """Delete all but the ``keep`` most recently used results of one study (written or read: old code versions go).

    Only this cache's own entries go: regular files named as :data:`ENTRY_NAME`; a folder
    that is a symbolic link (memlib makes none) is left alone.
    """
    study_folder = Path(study_folder)
    if study_folder.is_symlink():
        return
    used = []
    for p in study_folder.iterdir():
        if ENTRY_NAME.fullmatch(p.name) and not p.is_symlink():
            try:  # another process (a second study, a test worker) may prune the same folder at the same time
                if p.is_file():
                    used.append((p.stat().st_mtime_ns, p))
            except FileNotFoundError:
                continue
    for _, old in sorted(used, key=lambda e: e[0], reverse=True)[keep:]:
        old.unlink(missing_ok=True)


def load(path, types: dict | None = None):
    """Read a result written by :func:`save`; :class:`CorruptEntry` if its checksum or content is not right."""
    arrays = read_npz(path)
    try:
        text, stored = arrays.pop("__manifest__").tobytes(), arrays.pop("__checksum__").tobytes()
    except KeyError as exc:
        raise CorruptEntry(f"the entry has no {exc.args[0]}") from None
    if stored != checksum(text, arrays).encode():
        raise CorruptEntry("the entry's checksum does not match its content (edited or truncated)")
    return decode(json.loads(text), arrays, types)
