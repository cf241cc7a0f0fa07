"""What a policy reads of a store: :class:`StoreView`, the held items and their value, read-only.

Every hook of a :class:`~memlib.store.protocol.Policy` gets a :class:`StoreView`: the
per-item arrays of the items a store holds (times, valences, usage counts, expiry,
pins, tokens, embeddings, factors, store cues, and the per-item state the policy
declares), the store's value (:attr:`StoreView.value`) and what follows from it
(:meth:`~StoreView.values`, :meth:`~StoreView.normalised_values`), and
:meth:`~StoreView.similarity` to a query. Every array is read-only, so a policy cannot
change the store behind its transactions; a policy changes its own state by returning
it from :meth:`~memlib.store.protocol.Policy.on_retrieve`.

A view is a window on items: ``store.view`` shows what a store holds now, and
:meth:`StoreView.take` shows a subset of it at a given clock, which is how a replay
asks a policy what a bounded store would drop (:mod:`memlib.store.replay`; a policy's
:meth:`~memlib.store.protocol.Policy.forget_scorer` may read a batch history's arrays once
instead, with the same scores). A view can
also stand over a history annotated in a batch (:meth:`StoreView.of_history`), so that
a study replays a corpus through the policies a store uses, without adding each turn.

>>> import numpy as np
>>> from memlib.store import MemoryStore
>>> st = MemoryStore()
>>> st.add("I am allergic to peanuts.", time=2.0, embedding=np.eye(384)[0])
0
>>> st.view.time, st.view.retrievals
(array([2.]), array([0.]))
>>> st.view.time[0] = 5.0
Traceback (most recent call last):
...
ValueError: assignment destination is read-only
"""

from __future__ import annotations

import numpy as np

from memlib._checks import ParameterError
from memlib.cues import STORE_CUES, join_store_cues
from memlib.store.columns import STATE, matvec
from memlib.store.state import DIM


def _field(name: str, doc: str):
    return property(lambda self: self._read(name), doc=doc)


class ItemArrays:
    """Per-item arrays of a history annotated in a batch, in the layout a store's columns have.

    What :meth:`StoreView.of_history` stands on: a mapping from a column name of
    :class:`StoreView` to one array per item, with :meth:`view` as
    :class:`~memlib.store.columns.Columns` has it.
    """

    __slots__ = ("data", "n")

    def __init__(self, data: dict[str, np.ndarray]):
        self.data = data
        self.n = len(data["time"])

    def view(self, name: str) -> np.ndarray:
        """Return the column ``name``."""
        return self.data[name]

    def state_names(self) -> list[str]:
        """Names of the per-item policy states held (none for a batch history)."""
        return [k[len(STATE) :] for k in self.data if k.startswith(STATE)]


