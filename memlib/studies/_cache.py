"""A cache of study results, so that ``make studies`` and the book share one computation.

A result is stored under a key that hashes three things:

* the **code version**: every ``memlib`` source file, and the versions of the
  libraries that compute (numpy, pandas, torch, ...);
* the **data fingerprint**: for a ``dataset`` parameter, the file it resolves to,
  with its size and modification time;
* the **parameters**: every keyword the study takes, defaults filled in
  (``progress`` is left out: it changes nothing but the terminal).

A change to any of them gives a new key, so a stale result is never served. A
result is written atomically (:func:`memlib.embeddings.atomic_savez`: a temporary
file, then a rename), as one ``.npz`` file of plain arrays plus a JSON manifest;
nothing is pickled. A result is cached only if it reads back equal to what was
computed, so a study whose result holds something this module cannot store
(an arbitrary object) simply runs uncached.

The cache lives in ``memlib.embeddings.cache_root() / "results"``;
``MEMLIB_RESULT_CACHE=0`` turns it off.

>>> import numpy as np, pandas as pd
>>> from dataclasses import dataclass
>>> @dataclass
... class R:
...     table: pd.DataFrame
...     info: dict
>>> r = R(pd.DataFrame({"policy": ["a", "b"], "mean": [0.5, np.nan]}), {"n": 3, "tiers": (0.2, 0.45)})
>>> manifest, arrays = encode(r)
>>> back = decode(manifest, arrays, {"R": R})
>>> same(r, back)
True
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import os
import warnings
from dataclasses import fields, is_dataclass
from pathlib import Path

import numpy as np
import pandas as pd

#: Parameters that change nothing in a result.
IGNORED_PARAMETERS = ("progress",)
#: Libraries whose version is part of the code version.
LIBRARIES = ("numpy", "pandas", "torch", "sentence-transformers", "transformers", "scikit-learn", "scipy", "cma")
#: The manifest's format; bump it when :func:`encode` changes.
FORMAT = 1


class Uncacheable(TypeError):
    """A result holds a value this cache cannot store without pickling."""


def enabled() -> bool:
    """False when ``$MEMLIB_RESULT_CACHE`` is ``0``, ``false`` or ``off``."""
    return os.environ.get("MEMLIB_RESULT_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def folder() -> Path:
    """Where results are cached: ``memlib.embeddings.cache_root() / "results"``."""
    from memlib.embeddings import cache_root

    return cache_root() / "results"


@functools.cache
def code_version() -> str:
    """A hash of every ``memlib`` source file and of the computing libraries' versions."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256(f"format {FORMAT}\n".encode())
    package = Path(__file__).resolve().parent.parent
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    for lib in LIBRARIES:
        try:
            h.update(f"{lib}=={version(lib)}\n".encode())
        except PackageNotFoundError:
            h.update(f"{lib} missing\n".encode())
    return h.hexdigest()


