"""The per-item columns of a store, and the times they hold.

:class:`Columns` keeps every per-item field of a store: the arrays of
:data:`~memlib.store.state.ITEM_ARRAYS` and the item cues derived from the text, role
and ``first_in_session`` (:data:`DERIVED`), the four lists of strings (:data:`~memlib.store.state.ITEM_LISTS`),
and the per-item state a policy declares (:attr:`memlib.store.protocol.Policy.item_state`),
kept under ``state:<name>``. Arrays grow in amortised O(1); dropping items makes new
arrays, so the old ones can be kept to undo it.

Times: :func:`to_days` reads a time as float days, :func:`expiry_of` an expiry and
:func:`not_before` a consolidation's ``now``. :func:`count_tokens` counts what a token
budget counts.

>>> cols = Columns()
>>> cols.declare({"level": 0.0})
>>> for i, text in enumerate(["I like tea.", "Noted."]):
...     cols.append({"ids": i, "time": float(i), "tokens": count_tokens(text)}, (text, "user", "user", ""))
>>> cols.view("tokens").tolist(), cols.view("state:level").tolist(), cols.strings["texts"]
([3, 1], [0.0, 0.0], ['I like tea.', 'Noted.'])
>>> cols.position(5)
Traceback (most recent call last):
...
memlib._checks.ParameterError: no retained item has id 5 (never added, merged or forgotten)
"""

from __future__ import annotations

import datetime as _dt
import numbers
import re

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError
from memlib.cues import ITEM_CUES, item_cues
from memlib.store.state import ITEM_ARRAYS, ITEM_LISTS, fill_first_in_session, short_repr

#: Per-item arrays held in memory only, recomputed from the stored texts, roles and ``first_in_session`` on load:
#: the part of :data:`memlib.cues.STORE_CUES` the factors do not hold (:data:`memlib.cues.ITEM_CUES`).
DERIVED = {"static_cues": (np.float64, (len(ITEM_CUES),))}  # memlib.cues.item_cues
#: The prefix of a policy's per-item state column (``state:level`` for MemoryBank's level).
STATE = "state:"
_FACTOR = {f: j for j, f in enumerate(FACTORS)}
#: Strings that pandas reads as the wall clock; a store refuses them (see :func:`to_days`).
_WALL_CLOCK_WORDS = ("now", "today")
_WORD = re.compile(r"\S+")


