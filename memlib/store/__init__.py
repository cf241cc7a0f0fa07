"""A memory store for an agent, driven by one value, and the policies that decide what it forgets and returns.

:class:`MemoryStore` keeps the turns of one conversation. Each :meth:`~MemoryStore.add`
annotates the turn causally with the seven factors (the same definitions as
:mod:`memlib.factors` in the blind regime) and its text cues, and gives it an encoding
tier from its normalised value. :meth:`~MemoryStore.consolidate` ends a session: it fixes
the session's goal anchor (the centroid of the session's user turns), then drops the
items with the highest forget score until the budget holds (by default the lowest value
goes first; ``make_policy("paper")`` is eq. 3). :meth:`~MemoryStore.retrieve` ranks the
retained items for a query and counts the retrieval.

The default value (:data:`memlib.cues.STORE_CUES`, learned) reads the role, the text cues,
whether the turn opened its session (a new ``session`` label) and the goal, self and emotion
factors. Task utility (``add(task_utility=...)``), value
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

The retrieval rank of the value policy is documented in :class:`ValuePolicy`. Other
forgetting and retrieval rules (the published baselines of :mod:`memlib.store.baselines`)
plug in through the one interface :class:`Policy`, and read the store through
``store.view`` (:class:`~memlib.store.view.StoreView`).

>>> import numpy as np
>>> from memlib.store import MemoryStore, ValuePolicy, make_policy
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
>>> store.tiers().tolist()   # V-bar's place among the values learned on; the first turn opened its session
['meta', 'shallow']
>>> eq3 = MemoryStore(weights=[0, 0, 0, 0, 1, 0, 0], policy=ValuePolicy(beta=5.0))   # eq. 3, V = task utility
>>> for day, utility in enumerate([1.0, 0.0]):
...     _ = eq3.add(f"turn {day}", time=float(day), embedding=vec(), task_utility=utility)
>>> eq3.consolidate(budget=1, now=10.0)   # the older item survives: its value resists
[1]
>>> MemoryStore(policy=make_policy("memgpt_fifo")).policy.name
'memgpt_fifo'

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

The modules:

* :mod:`memlib.store.memory`: :class:`MemoryStore`, the public API over the modules below;
* :mod:`memlib.store.batches`: its batch methods (``add_many``, ``retrieve_many``, ``warm_up``);
* :mod:`memlib.store.checks`: the checks of a turn (one definition for ``add`` and
  ``add_many``) and of the store's settings;
* :mod:`memlib.store.embedder`: the embedder adapter (the default model or yours, checked);
* :mod:`memlib.store.annotate`: online annotation, the factors of a turn as it arrives;
* :mod:`memlib.store.forget`: what a consolidation drops and why (:func:`~memlib.store.forget.drops`,
  the one rule), and explanations;
* :mod:`memlib.store.retrieval`: the order in which items are returned for a query (:func:`rank`);
* :mod:`memlib.store.columns`: the per-item columns, and time parsing;
* :mod:`memlib.store.view`: :class:`~memlib.store.view.StoreView`, the read-only view a policy reads;
* :mod:`memlib.store.backend`: a change (:class:`~memlib.store.backend.Change`) and the
  in-memory backend that applies it;
* :mod:`memlib.store.persistence`: the file backend, and saving, loading, opening and
  closing a store;
* :mod:`memlib.store.durable`: the SQLite file (transactions, locking), over its tables
  (:mod:`memlib.store.tables`: the schema, and how a value becomes a cell);
* :mod:`memlib.store.npz`: the ``.npz`` export (:meth:`MemoryStore.save`, :meth:`MemoryStore.load`);
* :mod:`memlib.store.state`: the saved state both files hold, checked field by field;
* :mod:`memlib.store.protocol`: :class:`Policy`, the one interface of a forgetting policy;
* :mod:`memlib.store.policies`: :class:`ValuePolicy` (the paper's value, eq. 3) and the
  registry :data:`POLICIES` of every built-in policy with :func:`make_policy`;
* :mod:`memlib.store.baselines`: the published policies it is compared against;
* :mod:`memlib.store.replay`: every replay of a history into a bounded store: turn by turn
  (:func:`replay_history`), or from a view of all its turns, for many prefixes and budgets
  at once (:func:`held_after`), which is how the studies measure the store.
"""

from memlib.store.baselines import (
    FIFOPolicy,
    GenerativeAgentsPolicy,
    MemoryBankPolicy,
    RecencyPolicy,
    UnboundedRAGPolicy,
)
from memlib.store.memory import MERGE_THRESHOLD, MemoryStore, count_tokens, to_days, valence
from memlib.store.policies import POLICIES, AdaptivePolicy, PaperPolicy, ValuePolicy, make_policy
from memlib.store.protocol import Policy
from memlib.store.replay import Replayed, held_after, replay_history, session_ends
from memlib.store.retrieval import rank
from memlib.store.state import StoreError
from memlib.store.view import StoreView

__all__ = [
    "MERGE_THRESHOLD",
    "POLICIES",
    "AdaptivePolicy",
    "FIFOPolicy",
    "GenerativeAgentsPolicy",
    "MemoryBankPolicy",
    "MemoryStore",
    "PaperPolicy",
    "Policy",
    "RecencyPolicy",
    "Replayed",
    "StoreError",
    "StoreView",
    "UnboundedRAGPolicy",
    "ValuePolicy",
    "count_tokens",
    "held_after",
    "make_policy",
    "rank",
    "replay_history",
    "session_ends",
    "to_days",
    "valence",
]
