"""The saved form of a :class:`~memlib.store.MemoryStore`, shared by its two file formats.

Both the SQLite file of :meth:`MemoryStore.open <memlib.store.MemoryStore.open>`
(:mod:`memlib.store.durable`) and the ``.npz`` export of
:meth:`~memlib.store.MemoryStore.save` (:mod:`memlib.store.npz`) read a file
into one plain dict, the *state*, and :func:`check_state` checks every field
of it before a store is built. A tampered or foreign file so fails with one
:class:`StoreError` that names the file and the field, never with a
traceback from deep inside numpy.

The state holds:

* ``settings``: ``policy`` (class name), ``policy_config`` (dict), ``factor_set``,
  ``weights`` (7), ``value_profile`` (384 or None), ``merge_threshold`` (float or None);
* ``session``: ``current_session`` (str or None), ``session_has_user`` (bool),
  ``next_id`` (int), ``now`` (days, or None before the first turn);
* ``sums``: the running sums behind the centroids, ``user``, ``session``,
  ``session_all`` (384 each) and ``speakers`` (name -> 384);
* ``items``: one entry per retained item, see :data:`ITEM_ARRAYS` and :data:`ITEM_LISTS`, and
  ``state``: the per-item state of policies (name -> one float per item; see
  :attr:`memlib.store.protocol.Policy.item_state`). Both files keep the state ``level``
  (MemoryBank's) in their ``level`` field, which every store file has; another state
  ``<name>`` goes to a field ``state_<name>``.

>>> check_item_arrays("x.npz", {"ids": [1, 1]})
Traceback (most recent call last):
...
memlib.store.state.StoreError: x.npz: item ids must be integers in increasing order
"""

from __future__ import annotations

import math
import numbers
import re

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError
from memlib.cues import first_in_session
from memlib.references import Need

#: Dimension of the embeddings a store holds.
DIM = 384
#: Per-item arrays of the state: name -> (dtype, shape after the item axis).
ITEM_ARRAYS = {
    "ids": (np.int64, ()),
    "time": (np.float64, ()),
    "valence": (np.float64, ()),
    "retrievals": (np.float64, ()),
    "last_access": (np.float64, ()),
    "expires": (np.float64, ()),  # +inf: never
    "pinned": (np.bool_, ()),
    "tokens": (np.int64, ()),
    "embeddings": (np.float32, (DIM,)),
    "factors": (np.float64, (len(FACTORS),)),
    "first_in_session": (np.bool_, ()),  # the item opened its session when it arrived (memlib.cues.first_in_session)
}
#: Per-item lists of strings of the state.
ITEM_LISTS = ("texts", "roles", "speakers", "sessions")
#: The per-item policy state that both file formats hold in a field of its own name (every file has it).
LEGACY_STATE = "level"
_STATE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def state_field(name: str) -> str:
    """Return the field (``.npz`` array, SQLite column) that holds the per-item policy state ``name``.

    >>> state_field("level"), state_field("strength")
    ('level', 'state_strength')
    """
    return name if name == LEGACY_STATE else f"state_{name}"


def check_item_state(owner: str, item_state) -> None:
    """Refuse a policy's per-item state (name -> a new item's value) that a file could not hold.

    A name must be lower-case letters, digits and ``_`` (it names a file's field),
    a value a finite number.
    """
    if not isinstance(item_state, dict):
        raise ParameterError(f"{owner}: item_state must be a dict of names to numbers, got {short_repr(item_state)}")
    for name, value in item_state.items():
        if not isinstance(name, str) or not _STATE_NAME.fullmatch(name):
            raise ParameterError(
                f"{owner}: a per-item state name must be lower-case letters, digits and _ (at most 40), got {name!r}"
            )
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ParameterError(f"{owner}: the state {name!r} must start at a finite number, got {short_repr(value)}")


class StoreError(ValueError):
    """A store file is missing, corrupt, of another format, or locked by another writer."""


def fail(path, message: str):
    """Raise :class:`StoreError` naming ``path``."""
    raise StoreError(f"{path}: {message}")


def short_repr(x, limit: int = 120, quote: bool = True) -> str:
    """``repr(x)`` (or ``x`` itself, ``quote=False``), cut to ``limit`` characters: an error stays a readable line."""
    r = repr(x) if quote else str(x)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def policy_from(path, name, config, policies: dict):
    """Rebuild a saved policy from its class ``name`` and ``config`` among the registered ``policies``."""
    known = {cls.__name__: cls for cls in policies.values()}
    if not isinstance(name, str):
        fail(path, f"the policy name must be a string, got {name!r}")
    if name not in known:
        fail(path, f"unknown policy {name!r}; pass policy= to open it")
    if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
        fail(path, f"policy_config must be a mapping of parameter names, got {short_repr(config)}")
    try:
        return known[name](**config)
    except (TypeError, ValueError) as exc:  # unknown keyword, or a value out of range (ParameterError)
        fail(path, f"policy_config {short_repr(config)} does not build a {name}: {short_repr(str(exc), quote=False)}")


