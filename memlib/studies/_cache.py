"""A cache of study results, so that ``make studies`` and the book share one computation.

A result is stored under a key that hashes three things:

* the **code version**: every ``memlib`` source file, and the versions of the
  libraries that compute (numpy, pandas, torch, ...);
* the **data fingerprint**: for each parameter that names a dataset (a
  :class:`~.data_spec.DataSpec`, or a dataset name or path), the file it resolves to
  and the sha256 of its content (so a file copied again, with a new modification
  time, still hits; an edited one misses);
* the **parameters**: every keyword the study takes, defaults filled in (``progress``
  is left out: it changes nothing but the terminal). The ``data`` parameter counts as
  the :class:`~.data_spec.DataSpec` it stands for (a dataset name as the study's
  default spec on it) and as that spec resolves (:meth:`~.data_spec.DataSpec.resolved`),
  so two calls that read the same data share a result.

A change to any of them gives a new key, so a stale result is never served. A
result is written atomically (as :func:`memlib.embeddings.atomic_savez`: a temporary
file, then a rename), as one compressed ``.npz`` file of plain arrays plus a JSON
manifest; nothing is pickled. A result is cached only if it reads back equal to what was
computed, so a study whose result holds something this module cannot store
(an arbitrary object) simply runs uncached.

The cache lives in ``memlib.embeddings.cache_root() / "results"``, at most
:data:`MAX_ENTRIES` results per study; ``MEMLIB_RESULT_CACHE=0`` turns it off.

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

import dataclasses
import functools
import hashlib
import importlib
import inspect
import json
import os
import tempfile
import warnings
from dataclasses import fields, is_dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from memlib._checks import ParameterError
from memlib.studies.data_spec import DataSpec

#: Parameters that change nothing in a result.
IGNORED_PARAMETERS = ("progress",)
#: Libraries whose version is part of the code version.
LIBRARIES = ("numpy", "pandas", "torch", "sentence-transformers", "transformers", "scikit-learn", "scipy", "cma")
#: Results kept per study; older ones (earlier code versions, other parameters) are deleted.
MAX_ENTRIES = 12
#: The manifest's format; bump it when :func:`encode` changes.
FORMAT = 2


class Uncacheable(TypeError):
    """A result holds a value this cache cannot store without pickling."""


def enabled() -> bool:
    """Return False when ``$MEMLIB_RESULT_CACHE`` is ``0``, ``false`` or ``off``."""
    return os.environ.get("MEMLIB_RESULT_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def folder() -> Path:
    """Where results are cached: ``memlib.embeddings.cache_root() / "results"``."""
    from memlib._cachefiles import cache_root

    return cache_root() / "results"


@functools.cache
def code_version() -> str:
    """Hash every ``memlib`` source file and of the computing libraries' versions."""
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
    """Return the file behind a ``dataset`` parameter: its resolved path and the sha256 of its content.

    The hash is computed once per process and file version
    (:func:`memlib.datasets.sha256_file`, ``cached=True``). Raises :class:`Uncacheable` for a value that is neither a
    dataset name nor a path.
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
    return {"path": str(path.resolve()), "sha256": datasets.sha256_file(path, cached=True)}


def key(name: str, func, args: tuple, kwargs: dict) -> str:
    """Return the cache key of ``func(*args, **kwargs)`` run as study ``name``."""
    from memlib import datasets

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
    spec = {"study": name, "code": code_version(), "params": params}
    for k, v in params.items():
        if isinstance(v, DataSpec):
            dataset = v.dataset  # None for a study that reads datasets of its own
        elif isinstance(v, str | os.PathLike) and (v in datasets.DATASETS or os.path.exists(v)):
            dataset = v  # a dataset named directly (the cue study's ``transfer_from``)
        else:
            continue
        if dataset is None:
            continue
        try:
            spec.setdefault("data", {})[k] = data_fingerprint(dataset)
        except Uncacheable:
            raise
        except Exception as exc:  # a missing or unreadable file: the study reports it
            raise Uncacheable(f"dataset {dataset!r}: {exc}") from None
    try:
        text = json.dumps(spec, sort_keys=True, default=_plain)
    except TypeError as exc:
        raise Uncacheable(str(exc)) from None
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _plain(value):
    """JSON for parameter values: a DataSpec as it resolves, paths as strings, numpy values as Python ones."""
    if isinstance(value, DataSpec):
        return {"DataSpec": dataclasses.asdict(value.resolved())}
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
            except Exception as exc:  # a damaged file is recomputed, never fatal
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
    """Write ``result`` to ``path`` atomically; :class:`Uncacheable` if it would not read back equal.

    As :func:`memlib.embeddings.atomic_savez`, but compressed: a temporary file in the same folder,
    flushed to disk, then renamed into place, so a reader sees the whole file or none.
    """
    manifest, arrays = encode(result)
    if not same(result, decode(manifest, arrays)):
        raise Uncacheable("the result does not read back equal")
    manifest_bytes = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, __manifest__=manifest_bytes, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    prune(path.parent)


def prune(study_folder, keep: int = MAX_ENTRIES) -> None:
    """Delete all but the ``keep`` most recently written results of one study (old code versions)."""
    entries = sorted(Path(study_folder).glob("*.npz"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in entries[keep:]:
        old.unlink(missing_ok=True)


def load(path):
    """Read a result written by :func:`save`."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    manifest = json.loads(arrays.pop("__manifest__").tobytes().decode())
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
        dtype = str(values.dtype)
        if values.dtype.kind in "biufcmM" and not isinstance(values.dtype, pd.CategoricalDtype):
            return {"array": put(values.to_numpy()), "dtype": dtype}
        items = values.tolist()
        if all(isinstance(v, str) for v in items) or (
            dtype == "str" and all(isinstance(v, str) or v is None or v != v for v in items)
        ):  # text: one code per row and the distinct strings once (tables repeat their labels)
            codes, uniques = pd.factorize(values, use_na_sentinel=True)
            uniques = np.asarray(uniques, dtype=str)
            return {"codes": put(codes.astype(np.int32)), "uniques": put(uniques), "dtype": dtype}
        if not all(v is None or isinstance(v, str | bool | int | float) for v in items):
            raise Uncacheable(f"column of dtype {dtype} holding {type(items[0]).__name__}")
        return {"json": items, "dtype": dtype}

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


def decode(manifest: dict, arrays: dict, classes: dict | None = None):
    """Rebuild the value :func:`encode` split; ``classes`` maps qualified names to classes (tests)."""
    if manifest.get("format") != FORMAT:
        raise ValueError(f"cache format {manifest.get('format')}, expected {FORMAT}")

    def column(c) -> pd.Series:
        dtype = c["dtype"] if c["dtype"] != "object" else object
        if "codes" in c:
            codes = arrays[c["codes"]]
            values = np.full(len(codes), None, dtype=object)
            known = codes >= 0
            values[known] = arrays[c["uniques"]].astype(object)[codes[known]]
            return pd.Series(values, dtype=dtype)
        if "json" in c:
            return pd.Series(c["json"], dtype=dtype)
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
    if isinstance(a, pd.DataFrame | pd.Series):
        check = pd.testing.assert_frame_equal if isinstance(a, pd.DataFrame) else pd.testing.assert_series_equal
        try:
            check(a, b, check_exact=True)
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
