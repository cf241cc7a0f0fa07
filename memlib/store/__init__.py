"""A memory store for an agent, and the policies that decide what it forgets and returns.

* :mod:`memlib.store.memory`: :class:`MemoryStore` (encode, forget, retrieve, pin, explain;
  in memory, or in a SQLite file with :meth:`MemoryStore.open`);
* :mod:`memlib.store.durable`: the SQLite file (schema, transactions, locking);
* :mod:`memlib.store.npz`: the ``.npz`` export (:meth:`MemoryStore.save`, :meth:`MemoryStore.load`);
* :mod:`memlib.store.state`: the saved state both files hold, checked field by field;
* :mod:`memlib.store.protocol`: :class:`Policy`, the one interface of a forgetting policy;
* :mod:`memlib.store.policies`: :class:`ValuePolicy` (the paper's value, eq. 3) and the
  registry :data:`POLICIES` of every built-in policy with :func:`make_policy`;
* :mod:`memlib.store.baselines`: the published policies it is compared against.

>>> from memlib.store import MemoryStore, make_policy
>>> MemoryStore(policy=make_policy("memgpt_fifo")).policy.name
'memgpt_fifo'
"""

from memlib.store.baselines import (
    FIFOPolicy,
    GenerativeAgentsPolicy,
    MemoryBankPolicy,
    RecencyPolicy,
    UnboundedRAGPolicy,
)
from memlib.store.memory import MERGE_THRESHOLD, MemoryStore, count_tokens, to_days, valence
from memlib.store.policies import POLICIES, PaperPolicy, ValuePolicy, make_policy
from memlib.store.protocol import Policy
from memlib.store.state import StoreError

__all__ = [
    "MERGE_THRESHOLD",
    "POLICIES",
    "FIFOPolicy",
    "GenerativeAgentsPolicy",
    "MemoryBankPolicy",
    "MemoryStore",
    "PaperPolicy",
    "Policy",
    "RecencyPolicy",
    "StoreError",
    "UnboundedRAGPolicy",
    "ValuePolicy",
    "count_tokens",
    "make_policy",
    "to_days",
    "valence",
]
