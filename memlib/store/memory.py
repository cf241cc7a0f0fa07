"""An agent-facing memory store driven by one value: encode, forget, retrieve.

:class:`MemoryStore` keeps the turns of one conversation. Each :meth:`~MemoryStore.add`
annotates the turn causally with the seven factors (the same definitions as
:mod:`memlib.factors` in the blind regime) and its text cues, and gives it an encoding
tier from its normalised value. :meth:`~MemoryStore.consolidate` ends a session: it fixes
the session's goal anchor (the centroid of the session's user turns), then drops the
items with the highest forget score until the budget holds (by default the lowest value
goes first; ``make_policy("paper")`` is eq. 3). :meth:`~MemoryStore.retrieve` ranks the
retained items for a query and counts the retrieval.

The default value (:data:`memlib.cues.STORE_CUES`, learned) reads the role, the text cues
and the goal, self and emotion factors. Task utility (``add(task_utility=...)``), value
alignment (``value_profile=``) and the usage count (retrievals, merges) enter the paper's
value ``V = f @ w`` (``MemoryStore(weights=...)``), and the usage count also eq. 3's
``1 / (1 + r)``; the default store records them but its value and rule do not read them.
Between a session's turns and its consolidation, goal relevance is provisional (the
anchor so far), so ``items()`` and ``retrieve`` may show a value that the consolidation
then fixes; ``explain`` and dry runs show the fixed one.

What users of memory libraries ask for is built in: pinned items are never
forgotten (:meth:`~MemoryStore.pin`), an item can expire (``add(..., expires=...)``),
a turn that repeats a stored one merges into it (``merge_threshold``, logged in
:attr:`~MemoryStore.merges`), a dry run shows what a consolidation would drop and
why (``consolidate(..., dry_run=True)``, :meth:`~MemoryStore.explain`), and a budget
can be counted in tokens (``budget_tokens=``).

A store made with ``MemoryStore(...)`` lives in memory; :meth:`~MemoryStore.save`
exports it to one ``.npz`` file. ``MemoryStore.open(path)`` keeps it in one
SQLite file instead (:mod:`memlib.store.durable`), every change one transaction.

The retrieval rank of the value policy is documented in
:class:`~memlib.store.policies.ValuePolicy`. Other forgetting and retrieval
rules (the published baselines of :mod:`memlib.store.baselines`) plug in through
the one interface :class:`~memlib.store.protocol.Policy`.

>>> import numpy as np
>>> from memlib.store import ValuePolicy
>>> rng = np.random.default_rng(0)
>>> def vec():
...     v = rng.normal(size=384)
...     return v / np.linalg.norm(v)
>>> store = MemoryStore()   # the measured defaults (memlib/defaults.json): drop the lowest value
>>> for day, text in enumerate(["I am terribly allergic to peanuts!", "Nice weather.", "My sister is Ana."]):
...     _ = store.add(text, role="user", time=float(day), embedding=vec())
>>> store.consolidate(budget=2, now=10.0)   # the small talk goes, although it is not the oldest
[1]
>>> [item["text"] for item in store.items()]
['I am terribly allergic to peanuts!', 'My sister is Ana.']
>>> store.tiers().tolist()   # V-bar: each value's place among the values the default was learned on
['semantic', 'semantic']
>>> eq3 = MemoryStore(weights=[0, 0, 0, 0, 1, 0, 0], policy=ValuePolicy(beta=5.0))   # eq. 3, V = task utility
>>> for day, utility in enumerate([1.0, 0.0]):
...     _ = eq3.add(f"turn {day}", time=float(day), embedding=vec(), task_utility=utility)
>>> eq3.consolidate(budget=1, now=10.0)   # the older item survives: its value resists
[1]

Pinning, expiry and a near-duplicate:

>>> store.pin(0)
>>> _ = store.add("Parking spot 42 today.", time=11.0, embedding=vec(), expires=12.0)
>>> store.add("My sister is Ana!", time=11.5, embedding=store.embeddings[1])   # merges into item 2
2
>>> [(m["id"], m["text"]) for m in store.merges]
[(2, 'My sister is Ana!')]
>>> [(r["id"], r["reason"]) for r in store.consolidate(budget=0, now=13.0, dry_run=True)]
[(3, 'expired'), (2, 'budget')]
>>> store.consolidate(budget=0, now=13.0), store.ids   # the pinned item stays
([2, 3], [0])
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import math
import numbers
import re
import threading
from pathlib import Path

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_choice, check_int
from memlib._text import bounded, clean_text
from memlib.cues import STORE_FACTOR_COLUMNS, TEXT_CUES, text_role_cues
from memlib.factors import emotion_and_valence, reliability
from memlib.store.policies import POLICIES, ValuePolicy
from memlib.store.protocol import Policy
from memlib.store.state import DIM, ITEM_ARRAYS, StoreError, check_state, fail, policy_from, short_repr
from memlib.value import check_weights, encoding_tier

_FI = {f: i for i, f in enumerate(FACTORS)}
_GOAL, _USAGE = _FI["goal_relevance"], _FI["usage_history"]
#: Default cosine at or above which a new turn merges into the stored item it repeats.
MERGE_THRESHOLD = 0.95
_UNSET = object()
#: The fields of a record of :attr:`MemoryStore.forgotten`.
FORGOTTEN_KEYS = ("id", "text", "time", "value", "tier", "reason", "at")

__all__ = ["DIM", "MERGE_THRESHOLD", "MemoryStore", "StoreError", "count_tokens", "to_days", "valence"]


#: Strings that pandas reads as the wall clock; a store refuses them (see :func:`to_days`).
_WALL_CLOCK_WORDS = ("now", "today")


def to_days(time, name: str = "time") -> float:
    """A time as float days: a number is taken as days; a datetime or Timestamp as days since 1970 (UTC if aware).

    The strings ``"now"`` and ``"today"`` are refused, as the data loaders refuse
    them: a store's clock is the times it is given (``time=None`` in
    :meth:`MemoryStore.add` is the latest of them), and a word that means another
    time at every call would make a store's history unrepeatable. Pass
    ``datetime.now()`` for the wall clock. ``name`` is the argument the error's
    hint names (``time``, ``now``).

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
        t = float(time)
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


def valence(texts) -> np.ndarray:
    """VADER compound valence in [-1, 1] of each text."""
    return emotion_and_valence(texts)[1]


def count_tokens(text: str) -> int:
    """The tokens a budget counts for a text: its whitespace-separated words (no model tokenizer).

    >>> count_tokens("I am allergic  to peanuts!")
    5
    """
    # counted one word at a time: split() would build a list as large as a giant turn
    return sum(1 for _ in _WORD.finditer(text))


_WORD = re.compile(r"\S+")


def _check_merge_threshold(m) -> float | None:
    if m is None:
        return None
    if isinstance(m, bool) or not isinstance(m, numbers.Real) or not 0.0 < m <= 1.0:
        raise ParameterError(f"merge_threshold must be a number in (0, 1] or None, got {m!r}")
    return float(m)


def _unit_interval(name: str, x) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or not 0.0 <= x <= 1.0:
        raise ParameterError(f"{name} must be a number in [0, 1], got {x!r}")
    return float(x)


def _check_weights(weights) -> np.ndarray:
    """:func:`memlib.value.check_weights`, with input that is not numbers at all one :class:`ParameterError` too."""
    a = np.asarray(weights) if not isinstance(weights, str) else None
    if a is None or a.dtype.kind not in "biufO":
        raise ParameterError(f"weights must be {len(FACTORS)} numbers >= 0, one per factor, got {short_repr(weights)}")
    try:
        return check_weights(a)
    except ParameterError:
        raise
    except (TypeError, ValueError):
        raise ParameterError(
            f"weights must be {len(FACTORS)} numbers >= 0, one per factor, got {short_repr(weights)}"
        ) from None


def _check_timeout(timeout) -> float:
    """Seconds to wait for another process's write lock: a finite number >= 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not math.isfinite(timeout) or timeout < 0:
        raise ParameterError(f"timeout must be a finite number of seconds >= 0, got {short_repr(timeout)}")
    return float(timeout)


def _check_bool(name: str, x) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False, got {short_repr(x)}")
    return bool(x)


def _locked(method):
    """Run ``method`` holding the store's lock (see *Threads* in :class:`MemoryStore`)."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


#: Serialises calls of the default embedder: a fast tokenizer raises "Already borrowed" when two
#: threads use it at once, and the model runs on every core anyway.
_DEFAULT_EMBEDDER_LOCK = threading.Lock()

