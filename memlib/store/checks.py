"""The checks of a store's arguments: a turn's, one definition for ``add`` and ``add_many``, and the settings'.

A turn is checked in two steps. :func:`check_turn` checks what needs no clock (the
text, role, numbers and flags; it reads the time) and returns a :class:`Turn`;
:func:`check_clock` then checks the turn against the store's latest time (a time that
goes backwards, an expiry before the turn). :meth:`MemoryStore.add
<memlib.store.MemoryStore.add>` runs the first, embeds the turn, and runs the second
under the store's lock; :func:`check_turns` (for :meth:`~memlib.store.MemoryStore.add_many`)
runs both on every turn before anything changes, and names the turn and the key in
its error. The error of each check is the same words in both.

>>> turn = check_turn({"text": " I like tea ", "time": 2.0})
>>> turn.text, turn.role, turn.speaker, turn.time
(' I like tea ', 'user', 'user', 2.0)
>>> check_clock(turn, latest=3.0)
Traceback (most recent call last):
...
memlib._checks.ParameterError: time goes backwards: 2.0 days is before the latest time 3.0 days
>>> check_turns([{"text": "a", "time": 1.0}, {"text": "b", "emotion": 2}], -np.inf, ("text", "time", "emotion"))
Traceback (most recent call last):
...
memlib._checks.ParameterError: add_many: turn 1, 'emotion': emotion must be a number in [0, 1], got 2
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError, check_int
from memlib._text import clean_text
from memlib.store.columns import expiry_of, matvec, to_days
from memlib.store.embedder import check_vector
from memlib.store.state import short_repr
from memlib.value import CueValue, LinearValue, Value, check_weights, load_defaults


# --------------------------------------------------------------------------- a turn
@dataclass
class Turn:
    """One turn as :meth:`MemoryStore.add <memlib.store.MemoryStore.add>` stores it, checked.

    ``time`` is days (None: the store's latest time), ``expires`` as given (read by
    :func:`check_clock`), ``embedding`` as given until the store makes it unit length.
    ``valence`` and ``reliability`` are filled in by the annotator
    (:func:`memlib.store.annotate.measure`) unless a batch computed them.
    """

    text: str
    role: str = "user"
    time: float | None = None
    speaker: str = "user"
    session: str = ""
    embedding: object = None
    emotion: float | None = None
    task_utility: float = 0.0
    pinned: bool = False
    expires: object = None
    valence: float | None = None
    reliability: float | None = None


def unit_interval(name: str, x) -> float:
    """Return ``x`` as a float, checked to be a number in [0, 1] (the error names ``name``)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or not 0.0 <= x <= 1.0:
        raise ParameterError(f"{name} must be a number in [0, 1], got {x!r}")
    return float(x)


