"""The public face of the store: :class:`MemoryStore` (add, consolidate, retrieve, pin, explain).

What the store does, with examples, is told in :mod:`memlib.store`. The methods here are
thin: they check their arguments (:mod:`memlib.store.checks`), embed
(:mod:`memlib.store.embedder`), annotate a turn (:mod:`memlib.store.annotate`) or plan a
consolidation (:mod:`memlib.store.forget`), and hand each change, described once
(:class:`~memlib.store.backend.Change`), to the store's backend: in memory
(:mod:`memlib.store.backend`) or in a SQLite file (:mod:`memlib.store.persistence`, which
also holds the methods that save, load, open and close a store). The batch methods (``add_many``,
``retrieve_many``, ``warm_up``) live in :mod:`memlib.store.batches`.

>>> import numpy as np
>>> store = MemoryStore()
>>> store.add("I am allergic to peanuts!", time=0.0, embedding=np.eye(384)[0])
0
>>> store.retrieve(query_embedding=np.eye(384)[0], k=1)[0]["retrievals"], store.items()[0]["retrievals"]
(0, 1)
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_choice, check_int
from memlib._text import clean_text
from memlib.cues import join_store_cues
from memlib.store import forget
from memlib.store.annotate import _valence_cached, measure, reinforced, turn_change, valence
from memlib.store.backend import FORGOTTEN_KEYS as FORGOTTEN_KEYS  # (where it was; the fields of forgotten)
from memlib.store.backend import Change, MemoryBackend, locked
from memlib.store.batches import Batches
from memlib.store.checks import (
    MERGE_THRESHOLD,
    Turn,
    check_budgets,
    check_clock,
    check_flag,
    check_merge_threshold,
    check_turn,
    value_argument,
)
from memlib.store.columns import count_tokens, item_dict, not_before, to_days
from memlib.store.embedder import Embedder, check_vector, embedder_argument
from memlib.store.persistence import Persistence
from memlib.store.policies import default_policy
from memlib.store.protocol import Policy
from memlib.store.retrieval import rank
from memlib.store.state import DIM, StoreError, check_item_state, fail, short_repr
from memlib.store.value_settings import ValueSettings
from memlib.store.view import StoreView

__all__ = ["DIM", "MERGE_THRESHOLD", "MemoryStore", "StoreError", "count_tokens", "to_days", "valence"]


class MemoryStore(ValueSettings, Persistence, Batches):
    """A bounded memory for one conversation, ruled by one value.

    Parameters
    ----------
    weights : array_like, shape (7,), optional
        Factor weights of the paper's value ``V = f @ w``. Giving weights selects that
        value; learned weights come from :func:`memlib.learned_weights` (the
        oracle-blind study's blind regime), e.g.
        ``MemoryStore(weights=memlib.learned_weights("results/oracle-blind.json"))``.
    value : CueValue, LinearValue or 'paper', optional
        The value when no ``weights`` are given. Default: the learned cue value of
        ``memlib/defaults.json`` (:func:`memlib.value.load_defaults`), a linear value
        over the store cues of :data:`memlib.cues.STORE_CUES` and their products with
        ``is_user``, learned from gold retention on LoCoMo and LongMemEval-S. ``'paper'``
        is the paper's value with weight 1 for every factor, ``LinearValue(w)`` the same
        as ``weights=w``. Any :class:`~memlib.value.CueValue` (e.g. from
        :func:`memlib.learning.fit_cue_value`) works; its normalised value ``V-bar`` is its
        place among the values of the turns it was learned on, which sets the encoding tiers.
    policy : Policy, optional
        Forgetting and retrieval rules (default: :func:`~memlib.store.policies.default_policy`,
        the measured choice of ``memlib/defaults.json``, :class:`AdaptivePolicy` or
        :class:`ValuePolicy`; ``make_policy("paper")`` is the paper's eq. 3 with ``beta = 1``).
    value_profile : array_like, shape (384,), optional
        Embedding of the agent's value profile; makes the value-alignment factor live
        (read by the paper's value; the default cue value does not read it).
    embedder : callable, optional
        ``embedder(list of str) -> (n, 384)`` array-like, one embedding per text,
        used when :meth:`add`, :meth:`add_many`, :meth:`retrieve` or
        :meth:`retrieve_many` get text without an embedding (rows are made unit
        length). A wrong shape, a NaN or infinity, or a zero row raises a
        :class:`ParameterError` naming the embedder. Default:
        :func:`memlib.embeddings.embed_uncached` at the ``fast`` setting (128 word
        pieces, the setting the studies annotate at, so the store's embeddings
        match those the learned weights came from), straight from the model with
        no disk cache. The model loads on the first embedding, not before; call
        :meth:`warm_up` to load it ahead of the first turn.
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
    ):
        from memlib.factors import FACTOR_SETS

        self._backend = MemoryBackend()  # the data (persistence.FileBackend for a file store)
        self.factor_set = check_choice("factor_set", factor_set, FACTOR_SETS)
        self._weights = np.ones(len(FACTORS))  # a cue value's store keeps them as a setting only
        self._set_value(value_argument(value, weights))
        self.policy = policy or default_policy()
        self.value_profile = None if value_profile is None else check_vector("value_profile", value_profile)
        self.merge_threshold = check_merge_threshold(merge_threshold)
        self._embedder = Embedder(embedder_argument(embedder))
        self._lock = threading.RLock()  # see Threads in the class docstring
        self._closed = None  # the path of a file store after close()

    @property
    def policy(self) -> Policy:
        """The forgetting and retrieval rules; a policy's per-item state (``item_state``) is kept with the items."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        if not isinstance(policy, Policy):
            raise ParameterError(f"policy must be a memlib.store.Policy, got {type(policy).__name__}")
        check_item_state(f"policy {policy.name}", policy.item_state)
        self._policy = policy
        self._backend.cols.declare(policy.item_state)

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
    ) -> int:
        r"""Store one turn; return its id (or the id of the item it merged into).

        A rejected call (any :class:`ParameterError`) leaves the store exactly as it was.

        Parameters
        ----------
        text : str
            A lone surrogate (``"\ud800"``, not encodable as UTF-8) is stored as
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
        kw = {"text": text, "role": role, "time": time, "speaker": speaker, "session": session}
        kw.update(embedding=embedding, emotion=emotion, task_utility=task_utility, pinned=pinned, expires=expires)
        turn = check_turn(kw)
        turn.embedding = self._embedder.vector(turn.text, turn.embedding)
        measure(turn, self.factor_set)
        return self._add(turn)

    def _add(self, turn: Turn) -> int:
        """Store a checked, embedded and measured turn: one change, in one transaction."""
        with self._writing() as data:
            t, expiry = check_clock(turn, data.scalars["now"])
            change, item_id = turn_change(self, data, turn, t, expiry)
            data.apply(change)
        return item_id

    def pin(self, item_id: int, pinned: bool = True) -> None:
        """Pin the item ``item_id`` (or unpin it, with ``pinned=False``).

        A pinned item is never forgotten: a consolidation drops other items
        instead, and by default a pinned item does not count against the budget
        (see ``count_pinned`` of :meth:`consolidate`). Pinning clears an expiry.
        """
        pinned = check_flag("pinned", pinned)
        with self._writing() as data:
            i = data.cols.position(item_id)
            expires = np.inf if pinned else float(data.cols.view("expires")[i])
            data.apply(Change(rows=[(np.array([i]), {"pinned": [pinned], "expires": [expires]})]))

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
        budget, budget_tokens = check_budgets(budget, budget_tokens, count_pinned, dry_run)
        now_given = None if now is None else to_days(now, "now")
        with self._reading() if dry_run else self._writing() as data:
            now = not_before(now_given, data.scalars["now"])
            plan = forget.plan(self, data, budget, budget_tokens, now, count_pinned)
            if dry_run:
                return [forget.explain_row(self, data.cols, i, plan, reason) for i, reason in plan["order"]]
            data.apply(forget.change(self, data.cols, plan))
        return plan["dropped_ids"]

    def explain(self, item_id: int, now=None) -> dict:
        """Why the item ``item_id`` stays or goes: its forget score and the factor contributions to its value.

        The same fields as a row of ``consolidate(..., dry_run=True)`` (with the
        current session's goal relevance as a consolidation now would fix it),
        plus ``expired`` and ``rank``: the item's place in the order in which
        unpinned, unexpired items would be dropped (1: first to go; None for a
        pinned or expired item).
        """
        now_given = None if now is None else to_days(now, "now")
        with self._reading() as data:
            i = data.cols.position(item_id)
            return forget.explain(self, data, i, not_before(now_given, data.scalars["now"]))

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self._backend.cols.n

    @property
    def view(self) -> StoreView:
        """The held items, read-only, with their value: what a policy reads (:class:`~memlib.store.view.StoreView`)."""
        scalars = self._backend.scalars
        return StoreView(self._backend.cols, self.value, now=scalars["now"], need=scalars["need"])

    @property
    @locked
    def ids(self) -> list[int]:
        """Ids of the retained items, oldest first."""
        return self._backend.cols.view("ids").tolist()

    @property
    @locked
    def embeddings(self) -> np.ndarray:
        """(n, 384) unit embeddings (float32) of the retained items."""
        return self._backend.cols.view("embeddings")

    @property
    @locked
    def factors(self) -> np.ndarray:
        """(n, 7) factor values of the retained items."""
        return self._backend.cols.view("factors")

    @property
    @locked
    def forgotten(self) -> list[dict]:
        """Every dropped item: ``id, text, time, value, tier, reason`` (``budget`` or ``expired``) and ``at``."""
        return self._backend.log("forgotten")

    @property
    @locked
    def merges(self) -> list[dict]:
        """Every turn that merged into a stored near-duplicate: ``id`` (kept), ``turn``, ``text, time, cosine``."""
        return self._backend.log("merges")

    @property
    @locked
    def cues(self) -> np.ndarray:
        """(n, 12) store cues of the retained items (:data:`memlib.cues.STORE_CUES`), what a cue value reads."""
        cols = self._backend.cols
        return join_store_cues(cols.view("static_cues"), cols.view("factors"))

    @locked
    def values(self) -> np.ndarray:
        """Value of every retained item under the store's :attr:`value`: ``V = f @ w``, or its cue value."""
        return self.view.values()

    @locked
    def normalised_values(self) -> np.ndarray:
        """``V-bar`` in [0, 1]: ``V / sum(w)``, or a cue value's place among its training values."""
        return self.view.normalised_values()

    @locked
    def tiers(self) -> np.ndarray:
        """Return the encoding tier of every retained item (from its normalised value)."""
        return forget.tiers_of(self, self.values())

    @locked
    def similarity(self, query_vec) -> np.ndarray:
        """``(1 + cos) / 2`` between a unit query vector and every item (float32 products)."""
        return self.view.similarity(query_vec)

    @locked
    def items(self) -> list[dict]:
        """Return the retained items with factors, value and tier, oldest first (expired ones until consolidated)."""
        self._backend.sync()
        v, tiers = self.values(), self.tiers()
        return [item_dict(self._backend.cols, i, v[i], tiers[i]) for i in range(len(self))]

    def to_frame(self) -> pd.DataFrame:
        """Return :meth:`items` as a DataFrame, one row per item."""
        return pd.DataFrame(self.items())

    def retrieve(
        self, query: str | None = None, k: int = 5, query_embedding=None, now=None, update: bool = True
    ) -> list[dict]:
        """Return the ``k`` best unexpired items for a query, best first (each dict has a ``score``).

        Returned items' retrieval counts grow by one (``update=False`` leaves
        the store unchanged, for evaluation on a snapshot). A query embedding
        must be 384 finite numbers, not all zero.
        """
        k = check_int("k", k, minimum=1)
        update = check_flag("update", update, short_repr)
        if isinstance(query, str):
            query = clean_text(query)
        if query_embedding is None:
            if not isinstance(query, str) or not query.strip():
                raise ParameterError("retrieve needs a query string or a query_embedding")
            query_embedding = self._embedder([query])[0]
        q = check_vector("query_embedding", query_embedding)
        qv = _valence_cached(query) if isinstance(query, str) else 0.0
        now_given = None if now is None else to_days(now, "now")
        with self._writing() if update else self._reading() as data:
            now, cols = data.scalars["now"] if now_given is None else now_given, data.cols
            if not cols.n:
                return []
            view = self.view
            order, scores = rank(view, self.policy, q, qv, now, k=k, scores=True)
            v = view.values()[order]
            tiers = forget.tiers_of(self, v)
            out = [dict(item_dict(cols, i, v[j], tiers[j]), score=float(scores[i])) for j, i in enumerate(order)]
            if update and len(order):
                data.apply(Change(rows=[(order, reinforced(self, cols, order, now))]))
        return out

    @locked
    def rank(self, query_embedding, query_valence: float = 0.0, now=None) -> np.ndarray:
        """Positions of the retained unexpired items in retrieval order (no state change)."""
        q = check_vector("query_embedding", query_embedding)
        if not len(self):
            return np.zeros(0, dtype=np.int64)
        now = self._backend.scalars["now"] if now is None else to_days(now, "now")
        return rank(self.view, self.policy, q, query_valence, now)

    # ------------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def _writing(self):
        """One change under the store's lock, in one transaction of its backend (undone if the block fails)."""
        with self._lock:
            if self._closed is not None:
                fail(self._closed, "the store is closed; open it again to change it")
            with self._backend.transaction() as data:
                yield data

    @contextlib.contextmanager
    def _reading(self):
        """Read the store under its lock for a block (a file store caught up with the file first)."""
        with self._lock:
            self._backend.sync()
            yield self._backend