def _number(path, field: str, value, allow_none: bool = False, integer: bool = False):
    if value is None and allow_none:
        return None
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        what = "an integer" if integer else "a finite number"
        fail(path, f"{field} must be {what}{' or null' if allow_none else ''}, got {value!r}")
    return int(value) if integer else float(value)


def _vector(path, field: str, value, length: int, allow_none: bool = False) -> np.ndarray | None:
    if value is None and allow_none:
        return None
    try:
        v = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        fail(path, f"{field} must be {length} numbers")
    if v.shape != (length,) or not np.all(np.isfinite(v)):
        fail(path, f"{field} must be {length} finite numbers, got shape {v.shape}")
    return v


def check_settings(path, s: dict) -> dict:
    """Return the ``settings`` of a state, checked (a :class:`StoreError` names the field)."""
    from memlib.factors import FACTOR_SETS

    if not isinstance(s.get("factor_set"), str) or s["factor_set"] not in FACTOR_SETS:
        fail(path, f"factor_set must be one of {', '.join(FACTOR_SETS)}, got {s.get('factor_set')!r}")
    out = dict(s)
    out["weights"] = _vector(path, "weights", s.get("weights"), len(FACTORS))
    if np.any(out["weights"] < 0):
        fail(path, "weights must be >= 0")
    out["value_profile"] = _vector(path, "value_profile", s.get("value_profile"), DIM, allow_none=True)
    m = _number(path, "merge_threshold", s.get("merge_threshold"), allow_none=True)
    if m is not None and not 0.0 < m <= 1.0:
        fail(path, f"merge_threshold must be in (0, 1] or null, got {m}")
    out["merge_threshold"] = m
    out["value"] = None
    if s.get("value") is not None:  # a learned cue value (None: the paper's V = f @ w)
        from memlib.value import CueValue

        try:
            v = s["value"]
            out["value"] = v if isinstance(v, CueValue) else CueValue.from_dict(v, source="value")
        except ParameterError as exc:
            fail(path, str(exc))
    return out


#: The session scalars of a state (besides ``need``, which files written before need counts lack).
SESSION_SCALARS = ("current_session", "session_has_user", "next_id", "now")


def saved_state(settings: dict, session: dict, sums: tuple, items: dict) -> dict:
    """Assemble the state a file holds, unchecked (:func:`check_state` checks it): the one layout both formats read.

    ``session`` is where the file keeps its session scalars (a mapping that may hold other keys):
    :data:`SESSION_SCALARS`, and ``need`` where the file has it. ``sums`` are the running sums
    ``(user, session, session_all, speakers)``, ``speakers`` mapping each speaker to its sum.
    """
    user, session_sum, session_all, speakers = sums
    return {
        "settings": settings,
        "session": {k: session[k] for k in SESSION_SCALARS} | {k: session[k] for k in ("need",) if k in session},
        "sums": {"user": user, "session": session_sum, "session_all": session_all, "speakers": speakers},
        "items": items,
    }


def check_session(path, s: dict) -> dict:
    """Return the ``session`` scalars of a state, checked."""
    cur = s.get("current_session")
    if cur is not None and not isinstance(cur, str):
        fail(path, f"current_session must be a string or null, got {cur!r}")
    if not isinstance(s.get("session_has_user"), bool):
        fail(path, f"session_has_user must be true or false, got {s.get('session_has_user')!r}")
    next_id = _number(path, "next_id", s.get("next_id"), integer=True)
    if next_id < 0:
        fail(path, f"next_id must be >= 0, got {next_id}")
    now = _number(path, "now", s.get("now"), allow_none=True)
    # the stream's reference counts (memlib.references); a store saved before them starts with none
    need = Need() if s.get("need") is None else _need(path, s["need"])
    if need.boundaries and need.boundaries[-1] > next_id:
        fail(path, f"need: a session boundary ({need.boundaries[-1]}) is past next_id ({next_id})")
    out = {"current_session": cur, "session_has_user": s["session_has_user"], "next_id": next_id, "now": now}
    return out | {"need": need.to_dict()}


def _need(path, d) -> Need:
    if not isinstance(d, dict):
        fail(path, f"need must be a mapping, got {short_repr(d)}")
    try:
        return Need.from_dict(d)
    except ParameterError as exc:
        fail(path, str(exc))


def check_sums(path, s: dict) -> dict:
    """Return the running ``sums`` of a state, checked."""
    out = {k: _vector(path, f"the {k} sum", s.get(k), DIM) for k in ("user", "session", "session_all")}
    speakers = s.get("speakers")
    if not isinstance(speakers, dict) or not all(isinstance(k, str) for k in speakers):
        fail(path, "the speaker sums must map speaker names to vectors")
    out["speakers"] = {k: _vector(path, f"the sum of speaker {k!r}", v, DIM) for k, v in speakers.items()}
    return out


