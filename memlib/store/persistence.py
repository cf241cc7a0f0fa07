"""How a store is kept: in a SQLite file (:class:`FileBackend`), in an ``.npz`` export, in a copy or a pickle.

:class:`FileBackend` is the :class:`~memlib.store.backend.MemoryBackend` of a store made
by :meth:`MemoryStore.open <memlib.store.MemoryStore.open>`: the same data in memory,
as an index of the SQLite file (:class:`~memlib.store.durable.StoreFile`), and each part
of a change written to the file too, in one transaction per change. The index catches
up with the file when another process has written to it.

:class:`Persistence` holds the methods of :class:`~memlib.store.MemoryStore` that save,
load, open, persist and close a store, and copy or pickle one in memory; the store's
state (:mod:`memlib.store.state`) is what both files hold.

>>> import tempfile, numpy as np
>>> from memlib.store import MemoryStore
>>> st = MemoryStore.open(tempfile.mkdtemp() + "/memory.db")
>>> st.path.name, st.add("I like tea.", time=0.0, embedding=np.eye(384)[0])
('memory.db', 0)
>>> st.close()   # the data stay readable in memory; the file is closed
>>> st.path is None, len(st)
(True, 1)
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Self

import numpy as np

from memlib._checks import ParameterError, check_choice
from memlib.store.backend import MemoryBackend, locked
from memlib.store.checks import (
    MERGE_THRESHOLD,
    StoreLinearValue,
    check_merge_threshold,
    check_store_weights,
    check_timeout,
    value_argument,
)
from memlib.store.embedder import check_vector, embedder_argument
from memlib.store.policies import POLICIES
from memlib.store.protocol import Policy
from memlib.store.state import check_state, fail, policy_from
from memlib.value import LinearValue, check_weights

if TYPE_CHECKING:  # (the SQLite layer loads when a store first opens a file, not on import)
    from memlib.store.durable import StoreFile

_UNSET = object()


class FileBackend(MemoryBackend):
    """A store's data kept in the SQLite file ``db``, with the in-memory index of :class:`MemoryBackend`.

    Each part of a change is written to the file and applied in memory, inside one
    write transaction (:meth:`transaction`): a failure rolls the file back and undoes
    the memory. Before each operation the index catches up with the file if another
    process wrote to it (:meth:`sync`).

    Parameters
    ----------
    db : StoreFile
    version : int
        The file's ``data_version`` when the index was read from it.
    """

    def __init__(self, db: StoreFile, version: int):
        super().__init__()
        self.db, self.version = db, version
        self.stale = False  # the memory may be behind the file (an operation was cut short)

    @property
    def path(self) -> Path:
        """The path of the store file."""
        return self.db.path

    def log(self, name: str) -> list[dict]:
        """Return the ``forgotten`` or ``merges`` log of the file, oldest first."""
        return self.db.log(name)

    def sync(self, locked: bool = False) -> None:
        """Catch up with the file if another process wrote to it (or an operation was cut short).

        ``locked``: inside a write transaction, which already sees the latest state.
        """
        version = self.db.data_version()
        if self.stale or version != self.version:
            if locked:
                state = self.db.read_state()
            else:
                with self.db.reading():
                    state = self.db.read_state()
            self.load(check_state(self.db.path, state))
            self.version, self.stale = version, False

    @contextlib.contextmanager
    def transaction(self):
        """One SQLite write transaction around the block, which rolls back on any error (the memory is undone)."""
        db = self.db
        try:
            db.begin_write()
            self.sync(locked=True)
            with super().transaction():
                with db.errors():
                    db.add_states(self.cols.state_defaults())  # a policy's new per-item state gets its column
                    db.add_first_column(self.cols.view("ids"), self.cols.view("first_in_session"))  # a version 1 file
                    yield self
                self.stale = True  # until the commit is known to have landed
                db.commit()
        except BaseException:
            db.rollback()
            raise
        self.stale = False

    def put_settings(self, settings: dict) -> None:
        """Write changed settings to the file."""
        self.db.put_settings(settings)

    def closed(self) -> MemoryBackend:
        """Close the file; return the data in memory, with the file's logs (a closed store stays readable)."""
        mem = MemoryBackend()
        mem.adopt(self)
        mem.logs = {name: self.db.log(name) for name in ("forgotten", "merges")}
        self.db.close()
        return mem

    # each part of a change: in memory (MemoryBackend), then in the file
    def apply(self, change) -> None:
        """Apply ``change`` in memory and in the file (vectors of dropped items purged after a turn)."""
        super().apply(change)
        if change.turn:
            self.db.purge_vectors()

    def _set_rows(self, pos, values: dict) -> None:
        super()._set_rows(pos, values)
        self.db.update_items(self.cols.view("ids")[pos], values)

    def _log(self, name: str, records: list) -> None:  # the file holds the logs
        if name == "forgotten":
            self.db.log_forgotten(records)
        else:
            for record in records:
                self.db.log_merge(record)

    def _drop(self, drop) -> None:
        ids = self.cols.view("ids")[drop]
        super()._drop(drop)
        self.db.delete_items(ids)

    def _append(self, row: dict, strings: tuple) -> None:
        super()._append(row, strings)
        self.db.insert_items(self.cols.export([self.cols.n - 1]), [0])

    def _set_scalars(self, scalars: dict) -> None:
        super()._set_scalars(scalars)
        self.db.put_session(scalars)

    def _set_sums(self, sums: dict) -> None:
        super()._set_sums(sums)
        self.db.put_sums(sums)

    @classmethod
    def over(cls, db: StoreFile, version: int, data: MemoryBackend) -> FileBackend:
        """Return the backend of ``db`` holding the data of ``data`` (the same objects)."""
        backend = cls(db, version)
        backend.adopt(data)
        return backend