def check_flag(name: str, x, show=repr) -> bool:
    """``x`` as a bool: it must be True or False (numpy's too)."""
    if not isinstance(x, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False, got {show(x)}")
    return bool(x)


def _failing(key: str, exc: ParameterError) -> ParameterError:
    exc.key = key  # the argument a batch names in its error (check_turns)
    return exc


def check_turn(kw: Mapping, batch: bool = False) -> Turn:
    """Run the checks of a turn that need no clock, in :meth:`~memlib.store.MemoryStore.add`'s order.

    ``kw`` holds keyword arguments of ``add`` (``text`` is required). The
    :class:`ParameterError` raised carries the failing argument as ``.key``; with
    ``batch`` (``add_many``) a text that is not one also shows what it got.
    """
    key = "text"
    try:
        text = kw["text"]
        if not isinstance(text, str) or not text.strip():
            got = f", got {short_repr(text)}" if batch else ""
            raise ParameterError(f"text must be a non-empty string{got}")
        text = clean_text(text)  # a lone surrogate becomes U+FFFD (memlib._text): what is stored and embedded
        key = "role"
        role = kw.get("role", "user")
        if role not in ("user", "assistant"):
            raise ParameterError(f"role must be 'user' or 'assistant', got {role!r}")
        key = "task_utility"
        task_utility = unit_interval("task_utility", kw.get("task_utility", 0.0))
        key = "emotion"
        emotion = kw.get("emotion")
        if emotion is not None:
            emotion = unit_interval("emotion", emotion)
        key = "pinned"
        pinned = check_flag("pinned", kw.get("pinned", False))
        key = "expires"
        if pinned and kw.get("expires") is not None:
            raise ParameterError("an item cannot be both pinned and expiring: pass pinned=True or expires=")
        key = "time"
        time = None if kw.get("time") is None else to_days(kw["time"])
    except ParameterError as exc:
        raise _failing(key, exc) from None
    speaker, session = kw.get("speaker"), kw.get("session")
    return Turn(
        text=text,
        role=role,
        time=time,
        speaker=role if speaker is None else clean_text(str(speaker)),
        session="" if session is None else clean_text(str(session)),
        embedding=kw.get("embedding"),
        emotion=emotion,
        task_utility=task_utility,
        pinned=pinned,
        expires=kw.get("expires"),
    )


def check_clock(turn: Turn, latest: float) -> tuple[float, float]:
    """Check the turn's time and expiry (days; +inf: never) against the store's ``latest`` time (-inf: none yet)."""
    key = "time"
    try:
        t = latest if turn.time is None else turn.time
        if not np.isfinite(t):
            raise ParameterError("the first add needs a time")
        if t < latest:
            raise ParameterError(f"time goes backwards: {t} days is before the latest time {latest} days")
        key = "expires"
        return t, expiry_of(turn.expires, t)
    except ParameterError as exc:
        raise _failing(key, exc) from None


def check_turns(turns, latest: float, keys: tuple) -> list[Turn]:
    """Return the turns of :meth:`~memlib.store.MemoryStore.add_many`, each checked as ``add`` checks it, in order.

    ``keys`` are the arguments ``add`` takes. Times must not go backwards from
    ``latest`` or from turn to turn. A given embedding is made unit length.
    """
    if isinstance(turns, (str, bytes, Mapping)):
        raise ParameterError(f"add_many takes an iterable of dicts, one per turn, got a {type(turns).__name__}")
    try:
        turns = list(turns)
    except TypeError:
        raise ParameterError(f"add_many takes an iterable of dicts, one per turn, got {type(turns).__name__}") from None
    out = []
    for i, kw in enumerate(turns):
        if not isinstance(kw, Mapping):
            raise ParameterError(f"add_many: turn {i} must be a dict of add's arguments, got {type(kw).__name__}")
        unknown = [k for k in kw if k not in keys]
        if unknown:
            raise ParameterError(f"add_many: turn {i} has an unknown key {unknown[0]!r} (add takes {', '.join(keys)})")
        if "text" not in kw:
            raise ParameterError(f"add_many: turn {i} has no 'text'")
        try:
            turn = check_turn(kw, batch=True)
            latest = check_clock(turn, latest)[0]
            if turn.embedding is not None:
                try:
                    turn.embedding = check_vector("embedding", turn.embedding)
                except ParameterError as exc:
                    raise _failing("embedding", exc) from None
        except ParameterError as exc:
            raise ParameterError(f"add_many: turn {i}, {exc.key!r}: {exc}") from None
        out.append(turn)
    return out


def check_clocks(turns: list[Turn], latest: float) -> None:
    """:func:`check_clock` on checked turns in a row, named as :func:`check_turns` names them."""
    for i, turn in enumerate(turns):
        try:
            latest = check_clock(turn, latest)[0]
        except ParameterError as exc:
            raise ParameterError(f"add_many: turn {i}, {exc.key!r}: {exc}") from None


# --------------------------------------------------------------------------- other calls
def check_budgets(budget, budget_tokens, count_pinned, dry_run) -> tuple:
    """Return the budgets of :meth:`~memlib.store.MemoryStore.consolidate` (one at least), and its flags checked."""
    if budget is None and budget_tokens is None:
        raise ParameterError("consolidate needs a budget (items) or budget_tokens")
    budget = None if budget is None else check_int("budget", budget, minimum=0)
    budget_tokens = None if budget_tokens is None else check_int("budget_tokens", budget_tokens, minimum=0)
    if not isinstance(count_pinned, (bool, np.bool_)) or not isinstance(dry_run, (bool, np.bool_)):
        raise ParameterError("count_pinned and dry_run must be True or False")
    return budget, budget_tokens


def check_queries(queries, update) -> tuple[list, bool]:
    """Return the queries of :meth:`~memlib.store.MemoryStore.retrieve_many` and ``update``, checked.

    The queries must be a list of non-empty strings.
    """
    if isinstance(queries, (str, bytes)):
        raise ParameterError("retrieve_many takes a list of query strings, got one string: use retrieve")
    try:
        queries = list(queries)
    except TypeError:
        raise ParameterError(f"retrieve_many takes a list of query strings, got {type(queries).__name__}") from None
    update = check_flag("update", update, short_repr)
    for i, q in enumerate(queries):
        if not isinstance(q, str) or not q.strip():
            raise ParameterError(f"retrieve_many: query {i} must be a non-empty string, got {short_repr(q)}")
    return [clean_text(q) for q in queries], update


# --------------------------------------------------------------------------- the settings
#: Default cosine at or above which a new turn merges into the stored item it repeats.
MERGE_THRESHOLD = 0.95


def check_merge_threshold(m) -> float | None:
    """Return the merge threshold ``m`` checked: a float in (0, 1], or None (no merging)."""
    if m is None:
        return None
    if isinstance(m, bool) or not isinstance(m, numbers.Real) or not 0.0 < m <= 1.0:
        raise ParameterError(f"merge_threshold must be a number in (0, 1] or None, got {m!r}")
    return float(m)


def check_store_weights(weights) -> np.ndarray:
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


def check_timeout(timeout) -> float:
    """Seconds to wait for another process's write lock: a finite number >= 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not math.isfinite(timeout) or timeout < 0:
        raise ParameterError(f"timeout must be a finite number of seconds >= 0, got {short_repr(timeout)}")
    return float(timeout)


class StoreLinearValue(LinearValue):
    """The paper's value ``V = f @ w`` as a store sums it: one ``einsum`` per item.

    That is :func:`~memlib.store.columns.matvec`, where
    :class:`~memlib.value.LinearValue` sums factor by factor; the two sums can differ in
    the last bit. The store keeps its own so that its values, and the studies that replay
    stores (:mod:`memlib.studies.stream`), stay bit for bit as they were.
    """

    def score(self, x) -> np.ndarray:
        """Return the value ``V = f @ w`` of each memory, one ``einsum`` per item (:func:`matvec`)."""
        return matvec(self.features(x), self.weights)


def value_argument(value, weights, stored_weights=None) -> Value:
    """Return the store's :class:`~memlib.value.Value` from ``MemoryStore(weights=..., value=...)``.

    The paper's value, summed as the store sums it (a :class:`StoreLinearValue`), for
    ``weights``, a :class:`~memlib.value.LinearValue` or ``'paper'`` (with ``weights``,
    else ``stored_weights``, else 1 for every factor); a :class:`~memlib.value.CueValue`
    as given; neither: the default cue value (:func:`memlib.value.load_defaults`).

    >>> value_argument(None, [0, 0, 0, 0, 1, 0, 0])
    StoreLinearValue([0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    >>> value_argument("mine", None)
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: value must be a memlib.value.CueValue, a memlib.value.LinearValue or 'paper', got str
    """
    if value is None and weights is None:
        return load_defaults()["value"]
    if value is None or (isinstance(value, str) and value == "paper"):
        w = stored_weights if weights is None and stored_weights is not None else weights
        return StoreLinearValue(check_store_weights(np.ones(len(FACTORS)) if w is None else w))
    if not isinstance(value, (CueValue, LinearValue)):
        raise ParameterError(
            f"value must be a memlib.value.CueValue, a memlib.value.LinearValue or 'paper', got {type(value).__name__}"
        )
    if weights is not None:
        raise ParameterError("pass weights (the paper's value) or value=, not both")
    return StoreLinearValue(value.weights) if isinstance(value, LinearValue) else value