def check_item_lists(path, items: dict, n: int) -> None:
    """Check the per-item string lists: one string per item."""
    for k in ITEM_LISTS:
        v = items.get(k)
        if not isinstance(v, list) or len(v) != n or set(map(type, v)) - {str}:
            got = f"{len(v)} entries" if isinstance(v, list) else type(v).__name__
            fail(path, f"{k} must list one string per item ({n} items), got {got}")
    if any(r not in ("user", "assistant") for r in items["roles"]):
        fail(path, "roles must be 'user' or 'assistant'")


def fill_first_in_session(items: dict) -> dict:
    """Give the items of a file written before stores kept ``first_in_session`` that field, read from their sessions.

    Such a file does not say which turn opened each session; the first *held* item of each
    run of equal sessions (in id order) is taken to have opened it, which is exact unless
    the opening turn was forgotten. A file that has the field is left as it is.

    >>> fill_first_in_session({"sessions": ["mon", "mon", "tue"]})["first_in_session"].tolist()
    [True, False, True]
    """
    if items.get("first_in_session") is None and isinstance(items.get("sessions"), list):
        items["first_in_session"] = first_in_session(items["sessions"]).astype(bool)
    return items


def check_item_arrays(path, items: dict) -> int:
    """Convert the per-item arrays to their dtypes and check them; return the number of items."""
    try:
        ids = np.asarray(items.get("ids"))
        if ids.size == 0 and ids.ndim == 1:
            ids = ids.astype(np.int64)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or np.any(np.diff(ids) <= 0):
            raise ValueError
    except (TypeError, ValueError):
        fail(path, "item ids must be integers in increasing order")
    n = len(ids)
    items["ids"] = ids
    state = items.get("state", {})
    if not isinstance(state, dict) or not all(isinstance(k, str) and _STATE_NAME.fullmatch(k) for k in state):
        fail(
            path, f"the per-item policy state must map names (lower case, digits, _) to arrays, got {short_repr(state)}"
        )
    items["state"] = state = dict(state)
    # in the order of the fields before the policy state left the core fields (level came after last_access)
    core = list(ITEM_ARRAYS)
    fields = [(k, items, k, *ITEM_ARRAYS[k]) for k in core[: core.index("last_access") + 1]]
    fields += [(state_field(k), state, k, np.float64, ()) for k in state]
    fields += [(k, items, k, *ITEM_ARRAYS[k]) for k in core[core.index("last_access") + 1 :]]
    for field, where, k, dtype, shape in fields:
        v = where.get(k)
        if v is None and k == "first_in_session":  # an older file's is read from its sessions (fill_first_in_session)
            fail(path, f"the item sessions must be a list of {n} strings, got {short_repr(items.get('sessions'))}")
        if v is None:
            fail(path, f"the item field {field} is missing")
        try:
            a = np.asarray(v)
            if a.dtype.kind not in "biuf":
                raise TypeError(a.dtype)
            a = a.astype(dtype, copy=False)
        except (TypeError, ValueError):
            fail(path, f"the item field {field} must be numeric")
        if a.shape != (n, *shape):
            fail(path, f"the item field {field} has shape {a.shape}, expected {(n, *shape)} for {n} items")
        where[k] = a
    finite = [(k, items[k]) for k in ("time", "valence", "retrievals", "last_access")]
    for field, a in finite + [(state_field(k), v) for k, v in state.items()]:
        if not np.all(np.isfinite(a)):
            fail(path, f"the item field {field} must be finite")
    if np.any(np.isnan(items["expires"])):
        fail(path, "the item field expires must be a time or +inf (never)")
    if not np.all(np.isfinite(items["embeddings"])):
        fail(path, "the item embeddings must be finite")
    F = items["factors"]
    if not np.all((F >= 0) & (F <= 1)):
        fail(path, "the item factors must lie in [0, 1]")
    if np.any(items["tokens"] < 0) or np.any(items["retrievals"] < 0):
        fail(path, "item tokens and retrieval counts must be >= 0")
    return n


def check_state(path, state: dict) -> dict:
    """Check every part of a state read from ``path`` (see the module docstring)."""
    for part in ("settings", "session", "sums", "items"):
        if not isinstance(state.get(part), dict):
            fail(path, f"the {part} of the store are missing")
    state["settings"] = check_settings(path, state["settings"])
    state["session"] = check_session(path, state["session"])
    state["sums"] = check_sums(path, state["sums"])
    n = check_item_arrays(path, state["items"])
    check_item_lists(path, state["items"], n)
    if n and state["session"]["next_id"] <= int(state["items"]["ids"][-1]):
        fail(path, f"next_id {state['session']['next_id']} is not above the largest item id")
    return state
