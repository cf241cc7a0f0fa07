"""The batch operations of :class:`~memlib.store.MemoryStore`: many turns or queries at once, and the warm-up.

An agent loop adds a session's turns and asks several queries at a time; :class:`Batches`
gives a store :meth:`~Batches.add_many` and :meth:`~Batches.retrieve_many`, whose results are
those of :meth:`~memlib.store.MemoryStore.add` and :meth:`~memlib.store.MemoryStore.retrieve`
called in order, with the texts embedded in one call of the embedder and every turn checked
before anything changes, and :meth:`~Batches.warm_up`, which loads the models before the first turn.
"""

from __future__ import annotations

import functools
import inspect

from memlib._checks import ParameterError, check_int
from memlib.store.annotate import measure_batch
from memlib.store.checks import check_clocks, check_queries, check_turns
from memlib.store.columns import to_days
from memlib.store.state import fail


@functools.cache
def _add_keys(store_class) -> tuple:
    """Return the arguments ``store_class.add`` takes (``self`` aside), as :meth:`Batches.add_many` names them."""
    return tuple(k for k in inspect.signature(store_class.add).parameters if k != "self")


class Batches:
    """The batch methods of :class:`~memlib.store.MemoryStore` (a mixin: they call its ``add`` and ``retrieve``)."""

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
        backwards from turn to turn) before anything changes, with the checks of
        :meth:`add` (:mod:`memlib.store.checks`), and the embedder is called before
        anything changes: a :class:`ParameterError` that names the turn and the key
        leaves the store as it was. Then the turns are added one by one; for a store
        made by :meth:`open` each turn is its own transaction, so an interruption
        part-way (a killed process, or an error no check could foresee) keeps the
        turns before it, each whole. With the default embedder, a text embedded in
        a batch and the same text embedded alone agree to float32 precision
        (padding changes the arithmetic, not the result).

        Examples
        --------
        >>> import zlib
        >>> import numpy as np
        >>> from memlib.store import MemoryStore
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
        checked, checked_at = self._checked_turns(turns)
        if not checked:
            return []
        ids = []
        with self._reading() as data:  # the turns in a row, no other thread's add between them
            if data.scalars["now"] != checked_at:  # another thread (or process) added meanwhile: check the times again
                check_clocks(checked, data.scalars["now"])
            for i, turn in enumerate(checked):
                try:
                    ids.append(self._add(turn))
                except ParameterError as exc:
                    kept = f"turns 0 to {i - 1} were added" if i else "no turn was added"
                    raise ParameterError(f"add_many: turn {i}: {exc} ({kept})") from None
        return ids

    def _checked_turns(self, turns) -> tuple[list, float]:
        """Check, embed and measure ``turns`` as :meth:`add_many` does, before anything changes.

        Returns the checked turns and the store's latest time they were checked against.
        """
        with self._reading() as data:  # (a file store catches up first: times are checked against its latest)
            if self._closed is not None:
                fail(self._closed, "the store is closed; open it again to change it")
            checked = check_turns(turns, data.scalars["now"], _add_keys(type(self)))
            checked_at = data.scalars["now"]
        if checked:
            self._embedder.fill(checked)
            measure_batch(checked, self.factor_set)
        return checked, checked_at

    def retrieve_many(self, queries, k: int = 5, update: bool = True, now=None) -> list[list[dict]]:
        """Return the result of :meth:`retrieve` for each query, in order; the queries are embedded in one call.

        The same as ``[store.retrieve(q, k=k, update=update, now=now) for q in
        queries]``: with ``update=True`` each query's results count as retrieved
        before the next query is ranked (for a store made by :meth:`open`, one
        transaction per query). The queries are checked, and embedded, before
        anything changes.

        Examples
        --------
        >>> import re, zlib
        >>> import numpy as np
        >>> from memlib.store import MemoryStore
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
        queries, update = check_queries(queries, update)
        if now is not None:
            to_days(now, "now")
        if not queries:
            return []
        E = self._embedder(queries)
        with self._lock:  # the queries in a row, no other thread's operation between them
            return [self.retrieve(q, k=k, query_embedding=E[i], now=now, update=update) for i, q in enumerate(queries)]

    @classmethod
    def warm_up(cls) -> float:
        """Load what the first turn would load (the default embedder's model, VADER's lexicon); return the seconds.

        Nothing loads a model before it is needed: importing :mod:`memlib` or
        making a store does not. So the first :meth:`add` that embeds text would
        wait for the model (seconds); call this once, e.g. while the agent starts,
        and the first turn costs what any turn costs. It adds one turn to a
        scratch store and throws the store away. Later calls return at once. A
        store with its own ``embedder`` only needs VADER from this.

        Examples
        --------
        >>> from memlib.store import MemoryStore
        >>> seconds = MemoryStore.warm_up()
        >>> MemoryStore().add("I am allergic to peanuts!", time=0.0)   # no model to wait for
        0
        """
        from time import perf_counter

        t0 = perf_counter()
        cls().add("Warming up: I am so glad to meet you!", time=0.0)
        return perf_counter() - t0