def data_fingerprint(dataset) -> dict:
    """The file behind a ``dataset`` parameter: its resolved path, size and modification time.

    Raises :class:`Uncacheable` for a value that is neither a dataset name nor a path.
    """
    from memlib import datasets

    if isinstance(dataset, str) and dataset in datasets.DATASETS:
        path = datasets.resolve_dataset(dataset)
    elif isinstance(dataset, str | os.PathLike):
        path = Path(dataset)
    else:
        raise Uncacheable(f"dataset of type {type(dataset).__name__}")
    if not path.is_file():  # the study itself reports the missing file
        raise Uncacheable(f"no file at {path}")
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def key(name: str, func, args: tuple, kwargs: dict) -> str:
    """The cache key of ``func(*args, **kwargs)`` run as study ``name``."""
    bound = inspect.signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    params = {k: v for k, v in bound.arguments.items() if k not in IGNORED_PARAMETERS}
    spec = {"study": name, "code": code_version(), "params": params}
    if "dataset" in params:
        spec["data"] = data_fingerprint(params["dataset"])
    try:
        text = json.dumps(spec, sort_keys=True, default=_plain)
    except TypeError as exc:
        raise Uncacheable(str(exc)) from None
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _plain(value):
    """JSON for parameter values: paths as strings, numpy scalars and arrays as Python values."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise TypeError(f"parameter value of type {type(value).__name__}")


def cached(name: str, func):
    """``func`` (a study's loader) with its results cached under study ``name``.

    The wrapper has ``func``'s signature. A result that cannot be stored, or a
    cache that cannot be read or written, never stops the study: it runs, with a
    warning when a cache file was unreadable or unwritable.
    """

    @functools.wraps(func)
    def run(*args, **kwargs):
        if not enabled():
            return func(*args, **kwargs)
        try:
            path = folder() / name / f"{key(name, func, args, kwargs)}.npz"
        except Uncacheable:
            return func(*args, **kwargs)
        if path.is_file():
            try:
                return load(path)
            except Exception as exc:  # noqa: BLE001 - a damaged file is recomputed, never fatal
                warnings.warn(f"{path}: unreadable cached result ({exc}); recomputing", stacklevel=2)
        result = func(*args, **kwargs)
        try:
            save(path, result)
        except Uncacheable:
            pass
        except OSError as exc:
            warnings.warn(f"{path}: cannot cache the result ({exc})", stacklevel=2)
        return result

    run.uncached = func
    return run


def save(path, result) -> None:
    """Write ``result`` to ``path`` atomically; :class:`Uncacheable` if it would not read back equal."""
    from memlib.embeddings import atomic_savez

    manifest, arrays = encode(result)
    if not same(result, decode(manifest, arrays)):
        raise Uncacheable("the result does not read back equal")
    atomic_savez(path, __manifest__=np.array(json.dumps(manifest)), **arrays)


def load(path):
    """Read a result written by :func:`save`."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    manifest = json.loads(str(arrays.pop("__manifest__")))
    return decode(manifest, arrays)


# -- encoding: JSON for structure and scalars, named arrays for tables and ndarrays ----------------------------


def encode(value) -> tuple[dict, dict]:
    """Split ``value`` into a JSON-able manifest and a dict of plain (non-object) arrays."""
    arrays: dict[str, np.ndarray] = {}

    def put(array: np.ndarray) -> str:
        if array.dtype.hasobject:
            raise Uncacheable("object array")
        name = f"a{len(arrays)}"
        arrays[name] = array
        return name

    def column(values) -> dict:
        values = pd.Series(values)
        if (
            isinstance(values.dtype, pd.CategoricalDtype)
            or str(values.dtype) not in _PLAIN_DTYPES
            and (values.dtype.kind not in "biufcmM")
        ):
            items = values.tolist()
            if not all(v is None or isinstance(v, str | bool | int | float) for v in items):
                raise Uncacheable(f"column of dtype {values.dtype} holding {type(items[0]).__name__}")
            return {"json": items, "dtype": str(values.dtype)}
        return {"array": put(values.to_numpy()), "dtype": str(values.dtype)}

    def walk(v):
        if v is None or isinstance(v, bool | str):
            return v
        if isinstance(v, int | float) and not isinstance(v, np.generic):
            return v if not (isinstance(v, float) and not np.isfinite(v)) else {"float": repr(v)}
        if isinstance(v, np.generic):
            return {"scalar": walk(v.item()), "dtype": str(v.dtype)}
        if isinstance(v, np.ndarray):
            return {"ndarray": put(v)}
        if isinstance(v, pd.DataFrame):
            if not all(isinstance(c, str) for c in v.columns) or not v.columns.is_unique:
                raise Uncacheable("a table whose column names are not unique strings")
            index = v.index
            if isinstance(index, pd.RangeIndex):
                idx = {"range": [index.start, index.stop, index.step]}
            else:
                levels = index.to_frame(index=False)
                idx = {"names": list(index.names), "columns": [column(levels[c]) for c in levels.columns]}
            return {"frame": {c: column(v[c]) for c in v.columns}, "order": list(v.columns), "index": idx}
        if isinstance(v, pd.Series):
            return {"series": walk(v.to_frame(name="values")), "name": walk(v.name)}
        if is_dataclass(v) and not isinstance(v, type):
            cls = type(v)
            return {
                "dataclass": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: walk(getattr(v, f.name)) for f in fields(v)},
            }
        if isinstance(v, dict):
            return {"dict": [[walk(k), walk(x)] for k, x in v.items()]}
        if isinstance(v, list | tuple):
            return {"list" if isinstance(v, list) else "tuple": [walk(x) for x in v]}
        raise Uncacheable(f"value of type {type(v).__name__}")

    return {"format": FORMAT, "value": walk(value)}, arrays


_PLAIN_DTYPES = ("bool", "int64", "int32", "float64", "float32")


def decode(manifest: dict, arrays: dict, classes: dict | None = None):
    """Rebuild the value :func:`encode` split; ``classes`` maps qualified names to classes (tests)."""
    if manifest.get("format") != FORMAT:
        raise ValueError(f"cache format {manifest.get('format')}, expected {FORMAT}")

    def column(c) -> pd.Series:
        if "json" in c:
            return pd.Series(c["json"], dtype=c["dtype"] if c["dtype"] != "object" else object)
        return pd.Series(arrays[c["array"]], dtype=c["dtype"])

    def walk(v):
        if not isinstance(v, dict):
            return v
        if "float" in v:
            return float(v["float"])
        if "scalar" in v:
            return np.dtype(v["dtype"]).type(walk(v["scalar"]))
        if "ndarray" in v:
            return arrays[v["ndarray"]]
        if "frame" in v:
            data = {c: column(v["frame"][c]) for c in v["order"]}
            idx = v["index"]
            if "range" in idx:
                index = pd.RangeIndex(*idx["range"])
            else:
                cols = [column(c) for c in idx["columns"]]
                index = (
                    pd.MultiIndex.from_arrays(cols, names=idx["names"])
                    if len(cols) > 1
                    else pd.Index(cols[0], name=idx["names"][0])
                )
            return pd.DataFrame({c: s.array for c, s in data.items()}, index=index, columns=v["order"] or None)
        if "series" in v:
            return walk(v["series"])["values"].rename(walk(v["name"]))
        if "dataclass" in v:
            module, _, qualname = v["dataclass"].partition(":")
            if classes and qualname in classes:
                cls = classes[qualname]
            else:
                cls = importlib.import_module(module)
                for part in qualname.split("."):
                    cls = getattr(cls, part)
            obj = cls.__new__(cls)
            for k, x in v["fields"].items():
                object.__setattr__(obj, k, walk(x))
            return obj
        if "dict" in v:
            return {_hashable(walk(k)): walk(x) for k, x in v["dict"]}
        if "list" in v:
            return [walk(x) for x in v["list"]]
        if "tuple" in v:
            return tuple(walk(x) for x in v["tuple"])
        raise ValueError(f"unknown cache entry {sorted(v)}")

    return walk(manifest["value"])


def _hashable(k):
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k


def same(a, b) -> bool:
    """Whether two results are equal in type and value (NaN equals NaN; floats bit for bit)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, pd.DataFrame):
        try:
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        except AssertionError:
            return False
        return True
    if isinstance(a, pd.Series):
        try:
            pd.testing.assert_series_equal(a, b, check_exact=True)
        except AssertionError:
            return False
        return True
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float | np.floating) and np.isnan(a):
        return bool(np.isnan(b))
    return bool(a == b)