# --------------------------------------------------------------------------- times and tokens
def to_days(time, name: str = "time") -> float:
    """Convert a time to float days: a number is days; a datetime or Timestamp, days since 1970 (UTC if aware).

    The strings ``"now"`` and ``"today"`` are refused, as the data loaders refuse
    them: a store's clock is the times it is given (``time=None`` in
    :meth:`MemoryStore.add <memlib.store.MemoryStore.add>` is the latest of them), and a
    word that means another time at every call would make a store's history
    unrepeatable. Pass ``datetime.now()`` for the wall clock. ``name`` is the argument
    the error's hint names (``time``, ``now``).

    >>> import datetime as dt
    >>> paris = dt.timezone(dt.timedelta(hours=1))
    >>> to_days(dt.datetime(1970, 1, 2, 12)), to_days(dt.datetime(1970, 1, 2, 13, tzinfo=paris))
    (1.5, 1.5)
    >>> to_days("now")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: time must be ... got 'now': pass time=None for the store's latest time, or ...
    """
    if isinstance(time, (int, float, np.integer, np.floating)) and not isinstance(time, bool):
        try:
            t = float(time)
        except OverflowError:  # an int beyond any float (10**400)
            raise ParameterError(f"time must be finite, got {short_repr(time)}") from None
    elif isinstance(time, str) and time.strip().lower() in _WALL_CLOCK_WORDS:
        raise ParameterError(
            f"time must be a number of days or a datetime, got {short_repr(time)}: pass {name}=None for the store's "
            "latest time, or datetime.now() for the wall clock"
        )
    elif isinstance(time, (_dt.datetime, _dt.date, pd.Timestamp, np.datetime64, str)):
        try:
            ts = pd.Timestamp(time)
            if ts.tzinfo is not None:  # an aware time counts in UTC
                ts = ts.tz_convert("UTC").tz_localize(None)
            t = (ts - pd.Timestamp(0)) / pd.Timedelta(days=1)
        except (ValueError, TypeError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            reason = reason if len(reason) <= 120 else reason[:117] + "..."
            raise ParameterError(
                f"time must be a number of days or a datetime, got {short_repr(time)} ({reason})"
            ) from None
    else:
        raise ParameterError(f"time must be a number of days or a datetime, got {short_repr(time)}")
    if not np.isfinite(t):
        raise ParameterError(f"time must be finite, got {short_repr(time)}")
    return t


def expiry_of(expires, t: float) -> float:
    """When an item added at ``t`` expires: ``expires`` as a time, or a timedelta after ``t`` (+inf: never).

    >>> import datetime as dt
    >>> expiry_of(None, 1.0), expiry_of(dt.timedelta(hours=12), 1.0), expiry_of(3, 1.0)
    (inf, 1.5, 3.0)
    """
    if expires is None:
        return np.inf
    if isinstance(expires, (_dt.timedelta, pd.Timedelta, np.timedelta64)):
        x = t + pd.Timedelta(expires) / pd.Timedelta(days=1)
    else:
        try:
            x = to_days(expires)
        except ParameterError:
            raise ParameterError(
                f"expires must be a time (days or a datetime) or a timedelta, got {expires!r}"
            ) from None
    if not x > t:
        raise ParameterError(f"expires must be after the turn's time ({t} days), got {x} days")
    return float(x)


def not_before(now_given: float | None, latest: float) -> float:
    """Return the time of a consolidation or an explanation: ``now_given``, or the ``latest`` time; never before it."""
    now = latest if now_given is None else now_given
    if now < latest:
        raise ParameterError(f"time goes backwards: now={now} days is before the latest time {latest} days")
    return now


def count_tokens(text: str) -> int:
    """Count the tokens a budget counts for a text: its whitespace-separated words (no model tokenizer).

    >>> count_tokens("I am allergic  to peanuts!")
    5
    """
    # counted one word at a time: split() would build a list as large as a giant turn
    return sum(1 for _ in _WORD.finditer(text))


# --------------------------------------------------------------------------- arrays
def matvec(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Compute ``A @ x`` in one thread: BLAS's threaded matrix-vector product stalls for milliseconds on a busy CPU."""
    return np.einsum("ij,j->i", A, x)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest scores, best first; ties: the lower position first (a stable sort's order).

    >>> top_k(np.array([0.2, 0.9, 0.2, 0.5]), 3).tolist()
    [1, 3, 0]
    """
    n = len(scores)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if n <= 4096 or k * 8 >= n:
        return np.argsort(-scores, kind="stable")[:k]
    part = np.argpartition(-scores, k - 1)[:k]
    threshold = scores[part].min()
    above = np.flatnonzero(scores > threshold)
    ties = np.flatnonzero(scores == threshold)[: k - len(above)]
    sel = np.concatenate([above, ties])
    return sel[np.lexsort((sel, -scores[sel]))]


class Columns:
    """The per-item fields of a store (see the module docstring), one entry per retained item, oldest first.

    ``data`` maps a column name to its array (capacity rows, the first ``n`` in use);
    ``strings`` maps each of :data:`~memlib.store.state.ITEM_LISTS` to a list.
    """

    def __init__(self):
        self.n = 0
        self.data = {k: np.zeros((0, *shape), dtype) for k, (dtype, shape) in {**ITEM_ARRAYS, **DERIVED}.items()}
        self.strings: dict[str, list[str]] = {k: [] for k in ITEM_LISTS}
        #: Value a new item starts with, per state column (0.0 for a state no declared policy names).
        self.defaults: dict[str, float] = {}

    def upgrade(self) -> None:
        """Give columns made before stores kept ``first_in_session`` (an older pickle) that field and its cue.

        Read from the held items' sessions, as a file of that age is read
        (:func:`~memlib.store.state.fill_first_in_session`).
        """
        if "first_in_session" in self.data:
            return
        first = fill_first_in_session({"sessions": self.strings["sessions"][: self.n]})["first_in_session"]
        cap = len(self.data["ids"])
        self.data["first_in_session"] = np.zeros(cap, bool)
        self.data["first_in_session"][: self.n] = first
        self.data["static_cues"] = np.zeros((cap, len(ITEM_CUES)))
        self.data["static_cues"][: self.n] = item_cues(self.strings["texts"], self.strings["roles"], first)

    def view(self, name: str) -> np.ndarray:
        """Return the column ``name`` of the retained items (a view)."""
        return self.data[name][: self.n]

    def state_names(self) -> list[str]:
        """Names of the per-item policy states held (without the ``state:`` prefix)."""
        return [k[len(STATE) :] for k in self.data if k.startswith(STATE)]

    def state_defaults(self) -> dict[str, float]:
        """Return the value a new item gets for each per-item policy state held."""
        return {name: self.defaults.get(STATE + name, 0.0) for name in self.state_names()}

    def declare(self, item_state: dict) -> None:
        """Hold the per-item states ``item_state`` (name -> a new item's value); a new one starts at its value."""
        for name, default in item_state.items():
            key = STATE + name
            self.defaults[key] = float(default)
            if key not in self.data:
                self.data[key] = np.full(len(self.data["ids"]), float(default))  # (the capacity, not n)

    def position(self, item_id) -> int:
        """Position of the retained item ``item_id``."""
        if isinstance(item_id, bool) or not isinstance(item_id, numbers.Integral):
            raise ParameterError(f"an item id must be an integer, got {item_id!r}")
        ids = self.view("ids")
        i = int(np.searchsorted(ids, item_id))
        if i == self.n or ids[i] != item_id:
            raise ParameterError(f"no retained item has id {item_id} (never added, merged or forgotten)")
        return i

    def target(self, key: str) -> tuple[np.ndarray, int | None]:
        """Return the array and column a change of ``key`` writes to: a factor's name is one column of ``factors``."""
        if key in _FACTOR:
            return self.data["factors"], _FACTOR[key]
        return self.data[key], None

    # ---------------------------------------------------------------- changes (each returns nothing; see backend)
    def append(self, row: dict, strings: tuple) -> None:
        """Add one item: ``row`` maps columns to its values (absent ones: 0, or the state's default)."""
        if self.n == len(self.data["ids"]):
            cap = max(64, self.n + self.n // 2)
            for k, a in self.data.items():
                b = np.zeros((cap, *a.shape[1:]), a.dtype)
                b[: self.n] = a[: self.n]
                self.data[k] = b
        for k, a in self.data.items():
            a[self.n] = row.get(k, self.defaults.get(k, 0))
        for k, s in zip(ITEM_LISTS, strings):
            self.strings[k].append(s)
        self.n += 1

    def pop(self) -> None:
        """Remove the last item (undoes :meth:`append`)."""
        self.n -= 1
        for s in self.strings.values():
            s.pop()

    def set_rows(self, pos: np.ndarray, values: dict) -> dict:
        """Write ``values`` (column -> one value per position) at ``pos``; return the old values."""
        old = {}
        for key, v in values.items():
            a, j = self.target(key)
            old[key] = a[pos].copy() if j is None else a[pos, j].copy()
            if j is None:
                a[pos] = v
            else:
                a[pos, j] = v
        return old

    def take(self, keep: np.ndarray) -> None:
        """Keep only the items at the positions ``keep`` (new arrays: :meth:`saved` still holds the old ones)."""
        self.data = {k: a[: self.n][keep] for k, a in self.data.items()}
        self.strings = {k: [s[i] for i in keep] for k, s in self.strings.items()}
        self.n = len(keep)

    def saved(self) -> tuple:
        """Return what :meth:`restore` needs to undo a :meth:`take` or :meth:`replace` (references, no copies)."""
        return self.n, dict(self.data), dict(self.strings)

    def restore(self, saved: tuple) -> None:
        """Put back the items :meth:`saved` returned."""
        self.n, self.data, self.strings = saved[0], dict(saved[1]), dict(saved[2])

    # ---------------------------------------------------------------- the state layout (memlib.store.state)
    def replace(self, items: dict) -> None:
        """Replace every item by those of a checked state's ``items`` (a declared state they lack: its value)."""
        arrays = {k: np.array(items[k], dtype=dtype) for k, (dtype, _) in ITEM_ARRAYS.items()}
        arrays["static_cues"] = item_cues(items["texts"], items["roles"], arrays["first_in_session"])
        n = len(arrays["ids"])
        for name, v in items.get("state", {}).items():
            arrays[STATE + name] = np.array(v, dtype=np.float64)
        for key, default in self.defaults.items():
            arrays.setdefault(key, np.full(n, default))
        self.data, self.n = arrays, n
        self.strings = {k: list(items[k]) for k in ITEM_LISTS}

    def export(self, pos=None) -> dict:
        """Return the items (or those at the positions ``pos``) in the state layout: arrays, lists and ``state``."""
        pick = slice(None) if pos is None else np.asarray(pos)
        out = {k: self.view(k)[pick] for k in ITEM_ARRAYS}
        out.update({k: s if pos is None else [s[i] for i in pick] for k, s in self.strings.items()})
        out["state"] = {name: self.view(STATE + name)[pick] for name in self.state_names()}
        return out


def item_dict(cols: Columns, i: int, value: float, tier: str) -> dict:
    """Return the item at position ``i`` as :meth:`MemoryStore.items <memlib.store.MemoryStore.items>` shows it."""
    e = cols.data["expires"][i]
    return {
        "id": int(cols.data["ids"][i]),
        "text": cols.strings["texts"][i],
        "role": cols.strings["roles"][i],
        "speaker": cols.strings["speakers"][i],
        "session": cols.strings["sessions"][i],
        "time": float(cols.data["time"][i]),
        "retrievals": int(cols.data["retrievals"][i]),
        "value": float(value),
        "tier": str(tier),
        "pinned": bool(cols.data["pinned"][i]),
        "expires": None if np.isinf(e) else float(e),
        "tokens": int(cols.data["tokens"][i]),
        **dict(zip(FACTORS, cols.data["factors"][i].tolist())),
    }
