r"""Reading data files: UTF-8 text or JSON, gunzipped when compressed, every problem one line.

:func:`open_text` opens a data file; ``_read_text`` (and through it ``_read_lines``,
``_read_json`` and ``_read_json_list``) reads one whole, with a
:class:`~memlib.datasets.DatasetError` naming the file (and line) for text that is not UTF-8,
a damaged gzip file, invalid JSON or JSON nested too deeply (``_one_line_when_too_deep`` does
the same for a whole loader). Lone surrogates (invalid
Unicode that JSON may spell as ``\ud800``) are replaced by U+FFFD with one
:class:`~memlib.datasets.DatasetWarning` per file, whose message the parse cache keeps.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import sys
import threading
import warnings
import zlib
from pathlib import Path

from memlib._text import clean_text, count_surrogates
from memlib.datasets.normalised import DatasetError, DatasetWarning


def open_text(path):
    """Open a data file for reading text: UTF-8, transparently gunzipped when its name ends in ``.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _not_utf8(path):
    """Raise a :class:`DatasetError` naming the first line of ``path`` that is not UTF-8."""
    opener = gzip.open if Path(path).suffix == ".gz" else open
    with opener(path, "rb") as f:
        for n, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(
                    f"{path}: line {n}: not UTF-8 text (byte 0x{line[exc.start]:02x}); save the file as UTF-8"
                ) from None
    raise DatasetError(f"{path}: not UTF-8 text; save the file as UTF-8")


def _read_text(path, lines: bool = False):
    """Read a whole UTF-8 text file (gunzipped when it ends in ``.gz``): its text, or its ``lines``.

    A file that is not UTF-8, or a damaged gzip file, is a one-line :class:`DatasetError`.
    """
    try:
        with open_text(path) as f:
            return f.readlines() if lines else f.read()
    except UnicodeDecodeError:
        _not_utf8(path)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path}: not a readable gzip file ({exc})") from None


def _read_lines(path) -> list[str]:
    """Read the lines of a UTF-8 text file (a leading byte-order mark is dropped), gunzipped when it ends in ``.gz``."""
    lines = _read_text(path, lines=True)
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    return lines


def _read_json_list(path) -> list:
    data = _read_json(path)
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of records at the top level, got {type(data).__name__}")
    if not data:
        raise DatasetError(f"{path}: holds no records (an empty list)")
    return data


def _read_json(path):
    """Decode a whole JSON file (UTF-8, gunzipped when it ends in ``.gz``); any problem is one line."""
    text = _read_text(path).removeprefix("\ufeff")
    data = _decode(path, None, text)
    if _has_lone_surrogates(text):
        data = _repair_surrogates(path, data)
    return data


def _decode(path, where, text: str):
    """``json.loads(text)``, with a :class:`DatasetError` naming ``path`` (and ``where``) when it cannot be read."""
    at = f"{path}: {where}" if where else f"{path}"
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{at}: not valid JSON ({exc})") from None
    except RecursionError:
        raise DatasetError(f"{at}: {_TOO_DEEP}") from None


_TOO_DEEP = (
    f"nested too deeply: lists or objects inside each other more than about {sys.getrecursionlimit()} levels deep"
)


def _one_line_when_too_deep(loader):
    """Wrap a loader so that a RecursionError on a deeply nested value (a list in a list ...) is one line."""

    @functools.wraps(loader)
    def load_(path=None, *args, **kwargs):
        try:
            return loader(path, *args, **kwargs)
        except RecursionError:
            raise DatasetError(f"{path if path is not None else loader.__name__}: {_TOO_DEEP}") from None

    return load_


