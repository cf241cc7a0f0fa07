"""A history replayed into a store: every turn added in order, a consolidation at each session end.

This is how an agent uses a store (it consolidates when a session ends) and how the
studies and tests replay a conversation; :func:`replay_history` is its one definition.

>>> import numpy as np
>>> from memlib.store import MemoryStore
>>> store = MemoryStore()
>>> turns = [
...     {"text": f"turn {i}", "time": float(i), "session": i // 2, "embedding": np.eye(384)[i]}
...     for i in range(5)
... ]
>>> replay_history(store, turns, budget=2), len(store)
(4, 2)
"""

from __future__ import annotations

from memlib._checks import ParameterError, check_int


def replay_history(store, turns, budget: int | None = None, now_key: str = "time") -> int:
    """Add ``turns`` to ``store`` in order and consolidate to ``budget`` at each session end.

    Parameters
    ----------
    store : MemoryStore
    turns : sequence of dict
        The keyword arguments of :meth:`~memlib.store.MemoryStore.add` for each turn, ``text``
        and ``session`` included; a session ends where the next turn's ``session`` differs,
        and after the last turn.
    budget : int, optional
        Items to keep at each session end; None: nothing is forgotten (no consolidation).
    now_key : str
        The key whose value is the consolidation's ``now`` (the session's last turn's time);
        a turn without it consolidates at the store's current time.

    Returns
    -------
    int
        The largest number of items the store held at a session end, before it consolidated.
    """
    turns = list(turns)
    if budget is not None:
        budget = check_int("budget", budget, minimum=0)
    for i, turn in enumerate(turns):
        if "text" not in turn or "session" not in turn:
            raise ParameterError(f"turn {i} of the history needs 'text' and 'session', got keys {sorted(turn)}")
    peak = 0
    for i, turn in enumerate(turns):
        kwargs = dict(turn)
        store.add(kwargs.pop("text"), **kwargs)
        if i == len(turns) - 1 or turns[i + 1]["session"] != turn["session"]:
            peak = max(peak, len(store))
            if budget is not None:
                store.consolidate(budget, now=turn.get(now_key))
    return peak


__all__ = ["replay_history"]