@contextlib.contextmanager
def opened(path, timeout: float, synchronous: str):
    """Open the :class:`StoreFile` at ``path`` for the block; if the block fails, discard it (and a file it made)."""
    from memlib.store.durable import StoreFile

    db = StoreFile(path, timeout=timeout, synchronous=synchronous)
    try:
        yield db
    except BaseException:
        db.discard()  # closes it, and removes the file if this call made it and it holds no store
        raise


def written(db: StoreFile, state: dict, forgotten=(), merges=(), fresh: bool = False) -> None:
    """Write a whole store into the empty file ``db``, in one transaction.

    ``fresh``: a store just made for a new file, which another process may have made
    meanwhile (then it is left as it is); otherwise a file that already holds a store
    is refused.
    """
    db.begin_write()
    try:
        if not db.initialised():
            with db.errors():
                db.create(state, forgotten, merges)
        elif not fresh:
            fail(db.path, "already holds a store; open it with MemoryStore.open")
        db.commit()
    except BaseException:
        db.rollback()
        raise


class Persistence:
    """The methods of :class:`~memlib.store.MemoryStore` that keep a store (see the module docstring)."""

    def __getstate__(self):
        """Return what a copy or pickle of an in-memory store holds: all but its lock (a new copy gets its own)."""
        if self._backend.path is not None:
            raise TypeError(f"a file store cannot be copied or pickled: copy {self._backend.path} or use save()")
        with self._lock:
            state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state):
        if "value_model" in state:  # a pickle from before stores held a memlib.value.Value
            model, w = state.pop("value_model"), state.pop("weights")
            state["_weights"] = w
            state["_value"] = StoreLinearValue(w) if model is None else model
        self.__dict__.update(state)
        self._lock = threading.RLock()
        self._backend.cols.upgrade()  # a pickle from before stores kept first_in_session

    # ------------------------------------------------------------------ the state (memlib.store.state)
    def _settings(self) -> dict:
        return {
            "policy": type(self.policy).__name__,
            "policy_config": self.policy.config(),
            "factor_set": self.factor_set,
            "weights": self.weights,
            "value_profile": self.value_profile,
            "merge_threshold": self.merge_threshold,
            "value": None if isinstance(self.value, LinearValue) else self.value,  # None: the paper's, with weights
        }

    def _state(self) -> dict:
        """Return the store's state (see :mod:`memlib.store.state`); arrays are views."""
        return {"settings": self._settings(), **self._backend.state()}

    @classmethod
    def _from_state(cls, path, state: dict, policy, embedder) -> Self:
        try:
            return cls._build_from_state(path, state, policy, embedder)
        except RecursionError:  # a tampered value nested thousands of levels deep
            fail(path, "a stored value is nested too deeply to be a memlib store's")

    @classmethod
    def _build_from_state(cls, path, state: dict, policy, embedder) -> Self:
        check_state(path, state)
        s = state["settings"]
        if policy is None:
            policy = policy_from(path, s["policy"], s["policy_config"], POLICIES)
        try:
            cue_value = s.get("value")
            store = cls(
                weights=s["weights"] if cue_value is None else None,
                policy=policy,
                embedder=embedder,
                factor_set=s["factor_set"],
                merge_threshold=s["merge_threshold"],
                value=cue_value,
            )
            store.weights = check_weights(s["weights"])
        except ParameterError as exc:
            fail(path, str(exc))
        store.value_profile = s["value_profile"]
        store._backend.load(state)
        return store

    # ------------------------------------------------------------------ the .npz export
    @locked
    def save(self, path) -> None:
        """Export the store to one ``.npz`` file (arrays plus a JSON header; no pickle).

        The write is atomic and private (mode 0600): a process killed while saving
        leaves the old file whole and no temporary file behind
        (:func:`memlib.store.npz.write_private`). An error names ``path``.
        """
        from memlib.store.npz import write_npz

        self._backend.sync()
        write_npz(path, self._state(), self.forgotten, self.merges)

    @classmethod
    def load(cls, path, policy: Policy | None = None, embedder=None) -> Self:
        """Read a store exported by :meth:`save` into memory.

        The policy is rebuilt from its saved name and settings (built-in
        policies); pass ``policy`` to supply another. The embedder is never
        saved: pass ``embedder`` as to :class:`MemoryStore`. A missing, corrupt
        or tampered file raises :class:`StoreError` naming the file and the field.
        """
        from memlib.store.npz import read_npz

        embedder = embedder_argument(embedder)
        state, forgotten, merges = read_npz(path, MERGE_THRESHOLD)
        store = cls._from_state(Path(path), state, policy, embedder)
        store._backend.logs = {"forgotten": list(forgotten), "merges": list(merges)}
        return store

    # ------------------------------------------------------------------ the SQLite file
    @classmethod
    def open(
        cls,
        path,
        weights=None,
        policy: Policy | None = None,
        value_profile=None,
        embedder=None,
        factor_set: str | None = None,
        merge_threshold=_UNSET,
        *,
        timeout: float = 5.0,
        synchronous: str = "normal",
        value=None,
    ) -> Self:
        """Open a store kept in the SQLite file ``path`` (created if missing), one transaction per change.

        Every :meth:`add`, :meth:`consolidate`, :meth:`retrieve` (which updates
        usage counts) and :meth:`pin` is one transaction: a process killed at any
        point loses at most that operation and never corrupts the file. The
        in-memory arrays are an index of the file, rebuilt on open (and when
        another process has written to it). Any number of processes can read
        while one writes; a second writer waits up to ``timeout`` seconds, then
        gets a :class:`StoreError` naming the file. The file is private to its
        owner (mode 0600). Layout: :mod:`memlib.store.durable`.

        Parameters
        ----------
        path : str or path
        weights, policy, value_profile, embedder, factor_set, merge_threshold, value
            As for :class:`MemoryStore`. For a new file they (or their defaults)
            are stored in it. For an existing file, a given ``weights``, ``value``,
            ``policy`` or ``merge_threshold`` replaces the stored one (and is
            stored; ``weights`` alone selects the paper's value); a
            ``factor_set`` or ``value_profile`` must match the stored one, since
            the stored factors were computed with it. ``embedder`` is never stored.
        timeout : float
            Seconds to wait for another process's write lock.
        synchronous : {'normal', 'full'}
            ``normal``: a commit survives a killed process; a power cut may undo the
            last commits but never corrupts the file. ``full``: also survives a power
            cut, one disk flush per change.

        Examples
        --------
        >>> import tempfile, numpy as np
        >>> from memlib.store import MemoryStore
        >>> path = tempfile.mkdtemp() + "/memory.db"
        >>> with MemoryStore.open(path) as st:
        ...     st.add("I am allergic to peanuts.", time=0.0, embedding=np.eye(384)[0])
        0
        >>> MemoryStore.open(path).items()[0]["text"]
        'I am allergic to peanuts.'
        """
        from memlib.store.durable import SYNCHRONOUS

        timeout = check_timeout(timeout)
        check_choice("synchronous", synchronous, SYNCHRONOUS)
        embedder = embedder_argument(embedder)
        if weights is not None:
            check_store_weights(weights)  # before a new file is made
        with opened(path, timeout, synchronous) as db:
            if not db.initialised():
                fresh = cls(
                    weights=weights,
                    policy=policy,
                    value_profile=value_profile,
                    embedder=embedder,
                    factor_set="paper" if factor_set is None else factor_set,
                    merge_threshold=MERGE_THRESHOLD if merge_threshold is _UNSET else merge_threshold,
                    value=value,
                )
                written(db, fresh._state(), fresh=True)  # (another process may have made it meanwhile)
            version = db.data_version()
            with db.reading():
                state = db.read_state()
            store = cls._from_state(db.path, state, policy, embedder)
            store._backend = FileBackend.over(db, version, store._backend)
            store._reconfigure(weights, policy, value_profile, factor_set, merge_threshold, value)
        return store

    def _reconfigure(self, weights, policy, value_profile, factor_set, merge_threshold, value=None) -> None:
        """Apply the settings given to :meth:`open` for an existing file (see there)."""
        if factor_set is not None and factor_set != self.factor_set:
            raise ParameterError(
                f"{self.path} was built with factor_set={self.factor_set!r}; its factors cannot change set"
            )
        if value_profile is not None:
            vp = check_vector("value_profile", value_profile)
            if self.value_profile is None or not np.allclose(vp, self.value_profile):
                raise ParameterError(f"{self.path} was built with another value_profile")
        changed = False
        if weights is not None or value is not None:
            model = value_argument(value, weights, self.weights)
            changed |= model != self.value  # (two linear values are equal when their weights are)
            self._set_value(model)
        if policy is not None:
            changed = True
        if merge_threshold is not _UNSET:
            m = check_merge_threshold(merge_threshold)
            changed |= m != self.merge_threshold
            self.merge_threshold = m
        if changed:
            with self._writing() as data:
                data.put_settings(self._settings())

    @locked
    def persist(self, path, *, timeout: float = 5.0, synchronous: str = "normal") -> Self:
        """Write this in-memory store to a new SQLite file ``path`` and keep it there from now on.

        ``MemoryStore.load("memory.npz").persist("memory.db")`` turns an export into
        a durable store. Returns the store itself. A failed call leaves the store
        in memory as it was and no file behind (a file it made is removed; an
        existing file is never touched).
        """
        from memlib.store.durable import SYNCHRONOUS

        if self._backend.path is not None:
            raise ParameterError(f"this store is already kept in {self._backend.path}")
        timeout = check_timeout(timeout)
        check_choice("synchronous", synchronous, SYNCHRONOUS)
        with opened(path, timeout, synchronous) as db:
            written(db, self._state(), self._backend.log("forgotten"), self._backend.log("merges"))
            version = db.data_version()
        self._backend = FileBackend.over(db, version, self._backend)
        return self

    @property
    def path(self) -> Path | None:
        """The SQLite file of a store made by :meth:`open` (None in memory)."""
        return self._backend.path

    @locked
    def close(self) -> None:
        """Close the SQLite file of a store made by :meth:`open`; the store stays readable, but no longer changes."""
        if self._backend.path is not None:
            self._closed = self._backend.path
            self._backend = self._backend.closed()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