#: Per-item arrays held in memory only, recomputed from the stored texts and roles on load:
#: ``is_user`` and the text cues, the part of :data:`memlib.cues.STORE_CUES` the factors do not hold.
_DERIVED = {"static_cues": (np.float64, (1 + len(TEXT_CUES),))}  # memlib.cues.text_role_cues
_ARRAYS = {**ITEM_ARRAYS, **_DERIVED}


class _Columns:
    """The per-item arrays of a store (``ITEM_ARRAYS`` and ``_DERIVED``), grown in amortised O(1)."""

    def __init__(self):
        self.n = 0
        self.data = {k: np.zeros((0, *shape), dtype) for k, (dtype, shape) in _ARRAYS.items()}

    def view(self, name: str) -> np.ndarray:
        return self.data[name][: self.n]

    def append(self, row: dict) -> None:
        if self.n == len(self.data["ids"]):
            cap = max(64, self.n + self.n // 2)
            for k, a in self.data.items():
                b = np.zeros((cap, *a.shape[1:]), a.dtype)
                b[: self.n] = a[: self.n]
                self.data[k] = b
        for k, v in row.items():
            self.data[k][self.n] = v
        self.n += 1

    def pop(self) -> None:
        self.n -= 1

    def take(self, pick: np.ndarray) -> None:
        for k, a in self.data.items():
            self.data[k] = a[: self.n][pick]
        self.n = len(pick)

    def replace(self, arrays: dict) -> None:
        self.data = {k: np.array(arrays[k], dtype=dtype) for k, (dtype, _) in _ARRAYS.items()}
        self.n = len(self.data["ids"])


def _value_argument(value, weights):
    """The store's cue value, or None for the paper's ``V = f @ w`` (see :class:`MemoryStore`)."""
    from memlib.value import CueValue, load_defaults

    if isinstance(value, str) and value == "paper":
        return None
    if value is None:
        return load_defaults()["value"] if weights is None else None
    if not isinstance(value, CueValue):
        raise ParameterError(f"value must be a memlib.value.CueValue or 'paper', got {type(value).__name__}")
    if weights is not None:
        raise ParameterError("pass weights (the paper's value) or value= (a cue value), not both")
    return value


def _column(name: str, doc: str):
    return property(lambda self: self._cols.view(name), doc=doc)


# --------------------------------------------------------------------------- the store


class MemoryStore:
    """A bounded memory for one conversation, ruled by one value.

    Parameters
    ----------
    weights : array_like, shape (7,), optional
        Factor weights of the paper's value ``V = f @ w``. Giving weights selects that
        value; learned weights come from :func:`memlib.learned_weights` (the
        oracle-blind study's blind regime), e.g.
        ``MemoryStore(weights=memlib.learned_weights("results/oracle-blind.json"))``.
    value : CueValue or 'paper', optional
        The value when no ``weights`` are given. Default: the learned cue value of
        ``memlib/defaults.json`` (:func:`memlib.value.load_defaults`), a linear value
        over the store cues of :data:`memlib.cues.STORE_CUES` and their products with
        ``is_user``, learned from gold retention on LoCoMo and LongMemEval-S. ``'paper'``
        is the paper's value with weight 1 for every factor. Any
        :class:`~memlib.value.CueValue` (e.g. from :func:`memlib.learning.fit_cue_value`)
        works; its normalised value ``V-bar`` is its place among the values of the turns it
        was learned on, which sets the encoding tiers.
    policy : Policy, optional
        Forgetting and retrieval rules (default :class:`ValuePolicy`, with the measured
        defaults; ``make_policy("paper")`` is the paper's eq. 3 with ``beta = 1``).
    value_profile : array_like, shape (384,), optional
        Embedding of the agent's value profile; makes the value-alignment factor live
        (read by the paper's value; the default cue value does not read it).
    embedder : callable, optional
        ``embedder(list of str) -> (n, 384)`` array-like, one embedding per text,
        used when :meth:`add`, :meth:`add_many`, :meth:`retrieve` or
        :meth:`retrieve_many` get text without an embedding (rows are made unit
        length). A wrong shape, a NaN or infinity, or a zero row raises a
        :class:`ParameterError` naming the embedder. Default:
        :func:`memlib.embeddings.encode` at the ``fast`` setting (128 word
        pieces, the setting the studies annotate at, so the store's embeddings
        match those the learned weights came from), straight from the model with
        no disk cache. The model loads on the first embedding, not before; call
        :meth:`warm_up` to load it ahead of the first turn. ``embed=`` is the
        deprecated old name of this parameter (a :class:`DeprecationWarning`).
    factor_set : {'paper', 'extended'}
        Reliability as the paper states it (provenance only, the default) or with
        our cues (:data:`memlib.factors.FACTOR_SETS`).
    merge_threshold : float in (0, 1] or None
        A new turn whose cosine to a stored, unexpired item is at least this
        (default :data:`MERGE_THRESHOLD`, 0.95: a repeat or a near-verbatim
        paraphrase) is not stored again: it merges into the most similar item,
        which is reinforced as a retrieval would reinforce it (its usage count
        grows by one), and the merge is logged in :attr:`merges`. ``None`` stores
        every turn.

    Notes
    -----
    ``MemoryStore(...)`` lives in memory (export it with :meth:`save`);
    :meth:`open` keeps a store in a SQLite file, one transaction per change.
    Item ids count the turns added, from 0; a merged turn uses up its id too,
    so ids are positions in the conversation.

    Threads: a store may be shared by threads (an agent server's thread pool).
    Its public operations are serialised by one reentrant lock per store, so
    each runs whole, as if alone: ids are handed out once and in order, and
    :meth:`save` writes a consistent store. Embedding a turn or a query (the
    slow part) runs outside the lock, so threads embed in parallel with a
    custom ``embedder``, which must then be safe to call from several threads
    (calls of the default embedder are serialised). A file store's one SQLite
    connection is used under the same lock (:class:`~memlib.store.durable.StoreFile`).
    The arrays ``embeddings`` and ``factors`` return are views: copy them if
    another thread may change the store meanwhile.
    """

    def __init__(
        self,
        weights=None,
        policy: Policy | None = None,
        value_profile=None,
        embedder=None,
        factor_set: str = "paper",
        merge_threshold: float | None = MERGE_THRESHOLD,
        *,
        value=None,
        embed=None,
    ):
        from memlib.factors import FACTOR_SETS

        self.factor_set = check_choice("factor_set", factor_set, FACTOR_SETS)
        self.value_model = _value_argument(value, weights)
        self.weights = _check_weights(np.ones(len(FACTORS)) if weights is None else weights)
        self.policy = policy or ValuePolicy()
        if not isinstance(self.policy, Policy):
            raise ParameterError(f"policy must be a memlib.store.Policy, got {type(self.policy).__name__}")
        self.value_profile = None if value_profile is None else self._check_vector("value_profile", value_profile)
        self.merge_threshold = _check_merge_threshold(merge_threshold)
        self._embedder = self._embedder_argument(embedder, embed, "MemoryStore")
        self._lock = threading.RLock()  # see Threads in the class docstring
        self._cols = _Columns()
        self._texts: list[str] = []
        self._roles: list[str] = []
        self._speakers: list[str] = []
        self._sessions: list[str] = []
        self._user_sum = np.zeros(DIM)
        self._speaker_sums: dict[str, np.ndarray] = {}
        self._session_sum = np.zeros(DIM)
        self._session_all_sum = np.zeros(DIM)
        self._session_has_user = False
        self._current_session: str | None = None
        self._next_id = 0
        self._now = -np.inf
        self._forgotten: list[dict] = []
        self._merges: list[dict] = []
        self._db = None  # the StoreFile of a store made by open()
        self._closed = None  # the path of a file store after close()
        self._data_version = None
        self._stale = False

    def __getstate__(self):
        """A copy or pickle of an in-memory store holds everything but its lock (a new copy gets its own)."""
        if self._db is not None:
            raise TypeError(f"a file store cannot be copied or pickled: copy {self._db.path} or use save()")
        with self._lock:
            state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # per-item arrays (views of the columns; policies read and update them)
    _ids = _column("ids", "Item ids, increasing.")
    _time = _column("time", "Time of each item (days).")
    _valence = _column("valence", "VADER valence of each item.")
    _retrievals = _column("retrievals", "Retrieval count of each item.")
    _last_access = _column("last_access", "Time of each item's last access (days).")
    _level = _column("level", "MemoryBank strength level of each item.")
    _expires = _column("expires", "Expiry time of each item (days; +inf: never).")
    _pinned = _column("pinned", "Whether each item is pinned.")
    _tokens = _column("tokens", "Tokens of each item (:func:`count_tokens`).")
    _emb = _column("embeddings", "Unit embeddings, float32.")
    _factors = _column("factors", "(n, 7) factor values.")

    # ------------------------------------------------------------------ writing
    def add(
        self,
        text: str,
        role: str = "user",
        time=None,
        speaker: str | None = None,
        session: str | None = None,
        embedding=None,
        emotion: float | None = None,
        task_utility: float = 0.0,
        pinned: bool = False,
        expires=None,
        *,
        _valence: float | None = None,
    ) -> int:
        """Store one turn; return its id (or the id of the item it merged into).

        A rejected call (any :class:`ParameterError`) leaves the store exactly as it was.

        Parameters
        ----------
        text : str
            A lone surrogate (``"\\ud800"``, not encodable as UTF-8) is stored as
            U+FFFD, as the data loaders read it (:func:`memlib._text.clean_text`);
            so are those of ``speaker`` and ``session``.
        role : {'user', 'assistant'}
        time : float (days) or datetime
            Must not go backwards. Default (None): the latest time seen, not the
            wall clock; the string ``"now"`` is refused (see :func:`to_days`).
        speaker : str, optional
            Default: the role. A user turn's self relevance compares it with the
            same speaker's earlier turns.
        session : str, optional
            Session label; a new label ends the previous session's goal anchor
            (call :meth:`consolidate` at session ends to forget).
        embedding : array_like (384,), optional
            Precomputed embedding of ``text`` (made unit length).
        emotion : float, optional
            Precomputed emotional intensity in [0, 1].
        task_utility : float
            Task utility in [0, 1] from a judge, if any.
        pinned : bool
            Never forget this item (see :meth:`pin`).
        expires : float (days), datetime or timedelta, optional
            When the item expires: a time like ``time``, or a ``timedelta`` after
            ``time``. An expired item is never retrieved and is dropped at the next
            consolidation. A pinned item cannot expire.

        Notes
        -----
        A turn that merges into a near-duplicate (see ``merge_threshold``) still
        counts as said: the time, the session and the centroids behind self and
        goal relevance move on as for any turn. The merged item becomes pinned if
        the new turn is, and expires at the later of the two expiries.
        """
        if not isinstance(text, str) or not text.strip():
            raise ParameterError("text must be a non-empty string")
        text = clean_text(text)  # a lone surrogate becomes U+FFFD (memlib._text)
        if role not in ("user", "assistant"):
            raise ParameterError(f"role must be 'user' or 'assistant', got {role!r}")
        task_utility = _unit_interval("task_utility", task_utility)
        if emotion is not None:
            emotion = _unit_interval("emotion", emotion)
        if not isinstance(pinned, (bool, np.bool_)):
            raise ParameterError(f"pinned must be True or False, got {pinned!r}")
        if pinned and expires is not None:
            raise ParameterError("an item cannot be both pinned and expiring: pass pinned=True or expires=")
        t_given = None if time is None else to_days(time)
        speaker = role if speaker is None else clean_text(str(speaker))
        session = "" if session is None else clean_text(str(session))
        e = self._embedding(text, embedding)
        if emotion is None:
            emo, val = emotion_and_valence([text])
            emotion, text_valence = float(emo[0]), float(val[0])
        else:  # (add_many passes the valence it computed for all its turns at once)
            text_valence = _valence_cached(text) if _valence is None else float(_valence)
        rel = float(reliability([role], [text], cues=self.factor_set == "extended")[0])

        with self._writing() as tx:
            t = self._now if t_given is None else t_given
            if t_given is None and not np.isfinite(t):
                raise ParameterError("the first add needs a time")
            if t < self._now:
                raise ParameterError(f"time goes backwards: {t} days is before the latest time {self._now} days")
            expiry = self._expiry(expires, t)
            plan = self._plan_add(text, role, t, speaker, session, e, emotion, text_valence, rel, task_utility)
            plan["pinned"], plan["expires"] = bool(pinned), expiry
            if plan["merge"] is not None:
                tx.undo.append(self._merge_into(plan))
            if tx.db is not None:
                self._write_add(tx.db, plan)
            tx.after.append(lambda: self._apply_add(plan))
        return plan["id"] if plan["merge"] is None else plan["merge"][0]

    def _now_at(self, now_given: float | None) -> float:
        """The time of a consolidation or an explanation: ``now_given``, or the latest time; never before it."""
        now = self._now if now_given is None else now_given
        if now < self._now:
            raise ParameterError(f"time goes backwards: now={now} days is before the latest time {self._now} days")
        return now

    def _expiry(self, expires, t: float) -> float:
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

    def _plan_add(self, text, role, t, speaker, session, e, emotion, text_valence, rel, task_utility) -> dict:
        """Everything an add changes, computed without changing anything."""
        new_session = session != self._current_session
        goal_fix = self._goal_plan() if new_session else None
        if new_session:
            session_sum, session_all_sum, has_user = np.zeros(DIM), np.zeros(DIM), False
        else:
            session_sum, session_all_sum, has_user = self._session_sum, self._session_all_sum, self._session_has_user
        f = np.zeros(len(FACTORS))
        f[_FI["emotional_intensity"]] = emotion
        f[_FI["reliability"]] = rel
        speaker_sum = self._speaker_sums.get(speaker, np.zeros(DIM))
        f[_FI["self_relevance"]] = _cos01(e, speaker_sum if role == "user" else self._user_sum)
        f[_FI["task_utility"]] = task_utility
        if self.value_profile is not None:
            f[_FI["value_alignment"]] = (1.0 + float(e @ self.value_profile)) / 2.0
        user_sum = self._user_sum
        if role == "user":
            speaker_sum, user_sum, session_sum, has_user = speaker_sum + e, user_sum + e, session_sum + e, True
        session_all_sum = session_all_sum + e
        f[_GOAL] = _cos01(e, session_sum if has_user else session_all_sum)  # provisional; final at the session's end
        merge = self._near_duplicate(e, t)
        return {
            "id": self._next_id,
            "t": t,
            "session": session,
            "goal_fix": goal_fix,
            "sums": {"user": user_sum, "session": session_sum, "session_all": session_all_sum},
            "speaker": (speaker, speaker_sum) if role == "user" else None,
            "has_user": has_user,
            "merge": merge,
            "row": {
                "ids": self._next_id,
                "time": t,
                "valence": text_valence,
                "retrievals": 0.0,
                "last_access": t,
                "level": 0.0,
                "tokens": count_tokens(text),
                "embeddings": e.astype(np.float32),
                "factors": np.clip(f, 0.0, 1.0),
                "static_cues": text_role_cues([text], [role])[0],
            },
            "lists": (text, role, speaker, session),
        }

    def _near_duplicate(self, e: np.ndarray, t: float):
        """``(id, cosine)`` of the stored unexpired item the turn ``e`` repeats, or None."""
        if self.merge_threshold is None or not len(self):
            return None
        cos = _matvec(self._emb, e.astype(np.float32))
        cos[self._expires <= t] = -np.inf
        j = int(np.argmax(cos))
        if cos[j] < self.merge_threshold:
            return None
        return int(self._ids[j]), float(cos[j])

    def _merge_into(self, plan: dict):
        """Reinforce the item a turn merges into (in memory); return the function that undoes it."""
        item_id, cos = plan["merge"]
        i = self._position(item_id)
        idx = np.array([i])
        snap = self._usage_snapshot(idx)
        pin_snap = (bool(self._pinned[i]), float(self._expires[i]))
        self.policy.on_retrieve(self, idx, plan["t"])
        if plan["pinned"]:
            self._pinned[i], self._expires[i] = True, np.inf
        elif not self._pinned[i]:
            self._expires[i] = max(self._expires[i], plan["expires"])
        plan["merge_row"] = i
        plan["merge_log"] = {"id": item_id, "turn": plan["id"], "text": plan["lists"][0], "time": plan["t"]}
        plan["merge_log"]["cosine"] = cos

        def undo():
            self._usage_restore(idx, snap)
            self._pinned[i], self._expires[i] = pin_snap

        return undo

    def _write_add(self, db, plan: dict) -> None:
        if plan["merge"] is not None:
            self._write_usage(db, np.array([plan["merge_row"]]))
            i = plan["merge_row"]
            db.update_pin(int(self._ids[i]), bool(self._pinned[i]), float(self._expires[i]))
            db.log_merge(plan["merge_log"])
        if plan["goal_fix"] is not None:
            pos, values = plan["goal_fix"]
            db.update_goal(self._ids[pos], values)
        db.put_session(
            {
                "current_session": plan["session"],
                "session_has_user": plan["has_user"],
                "next_id": plan["id"] + 1,
                "now": plan["t"],
            }
        )
        sums = dict(plan["sums"])
        if plan["speaker"] is not None:
            sums[f"speaker:{plan['speaker'][0]}"] = plan["speaker"][1]
        db.put_sums(sums)
        if plan["merge"] is None:
            text, role, speaker, session = plan["lists"]
            row = {k: np.asarray([v]) for k, v in plan["row"].items()}
            row.update(expires=np.array([plan["expires"]]), pinned=np.array([plan["pinned"]]))
            row.update(texts=[text], roles=[role], speakers=[speaker], sessions=[session])
            db.insert_items(row, [0])
        db.purge_vectors()

    def _apply_add(self, plan: dict) -> None:
        if plan["goal_fix"] is not None:
            pos, values = plan["goal_fix"]
            self._factors[pos, _GOAL] = values
        self._current_session = plan["session"]
        self._user_sum = plan["sums"]["user"]
        self._session_sum = plan["sums"]["session"]
        self._session_all_sum = plan["sums"]["session_all"]
        self._session_has_user = plan["has_user"]
        if plan["speaker"] is not None:
            self._speaker_sums[plan["speaker"][0]] = plan["speaker"][1]
        self._now = plan["t"]
        self._next_id = plan["id"] + 1
        if plan["merge"] is not None:
            if self._db is None:
                self._merges.append(plan["merge_log"])
            return
        self._cols.append({**plan["row"], "expires": plan["expires"], "pinned": plan["pinned"]})
        text, role, speaker, session = plan["lists"]
        self._texts.append(text)
        self._roles.append(role)
        self._speakers.append(speaker)
        self._sessions.append(session)

    def _goal_plan(self):
        """Final goal relevance of the current session's items: ``(positions, values)``, or None."""
        if self._current_session is None or not len(self):
            return None
        cur = self._current_session
        pos = np.fromiter((i for i, s in enumerate(self._sessions) if s == cur), dtype=np.int64)
        if not len(pos):
            return None
        anchor = self._session_sum if self._session_has_user else self._session_all_sum
        n = np.linalg.norm(anchor)
        if n == 0:
            return pos, np.full(len(pos), 0.5)
        cos = _matvec(self._emb[pos].astype(np.float64), anchor) / n
        return pos, np.clip((1.0 + cos) / 2.0, 0.0, 1.0)

    @contextlib.contextmanager
    def _goal_fixed(self, goal_fix):
        """The factors with the current session's final goal relevance, for the block only."""
        if goal_fix is None:
            yield
            return
        pos, values = goal_fix
        old = self._factors[pos, _GOAL].copy()
        self._factors[pos, _GOAL] = values
        try:
            yield
        finally:
            self._factors[pos, _GOAL] = old

    def pin(self, item_id: int, pinned: bool = True) -> None:
        """Pin the item ``item_id`` (or unpin it, with ``pinned=False``).

        A pinned item is never forgotten: a consolidation drops other items
        instead, and by default a pinned item does not count against the budget
        (see ``count_pinned`` of :meth:`consolidate`). Pinning clears an expiry.
        """
        if not isinstance(pinned, (bool, np.bool_)):
            raise ParameterError(f"pinned must be True or False, got {pinned!r}")
        with self._writing() as tx:
            i = self._position(item_id)
            expires = np.inf if pinned else float(self._expires[i])
            if tx.db is not None:
                tx.db.update_pin(int(item_id), bool(pinned), expires)
            tx.after.append(lambda: self._set_pin(i, bool(pinned), expires))

    def _set_pin(self, i: int, pinned: bool, expires: float) -> None:
        self._pinned[i], self._expires[i] = pinned, expires

    def unpin(self, item_id: int) -> None:
        """Unpin the item ``item_id``: it can be forgotten again."""
        self.pin(item_id, pinned=False)

    def consolidate(
        self,
        budget: int | None = None,
        now=None,
        *,
        budget_tokens: int | None = None,
        count_pinned: bool = False,
        dry_run: bool = False,
    ):
        """End the session and forget down to the budget; return the dropped ids.

        Expired items go first. Then, while the budget is exceeded, the unpinned
        item with the highest forget score under the policy goes (ties: the older
        item first). ``now`` (default: the latest time) is the time at which ages
        and expiry are measured.

        Parameters
        ----------
        budget : int, optional
            Most items to keep.
        now : float (days) or datetime, optional
        budget_tokens : int, optional
            Most tokens to keep, counted by :func:`count_tokens` (whitespace words).
            With both budgets, both must hold.
        count_pinned : bool
            Whether pinned items use up the budget (default: they do not, so the
            budget bounds the unpinned items). Pinned items are kept either way.
        dry_run : bool
            Change nothing; return what would go instead, as a list of dicts (the
            expired first, then in the order they would be dropped): ``id, text,
            reason`` (``'expired'`` or ``'budget'``), ``forget_score, value, tier``
            and ``contrib_<factor>`` = weight x factor, the contributions that sum
            to the value. :meth:`explain` gives the same for one item.

        Returns
        -------
        list of int, or list of dict with ``dry_run=True``
        """
        if budget is None and budget_tokens is None:
            raise ParameterError("consolidate needs a budget (items) or budget_tokens")
        budget = None if budget is None else check_int("budget", budget, minimum=0)
        budget_tokens = None if budget_tokens is None else check_int("budget_tokens", budget_tokens, minimum=0)
        if not isinstance(count_pinned, (bool, np.bool_)) or not isinstance(dry_run, (bool, np.bool_)):
            raise ParameterError("count_pinned and dry_run must be True or False")
        now_given = None if now is None else to_days(now, "now")
        with self._reading() if dry_run else self._writing() as tx:
            now = self._now_at(now_given)
            plan = self._plan_consolidate(budget, budget_tokens, now, count_pinned)
            if dry_run:
                return [self._explain_row(i, plan, reason) for i, reason in plan["order"]]
            if tx.db is not None:
                self._write_consolidate(tx.db, plan)
            tx.after.append(lambda: self._apply_consolidate(plan))
        return plan["dropped_ids"]

    def _plan_consolidate(self, budget, budget_tokens, now: float, count_pinned: bool) -> dict:
        goal_fix = self._goal_plan()
        n = len(self)
        expired = self._expires <= now if n else np.zeros(0, bool)
        pinned = self._pinned.astype(bool)
        cand = np.flatnonzero(~expired & ~pinned)
        fixed = ~expired & pinned
        over_items = over_tokens = False
        if self.policy.bounded and budget is not None:
            room = budget - (int(fixed.sum()) if count_pinned else 0)
            over_items = len(cand) > max(room, 0)
        if self.policy.bounded and budget_tokens is not None:
            held = int(self._tokens[cand].sum()) + (int(self._tokens[fixed].sum()) if count_pinned else 0)
            over_tokens = held > budget_tokens
        with self._goal_fixed(goal_fix):
            need = bool(expired.any()) or over_items or over_tokens
            scores = np.asarray(self.policy.forget_scores(self, now), float) if need and n else np.zeros(n)
            values = self.values()
        n_drop = 0
        order = cand[np.argsort(-scores[cand], kind="stable")] if (over_items or over_tokens) else cand[:0]
        if over_items:
            n_drop = len(cand) - max(room, 0)
        if over_tokens:  # drop in forget order until the remaining tokens fit
            remaining = held - np.concatenate([[0], np.cumsum(self._tokens[order])])
            fits = np.flatnonzero(remaining <= budget_tokens)
            n_drop = max(n_drop, int(fits[0]) if len(fits) else len(order))
        drop = expired.copy()
        drop[order[:n_drop]] = True
        return {
            "goal_fix": goal_fix,
            "now": now,
            "scores": scores,
            "values": values,
            "expired": expired,
            "drop": drop,
            "order": [(int(i), "expired") for i in np.flatnonzero(expired)]
            + [(int(i), "budget") for i in order[:n_drop]],
            "dropped_ids": self._ids[drop].tolist(),
        }

    def _forget_log(self, plan: dict) -> list[tuple]:
        """One record per dropped item: the values of :data:`FORGOTTEN_KEYS`."""
        idx = np.flatnonzero(plan["drop"])
        values = plan["values"][idx]
        return list(
            zip(
                self._ids[idx].tolist(),
                [self._texts[i] for i in idx],
                self._time[idx].tolist(),
                values.tolist(),
                self._tiers_of(values).tolist(),
                np.where(plan["expired"][idx], "expired", "budget").tolist(),
                [plan["now"]] * len(idx),
            )
        )

    def _write_consolidate(self, db, plan: dict) -> None:
        if plan["goal_fix"] is not None:
            pos, values = plan["goal_fix"]
            db.update_goal(self._ids[pos], values)
        db.log_forgotten(self._forget_log(plan))
        db.delete_items(plan["dropped_ids"])
        db.put_meta({"now": plan["now"]})

    def _apply_consolidate(self, plan: dict) -> None:
        if plan["goal_fix"] is not None:
            pos, values = plan["goal_fix"]
            self._factors[pos, _GOAL] = values
        self._now = plan["now"]
        if not plan["drop"].any():
            return
        if self._db is None:
            self._forgotten.extend(dict(zip(FORGOTTEN_KEYS, r)) for r in self._forget_log(plan))
        keep = np.flatnonzero(~plan["drop"])
        self._cols.take(keep)
        for name in ("_texts", "_roles", "_speakers", "_sessions"):
            old = getattr(self, name)
            setattr(self, name, [old[i] for i in keep])

    # ------------------------------------------------------------------ explaining
    def _explain_row(self, i: int, plan: dict, reason=None) -> dict:
        f = self._factors[i].copy()
        if plan["goal_fix"] is not None:
            pos, values = plan["goal_fix"]
            hit = np.flatnonzero(pos == i)
            if len(hit):
                f[_GOAL] = values[hit[0]]
        if self.value_model is not None:
            x = np.concatenate([self._cols.view("static_cues")[i], f[STORE_FACTOR_COLUMNS]])
            names, contrib = self.value_model.feature_names, self.value_model.contributions(x[None])[0]
        else:
            names, contrib = FACTORS, f * self.weights
        row = {"id": int(self._ids[i]), "text": self._texts[i]}
        if reason is not None:
            row["reason"] = reason
        row.update(
            forget_score=float(plan["scores"][i]),
            value=float(plan["values"][i]),
            tier=str(self._tiers_of(plan["values"][i : i + 1])[0]),
            pinned=bool(self._pinned[i]),
            expires=None if np.isinf(self._expires[i]) else float(self._expires[i]),
        )
        row.update({f"contrib_{name}": float(c) for name, c in zip(names, contrib)})
        return row

    def explain(self, item_id: int, now=None) -> dict:
        """Why the item ``item_id`` stays or goes: its forget score and the factor contributions to its value.

        The same fields as a row of ``consolidate(..., dry_run=True)`` (with the
        current session's goal relevance as a consolidation now would fix it),
        plus ``expired`` and ``rank``: the item's place in the order in which
        unpinned, unexpired items would be dropped (1: first to go; None for a
        pinned or expired item).
        """
        now_given = None if now is None else to_days(now, "now")
        with self._reading():
            i = self._position(item_id)
            now = self._now_at(now_given)
            goal_fix = self._goal_plan()
            with self._goal_fixed(goal_fix):
                scores = np.asarray(self.policy.forget_scores(self, now), float)
                values = self.values()
            plan = {"goal_fix": goal_fix, "scores": scores, "values": values}
            row = self._explain_row(i, plan)
            expired = self._expires <= now
            cand = ~expired & ~self._pinned.astype(bool)
            row["expired"] = bool(expired[i])
            if cand[i]:
                c = np.flatnonzero(cand)
                order = c[np.argsort(-scores[c], kind="stable")]
                row["rank"] = int(np.flatnonzero(order == i)[0]) + 1
            else:
                row["rank"] = None
        return row

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self._cols.n

    @property
    @_locked
    def ids(self) -> list[int]:
        """Ids of the retained items, oldest first."""
        return self._ids.tolist()

    @property
    @_locked
    def embeddings(self) -> np.ndarray:
        """(n, 384) unit embeddings (float32) of the retained items."""
        return self._emb

    @property
    @_locked
    def factors(self) -> np.ndarray:
        """(n, 7) factor values of the retained items."""
        return self._factors

    @property
    @_locked
    def forgotten(self) -> list[dict]:
        """Every dropped item: ``id, text, time, value, tier, reason`` (``budget`` or ``expired``) and ``at``."""
        if self._db is not None:
            return self._db.log("forgotten")
        return list(self._forgotten)

    @property
    @_locked
    def merges(self) -> list[dict]:
        """Every turn that merged into a stored near-duplicate: ``id`` (kept), ``turn``, ``text, time, cosine``."""
        if self._db is not None:
            return self._db.log("merges")
        return list(self._merges)

    @property
    @_locked
    def cues(self) -> np.ndarray:
        """(n, 11) store cues of the retained items (:data:`memlib.cues.STORE_CUES`), what a cue value reads."""
        return np.hstack([self._cols.view("static_cues"), self._factors[:, STORE_FACTOR_COLUMNS]])

    @_locked
    def values(self) -> np.ndarray:
        """Value of every retained item: ``V = f @ w``, or the store's cue value."""
        if self.value_model is not None:
            return self.value_model(self.cues)
        return _matvec(self._factors, self.weights)

    def _normalise(self, values: np.ndarray) -> np.ndarray:
        if self.value_model is not None:
            return self.value_model.normalise(values)
        total = self.weights.sum()
        return values / total if total > 0 else np.zeros(len(values))

    @_locked
    def normalised_values(self) -> np.ndarray:
        """``V-bar`` in [0, 1]: ``V / sum(w)``, or a cue value's place among its training values."""
        return self._normalise(self.values())

    def _tiers_of(self, values: np.ndarray) -> np.ndarray:
        return encoding_tier(np.clip(self._normalise(values), 0, 1))

    @_locked
    def tiers(self) -> np.ndarray:
        """Encoding tier of every retained item (from its normalised value)."""
        return self._tiers_of(self.values())

    @_locked
    def similarity(self, query_vec) -> np.ndarray:
        """``(1 + cos) / 2`` between a unit query vector and every item (float32 products)."""
        cos = _matvec(self._emb, np.asarray(query_vec, dtype=np.float32))
        return (1.0 + cos.astype(np.float64)) / 2.0

    def _item(self, i: int, value: float, tier: str) -> dict:
        e = self._expires[i]
        return {
            "id": int(self._ids[i]),
            "text": self._texts[i],
            "role": self._roles[i],
            "speaker": self._speakers[i],
            "session": self._sessions[i],
            "time": float(self._time[i]),
            "retrievals": int(self._retrievals[i]),
            "value": float(value),
            "tier": str(tier),
            "pinned": bool(self._pinned[i]),
            "expires": None if np.isinf(e) else float(e),
            "tokens": int(self._tokens[i]),
            **dict(zip(FACTORS, self._factors[i].tolist())),
        }

    @_locked
    def items(self) -> list[dict]:
        """The retained items with their factors, value and tier, oldest first (expired ones until consolidated)."""
        self._sync()
        v, tiers = self.values(), self.tiers()
        return [self._item(i, v[i], tiers[i]) for i in range(len(self))]

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.items())

    def retrieve(
        self, query: str | None = None, k: int = 5, query_embedding=None, now=None, update: bool = True
    ) -> list[dict]:
        """The ``k`` best unexpired items for a query, best first (each dict has a ``score``).

        Returned items' retrieval counts grow by one (``update=False`` leaves
        the store unchanged, for evaluation on a snapshot). A query embedding
        must be 384 finite numbers, not all zero.
        """
        k = check_int("k", k, minimum=1)
        update = _check_bool("update", update)
        if isinstance(query, str):
            query = clean_text(query)
        if query_embedding is None:
            if not isinstance(query, str) or not query.strip():
                raise ParameterError("retrieve needs a query string or a query_embedding")
            query_embedding = self._embed([query])[0]
        q = self._check_vector("query_embedding", query_embedding)
        qv = _valence_cached(query) if isinstance(query, str) else 0.0
        now_given = None if now is None else to_days(now, "now")
        with self._writing() if update else self._reading() as tx:
            now = self._now if now_given is None else now_given
            if not len(self):
                return []
            scores = np.asarray(self.policy.retrieval_scores(self, q, qv, now), float)
            alive = self._expires > now
            order = _top_k(np.where(alive, scores, -np.inf), min(k, int(alive.sum())))
            v = self.values()[order]
            tiers = self._tiers_of(v)
            out = [dict(self._item(i, v[j], tiers[j]), score=float(scores[i])) for j, i in enumerate(order)]
            if update and len(order):
                snap = self._usage_snapshot(order)
                tx.undo.append(lambda: self._usage_restore(order, snap))
                self.policy.on_retrieve(self, order, now)
                if tx.db is not None:
                    self._write_usage(tx.db, order)
        return out

    @_locked
    def rank(self, query_embedding, query_valence: float = 0.0, now=None) -> np.ndarray:
        """Positions of the retained unexpired items in retrieval order (no state change)."""
        q = self._check_vector("query_embedding", query_embedding)
        if not len(self):
            return np.zeros(0, dtype=np.int64)
        now = self._now if now is None else to_days(now, "now")
        scores = np.asarray(self.policy.retrieval_scores(self, q, query_valence, now), float)
        order = np.argsort(-scores, kind="stable")
        return order[self._expires[order] > now]

    def _refresh_usage(self, idx) -> None:
        r = self._retrievals[idx]
        self._factors[idx, _USAGE] = r / (1.0 + r)

    def _usage_snapshot(self, idx) -> tuple:
        return tuple(a[idx].copy() for a in (self._retrievals, self._last_access, self._level, self._factors))

    def _usage_restore(self, idx, snap) -> None:
        self._retrievals[idx], self._last_access[idx], self._level[idx], self._factors[idx] = snap

    def _write_usage(self, db, idx) -> None:
        db.update_usage(
            self._ids[idx], self._retrievals[idx], self._last_access[idx], self._level[idx], self._factors[idx]
        )

    def _position(self, item_id) -> int:
        """Position of the retained item ``item_id``."""
        if isinstance(item_id, bool) or not isinstance(item_id, numbers.Integral):
            raise ParameterError(f"an item id must be an integer, got {item_id!r}")
        i = int(np.searchsorted(self._ids, item_id))
        if i == len(self) or self._ids[i] != item_id:
            raise ParameterError(f"no retained item has id {item_id} (never added, merged or forgotten)")
        return i

    # ------------------------------------------------------------------ batches and warm-up (an agent loop)
    def add_many(self, turns) -> list[int]:
        """Store several turns at once; return the ids :meth:`add` would have returned, one per turn.

        The result is the same as calling :meth:`add` on each turn in order (same
        ids, factors, values, merges), only faster: the turns without an
        embedding are embedded in one call of the embedder, and the emotion and
        valence of all turns are computed in one pass.

        Parameters
        ----------
        turns : iterable of dict
            One dict per turn, holding keyword arguments of :meth:`add`: ``text``
            (required), ``role, time, speaker, session, embedding, emotion,
            task_utility, pinned, expires``.

        Returns
        -------
        list of int

        Notes
        -----
        Every turn is checked (keys and values, and times that must not go
        backwards from turn to turn) before anything changes, and the embedder is
        called before anything changes: a :class:`ParameterError` that names the
        turn and the key leaves the store as it was. Then the turns are added one
        by one; for a store made by :meth:`open` each turn is its own transaction,
        so an interruption part-way (a killed process, or an error no check could
        foresee) keeps the turns before it, each whole. With the default embedder,
        a text embedded in a batch and the same text embedded alone agree to
        float32 precision (padding changes the arithmetic, not the result).

        Examples
        --------
        >>> import zlib
        >>> def embedder(texts):   # a stand-in for a sentence model: a fixed random unit vector per text
        ...     rows = [np.random.default_rng(zlib.crc32(t.encode())).normal(size=384) for t in texts]
        ...     return np.array(rows)
        >>> store = MemoryStore(embedder=embedder)
        >>> store.add_many(
        ...     [
        ...         {"text": "I am allergic to peanuts!", "time": 0.0, "session": "monday"},
        ...         {"text": "Noted: no peanuts.", "role": "assistant"},
        ...         {"text": "I am allergic to peanuts!", "time": 1.0, "session": "tuesday"},
        ...     ]
        ... )   # the repeat merges into item 0
        [0, 1, 0]
        >>> store.add_many([{"text": "My sister is Ana.", "time": 2.0}, {"text": "Hi", "colour": "red"}])
        Traceback (most recent call last):
        ...
        memlib._checks.ParameterError: add_many: turn 1 has an unknown key 'colour' (add takes text, role, ...)
        >>> len(store), store.ids   # nothing of that batch was added
        (2, [0, 1])
        """
        with self._reading():  # (a file store catches up first: times are checked against its latest)
            if self._closed is not None:
                fail(self._closed, "the store is closed; open it again to change it")
            calls = self._check_turns(turns)
            checked_at = self._now
        if not calls:
            return []
        need = [i for i, kw in enumerate(calls) if kw.get("embedding") is None]
        if need:
            E = self._embed([calls[i]["text"] for i in need])
            for j, i in enumerate(need):
                calls[i]["embedding"] = E[j]
        emotion, text_valence = emotion_and_valence([kw["text"] for kw in calls], workers=1)  # no fork in an agent
        for i, kw in enumerate(calls):
            if kw.get("emotion") is None:
                kw["emotion"] = float(emotion[i])
            kw["_valence"] = float(text_valence[i])
        ids = []
        with self._reading():  # the turns in a row, no other thread's add between them
            if self._now != checked_at:  # another thread (or process) added meanwhile: check the times again
                self._check_turns([{k: v for k, v in kw.items() if not k.startswith("_")} for kw in calls])
            for i, kw in enumerate(calls):
                try:
                    ids.append(self.add(**kw))
                except ParameterError as exc:
                    kept = f"turns 0 to {i - 1} were added" if i else "no turn was added"
                    raise ParameterError(f"add_many: turn {i}: {exc} ({kept})") from None
        return ids

    def _check_turns(self, turns) -> list[dict]:
        """The turns of :meth:`add_many` as keyword dicts of :meth:`add`, every key and value checked."""
        import inspect
        from collections.abc import Mapping

        keys = [k for k in inspect.signature(MemoryStore.add).parameters if k != "self" and not k.startswith("_")]
        if isinstance(turns, (str, bytes, Mapping)):
            raise ParameterError(f"add_many takes an iterable of dicts, one per turn, got a {type(turns).__name__}")
        try:
            turns = list(turns)
        except TypeError:
            raise ParameterError(
                f"add_many takes an iterable of dicts, one per turn, got {type(turns).__name__}"
            ) from None
        calls, now = [], self._now
        for i, turn in enumerate(turns):
            if not isinstance(turn, Mapping):
                raise ParameterError(f"add_many: turn {i} must be a dict of add's arguments, got {type(turn).__name__}")
            unknown = [k for k in turn if k not in keys]
            if unknown:
                raise ParameterError(
                    f"add_many: turn {i} has an unknown key {unknown[0]!r} (add takes {', '.join(keys)})"
                )
            if "text" not in turn:
                raise ParameterError(f"add_many: turn {i} has no 'text'")
            kw = dict(turn)
            key = "text"
            try:
                if not isinstance(kw["text"], str) or not kw["text"].strip():
                    raise ParameterError(f"text must be a non-empty string, got {short_repr(kw['text'])}")
                kw["text"] = clean_text(kw["text"])  # what add stores, and so what the embedder gets
                key = "role"
                if kw.get("role", "user") not in ("user", "assistant"):
                    raise ParameterError(f"role must be 'user' or 'assistant', got {kw['role']!r}")
                key = "task_utility"
                _unit_interval("task_utility", kw.get("task_utility", 0.0))
                key = "emotion"
                if kw.get("emotion") is not None:
                    _unit_interval("emotion", kw["emotion"])
                key = "pinned"
                pinned = kw.get("pinned", False)
                if not isinstance(pinned, (bool, np.bool_)):
                    raise ParameterError(f"pinned must be True or False, got {pinned!r}")
                key = "expires"
                if pinned and kw.get("expires") is not None:
                    raise ParameterError("an item cannot be both pinned and expiring: pass pinned=True or expires=")
                key = "time"
                t = now if kw.get("time") is None else to_days(kw["time"])
                if not np.isfinite(t):
                    raise ParameterError("the first add needs a time")
                if t < now:
                    raise ParameterError(f"time goes backwards: {t} days is before the latest time {now} days")
                key = "expires"
                self._expiry(kw.get("expires"), t)
                key = "embedding"
                if kw.get("embedding") is not None:
                    self._check_vector("embedding", kw["embedding"])
            except ParameterError as exc:
                raise ParameterError(f"add_many: turn {i}, {key!r}: {exc}") from None
            now = t
            calls.append(kw)
        return calls

    def retrieve_many(self, queries, k: int = 5, update: bool = True, now=None) -> list[list[dict]]:
        """The result of :meth:`retrieve` for each query, in order; the queries are embedded in one call.

        The same as ``[store.retrieve(q, k=k, update=update, now=now) for q in
        queries]``: with ``update=True`` each query's results count as retrieved
        before the next query is ranked (for a store made by :meth:`open`, one
        transaction per query). The queries are checked, and embedded, before
        anything changes.

        Examples
        --------
        >>> import re, zlib
        >>> def bag_of_words(texts):   # a stand-in for a sentence model: texts that share words are close
        ...     E = np.zeros((len(texts), 384))
        ...     for i, t in enumerate(texts):
        ...         for w in re.findall(r"[a-z]+", t.lower()):
        ...             E[i, zlib.crc32(w.encode()) % 384] += 1.0
        ...     return E
        >>> store = MemoryStore(embedder=bag_of_words)
        >>> store.add_many([{"text": "My dog is called Rex.", "time": 0.0}, {"text": "I live in Lyon."}])
        [0, 1]
        >>> hits = store.retrieve_many(["What is my dog called?", "Where do I live?"], k=1)
        >>> [[r["text"] for r in h] for h in hits]
        [['My dog is called Rex.'], ['I live in Lyon.']]
        """
        k = check_int("k", k, minimum=1)
        if isinstance(queries, (str, bytes)):
            raise ParameterError("retrieve_many takes a list of query strings, got one string: use retrieve")
        try:
            queries = list(queries)
        except TypeError:
            raise ParameterError(f"retrieve_many takes a list of query strings, got {type(queries).__name__}") from None
        update = _check_bool("update", update)
        for i, q in enumerate(queries):
            if not isinstance(q, str) or not q.strip():
                raise ParameterError(f"retrieve_many: query {i} must be a non-empty string, got {short_repr(q)}")
        queries = [clean_text(q) for q in queries]
        if now is not None:
            to_days(now, "now")
        if not queries:
            return []
        E = self._embed(queries)
        with self._lock:  # the queries in a row, no other thread's operation between them
            return [self.retrieve(q, k=k, query_embedding=E[i], now=now, update=update) for i, q in enumerate(queries)]

    @staticmethod
    def warm_up() -> float:
        """Load what the first turn would load (the default embedder's model, VADER's lexicon); return the seconds.

        Nothing loads a model before it is needed: importing :mod:`memlib` or
        making a store does not. So the first :meth:`add` that embeds text would
        wait for the model (seconds); call this once, e.g. while the agent starts,
        and the first turn costs what any turn costs. It adds one turn to a
        scratch store and throws the store away. Later calls return at once. A
        store with its own ``embedder`` only needs VADER from this.

        Examples
        --------
        >>> seconds = MemoryStore.warm_up()
        >>> MemoryStore().add("I am allergic to peanuts!", time=0.0)   # no model to wait for
        0
        """
        from time import perf_counter

        t0 = perf_counter()
        MemoryStore().add("Warming up: I am so glad to meet you!", time=0.0)
        return perf_counter() - t0

    # ------------------------------------------------------------------ embeddings
    @staticmethod
    def _check_vector(name: str, v) -> np.ndarray:
        """A unit float64 copy of ``v``, which must be 384 finite real numbers in one row (1-D), not all zero."""
        try:
            a = np.asarray(v)
            if a.dtype.kind == "c":
                raise ParameterError(f"{name} must be real numbers, got {a.dtype.name} numbers")
            e = np.asarray(a, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ParameterError):
                raise
            raise ParameterError(f"{name} must be {DIM} finite numbers") from None
        if e.ndim != 1:
            raise ParameterError(f"{name} must be {DIM} finite numbers in one 1-D row, got shape {e.shape}")
        if e.shape != (DIM,) or not np.all(np.isfinite(e)):
            raise ParameterError(
                f"{name} must be {DIM} finite numbers, got shape {e.shape}"
                + ("" if e.shape != (DIM,) else " with a NaN or infinity")
            )
        n = np.linalg.norm(e)
        if n == 0:
            raise ParameterError(f"{name} must not be the zero vector")
        return e / n

    def _embedding(self, text, embedding) -> np.ndarray:
        if embedding is None:
            embedding = self._embed([text])[0]
        return self._check_vector("embedding", embedding)

    @staticmethod
    def _embedder_argument(embedder, embed, caller: str):
        """The ``embedder`` argument of ``caller``, or its deprecated alias ``embed`` (with a warning)."""
        if embed is not None:
            if embedder is not None:
                raise ParameterError(f"{caller}: pass embedder= only (embed= is its deprecated old name), not both")
            import warnings

            warnings.warn(
                f"{caller}(embed=...) is deprecated: pass embedder=... instead", DeprecationWarning, stacklevel=3
            )
            embedder = embed
        if embedder is not None and not callable(embedder):
            raise ParameterError(
                f"embedder must be a callable, list of str -> (n, {DIM}) array, got {type(embedder).__name__}"
            )
        return embedder

    def _embed(self, texts: list[str]) -> np.ndarray:
        """(n, 384) float64 embeddings of ``texts`` from the store's embedder, in one call, checked."""
        if self._embedder is None:
            from memlib.embeddings import encode

            with _DEFAULT_EMBEDDER_LOCK:
                name, raw = "memlib.embeddings.encode (the default)", encode(texts, setting="fast")
        else:
            fn = self._embedder
            name = getattr(fn, "__qualname__", None) or repr(fn)[:80]
            raw = fn(texts)
        try:
            out = np.asarray(raw)
            if out.dtype.kind == "c":
                raise ParameterError(
                    f"the embedder {name} must return real numbers, got an array of {out.dtype.name} numbers"
                )
            out = np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ParameterError):
                raise
            raise ParameterError(
                f"the embedder {name} must return an (n, {DIM}) array of numbers, got {type(raw).__name__}"
            ) from None
        if out.shape != (len(texts), DIM):
            raise ParameterError(
                f"the embedder {name} returned shape {out.shape} for {len(texts)} texts; "
                f"it must return ({len(texts)}, {DIM}): one row of {DIM} numbers per text"
            )
        bad = ~np.isfinite(out).all(axis=1) | ~out.any(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "a zero vector" if np.isfinite(out[i]).all() else "a NaN or infinity"
            raise ParameterError(f"the embedder {name} returned {what} for text {i} ({texts[i][:60]!r})")
        return out

    # ------------------------------------------------------------------ state, files and transactions
    def _state(self) -> dict:
        """The store's state (see :mod:`memlib.store.state`); arrays are views."""
        return {
            "settings": {
                "policy": type(self.policy).__name__,
                "policy_config": self.policy.config(),
                "factor_set": self.factor_set,
                "weights": self.weights,
                "value_profile": self.value_profile,
                "merge_threshold": self.merge_threshold,
                "value": self.value_model,
            },
            "session": {
                "current_session": self._current_session,
                "session_has_user": self._session_has_user,
                "next_id": self._next_id,
                "now": None if not np.isfinite(self._now) else float(self._now),
            },
            "sums": {
                "user": self._user_sum,
                "session": self._session_sum,
                "session_all": self._session_all_sum,
                "speakers": dict(self._speaker_sums),
            },
            "items": {
                **{k: self._cols.view(k) for k in ITEM_ARRAYS},
                "texts": self._texts,
                "roles": self._roles,
                "speakers": self._speakers,
                "sessions": self._sessions,
            },
        }

    def _load_state(self, state: dict) -> None:
        """Replace the data (not the settings) by a checked ``state``."""
        sess, sums, items = state["session"], state["sums"], state["items"]
        self._current_session = sess["current_session"]
        self._session_has_user = bool(sess["session_has_user"])
        self._next_id = int(sess["next_id"])
        self._now = -np.inf if sess["now"] is None else float(sess["now"])
        self._user_sum = np.array(sums["user"], np.float64)
        self._session_sum = np.array(sums["session"], np.float64)
        self._session_all_sum = np.array(sums["session_all"], np.float64)
        self._speaker_sums = {k: np.array(v, np.float64) for k, v in sums["speakers"].items()}
        self._cols.replace({**items, "static_cues": text_role_cues(items["texts"], items["roles"])})
        self._texts, self._roles = list(items["texts"]), list(items["roles"])
        self._speakers, self._sessions = list(items["speakers"]), list(items["sessions"])

    @classmethod
    def _from_state(cls, path, state: dict, policy, embedder) -> MemoryStore:
        try:
            return cls._build_from_state(path, state, policy, embedder)
        except RecursionError:  # a tampered value nested thousands of levels deep
            fail(path, "a stored value is nested too deeply to be a memlib store's")

    @classmethod
    def _build_from_state(cls, path, state: dict, policy, embedder) -> MemoryStore:
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
        store._load_state(state)
        return store

    @_locked
    def save(self, path) -> None:
        """Export the store to one ``.npz`` file (arrays plus a JSON header; no pickle).

        The write is atomic and private (mode 0600): a process killed while saving
        leaves the old file whole and no temporary file behind
        (:func:`memlib.store.npz.write_private`). An error names ``path``.
        """
        from memlib.store.npz import write_npz

        self._sync()
        write_npz(path, self._state(), self.forgotten, self.merges)

    @classmethod
    def load(cls, path, policy: Policy | None = None, embedder=None, *, embed=None) -> MemoryStore:
        """Read a store exported by :meth:`save` into memory.

        The policy is rebuilt from its saved name and settings (built-in
        policies); pass ``policy`` to supply another. The embedder is never
        saved: pass ``embedder`` as to :class:`MemoryStore` (``embed=`` is its
        deprecated old name). A missing, corrupt or tampered file raises
        :class:`StoreError` naming the file and the field.
        """
        from memlib.store.npz import read_npz

        embedder = cls._embedder_argument(embedder, embed, "MemoryStore.load")
        state, forgotten, merges = read_npz(path, MERGE_THRESHOLD)
        store = cls._from_state(Path(path), state, policy, embedder)
        store._forgotten, store._merges = list(forgotten), list(merges)
        return store

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
        embed=None,
    ) -> MemoryStore:
        """A store kept in the SQLite file ``path`` (created if missing), one transaction per change.

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
            the stored factors were computed with it. ``embedder`` is never stored
            (``embed=`` is its deprecated old name).
        timeout : float
            Seconds to wait for another process's write lock.
        synchronous : {'normal', 'full'}
            ``normal``: a commit survives a killed process; a power cut may undo
            the last commits but never corrupts the file. ``full``: also survives a
            power cut, one disk flush per change.

        Examples
        --------
        >>> import tempfile, numpy as np
        >>> path = tempfile.mkdtemp() + "/memory.db"
        >>> with MemoryStore.open(path) as st:
        ...     st.add("I am allergic to peanuts.", time=0.0, embedding=np.eye(384)[0])
        0
        >>> MemoryStore.open(path).items()[0]["text"]
        'I am allergic to peanuts.'
        """
        from memlib.store.durable import SYNCHRONOUS, StoreFile

        timeout = _check_timeout(timeout)
        check_choice("synchronous", synchronous, SYNCHRONOUS)
        embedder = cls._embedder_argument(embedder, embed, "MemoryStore.open")
        if weights is not None:
            _check_weights(weights)  # before a new file is made
        db = StoreFile(path, timeout=timeout, synchronous=synchronous)
        try:
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
                db.begin_write()
                try:
                    if not db.initialised():  # another process may have created it meanwhile
                        db.create(fresh._state())
                    db.commit()
                except BaseException:
                    db.rollback()
                    raise
            version = db.data_version()
            with db.reading():
                state = db.read_state()
            store = cls._from_state(db.path, state, policy, embedder)
            store._db, store._data_version = db, version
            store._reconfigure(weights, policy, value_profile, factor_set, merge_threshold, value)
        except BaseException:
            db.discard()  # closes it, and removes the file if this call made it and it holds no store
            raise
        return store

    def _reconfigure(self, weights, policy, value_profile, factor_set, merge_threshold, value=None) -> None:
        """Apply the settings given to :meth:`open` for an existing file (see there)."""
        if factor_set is not None and factor_set != self.factor_set:
            raise ParameterError(
                f"{self._db.path} was built with factor_set={self.factor_set!r}; its factors cannot change set"
            )
        if value_profile is not None:
            vp = self._check_vector("value_profile", value_profile)
            if self.value_profile is None or not np.allclose(vp, self.value_profile):
                raise ParameterError(f"{self._db.path} was built with another value_profile")
        changed = False
        if weights is not None or value is not None:
            model = _value_argument(value, weights)
            changed |= model != self.value_model
            self.value_model = model
        if weights is not None:
            w = _check_weights(weights)
            changed |= not np.array_equal(w, self.weights)
            self.weights = w
        if policy is not None:
            changed = True
        if merge_threshold is not _UNSET:
            m = _check_merge_threshold(merge_threshold)
            changed |= m != self.merge_threshold
            self.merge_threshold = m
        if changed:
            with self._writing() as tx:
                tx.db.put_settings(self._state()["settings"])

    @_locked
    def persist(self, path, *, timeout: float = 5.0, synchronous: str = "normal") -> MemoryStore:
        """Write this in-memory store to a new SQLite file ``path`` and keep it there from now on.

        ``MemoryStore.load("memory.npz").persist("memory.db")`` turns an export into
        a durable store. Returns the store itself. A failed call leaves the store
        in memory as it was and no file behind (a file it made is removed; an
        existing file is never touched).
        """
        from memlib.store.durable import SYNCHRONOUS, StoreFile

        if self._db is not None:
            raise ParameterError(f"this store is already kept in {self._db.path}")
        timeout = _check_timeout(timeout)
        check_choice("synchronous", synchronous, SYNCHRONOUS)
        db = StoreFile(path, timeout=timeout, synchronous=synchronous)
        try:
            db.begin_write()
            try:
                if db.initialised():
                    fail(db.path, "already holds a store; open it with MemoryStore.open")
                with db.errors():
                    db.create(self._state(), self._forgotten, self._merges)
                db.commit()
            except BaseException:
                db.rollback()
                raise
            self._data_version = db.data_version()
        except BaseException:
            db.discard()  # closes it, and removes the file if this call made it and it holds no store
            raise
        self._db = db
        self._forgotten, self._merges = [], []
        return self

    @property
    def path(self) -> Path | None:
        """The SQLite file of a store made by :meth:`open` (None in memory)."""
        return None if self._db is None else self._db.path

    @_locked
    def close(self) -> None:
        """Close the SQLite file of a store made by :meth:`open`; the store stays readable, but no longer changes."""
        if self._db is not None:
            self._closed = self._db.path
            self._forgotten, self._merges = self._db.log("forgotten"), self._db.log("merges")
            self._db.close()
            self._db = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _sync(self, locked: bool = False) -> None:
        """Catch up with the file if another process wrote to it (or an operation was cut short).

        ``locked``: inside a write transaction, which already sees the latest state.
        """
        if self._db is None:
            return
        version = self._db.data_version()
        if self._stale or version != self._data_version:
            if locked:
                state = self._db.read_state()
            else:
                with self._db.reading():
                    state = self._db.read_state()
            self._load_state(check_state(self._db.path, state))
            self._data_version, self._stale = version, False

    @contextlib.contextmanager
    def _writing(self):
        """One change: validate, compute and write inside the block, apply in memory after the commit.

        The block appends to ``tx.after`` what applies the change in memory (run
        once the transaction has committed) and to ``tx.undo`` what reverts a change
        it already made in memory (run if anything fails). A durable store's block
        runs inside one SQLite write transaction, which rolls back on any error.
        """
        with self._lock:
            if self._closed is not None:
                fail(self._closed, "the store is closed; open it again to change it")
            tx = _Tx(self._db)
            try:
                if tx.db is not None:
                    tx.db.begin_write()
                    self._sync(locked=True)
                    with tx.db.errors():
                        yield tx
                    self._stale = True  # until the committed change is applied in memory
                    tx.db.commit()
                else:
                    yield tx
            except BaseException:
                if tx.db is not None:
                    tx.db.rollback()
                for undo in reversed(tx.undo):
                    undo()
                raise
            for apply in tx.after:
                apply()
            self._stale = False

    @contextlib.contextmanager
    def _reading(self):
        """A block that reads the store (caught up with the file first); ``tx.db`` is None."""
        with self._lock:
            self._sync()
            yield _Tx(None)


class _Tx:
    """What one change of a store does after its commit (``after``) or on failure (``undo``)."""

    def __init__(self, db):
        self.db = db
        self.after: list = []
        self.undo: list = []


def _valence_cached(text: str) -> float:
    """VADER's valence of a text, from a cache keyed by the bounded prefix VADER reads (not the whole text)."""
    return _valence_of_prefix(bounded(text))


@functools.lru_cache(maxsize=4096)
def _valence_of_prefix(text: str) -> float:
    return float(valence([text])[0])


def _matvec(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``A @ x`` in one thread: BLAS's threaded matrix-vector product stalls for milliseconds on a busy CPU."""
    return np.einsum("ij,j->i", A, x)


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest scores, best first; ties: the lower position first (a stable sort's order)."""
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


def _cos01(e: np.ndarray, anchor: np.ndarray) -> float:
    n = np.linalg.norm(anchor)
    if n == 0:
        return 0.5
    return float(np.clip((1.0 + float(e @ anchor) / n) / 2.0, 0.0, 1.0))
