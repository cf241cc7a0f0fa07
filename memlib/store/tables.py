"""The tables of a store file (:mod:`memlib.store.durable`), and how a value becomes a cell of one.

Tables (``PRAGMA application_id`` is :data:`APPLICATION_ID`, ``user_version`` is
:data:`SCHEMA_VERSION`):

* ``meta(key, value)``: the settings and session scalars, one JSON value per key
  (``format, version, policy, policy_config, factor_set, weights, value_profile,
  merge_threshold, value, current_session, session_has_user, next_id, now``);
* ``sums(name, vector)``: the running sums behind the centroids as float64 blobs
  (``user``, ``session``, ``session_all``, ``speaker:<name>``);
* ``items``: one row per retained item, its factors as one column each
  (:data:`ITEM_COLUMNS`); ``expires`` is NULL for never; ``level`` holds the per-item
  policy state ``level`` (MemoryBank's; 0 for items of other policies), and a column
  ``state_<name>``, added when a policy first keeps it, any other per-item state;
* ``vectors(id, embedding)``: each item's unit embedding as a float32 blob, kept
  apart so that reading or rewriting the items does not touch the vectors' pages.
  A consolidation deletes the dropped items' rows from ``items`` only and lists
  their ids in ``dropped_vectors``; each later add deletes up to
  :data:`~memlib.store.durable.PURGE_PER_ADD` of those vectors. So forgetting thousands of items
  rewrites a few hundred small pages, not a 1.5 KB vector per item, and the
  vectors of forgotten items are gone after at most half as many adds as were dropped;
* ``forgotten``: every dropped item (``reason`` ``budget`` or ``expired``, ``at`` the
  consolidation time);
* ``merges``: every turn that merged into a stored near-duplicate.
"""

from __future__ import annotations

import math

from memlib import FACTORS
from memlib.store.state import LEGACY_STATE

#: ``PRAGMA application_id`` of a store file ("meml").
APPLICATION_ID = 0x6D656D6C
#: ``PRAGMA user_version``: the layout of the tables below. Version 1 files lack ``first_in_session``:
#: they are read (:func:`~memlib.store.state.fill_first_in_session`) and get it, and version 2, at their first write;
#: a memlib that knows only version 1 refuses version 2 rather than write 0 for the sessions its turns open.
SCHEMA_VERSION = 2
#: The schema versions a store file may have.
READ_VERSIONS = (1, SCHEMA_VERSION)
#: The per-item scalars of a state that the ``items`` table holds as they are.
CORE_SCALARS = ("time", "valence", "retrievals", "last_access")
#: Its scalar columns: those and the per-item policy state ``level``.
SCALAR_COLUMNS = (*CORE_SCALARS, LEGACY_STATE)
#: Columns of the ``items`` table, in order.
ITEM_COLUMNS = ("id", "text", "role", "speaker", "session", *SCALAR_COLUMNS, "expires", "pinned", "tokens")
ITEM_COLUMNS += (*FACTORS, "first_in_session")
#: The column a file written before stores kept ``first_in_session`` lacks; it is added at its first write.
FIRST_COLUMN = "first_in_session INTEGER NOT NULL DEFAULT 0"
#: The keys every ``meta`` table holds.
META_KEYS = ("format", "version", "policy", "policy_config", "factor_set", "weights", "value_profile")
META_KEYS += ("merge_threshold", "current_session", "session_has_user", "next_id", "now")
#: The statements that make the tables of a new store file.
SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sums (name TEXT PRIMARY KEY, vector BLOB NOT NULL);
CREATE TABLE items (
    id INTEGER PRIMARY KEY, text TEXT NOT NULL, role TEXT NOT NULL, speaker TEXT NOT NULL, session TEXT NOT NULL,
    {", ".join(f"{c} REAL NOT NULL" for c in SCALAR_COLUMNS)},
    expires REAL, pinned INTEGER NOT NULL, tokens INTEGER NOT NULL,
    {", ".join(f"{f} REAL NOT NULL" for f in FACTORS)},
    {FIRST_COLUMN}
);
CREATE TABLE vectors (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL);
CREATE TABLE dropped_vectors (id INTEGER PRIMARY KEY);
CREATE TABLE forgotten (
    seq INTEGER PRIMARY KEY, id INTEGER NOT NULL, text TEXT NOT NULL, time REAL NOT NULL, value REAL NOT NULL,
    tier TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE merges (
    seq INTEGER PRIMARY KEY, id INTEGER NOT NULL, turn INTEGER NOT NULL, text TEXT NOT NULL, time REAL NOT NULL,
    cosine REAL NOT NULL
);
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""
#: Columns of the ``forgotten`` and ``merges`` logs (their ``seq`` aside), and how a record is appended.
FORGOTTEN_COLUMNS = ("id", "text", "time", "value", "tier", "reason", "at")
MERGE_COLUMNS = ("id", "turn", "text", "time", "cosine")
INSERT_FORGOTTEN = (
    f"INSERT INTO forgotten ({', '.join(FORGOTTEN_COLUMNS)}) VALUES ({', '.join('?' * len(FORGOTTEN_COLUMNS))})"
)
INSERT_MERGE = f"INSERT INTO merges ({', '.join(MERGE_COLUMNS)}) VALUES ({', '.join('?' * len(MERGE_COLUMNS))})"


def json_number(x):
    """Return a number as ``meta`` holds it: a float, or None for None, NaN or an infinity."""
    return None if x is None or not math.isfinite(x) else float(x)


#: How each session scalar is written to ``meta``.
SESSION_JSON = {"current_session": lambda x: x, "session_has_user": bool, "next_id": int, "now": json_number}
SESSION_JSON["need"] = lambda x: x if isinstance(x, dict) else x.to_dict()


def value_json(value):
    """Return the JSON of a store's value: None for the paper's ``V = f @ w``, else a cue value's dict."""
    return None if value is None else value if isinstance(value, dict) else value.to_dict()


def item_row(items: dict, i: int, extra) -> tuple:
    """Return the values of one row of the items table: :data:`ITEM_COLUMNS`, then the ``extra`` state columns."""
    f = items["factors"][i]
    e = items["expires"][i]
    state = items.get("state", {})
    return (
        int(items["ids"][i]),
        items["texts"][i],
        items["roles"][i],
        items["speakers"][i],
        items["sessions"][i],
        *(float(items[k][i]) for k in CORE_SCALARS),
        float(state[LEGACY_STATE][i]) if LEGACY_STATE in state else 0.0,
        None if math.isinf(e) else float(e),
        int(bool(items["pinned"][i])),
        int(items["tokens"][i]),
        *map(float, f),
        int(bool(items["first_in_session"][i])),
        *(float(state[k][i]) if k in state else 0.0 for k in extra),
    )


def sql_values(key: str, values) -> list:
    """Return the ``values`` of column ``key`` as the items table holds them.

    ``key`` is a column of the store's :class:`~memlib.store.columns.Columns`.
    """
    if key == "expires":
        return [None if math.isinf(x) else float(x) for x in values]
    if key == "pinned":
        return [int(bool(x)) for x in values]
    return [float(x) for x in values]
