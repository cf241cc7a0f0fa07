"""How the result cache (:mod:`._cache`) writes a result as plain data and builds it again.

:func:`encode` splits a result into a JSON manifest (structure and scalars) and named plain
arrays (tables' columns, ndarrays); :func:`decode` builds it again. It builds only the types
of :data:`RESULT_TYPES`, memlib's own result dataclasses (the study registry joins them with
:func:`register`), and inside them only arrays, JSON scalars, lists, tuples, dicts, tables and
numeric numpy scalars of the dtypes it knows; it imports nothing and looks up no name that a
file gives it. Anything else in a manifest (an unknown type or form) is a :class:`CorruptEntry`;
a value it cannot store without pickling is :class:`Uncacheable`. :func:`same` says whether a
result read back equals the one written.

>>> import numpy as np, pandas as pd
>>> from dataclasses import dataclass
>>> @dataclass
... class R:
...     table: pd.DataFrame
...     info: dict
>>> r = R(pd.DataFrame({"policy": ["a", "b"], "mean": [0.5, np.nan]}), {"n": 3, "tiers": (0.2, 0.45)})
>>> types = {type_name(R): R}
>>> manifest, arrays = encode(r, types)
>>> back = decode(manifest, arrays, types)
>>> same(r, back)
True
>>> decode(manifest, arrays)   # R is not one of memlib's result types  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
memlib.studies._codec.CorruptEntry: the entry names the type '...R', which is not one of memlib's result types
"""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass

import numpy as np
import pandas as pd

#: The manifest's format; bump it when :func:`encode` changes.
FORMAT = 3
#: The types :func:`decode` builds, by ``module:qualname``: memlib's own result dataclasses (:func:`register`).
RESULT_TYPES: dict[str, type] = {}
#: Column and scalar dtypes a cache entry may name (anything else is a corrupt entry).
_NUMERIC = r"bool|u?int(8|16|32|64)|float(16|32|64)|complex(64|128)|(datetime|timedelta)64\[(s|ms|us|ns)\]"
SCALAR_DTYPE = re.compile(_NUMERIC)
COLUMN_DTYPE = re.compile(rf"{_NUMERIC}|object|str|string|category|boolean|U?Int(8|16|32|64)|Float(32|64)")


class Uncacheable(TypeError):
    """A result holds a value the cache cannot store without pickling."""


class CorruptEntry(ValueError):
    """A cache entry that is not what the cache writes: set aside and recomputed."""