# a \uXXXX escape of a surrogate code point, high (D800-DBFF) or low (DC00-DFFF), in JSON source text
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _has_lone_surrogates(text: str) -> bool:
    r"""Whether JSON source ``text`` holds a surrogate escape that decodes to a lone surrogate.

    JSON decoding joins a high and a low escape written next to each other into one
    code point (``"\ud83d\ude00"`` is an emoji); any other surrogate escape stays a
    lone surrogate, which UTF-8 cannot encode. An escape preceded by an odd number
    of backslashes is a literal backslash and text, not an escape. Only the files
    that hold one (exactly those) are walked by :func:`_repair_surrogates`, so a
    clean 256 MB file costs one regular-expression scan.

    >>> _has_lone_surrogates(r'["\ud83d\ude00", "\\ud800"]'), _has_lone_surrogates(r'["a\ud800b"]')
    (False, True)
    """
    if _SURROGATE_ESCAPE.search(text) is None:  # one scan (0.25 s for LongMemEval-S), as for most files
        return False
    pending = None  # where an unpaired high escape ends
    for m in _SURROGATE_ESCAPE.finditer(text):
        start = before = m.start()
        while before > 0 and text[before - 1] == "\\":
            before -= 1
        if (start - before) % 2:  # an escaped backslash followed by the letters "ud8..": text
            continue
        high = m.group()[3] in "89abAB"
        if pending is not None and not (start == pending and not high):
            return True  # a high escape not followed by a low one
        if high:
            pending = m.end()
        elif pending is None:
            return True  # a low escape without a high one before it
        else:
            pending = None
    return pending is not None


def _repair_surrogates(path, data, where=None):
    """Return ``data`` with every lone surrogate in its strings (and keys) replaced by U+FFFD, warning once.

    The warning (:class:`DatasetWarning`) names the file, how many were replaced and the
    first place: its record (``record <i> (<id>)``, or ``where`` for one line of JSON Lines)
    and the field inside it. The rule is :func:`memlib._text.clean_text`'s, which the store
    applies too.
    """
    records = list(enumerate(data)) if isinstance(data, list) and where is None else [(None, data)]
    total, first = 0, None
    for i, rec in records:
        rec, n, place = _clean_tree(rec)
        if not n:
            continue
        total += n
        if i is None:
            data = rec
            label = where or "the top level"
        else:
            data[i] = rec
            ident = next((rec[k] for k in _ID_FIELDS if isinstance(rec, dict) and isinstance(rec.get(k), str)), None)
            label = f"record {i}" + (f" ({ident})" if ident is not None else "")
        if first is None:
            first = label + (f" {place}" if place else "")
    if total:
        _note(
            f"{path}: {total} lone surrogate{'s' if total > 1 else ''} (invalid Unicode such as \\ud800, legal in "
            f"JSON) replaced by U+FFFD, the first in {first}"
        )
    return data


_ID_FIELDS = ("question_id", "sample_id", "conversation_id")


def _clean_tree(value) -> tuple:
    """``(value, count, first)``: a decoded JSON value with lone surrogates replaced in every string and key.

    Lists and objects are cleaned in place, without recursion (a value may nest as deep
    as the decoder allows); ``first`` names the first field that held one, like
    ``haystack_sessions[1][0].content``.
    """
    total, first = 0, None
    root = [value]
    stack = [(root, 0, "")]
    while stack:
        holder, key, place = stack.pop()
        item = holder[key]
        if isinstance(item, str):
            n = count_surrogates(item)
            if n:
                holder[key] = clean_text(item)
                total += n
                first = place if first is None else first
        elif isinstance(item, list):
            stack.extend((item, k, f"{place}[{k}]") for k in range(len(item) - 1, -1, -1))
        elif isinstance(item, dict):
            if any(count_surrogates(k) for k in item):
                cleaned = {}
                for k, v in item.items():
                    n = count_surrogates(k)
                    if n and first is None:
                        first = f"{place}.{clean_text(k)}" if place else clean_text(k)
                    total += n
                    cleaned[clean_text(k)] = v
                holder[key] = item = cleaned
            stack.extend((item, k, f"{place}.{k}" if place else k) for k in reversed(list(item)))
    return root[0], total, first or ""


_NOTES = threading.local()


def _note(message: str) -> None:
    """Warn (:class:`DatasetWarning`) about something repaired at load, and keep the message for the parse cache."""
    notes = getattr(_NOTES, "current", None)
    if notes is not None:
        notes.append(message)
    warnings.warn(message, DatasetWarning, stacklevel=4)
