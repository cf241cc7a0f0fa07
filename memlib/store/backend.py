"""Where a store's data live, and how one change is applied to them: :class:`MemoryBackend`.

A store's data are its per-item columns (:class:`~memlib.store.columns.Columns`), the
session scalars (``current_session, session_has_user, next_id, now``), the running sums
behind the centroids (``user, session, session_all`` and one per speaker), and the logs
of forgotten items and merges. Every operation that changes them describes the change
once, as a :class:`Change`, and hands it to :meth:`MemoryBackend.apply` inside
:meth:`MemoryBackend.transaction`:

* :class:`MemoryBackend` keeps the data in memory; a failed transaction undoes what it applied;
* :class:`memlib.store.persistence.FileBackend` keeps the same data in memory as an index of a
  SQLite file and writes each part of a change to the file too, in one SQLite transaction.

So the two backends implement the same six parts (rows, log, drop, append, scalars,
sums), each once, and every kind of change is written once, where it is decided: an add
or a merge (:func:`memlib.store.annotate.turn_change`), a retrieval's usage
(:func:`memlib.store.annotate.reinforced`), a consolidation (:func:`memlib.store.forget.change`)
and a pin (:meth:`MemoryStore.pin <memlib.store.MemoryStore.pin>`).

>>> import numpy as np
>>> b = MemoryBackend()
>>> item = ({"ids": 0, "time": 1.0}, ("hi", "user", "user", ""))   # its columns, and its text, role, speaker, session
>>> with b.transaction():
...     b.apply(Change(append=item, scalars={"next_id": 1, "now": 1.0}))
>>> try:
...     with b.transaction():
...         b.apply(Change(rows=[(np.array([0]), {"retrievals": [1.0]})], scalars={"now": 2.0}))
...         raise RuntimeError("the disk is full")
... except RuntimeError:
...     pass
>>> b.cols.view("retrievals").tolist(), b.scalars["now"]   # the failed change left nothing behind
([0.0], 1.0)
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import numpy as np

from memlib.references import Need
from memlib.store.columns import Columns
from memlib.store.state import DIM

#: The fields of a record of :attr:`MemoryStore.forgotten <memlib.store.MemoryStore.forgotten>`.
FORGOTTEN_KEYS = ("id", "text", "time", "value", "tier", "reason", "at")


def locked(method):
    """Run ``method`` holding the store's lock ``self._lock`` (see *Threads* in :class:`~memlib.store.MemoryStore`)."""

    @functools.wraps(method)
    def run_locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return run_locked


@dataclass
class Change:
    """One change of a store's data, applied whole or not at all (see the module docstring).

    Attributes
    ----------
    rows : list of (positions, dict)
        Column values to write at item positions: a column of
        :class:`~memlib.store.columns.Columns` (``retrievals``, ``pinned``,
        ``state:level``, ...) or a factor's name (one column of ``factors``).
    log : tuple or None
        ``("forgotten", records)`` (tuples of :data:`FORGOTTEN_KEYS`) or ``("merges", [record])``.
    drop : ndarray of bool, optional
        The items to forget (positions before the change).
    append : tuple or None
        ``(row, strings)``: a new item's columns and its text, role, speaker and session.
    scalars, sums : dict
        Session scalars and running sums to set; ``sums["speakers"]`` holds only the speakers that move.
    turn : bool
        Whether the change adds a turn (a file store then purges a few vectors of forgotten items).
    """

    rows: list = field(default_factory=list)
    log: tuple | None = None
    drop: np.ndarray | None = None
    append: tuple | None = None
    scalars: dict = field(default_factory=dict)
    sums: dict = field(default_factory=dict)
    turn: bool = False