class StoreView:
    """The held items of a store, read-only, oldest first: what every policy hook reads.

    Parameters
    ----------
    source : Columns or ItemArrays
        The items (a store's columns, read when asked, so ``store.view`` stays current).
    value : memlib.value.Value
        The value the items are scored with.
    index : ndarray of int, optional
        The positions of ``source`` this view shows, in order (default: all).
    now : float, optional
        The clock of the view, in days: a store's latest time, or what :meth:`take` sets.
    need : memlib.references.NeedCounts, optional
        The stream's reference counts so far (:mod:`memlib.references`): what a policy that
        adapts to its user reads (:class:`~memlib.store.policies.AdaptivePolicy`).
    values : ndarray, optional
        The value of every item of ``source``, when it is fixed (a batch history): computed
        once, read by every view taken from it.
    normalised : ndarray, optional
        ``value.normalise(values)``, likewise (``V-bar`` is a function of each value alone).
    """

    __slots__ = ("_source", "_index", "_values", "_normalised", "value", "now", "need")

    def __init__(self, source, value, index=None, now: float | None = None, values=None, need=None, normalised=None):
        self._source, self.value, self._index, self.now, self._values = source, value, index, now, values
        self.need, self._normalised = need, normalised

    @classmethod
    def of_history(
        cls, value, *, time, embeddings, factors, cues, valence, expires=None, pinned=None, tokens=None
    ) -> StoreView:
        """Return a view over one history annotated in a batch: every turn held, its value computed once.

        The arrays are those a store holds per item (one row per turn, in time order):
        ``time`` in days, unit ``embeddings`` (n, 384), ``factors`` (n, 7), the store
        ``cues`` (n, 12) of :data:`memlib.cues.STORE_CUES` and each turn's VADER
        ``valence``; no turn expires, is pinned or retrieved unless told. Taking subsets
        of it (:meth:`take`) is what a replay does (:func:`memlib.store.replay.held_after`).

        >>> import numpy as np
        >>> from memlib.value import LinearValue
        >>> v = StoreView.of_history(LinearValue(np.ones(7)), time=np.arange(3.0), embeddings=np.eye(384)[:3],
        ...     factors=np.eye(7)[:3] / 2, cues=np.zeros((3, 12)), valence=np.zeros(3))
        >>> v.values().tolist(), v.take([2, 0], now=5.0).time.tolist()
        ([0.5, 0.5, 0.5], [2.0, 0.0])
        """
        time = np.asarray(time, dtype=np.float64)
        n = len(time)
        data = {
            "ids": np.arange(n, dtype=np.int64),
            "time": time,
            "valence": np.asarray(valence, dtype=np.float64),
            "retrievals": np.zeros(n),
            "last_access": time,
            "expires": np.full(n, np.inf) if expires is None else np.asarray(expires, dtype=np.float64),
            "pinned": np.zeros(n, bool) if pinned is None else np.asarray(pinned, dtype=bool),
            "tokens": np.zeros(n, np.int64) if tokens is None else np.asarray(tokens, dtype=np.int64),
            "embeddings": np.asarray(embeddings, dtype=np.float32),
            "factors": np.asarray(factors),
            "cues": np.asarray(cues, dtype=np.float64),
        }
        for name, a in data.items():
            if len(a) != n:
                raise ParameterError(f"{name} must have one row per turn ({n}), got {len(a)}")
        if data["embeddings"].shape[1:] != (DIM,) or data["cues"].shape[1:] != (len(STORE_CUES),):
            raise ParameterError(f"embeddings must be (n, {DIM}) and cues (n, {len(STORE_CUES)})")
        base = cls(ItemArrays(data), value)
        values = np.asarray(value.score(base))
        return cls(base._source, value, values=values, normalised=np.asarray(value.normalise(values)))

    def __len__(self) -> int:
        return self._source.n if self._index is None else len(self._index)

    def take(self, keep, now: float | None = None, need=None) -> StoreView:
        """Return the view of the items at positions ``keep`` of this view (in order), its clock at ``now``.

        ``need`` replaces the stream's reference counts (a replay keeps its own). Nothing is
        copied until an array is read.
        """
        keep = np.asarray(keep, dtype=np.int64)
        index = keep if self._index is None else self._index[keep]
        now = self.now if now is None else float(now)
        need = self.need if need is None else need
        return StoreView(self._source, self.value, index, now, self._values, need, self._normalised)

    @property
    def holds_values(self) -> bool:
        """Whether the view holds its items' values, computed once (a batch history's view and its subsets)."""
        return self._values is not None

    @property
    def positions(self) -> np.ndarray:
        """The positions of the items shown among those of the source (a store's, or a history's)."""
        return np.arange(self._source.n) if self._index is None else self._index

    def _read(self, name: str) -> np.ndarray:
        a = self._source.view(name)
        a = a.view() if self._index is None else a[self._index]
        a.flags.writeable = False
        return a

    ids = _field("ids", "Item ids, increasing (int64).")
    time = _field("time", "Time of each item (days).")
    valence = _field("valence", "VADER valence of each item's text, in [-1, 1].")
    retrievals = _field("retrievals", "Usage count of each item: its retrievals and the turns merged into it.")
    last_access = _field("last_access", "Time of each item's last access (days): its time, or its last retrieval.")
    expires = _field("expires", "Expiry time of each item (days; +inf: never).")
    pinned = _field("pinned", "Whether each item is pinned (bool).")
    tokens = _field("tokens", "Tokens of each item (:func:`~memlib.store.columns.count_tokens`).")
    embeddings = _field("embeddings", f"(n, {DIM}) unit embeddings, float32.")
    factors = _field("factors", "(n, 7) factor values, in the order of :data:`memlib.FACTORS`.")

    @property
    def cues(self) -> np.ndarray:
        """(n, 12) store cues of :data:`memlib.cues.STORE_CUES`: what a cue value reads."""
        if "cues" in getattr(self._source, "data", {}):
            return self._read("cues")
        return join_store_cues(self._read("static_cues"), self._read("factors"))

    @property
    def user(self) -> np.ndarray:
        """Whether each item is a user's turn (the store cue ``is_user``)."""
        return self.cues[:, STORE_CUES.index("is_user")] > 0.5

    @property
    def state_names(self) -> list[str]:
        """The per-item policy states the store holds."""
        return self._source.state_names()

    def state(self, name: str) -> np.ndarray:
        """Return the per-item state ``name`` of a policy (declared in its ``item_state``), one float per item."""
        if name not in self.state_names:
            raise ParameterError(
                f"the store holds no per-item state {name!r} (a policy declares its state in item_state); "
                f"it holds: {', '.join(self.state_names) or 'none'}"
            )
        return self._read(STATE + name)

    def values(self) -> np.ndarray:
        """Value of every item under :attr:`value`: the paper's ``V = f @ w``, or a cue value."""
        if self._values is not None:
            return self._values if self._index is None else self._values[self._index]
        return self.value.score(self)

    def normalised_values(self) -> np.ndarray:
        """``V-bar`` in [0, 1] of every item (:meth:`memlib.value.Value.normalise`)."""
        held = self._held_normalised()
        return self.value.normalise(self.values()) if held is None else held

    def _held_normalised(self):
        """``V-bar`` of every item if the view holds it (a batch history's, normalised once), else None."""
        if self._normalised is None:
            return None
        return self._normalised if self._index is None else self._normalised[self._index]

    def eq3_values(self) -> np.ndarray:
        """Return the value eq. 3 reads (:meth:`memlib.value.Value.eq3_value`), from the ``V-bar`` the view holds."""
        return self.value.eq3_value(self.values(), v_bar=self._held_normalised())

    def similarity(self, query_vec) -> np.ndarray:
        """``(1 + cos) / 2`` between a unit query vector and every item (float32 products)."""
        cos = matvec(self.embeddings, np.asarray(query_vec, dtype=np.float32))
        return (1.0 + cos.astype(np.float64)) / 2.0


__all__ = ["ItemArrays", "StoreView"]
