"""The parsed-dataset cache: a parse stored as plain arrays, read back by the next process.

:func:`_parsed` keys a parse by the data files' sha256, their path, the name they were
loaded under, the source of this package (:func:`source_files`) and the numpy and pandas
versions; :func:`_dataset_arrays` and :func:`_dataset_from_arrays` turn a
:class:`~memlib.datasets.Dataset` into named arrays plus a JSON manifest and back, checking
every array against the manifest. ``MEMLIB_DATASET_CACHE=0`` turns the cache off
(:func:`parsed_cache_enabled`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from memlib._cachefiles import (
    CORRUPT_ERRORS,
    atomic_savez,
    cache_folder_ok,
    cache_root,
    report_unwritable,
    safe_name,
    set_aside,
)
from memlib.datasets.normalised import Dataset, DatasetWarning, _describe
from memlib.datasets.reading import _NOTES
from memlib.datasets.resolver import sha256_file


def source_files() -> list[Path]:
    """Return the ``.py`` files of the :mod:`memlib.datasets` package, sorted by name: the code a parse depends on.

    The parse cache (:func:`_parsed`) and the factor tables (:func:`memlib.factors.fingerprint`)
    hash their content, so an edited loader never reads a stale parse or table.
    """
    return sorted(Path(__file__).resolve().parent.glob("*.py"))


def parsed_cache_enabled() -> bool:
    """Return False when ``$MEMLIB_DATASET_CACHE`` is ``0``, ``false``, ``off`` or ``no``, else True."""
    return os.environ.get("MEMLIB_DATASET_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def _parsed(path: Path, name: str, reader, files=None) -> Dataset:
    """``reader(path)``, or the same dataset read back from the parsed-dataset cache.

    Parsing LongMemEval-S takes about 10 s, and every study process and notebook kernel
    that reads it paid that; the cached form loads in about 1 s. The cache file, one
    ``.npz`` of plain arrays (no pickle) under ``cache_root() / "datasets"``, is keyed by
    the file's sha256 and path, the name it was loaded under, the source of this package's
    modules (:func:`source_files`) and the numpy and pandas versions, so an edited file or
    loader never reads a stale parse. It is written atomically, and only when it reads back
    equal to the parse (a dataset with a column it cannot store as plain arrays is not
    cached); a damaged one (unreadable, or whose manifest disagrees with its arrays:
    :func:`_dataset_from_arrays`) is set aside and the file parsed again. The warnings of the
    parse (:class:`DatasetWarning`) are kept in the manifest and given again whenever the
    cached parse is read.
    """
    if not parsed_cache_enabled():
        return reader(path)
    h = hashlib.sha256(f"format {PARSED_FORMAT}\0numpy {np.__version__}\0pandas {pd.__version__}\0".encode())
    for source in source_files():
        h.update(source.read_bytes())
    # surrogateescape: a file name that is not UTF-8 (bytes os.fsdecode could not decode) still keys
    h.update(f"\0{name}\0{path}\0{Path(path).resolve()}".encode("utf-8", "surrogateescape"))
    for f in files or [path]:  # a folder (RealMem) is keyed by the content of each of its files
        h.update(f"\0{Path(f).name}\0{sha256_file(f, cached=True)}".encode("utf-8", "surrogateescape"))
    folder = cache_root() / "datasets"
    prefix = safe_name(Path(name).name)
    cached = folder / f"{prefix}-{h.hexdigest()[:24]}.npz"
    try:
        ds, notes = _dataset_from_npz(cached, str(path))
    except (FileNotFoundError, NotADirectoryError):  # not cached, pruned a moment ago, or no cache folder
        pass
    except CORRUPT_ERRORS + (TypeError, IndexError, UnicodeDecodeError, AttributeError) as exc:
        set_aside(cached, exc)
    else:
        for message in notes:  # what the parse warned about, said again as it did then
            warnings.warn(message, DatasetWarning, stacklevel=4)
        return ds
    ds, notes = _read_noting(reader, path)
    try:
        arrays = _dataset_arrays(ds, notes)
    except _NotStorable:
        return ds
    try:
        same = _same_dataset(ds, _dataset_from_arrays(arrays, str(path)))
    except CORRUPT_ERRORS + (TypeError, IndexError):  # a dataset that breaks the cache's own checks: not cached
        same = False
    if not same or not cache_folder_ok(folder):
        return ds
    try:
        atomic_savez(cached, **arrays)
    except OSError as exc:
        report_unwritable(folder, exc)
        return ds
    # earlier parses under this name (another content, loader or library version); a clone that reads
    # another file under the same name parses again rather than letting the folder grow
    stale = re.compile(re.escape(prefix) + r"-[0-9a-f]{24}\.npz")
    for old in folder.iterdir():
        if old != cached and stale.fullmatch(old.name):
            try:
                old.unlink(missing_ok=True)
            except OSError:  # e.g. a shared folder whose files belong to someone else
                pass
    return ds


#: The layout of a parsed-dataset cache file; bump it when :func:`_dataset_arrays` changes.
PARSED_FORMAT = 3


def _read_noting(reader, path) -> tuple:
    """``(reader(path), the messages of the DatasetWarnings it gave)``."""
    previous = getattr(_NOTES, "current", None)
    _NOTES.current = notes = []
    try:
        return reader(path), notes
    finally:
        _NOTES.current = previous


#: The columns of each frame of a parsed dataset and how the cache stores them (:func:`_frame_arrays`):
#: ``str``, ``tuple-str``, ``tuple-int``, or ``array`` with the numpy kinds it may have.
_SCHEMA = {
    "turns": {"session": "str", "turn": "iu", "role": "str", "speaker": "str", "timestamp": "M", "text_id": "iu"},
    "sessions": {"session": "str", "label": "str", "date": "M", "first_turn": "iu", "n_turns": "iu"},
    "cases": {
        "case_id": "str",
        "question": "str",
        "question_type": "str",
        "haystack": "tuple-str",
        "gold": "tuple-int",
        "group": "str",
        "usable": "b",
        "question_date": "M",
        "session_file_index": "tuple-int",
        "answer": "str",
    },
}
#: The columns of ``Dataset.turns`` (``text`` is rebuilt from ``texts``, not stored).
_TURN_COLUMNS = ["session", "turn", "role", "speaker", "text", "timestamp", "text_id"]
_MANIFEST_KEYS = {"name", "source", "skipped", "notes", "turns", "turn_columns", "text_dtype", "sessions", "cases"}


class _NotStorable(TypeError):
    """A dataset column holds values the parsed-dataset cache does not store (it is then not cached)."""


def _pack(strings) -> dict:
    """Pack a list of str as one UTF-8 byte array and character offsets (no object arrays, no pickle)."""
    joined = "".join(strings)
    offsets = np.zeros(len(strings) + 1, np.int64)
    np.cumsum([len(x) for x in strings], out=offsets[1:])
    return {"utf8": np.frombuffer(joined.encode("utf-8", "surrogatepass"), np.uint8), "offsets": offsets}


def _unpack(utf8: np.ndarray, offsets: np.ndarray) -> list:
    joined = utf8.tobytes().decode("utf-8", "surrogatepass")
    o = offsets.tolist()
    if not o or o[0] != 0 or o[-1] != len(joined) or any(b < a for a, b in zip(o[:-1], o[1:])):
        raise ValueError(f"string offsets do not cut {len(joined)} characters into pieces")
    return [joined[a:b] for a, b in zip(o[:-1], o[1:])]


def _frame_arrays(prefix: str, frame: pd.DataFrame, out: dict, skip=()) -> list:
    """Store each column of ``frame`` as plain arrays in ``out``; return the column specs for the manifest."""
    specs = []
    for col in frame.columns:
        if col in skip:
            continue
        series, key = frame[col], f"{prefix}.{col}"
        spec = {"name": col, "dtype": str(series.dtype)}
        values = series.tolist()
        if series.dtype.kind in "biufmM":
            out[key] = series.to_numpy()
            if out[key].dtype.hasobject:  # e.g. time-zone aware or nullable columns: never pickled
                raise _NotStorable(f"column {col!r} of dtype {series.dtype}")
            spec["kind"] = "array"
        elif all(isinstance(v, str) for v in values):
            codes, uniques = pd.factorize(series)
            packed = _pack(list(uniques))
            out[key + ".codes"], out[key + ".utf8"], out[key + ".offsets"] = codes, packed["utf8"], packed["offsets"]
            spec["kind"] = "str"
        elif all(isinstance(v, tuple) for v in values):
            flat = [x for v in values for x in v]
            out[key + ".lengths"] = np.array([len(v) for v in values], np.int64)
            if all(isinstance(x, str) for x in flat):
                packed = _pack(flat)
                out[key + ".utf8"], out[key + ".offsets"] = packed["utf8"], packed["offsets"]
                spec["kind"] = "tuple-str"
            elif all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in flat):
                out[key + ".items"] = np.array(flat, np.int64)
                spec["kind"] = "tuple-int"
            else:
                raise _NotStorable(f"column {col!r}: tuples of mixed items")
        else:
            raise _NotStorable(f"column {col!r} of dtype {series.dtype}")
        specs.append(spec)
    return specs


class _ManifestError(ValueError):
    """A parsed-dataset cache file whose manifest disagrees with its arrays (or with the loaders' schema)."""


def _frame_from_arrays(prefix: str, specs: list, z, used: set | None = None) -> pd.DataFrame:
    """One frame of a parsed dataset, checked against :data:`_SCHEMA` (a mismatch raises :class:`_ManifestError`)."""
    used = set() if used is None else used
    schema = _SCHEMA.get(prefix)
    names = [spec.get("name") if isinstance(spec, dict) else None for spec in specs]
    if schema is not None and names != list(schema):
        raise _ManifestError(f"{prefix} columns {names} are not {list(schema)}")

    def get(key, kinds="iu"):
        array = z[key]
        used.add(key)
        if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype.kind not in kinds:
            raise _ManifestError(f"array {key} is not a list of {kinds!r} numbers")
        return array

    data, rows = {}, None
    for spec in specs:
        key, kind = f"{prefix}.{spec['name']}", spec["kind"]
        want = schema[spec["name"]] if schema is not None else None
        stored = want if want in ("str", "tuple-str", "tuple-int") else "array"
        if want is not None and kind != stored and not (want == "tuple-int" and kind == "tuple-str"):
            raise _ManifestError(f"column {key} is stored as {kind!r}, not {stored!r}")  # (no gold at all: tuple-str)
        if kind == "array":
            values = get(key, want if want is not None else "biufmM")
            if str(values.dtype) != spec["dtype"]:
                raise _ManifestError(f"column {key} is said to be {spec['dtype']}, but its array is {values.dtype}")
        elif kind == "str":
            uniques = _unpack(get(key + ".utf8", "u"), get(key + ".offsets"))
            codes = get(key + ".codes")
            if len(codes) and (codes.min() < 0 or codes.max() >= len(uniques)):
                raise _ManifestError(f"codes of column {key} point outside its {len(uniques)} values")
            values = np.array(uniques, dtype=object)[codes]
        elif kind in ("tuple-str", "tuple-int"):
            lengths = get(key + ".lengths")
            if kind == "tuple-str":
                flat = _unpack(get(key + ".utf8", "u"), get(key + ".offsets"))
            else:
                flat = get(key + ".items").tolist()
            if (lengths < 0).any() or int(lengths.sum()) != len(flat):
                raise _ManifestError(f"lengths of column {key} do not add up to its {len(flat)} items")
            if want == "tuple-int" and kind == "tuple-str" and flat:
                raise _ManifestError(f"column {key} holds strings, not turn indices")
            ends = np.cumsum(lengths).tolist()
            values = [tuple(flat[e - n : e]) for e, n in zip(ends, lengths.tolist())]
        else:
            raise _ManifestError(f"column {key} has an unknown kind {kind!r}")
        if rows is not None and len(values) != rows:
            raise _ManifestError(f"column {key} has {len(values)} rows, the columns before it {rows}")
        rows = len(values)
        dtype = object if spec["dtype"] == "object" else spec["dtype"]
        data[spec["name"]] = pd.Series(values, dtype=dtype)
    return pd.DataFrame(data)


def _dataset_arrays(ds: Dataset, notes=()) -> dict:
    """Store a :class:`Dataset` as named plain arrays plus a JSON manifest (``turns.text`` is rebuilt from ``texts``).

    ``notes`` are the messages of the warnings its parse gave, kept to be given again.
    """
    out: dict = {}
    packed = _pack(list(ds.texts))
    out["texts.utf8"], out["texts.offsets"] = packed["utf8"], packed["offsets"]
    manifest = {
        "name": ds.name,
        "source": ds.source,
        "skipped": ds.skipped,
        "notes": list(notes),
        "turns": _frame_arrays("turns", ds.turns, out, skip=("text",)),
        "turn_columns": list(ds.turns.columns),
        "text_dtype": str(ds.turns["text"].dtype) if "text" in ds.turns else None,
        "sessions": _frame_arrays("sessions", ds.sessions, out),
        "cases": _frame_arrays("cases", ds.cases, out),
    }
    out["manifest"] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    return out


def _dataset_from_arrays(z, source=None) -> Dataset:
    """Rebuild the dataset of :func:`_dataset_arrays`'s arrays, checked: a manifest that disagrees raises.

    The manifest must hold exactly its fields, each frame the loaders' columns in the kinds
    the cache stores them (:data:`_SCHEMA`), every array it names and no other, columns of
    one length, and indices that point inside the dataset (text ids, sessions' turns,
    haystacks, gold turns); ``source``, when given, is the file the cache key was made from.
    Otherwise :class:`_ManifestError` (a ValueError) names what disagrees, and the caller sets
    the file aside (a hand-edited manifest once failed with a KeyError on every run).
    """
    m = json.loads(z["manifest"].tobytes().decode())
    if not isinstance(m, dict) or set(m) != _MANIFEST_KEYS:
        keys = sorted(m) if isinstance(m, dict) else type(m).__name__
        raise _ManifestError(f"manifest fields {keys} are not {sorted(_MANIFEST_KEYS)}")
    if not isinstance(m["name"], str) or not isinstance(m["source"], str) or source not in (None, m["source"]):
        raise _ManifestError(f"manifest names source {_describe(m['source'])}, not {source!r}")
    if not isinstance(m["skipped"], dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in m["skipped"].items()
    ):
        raise _ManifestError(f"manifest skipped {_describe(m['skipped'])} is not counts by name")
    if not isinstance(m["notes"], list) or not all(isinstance(x, str) for x in m["notes"]):
        raise _ManifestError("manifest notes are not a list of messages")
    if m["turn_columns"] != _TURN_COLUMNS or m["text_dtype"] not in ("object", "str"):
        raise _ManifestError(f"turn columns {_describe(m['turn_columns'])} are not {_TURN_COLUMNS}")
    used = {"manifest", "texts.utf8", "texts.offsets"}
    texts = _unpack(z["texts.utf8"], z["texts.offsets"])
    turns = _frame_from_arrays("turns", m["turns"], z, used)
    ids = turns["text_id"].to_numpy()
    if len(ids) and (ids.min() < 0 or ids.max() >= len(texts)):
        raise _ManifestError(f"turn text ids point outside the {len(texts)} texts")
    text_dtype = m["text_dtype"] if m["text_dtype"] != "object" else object
    turns["text"] = pd.Series(np.array(texts, dtype=object)[ids], dtype=text_dtype)
    turns = turns[m["turn_columns"]]
    sessions = _frame_from_arrays("sessions", m["sessions"], z, used)
    cases = _frame_from_arrays("cases", m["cases"], z, used)
    extra = sorted(set(z) - used)
    if extra:
        raise _ManifestError(f"arrays {extra} are not in the manifest")
    first, count = sessions["first_turn"].to_numpy(), sessions["n_turns"].to_numpy()
    if len(first) and (first.min() < 0 or count.min() < 0 or (first + count).max() > len(turns)):
        raise _ManifestError(f"sessions' turns point outside the {len(turns)} turns")
    known = set(sessions["session"])
    if any(key not in known for hay in cases["haystack"] for key in hay):
        raise _ManifestError("a case's haystack names a session the dataset does not hold")
    if any(g < 0 or g >= len(turns) for gold in cases["gold"] for g in gold):
        raise _ManifestError(f"a case's gold turn points outside the {len(turns)} turns")
    return Dataset(m["name"], turns, sessions, cases, texts, m["source"], m["skipped"])


def _dataset_from_npz(path, source=None) -> tuple:
    """``(Dataset, notes)`` read back from a parsed-dataset cache file (:func:`_dataset_from_arrays`)."""
    with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    ds = _dataset_from_arrays(arrays, source)
    return ds, json.loads(arrays["manifest"].tobytes().decode())["notes"]


def _same_dataset(a: Dataset, b: Dataset) -> bool:
    """Whether two datasets are equal, value for value and dtype for dtype."""
    if (a.name, a.source, a.skipped, list(a.texts)) != (b.name, b.source, b.skipped, list(b.texts)):
        return False
    try:
        for x, y in ((a.turns, b.turns), (a.sessions, b.sessions), (a.cases, b.cases)):
            pd.testing.assert_frame_equal(x, y, check_exact=True)
    except AssertionError:
        return False
    return True
