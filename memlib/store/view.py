"""What a policy reads of a store: :class:`StoreView`, its per-item arrays, read-only.

A :class:`~memlib.store.protocol.Policy` gets the store itself in every hook; it reads
the store's public methods (:meth:`~memlib.store.MemoryStore.values`,
:meth:`~memlib.store.MemoryStore.normalised_values`,
:meth:`~memlib.store.MemoryStore.similarity`) and, for the per-item fields,
``store.view``: times, valences, usage counts, expiry, pins, tokens, embeddings and
factors, and the per-item state the policy declares (``view.state(name)``). Every
array is a read-only view of the store's columns, so reading copies nothing and a
policy cannot change the store behind its transactions; a policy changes its own
state by returning it from :meth:`~memlib.store.protocol.Policy.on_retrieve`.

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
from memlib.store.columns import STATE, Columns


def _field(name: str, doc: str):
    return property(lambda self: self._read(name), doc=doc)


class StoreView:
    """The per-item arrays of a store, read-only, oldest item first (``store.view``).

    Parameters
    ----------
    cols : Columns
        The store's columns; the view reads them when asked, so it stays current.
    """

    __slots__ = ("_cols",)

    def __init__(self, cols: Columns):
        self._cols = cols

    def __len__(self) -> int:
        return self._cols.n

    def _read(self, name: str) -> np.ndarray:
        a = self._cols.view(name).view()
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
    embeddings = _field("embeddings", "(n, 384) unit embeddings, float32.")
    factors = _field("factors", "(n, 7) factor values, in the order of :data:`memlib.FACTORS`.")

    @property
    def state_names(self) -> list[str]:
        """The per-item policy states the store holds."""
        return self._cols.state_names()

    def state(self, name: str) -> np.ndarray:
        """Return the per-item state ``name`` of a policy (declared in its ``item_state``), one float per item."""
        if STATE + name not in self._cols.data:
            raise ParameterError(
                f"the store holds no per-item state {name!r} (a policy declares its state in item_state); "
                f"it holds: {', '.join(self.state_names) or 'none'}"
            )
        return self._read(STATE + name)