def type_name(cls: type) -> str:
    """Return the name a cache entry gives a dataclass: ``module:qualname``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def register(*classes: type) -> None:
    """Let the cache store and rebuild the result dataclasses ``classes`` (:data:`RESULT_TYPES`)."""
    for cls in classes:
        if not (isinstance(cls, type) and is_dataclass(cls)):
            raise TypeError(f"a result type is a dataclass, got {cls!r}")
        RESULT_TYPES[type_name(cls)] = cls


def encode(value, types: dict | None = None) -> tuple[dict, dict]:
    """Split ``value`` into a JSON-able manifest and a dict of plain (non-object) arrays.

    Its dataclasses must be among ``types`` (:data:`RESULT_TYPES`), else :class:`Uncacheable`.
    """
    types = RESULT_TYPES if types is None else types
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
            name = type_name(type(v))
            if types.get(name) is not type(v):
                raise Uncacheable(f"{name} is not one of memlib's result types (memlib.studies._cache.register)")
            return {"dataclass": name, "fields": {f.name: walk(getattr(v, f.name)) for f in fields(v)}}
        if isinstance(v, dict):
            return {"dict": [[walk(k), walk(x)] for k, x in v.items()]}
        if isinstance(v, list | tuple):
            return {"list" if isinstance(v, list) else "tuple": [walk(x) for x in v]}
        raise Uncacheable(f"value of type {type(v).__name__}")

    return {"format": FORMAT, "value": walk(value)}, arrays


def decode(manifest: dict, arrays: dict, types: dict | None = None):
    """Rebuild the value :func:`encode` split, building no type but those of ``types`` (:data:`RESULT_TYPES`).

    Anything else in the manifest (an unknown type or form, a dtype it does not know, a missing
    array) raises :class:`CorruptEntry`.
    """
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CorruptEntry(f"cache format {found!r}, expected {FORMAT}")
    return _Decoder(arrays, RESULT_TYPES if types is None else types).walk(manifest.get("value"))


class _Decoder:
    """Rebuilds one manifest's value: every form :func:`encode` writes, checked, and nothing else."""

    def __init__(self, arrays: dict, types: dict):
        self.arrays, self.types = arrays, types
        self.forms = {
            ("float",): self.float_,
            ("dtype", "scalar"): self.scalar,
            ("ndarray",): lambda v: self.array(v["ndarray"]),
            ("frame", "index", "order"): self.frame,
            ("name", "series"): self.series,
            ("dataclass", "fields"): self.dataclass_,
            ("dict",): lambda v: {_hashable(self.walk(k)): self.walk(x) for k, x in self.pairs(v["dict"])},
            ("list",): lambda v: [self.walk(x) for x in self.items(v["list"])],
            ("tuple",): lambda v: tuple(self.walk(x) for x in self.items(v["tuple"])),
        }

    def walk(self, v):
        if v is None or isinstance(v, bool | int | float | str):
            return v
        form = self.forms.get(tuple(sorted(v))) if isinstance(v, dict) else None
        if form is None:
            raise CorruptEntry(f"unknown cache entry {_short(v)}")
        return form(v)

    def items(self, v) -> list:
        if not isinstance(v, list):
            raise CorruptEntry(f"expected a list, got {_short(v)}")
        return v

    def pairs(self, v) -> list:
        if not all(isinstance(p, list) and len(p) == 2 for p in self.items(v)):
            raise CorruptEntry(f"expected a list of key-value pairs, got {_short(v)}")
        return v

    def array(self, name) -> np.ndarray:
        if not isinstance(name, str) or name not in self.arrays:
            raise CorruptEntry(f"the entry names an array {_short(name)} it does not hold")
        return self.arrays[name]

    def float_(self, v) -> float:
        if v["float"] not in ("nan", "inf", "-inf"):
            raise CorruptEntry(f"a non-finite float written as {_short(v['float'])}")
        return float(v["float"])

    def scalar(self, v):
        value = self.walk(v["scalar"])
        if not isinstance(v["dtype"], str) or not SCALAR_DTYPE.fullmatch(v["dtype"]):
            raise CorruptEntry(f"a scalar of dtype {_short(v['dtype'])}")
        if not isinstance(value, bool | int | float):
            raise CorruptEntry(f"a numeric scalar holding {_short(value)}")
        return np.dtype(v["dtype"]).type(value)

    def column(self, c) -> pd.Series:
        if not isinstance(c, dict) or not isinstance(c.get("dtype"), str) or not COLUMN_DTYPE.fullmatch(c["dtype"]):
            raise CorruptEntry(f"a table column {_short(c)}")
        dtype = c["dtype"] if c["dtype"] != "object" else object
        if sorted(c) == ["codes", "dtype", "uniques"]:
            codes, uniques = self.array(c["codes"]), self.array(c["uniques"])
            values = np.full(len(codes), None, dtype=object)
            known = codes >= 0
            values[known] = uniques.astype(object)[codes[known]]
            return pd.Series(values, dtype=dtype)
        if sorted(c) == ["dtype", "json"]:
            if not all(x is None or isinstance(x, bool | int | float | str) for x in self.items(c["json"])):
                raise CorruptEntry("a table column of JSON values that are not scalars")
            return pd.Series(c["json"], dtype=dtype)
        if sorted(c) == ["array", "dtype"]:
            return pd.Series(self.array(c["array"]), dtype=c["dtype"])
        raise CorruptEntry(f"a table column {_short(c)}")

    def frame(self, v) -> pd.DataFrame:
        order, columns, idx = self.items(v["order"]), v["frame"], v["index"]
        if (
            not isinstance(columns, dict)
            or not all(isinstance(c, str) for c in order)
            or sorted(order) != sorted(columns)
        ):
            raise CorruptEntry("a table whose columns disagree with its column order")
        data = {c: self.column(columns[c]) for c in order}
        if isinstance(idx, dict) and sorted(idx) == ["range"]:
            index = pd.RangeIndex(*[operator_index(x) for x in self.items(idx["range"])])
        elif isinstance(idx, dict) and sorted(idx) == ["columns", "names"]:
            names = self.items(idx["names"])
            if not all(n is None or isinstance(n, str | int) for n in names):
                raise CorruptEntry("a table index whose names are not strings")
            cols = [self.column(c) for c in self.items(idx["columns"])]
            index = pd.MultiIndex.from_arrays(cols, names=names) if len(cols) > 1 else pd.Index(cols[0], name=names[0])
        else:
            raise CorruptEntry(f"a table index {_short(idx)}")
        return pd.DataFrame({c: s.array for c, s in data.items()}, index=index, columns=order or None)

    def series(self, v) -> pd.Series:
        table = self.walk(v["series"])
        if not isinstance(table, pd.DataFrame) or list(table.columns) != ["values"]:
            raise CorruptEntry("a series that is not one column named 'values'")
        return table["values"].rename(self.walk(v["name"]))

    def dataclass_(self, v):
        name, given = v["dataclass"], v["fields"]
        cls = self.types.get(name) if isinstance(name, str) else None
        if cls is None:
            raise CorruptEntry(f"the entry names the type {_short(name)}, which is not one of memlib's result types")
        expected = [f.name for f in fields(cls)]
        if not isinstance(given, dict) or sorted(given) != sorted(expected):
            raise CorruptEntry(f"the entry's fields of {name} are not {', '.join(expected)}")
        obj = cls.__new__(cls)
        for k in expected:
            object.__setattr__(obj, k, self.walk(given[k]))
        return obj


def operator_index(x) -> int:
    """``x`` if it is an int (not a bool), else :class:`CorruptEntry`."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise CorruptEntry(f"expected an integer, got {_short(x)}")
    return x


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


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