class MemoryBackend:
    """A store's data in memory; each part of a :class:`Change` applied, and undone if its transaction fails."""

    #: The file behind the data (None in memory).
    path = None

    def __init__(self):
        self.cols = Columns()
        self.scalars = {"current_session": None, "session_has_user": False, "next_id": 0, "now": -np.inf}
        self.scalars["need"] = Need()  # the stream's reference counts and sessions (memlib.references)
        self.sums = {"user": np.zeros(DIM), "session": np.zeros(DIM), "session_all": np.zeros(DIM), "speakers": {}}
        self.logs: dict[str, list[dict]] = {"forgotten": [], "merges": []}
        self._undo: list | None = None

    # ---------------------------------------------------------------- transactions
    @contextlib.contextmanager
    def transaction(self):
        """Run a block whose changes (:meth:`apply`) all stay, or, if it raises, are all undone."""
        self._undo = undo = []
        try:
            yield self
        except BaseException:
            for step in reversed(undo):
                step()
            raise
        finally:
            self._undo = None

    def _on_undo(self, step) -> None:
        if self._undo is not None:
            self._undo.append(step)

    def sync(self, locked: bool = False) -> None:
        """Catch up with the file another process wrote to (nothing to do in memory)."""

    def put_settings(self, settings: dict) -> None:
        """Store changed settings (nothing to do in memory: the store object holds them)."""

    def log(self, name: str) -> list[dict]:
        """Return the ``forgotten`` or ``merges`` log, oldest first (a copy)."""
        return list(self.logs[name])

    # ---------------------------------------------------------------- applying a change
    def apply(self, change: Change) -> None:
        """Apply every part of ``change``, in an order that keeps positions valid (rows before the drop)."""
        for pos, values in change.rows:
            self._set_rows(pos, values)
        if change.log is not None:
            self._log(*change.log)
        if change.drop is not None and change.drop.any():
            self._drop(change.drop)
        if change.append is not None:
            self._append(*change.append)
        if change.scalars:
            self._set_scalars(change.scalars)
        if change.sums:
            self._set_sums(change.sums)

    def _set_rows(self, pos, values: dict) -> None:
        old = self.cols.set_rows(pos, values)
        self._on_undo(lambda: self.cols.set_rows(pos, old))

    def _log(self, name: str, records: list) -> None:
        log, n = self.logs[name], len(self.logs[name])
        log.extend(dict(zip(FORGOTTEN_KEYS, r)) if isinstance(r, tuple) else r for r in records)
        self._on_undo(lambda: log.__delitem__(slice(n, None)))

    def _drop(self, drop: np.ndarray) -> None:
        saved = self.cols.saved()
        self.cols.take(np.flatnonzero(~drop))
        self._on_undo(lambda: self.cols.restore(saved))

    def _append(self, row: dict, strings: tuple) -> None:
        self.cols.append(row, strings)
        self._on_undo(self.cols.pop)

    def _set_scalars(self, scalars: dict) -> None:
        old = dict(self.scalars)
        self.scalars.update(scalars)
        self._on_undo(lambda: self.scalars.update(old))

    def _set_sums(self, sums: dict) -> None:
        old = dict(self.sums)
        self.sums.update({k: v for k, v in sums.items() if k != "speakers"})
        self.sums["speakers"] = {**old["speakers"], **sums.get("speakers", {})}
        self._on_undo(lambda: self.sums.update(old))

    # ---------------------------------------------------------------- the state layout (memlib.store.state)
    def state(self) -> dict:
        """Return the data as the ``session``, ``sums`` and ``items`` of a state; arrays are views."""
        s = self.scalars
        return {
            "session": {**s, "now": None if not np.isfinite(s["now"]) else float(s["now"])}
            | {"need": s["need"].to_dict()},
            "sums": {**self.sums, "speakers": dict(self.sums["speakers"])},
            "items": self.cols.export(),
        }

    def load(self, state: dict) -> None:
        """Replace the data by those of a checked ``state`` (the logs excepted)."""
        sess, sums = state["session"], state["sums"]
        self.scalars = {
            "current_session": sess["current_session"],
            "session_has_user": bool(sess["session_has_user"]),
            "next_id": int(sess["next_id"]),
            "now": -np.inf if sess["now"] is None else float(sess["now"]),
            "need": Need.from_dict(sess["need"]),
        }
        self.sums = {k: np.array(sums[k], np.float64) for k in ("user", "session", "session_all")}
        self.sums["speakers"] = {k: np.array(v, np.float64) for k, v in sums["speakers"].items()}
        self.cols.replace(state["items"])

    def adopt(self, other: MemoryBackend) -> None:
        """Take over the data of ``other`` (the same objects: no copy)."""
        self.cols, self.scalars, self.sums = other.cols, other.scalars, other.sums
