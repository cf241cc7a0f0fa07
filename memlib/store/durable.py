"""The SQLite file behind :meth:`MemoryStore.open <memlib.store.MemoryStore.open>`.

One store is one SQLite file in WAL mode (standard library :mod:`sqlite3`).
Every change a store makes (an add, a consolidation, a retrieval's usage
counts, a pin) is one transaction, so a process killed at any point loses at
most the operation in flight and never leaves a half-written store; the
in-memory arrays of the store are an index rebuilt from the file on open. The file's tables,
and how a value becomes a cell of one, are :mod:`memlib.store.tables`.

Concurrency is SQLite's: any number of processes read while one writes; a
second writer waits up to ``timeout`` seconds for the lock, then gets a
:class:`~memlib.store.state.StoreError` that names the file.

Threads: a store holds one connection, opened with ``check_same_thread=False``
and used only under the store's lock (:class:`~memlib.store.MemoryStore`
serialises its public operations). One connection per thread would not let
threads work in parallel: the store's in-memory index, which every operation
reads and changes, has to be kept in step with the file under one lock anyway,
and threads with connections of their own would then wait for each other twice
(the store's lock and SQLite's, with ``timeout``), and leave a connection open
per thread that ever used the store.

A store in a folder the process cannot write to cannot be opened, not even to
read: in WAL mode SQLite creates ``<name>-wal`` and ``<name>-shm`` beside the
file, and a read-only open (``mode=ro``) needs them too. Only ``immutable=1``
reads without them, and it promises SQLite that nobody changes the file, which
a process that can write to the folder could break, giving wrong results
silently. So the error says that the folder must be writable instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
from pathlib import Path

import numpy as np

from memlib import FACTORS
from memlib._safewrite import file_in_the_way
from memlib.store.columns import STATE
from memlib.store.state import (
    DIM,
    LEGACY_STATE,
    StoreError,
    fail,
    fill_first_in_session,
    saved_state,
    short_repr,
    state_field,
)
from memlib.store.tables import (
    APPLICATION_ID,
    CORE_SCALARS,
    FIRST_COLUMN,
    FORGOTTEN_COLUMNS,
    INSERT_FORGOTTEN,
    INSERT_MERGE,
    ITEM_COLUMNS,
    MERGE_COLUMNS,
    META_KEYS,
    READ_VERSIONS,
    SCALAR_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    SESSION_JSON,
    item_row,
    sql_values,
    value_json,
)

#: Durability of a commit: ``normal`` survives a killed process; ``full`` also a power cut.
SYNCHRONOUS = ("normal", "full")
#: Vectors of forgotten items that each add deletes (see the vectors table in :mod:`memlib.store.tables`).
PURGE_PER_ADD = 2
#: SQLite's page cache per connection, in KiB (a consolidation rewrites many pages at once).
CACHE_KIB = 65536


def _can_create_in(folder: Path) -> bool:
    """Whether this process can create a file in ``folder`` (tried, since ``os.access`` says yes to root)."""
    probe = folder / f".memlib-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.unlink()
    return True


class StoreFile:
    """One open SQLite store file: transactions, and reading and writing the state.

    Parameters
    ----------
    path : str or path
        Created (private to its owner, mode 0600) if it does not exist.
    timeout : float
        Seconds a writer waits for another writer's lock before failing.
    synchronous : {'normal', 'full'}
        ``normal`` (the default): a killed process loses at most the operation in
        flight; a power cut may also undo the last commits, never corrupting the file.
        ``full`` flushes every commit to disk, so it also survives a power cut.
    """

    def __init__(self, path, timeout: float = 5.0, synchronous: str = "normal"):
        self.path = Path(path)
        self.timeout = float(timeout)
        #: Whether this object made the file (so :meth:`discard` may remove it again).
        self.created = False
        if self.path.is_dir():
            fail(self.path, "is a folder, not a store file")
        blocker = file_in_the_way(self.path)
        if blocker is not None:
            fail(self.path, f"cannot create the store file: {blocker} is a file, not a folder")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
            self.created = True
        except FileExistsError:
            pass
        except OSError as exc:
            if isinstance(exc, PermissionError) and not _can_create_in(self.path.parent):
                fail(self.path, f"cannot create the store file: its folder {self.path.parent} is not writable")
            fail(self.path, f"cannot create the store file ({exc.strerror})")
        self.con = None
        self._states = None  # the state_<name> columns of the items table (see states())
        self._has_first = False  # whether the items table has first_in_session (see has_first_column())
        with self.errors():
            # any thread may use the connection, one at a time: under the store's lock (module docstring)
            self.con = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
            mode = self.con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                fail(self.path, f"cannot switch the store to WAL mode (journal mode {mode})")
            self.con.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            self.con.execute(f"PRAGMA cache_size = -{CACHE_KIB}")

    # ---------------------------------------------------------------- transactions and errors
    @contextlib.contextmanager
    def errors(self):
        """Turn SQLite's errors into :class:`StoreError` naming the file."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            msg = str(exc)
            if "locked" in msg or "busy" in msg:
                fail(
                    self.path,
                    f"another process is writing to this store; gave up waiting after {self.timeout:g} s "
                    "(open it with a longer timeout= to wait longer)",
                )
            if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
                self._fail_not_writable(msg)
            fail(self.path, f"cannot use the store file ({msg})")
        except sqlite3.DatabaseError as exc:
            msg = str(exc)
            if any(w in msg for w in ("not a database", "malformed", "corrupt")):
                fail(self.path, f"not a readable store file ({msg})")
            fail(self.path, f"SQLite error ({msg})")

    def _fail_not_writable(self, msg: str):
        """Fail saying whether the folder or the file cannot be written (module docstring), else with ``msg``."""
        folder, name = self.path.parent, self.path.name
        if not _can_create_in(folder):
            fail(
                self.path,
                f"cannot open the store: its folder {folder} must be writable, even to read the store "
                f"(SQLite's WAL mode keeps {name}-wal and {name}-shm beside it); copy the store to a writable folder",
            )
        if not os.access(self.path, os.W_OK):
            fail(self.path, f"cannot change the store: the file is read-only ({msg})")
        fail(self.path, f"cannot use the store file ({msg})")

    def begin_write(self) -> None:
        """Take the write lock (waiting up to ``timeout``) and start a transaction."""
        with self.errors():
            self.con.execute("BEGIN IMMEDIATE")

    def begin_read(self) -> None:
        """Start a read transaction: a consistent snapshot until :meth:`commit`."""
        with self.errors():
            self.con.execute("BEGIN")

    def commit(self) -> None:
        """Commit the transaction."""
        with self.errors():
            self.con.execute("COMMIT")

    def rollback(self) -> None:
        """Roll back the transaction, if one is open (an SQLite error in doing so is ignored)."""
        self._states = None  # a rolled-back transaction may have added a state column
        self._has_first = False  # or the first_in_session column
        if self.con is not None and self.con.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.con.execute("ROLLBACK")

    @contextlib.contextmanager
    def reading(self):
        """Hold a read transaction around a block."""
        self.begin_read()
        try:
            yield
        finally:
            self.rollback()

    def data_version(self) -> int:
        """Return a number that changes when another connection commits (SQLite's ``PRAGMA data_version``)."""
        with self.errors():
            return int(self.con.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        """Roll back any open transaction and close the connection."""
        if self.con is not None:
            self.rollback()
            with contextlib.suppress(sqlite3.Error):
                self.con.close()
            self.con = None

    def discard(self) -> None:
        """Close the file after a failed open or persist; remove it if this object made it and it holds no store.

        So a refused :meth:`MemoryStore.open <memlib.store.MemoryStore.open>` of a new
        path, or a failed :meth:`~memlib.store.MemoryStore.persist`, leaves no empty or
        half-written ``.db`` behind (the store's tables are written in one transaction,
        so a failure leaves none of them). A file that existed before is only closed.
        """
        empty = False
        if self.created and self.con is not None:
            with contextlib.suppress(StoreError, sqlite3.Error):
                self.rollback()
                empty = not self.initialised()
        self.close()
        if empty:
            for p in (self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm", "-journal"))):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()

    # ---------------------------------------------------------------- creating and reading
    def initialised(self) -> bool:
        """Whether the file holds a store (False for an empty file; StoreError for a foreign database)."""
        with self.errors():
            tables = {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            app = self.con.execute("PRAGMA application_id").fetchone()[0]
        if not tables and app == 0:
            return False
        if app != APPLICATION_ID or "meta" not in tables:
            fail(self.path, "a SQLite database, but not a memlib store")
        return True

    def create(self, state: dict, forgotten=(), merges=()) -> None:
        """Write the tables and the whole ``state`` (inside the caller's write transaction)."""
        with self.errors():
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    self.con.execute(statement)
            self.put_meta({"format": "memlib.MemoryStore", "version": SCHEMA_VERSION})
            self.put_settings(state["settings"])
            self.put_session(state["session"])
            self.put_sums(state["sums"])
            items = state["items"]
            self.add_states(dict.fromkeys(items.get("state", {}), 0.0))
            self.insert_items(items, range(len(items["ids"])))
            self.log_forgotten(forgotten)
            for e in merges:
                self.log_merge(e)

    def read_state(self) -> dict:
        """Read the state in the file (inside the caller's transaction), unchecked: see :func:`check_state`."""
        with self.errors():
            version = self.con.execute("PRAGMA user_version").fetchone()[0]
            if version not in READ_VERSIONS:
                fail(self.path, f"store schema version {version} is not one of {', '.join(map(str, READ_VERSIONS))}")
            meta = {}
            for key, value in self.con.execute("SELECT key, value FROM meta"):
                try:
                    meta[key] = json.loads(value)
                except RecursionError:
                    fail(self.path, f"the setting {key!r} is nested too deeply to be a memlib store setting")
                except (TypeError, ValueError):
                    fail(self.path, f"the setting {key!r} is not JSON: {short_repr(value)}")
            missing = [k for k in META_KEYS if k not in meta]
            if missing:
                fail(self.path, f"missing settings {', '.join(missing)}")
            if meta["format"] != "memlib.MemoryStore":
                fail(self.path, "not a memlib store")
            sums = {}
            for name, blob in self.con.execute("SELECT name, vector FROM sums"):
                if not isinstance(blob, bytes) or len(blob) != DIM * 8:
                    fail(self.path, f"the sum {name!r} is not {DIM} float64 numbers")
                sums[name] = np.frombuffer(blob, "<f8").copy()
            missing = [k for k in ("user", "session", "session_all") if k not in sums]
            if missing:
                fail(self.path, f"missing sums {', '.join(missing)}")
            items = self._read_items()
        settings = {k: meta[k] for k in ("policy", "policy_config", "factor_set", "weights")}
        settings |= {"value_profile": meta["value_profile"], "merge_threshold": meta["merge_threshold"]}
        settings["value"] = meta.get("value")  # absent in files written before cue values: the paper's V
        speakers = {k[len("speaker:") :]: v for k, v in sums.items() if k.startswith("speaker:")}
        return saved_state(settings, meta, (sums["user"], sums["session"], sums["session_all"], speakers), items)

    def _read_items(self) -> dict:
        """Read the items table as the per-item arrays and lists of a state (column by column: fast for 100k items)."""
        extra = [state_field(k) for k in self.states(refresh=True)]
        first = ("first_in_session",) if self.has_first_column() else ()
        numeric = ("id", *SCALAR_COLUMNS, "IFNULL(expires, 9e999)", "pinned", "tokens", *FACTORS, *first, *extra)
        rows = self.con.execute(f"SELECT {', '.join(numeric)} FROM items ORDER BY id").fetchall()
        n = len(rows)
        try:
            a = np.array(rows, dtype=np.float64).reshape(n, len(numeric))
        except (TypeError, ValueError) as exc:
            fail(self.path, f"an item column holds a value that is not a number ({exc})")
        items = {"ids": a[:, 0].astype(np.int64)}
        if not np.array_equal(items["ids"], a[:, 0]):
            fail(self.path, "an item id is not an integer")
        items.update({k: a[:, 1 + j] for j, k in enumerate(CORE_SCALARS)})
        c = 1 + len(SCALAR_COLUMNS)
        items.update(expires=a[:, c], pinned=a[:, c + 1] != 0, tokens=a[:, c + 2].astype(np.int64))
        items["factors"] = np.ascontiguousarray(a[:, c + 3 : c + 3 + len(FACTORS)])
        items["state"] = {LEGACY_STATE: a[:, c - 1]}
        c += 3 + len(FACTORS)
        items["first_in_session"] = a[:, c] != 0 if first else None  # None: read from the sessions (older files)
        items["state"].update({k: a[:, c + len(first) + j] for j, k in enumerate(self.states())})
        texts = self.con.execute("SELECT text, role, speaker, session FROM items ORDER BY id").fetchall()
        for k, column in zip(("texts", "roles", "speakers", "sessions"), zip(*texts) if n else [()] * 4):
            items[k] = list(column)
        fill_first_in_session(items)
        vectors = self.con.execute(
            "SELECT items.id, embedding FROM items LEFT JOIN vectors ON vectors.id = items.id ORDER BY items.id"
        ).fetchall()
        blobs = [r[1] for r in vectors]
        missing = [r[0] for r in vectors if r[1] is None]
        if missing:
            fail(self.path, f"the vectors table has no embedding for item {missing[0]}")
        if set(map(type, blobs)) - {bytes} or set(map(len, blobs)) - {DIM * 4}:
            fail(self.path, f"an item embedding is not {DIM} float32 numbers")
        items["embeddings"] = np.frombuffer(b"".join(blobs), "<f4").reshape(n, DIM)
        return items

    # ---------------------------------------------------------------- writing (inside a write transaction)
    def put_meta(self, values: dict) -> None:
        """Write ``values`` (key -> a JSON value) to the meta table."""
        self.con.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [(k, json.dumps(v, allow_nan=False)) for k, v in values.items()],
        )

    def put_settings(self, s: dict) -> None:
        """Write the store's settings ``s`` to the meta table."""
        vp = s["value_profile"]
        self.put_meta(
            {
                "policy": s["policy"],
                "policy_config": s["policy_config"],
                "factor_set": s["factor_set"],
                "weights": [float(x) for x in s["weights"]],
                "value_profile": None if vp is None else [float(x) for x in vp],
                "merge_threshold": s["merge_threshold"],
                "value": value_json(s.get("value")),
            }
        )

    def put_session(self, s: dict) -> None:
        """Write the session scalars in ``s`` (any of ``current_session, session_has_user, next_id, now``)."""
        self.put_meta({k: SESSION_JSON[k](v) for k, v in s.items()})

    def put_sums(self, sums: dict) -> None:
        """Write running sums (state layout: ``sums["speakers"]`` maps speakers to their sums)."""
        rows = {k: v for k, v in sums.items() if k != "speakers"}
        rows.update({f"speaker:{k}": v for k, v in sums.get("speakers", {}).items()})
        self.con.executemany(
            "INSERT OR REPLACE INTO sums (name, vector) VALUES (?, ?)",
            [(k, np.asarray(v, "<f8").tobytes()) for k, v in rows.items()],
        )

    def states(self, refresh: bool = False) -> list[str]:
        """Return the per-item policy states the items table holds in ``state_<name>`` columns (``level`` aside)."""
        if refresh or self._states is None:
            columns = [r[1] for r in self.con.execute("PRAGMA table_info(items)")]
            self._states = [c[len("state_") :] for c in columns if c.startswith("state_")]
        return self._states

    def add_states(self, defaults: dict) -> None:
        """Add a ``state_<name>`` column for each per-item state the items table lacks.

        ``defaults`` maps a state's name to the value the items already in the
        table get (a policy's value for a new item).
        """
        for name, default in defaults.items():
            if name != LEGACY_STATE and name not in self.states():
                column = f"{state_field(name)} REAL NOT NULL DEFAULT {float(default)!r}"
                self.con.execute(f"ALTER TABLE items ADD COLUMN {column}")
                self._states = [*self._states, name]

    def add_first_column(self, ids, first) -> None:
        """Give a version 1 file the ``first_in_session`` column (inside a write transaction), and version 2.

        ``first`` holds, for the items ``ids`` (every item of the file), the values the store
        read for them (:func:`~memlib.store.state.fill_first_in_session`), so that file and memory agree.
        """
        if self.has_first_column():
            return
        self.con.execute(f"ALTER TABLE items ADD COLUMN {FIRST_COLUMN}")
        rows = [(int(bool(f)), int(i)) for i, f in zip(ids, first)]
        self.con.executemany("UPDATE items SET first_in_session = ? WHERE id = ?", rows)
        self.con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self.put_meta({"version": SCHEMA_VERSION})
        self._has_first = True

    def has_first_column(self) -> bool:
        """Whether the items table has the ``first_in_session`` column (a file written before it was kept has not).

        Asked again until it is true (another connection may add it; no one drops it).
        """
        if not self._has_first:
            self._has_first = any(r[1] == "first_in_session" for r in self.con.execute("PRAGMA table_info(items)"))
        return self._has_first

    def insert_items(self, items: dict, positions) -> None:
        """Insert the items at ``positions`` of the per-item arrays ``items`` (state layout)."""
        extra = self.states()
        columns = (*ITEM_COLUMNS, *map(state_field, extra))
        insert = f"INSERT INTO items ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        self.con.executemany(insert, (item_row(items, i, extra) for i in positions))
        ids, emb = items["ids"], items["embeddings"]
        self.con.executemany(
            "INSERT INTO vectors (id, embedding) VALUES (?, ?)",
            ((int(ids[i]), np.asarray(emb[i], "<f4").tobytes()) for i in positions),
        )

    def update_items(self, ids, values: dict) -> None:
        """Set columns of the items ``ids``.

        ``values`` maps a column of the store's :class:`~memlib.store.columns.Columns`
        (``state:<name>`` for a policy's state) or a factor's name to one value per item.
        """
        names = [state_field(k[len(STATE) :]) if k.startswith(STATE) else k for k in values]
        rows = zip(*(sql_values(k, v) for k, v in values.items()), map(int, ids))
        self.con.executemany(f"UPDATE items SET {', '.join(f'{c} = ?' for c in names)} WHERE id = ?", list(rows))

    def delete_items(self, ids) -> None:
        """Delete items; their vectors go later, a few per add (:meth:`purge_vectors`)."""
        rows = [(int(i),) for i in ids]
        self.con.executemany("DELETE FROM items WHERE id = ?", rows)
        self.con.executemany("INSERT OR IGNORE INTO dropped_vectors (id) VALUES (?)", rows)

    def purge_vectors(self, limit: int = PURGE_PER_ADD) -> None:
        """Delete up to ``limit`` vectors of forgotten items."""
        rows = self.con.execute("SELECT id FROM dropped_vectors LIMIT ?", (limit,)).fetchall()
        if rows:
            self.con.executemany("DELETE FROM vectors WHERE id = ?", rows)
            self.con.executemany("DELETE FROM dropped_vectors WHERE id = ?", rows)

    def log_forgotten(self, records) -> None:
        """Append dropped items to the ``forgotten`` log.

        Each record is a tuple ``(id, text, time, value, tier, reason, at)`` or a dict with those
        keys (``reason`` and ``at`` may be missing from the records of an older export).
        """
        self.con.executemany(
            INSERT_FORGOTTEN,
            [
                r
                if isinstance(r, tuple)
                else (*(r[k] for k in FORGOTTEN_COLUMNS[:5]), r.get("reason", "budget"), r.get("at", r["time"]))
                for r in records
            ],
        )

    def log_merge(self, entry: dict) -> None:
        """Append one entry to the ``merges`` log."""
        self.con.execute(INSERT_MERGE, tuple(entry[k] for k in MERGE_COLUMNS))

    def log(self, table: str) -> list[dict]:
        """Return the ``forgotten`` or ``merges`` log, oldest first."""
        columns = FORGOTTEN_COLUMNS if table == "forgotten" else MERGE_COLUMNS
        with self.errors():
            rows = self.con.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY seq").fetchall()
        return [dict(zip(columns, r)) for r in rows]


__all__ = ["APPLICATION_ID", "ITEM_COLUMNS", "SCHEMA_VERSION", "SYNCHRONOUS", "StoreError", "StoreFile"]
