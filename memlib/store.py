"""An agent-facing memory store driven by one value: encode, forget, retrieve.

:class:`MemoryStore` keeps the turns of one conversation. Each :meth:`~MemoryStore.add`
annotates the turn causally with the seven factors (the same definitions as
:mod:`memlib.factors` in the blind regime) and gives it an encoding tier from its
normalised value. :meth:`~MemoryStore.consolidate` ends a session: it fixes the
session's goal anchor (the centroid of the session's user turns), then drops the
items with the highest forget score (eq. 3) until the budget holds.
:meth:`~MemoryStore.retrieve` ranks the retained items for a query and counts the
retrieval, so the usage-history factor becomes live.

The retrieval rank of the value policy is documented in :class:`ValuePolicy`.
Other forgetting and retrieval rules (the published baselines of
:mod:`memlib.baselines`) plug in through the same :class:`Policy` interface.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> def vec():
...     v = rng.normal(size=384)
...     return v / np.linalg.norm(v)
>>> store = MemoryStore(policy=ValuePolicy(beta=5.0))
>>> for day, text in enumerate(["I am allergic to peanuts!", "Nice weather.", "My sister is Ana."]):
...     _ = store.add(text, role="user", time=float(day), embedding=vec())
>>> store.consolidate(budget=2, now=10.0)   # the oldest item survives: its value resists
[1]
>>> [item["text"] for item in store.items()]
['I am allergic to peanuts!', 'My sister is Ana.']
>>> store.tiers().tolist()   # V / sum(w): the three inert factors hold the default weights down
['semantic', 'semantic']
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_int, check_positive
from memlib.factors import emotion_and_valence, reliability
from memlib.forgetting import drop_to_budget, forget_score
from memlib.value import check_weights, encoding_tier

DIM = 384
_FI = {f: i for i, f in enumerate(FACTORS)}
FORMAT_VERSION = 1


class StoreError(ValueError):
    """A saved store is missing, corrupt or of another format."""


def to_days(time) -> float:
    """A time as float days: a number is taken as days; a datetime or Timestamp as days since 1970."""
    if isinstance(time, (int, float, np.integer, np.floating)) and not isinstance(time, bool):
        t = float(time)
    elif isinstance(time, (_dt.datetime, _dt.date, pd.Timestamp, np.datetime64, str)):
        t = (pd.Timestamp(time) - pd.Timestamp(0)) / pd.Timedelta(days=1)
    else:
        raise ParameterError(f"time must be a number of days or a datetime, got {time!r}")
    if not np.isfinite(t):
        raise ParameterError(f"time must be finite, got {time!r}")
    return t


def valence(texts) -> np.ndarray:
    """VADER compound valence in [-1, 1] of each text."""
    return emotion_and_valence(texts)[1]


# --------------------------------------------------------------------------- policies


class Policy:
    """How a store forgets and ranks. Subclasses override the three hooks.

    ``forget_scores(store, now)`` returns one score per item (highest dropped
    first); ``retrieval_scores(store, query_vec, query_valence, now)`` one score
    per item (highest returned first); ``on_retrieve(store, idx, now)`` updates
    state for the returned items. ``bounded = False`` turns forgetting off.
    """

    name = "policy"
    bounded = True

    def forget_scores(self, store: "MemoryStore", now: float) -> np.ndarray:
        raise NotImplementedError

    def retrieval_scores(self, store: "MemoryStore", query_vec, query_valence: float, now: float) -> np.ndarray:
        return store.similarity(query_vec)

    def on_retrieve(self, store: "MemoryStore", idx: np.ndarray, now: float) -> None:
        store._retrievals[idx] += 1
        store._last_access[idx] = now
        store._refresh_usage(idx)

    def config(self) -> dict:
        return {}


class ValuePolicy(Policy):
    """The paper's single value for forgetting and retrieval.

    Forgetting: eq. 3, ``age**0.7 / (1 + r) / (1 + beta * V)`` with age in days at
    consolidation time (``keep_top_value=True`` instead drops the lowest ``V``
    first, the keep/drop rule of the paper's evaluation).

    Retrieval: ``sim + value_weight * V_bar + mood_weight * mood`` where ``sim =
    (1 + cos(query, item)) / 2``, ``V_bar = V / sum(w)`` and mood congruence
    ``mood = 1 - |valence(query) - valence(item)| / 2`` (VADER valences), all in
    [0, 1]. Defaults: ``value_weight = 0.5``, ``mood_weight = 0.1``; query
    similarity leads, the value breaks near-ties toward durable memories.
    """

    name = "learned_V"

    def __init__(self, beta: float = 1.0, value_weight: float = 0.5, mood_weight: float = 0.1,
                 keep_top_value: bool = False):
        self.beta = check_positive("beta", beta, allow_zero=True)
        self.value_weight = check_positive("value_weight", value_weight, allow_zero=True)
        self.mood_weight = check_positive("mood_weight", mood_weight, allow_zero=True)
        self.keep_top_value = bool(keep_top_value)

    def forget_scores(self, store, now):
        v = store.values()
        if self.keep_top_value:
            return -v
        return forget_score(np.maximum(now - store._time, 0.0), store._retrievals, v, beta=self.beta)

    def retrieval_scores(self, store, query_vec, query_valence, now):
        mood = 1.0 - np.abs(query_valence - store._valence) / 2.0
        return store.similarity(query_vec) + self.value_weight * store.normalised_values() + self.mood_weight * mood

    def config(self):
        return {"beta": self.beta, "value_weight": self.value_weight, "mood_weight": self.mood_weight,
                "keep_top_value": self.keep_top_value}


# --------------------------------------------------------------------------- the store


class MemoryStore:
    """A bounded memory for one conversation, ruled by the value ``V = f @ w``.

    Parameters
    ----------
    weights : array_like, shape (7,), optional
        Factor weights (default: 1 for every factor). Learned weights come from
        :func:`memlib.experiments.oracle_vs_blind` (blind regime).
    policy : Policy, optional
        Forgetting and retrieval rules (default :class:`ValuePolicy`).
    value_profile : array_like, shape (384,), optional
        Embedding of the agent's value profile; makes value alignment live.
    embed : callable, optional
        ``embed(list of texts) -> (n, 384)`` unit vectors, used when
        :meth:`add` or :meth:`retrieve` get text without an embedding (default:
        :func:`memlib.embeddings.embed`).
    """

    def __init__(self, weights=None, policy: Policy | None = None, value_profile=None, embed=None):
        self.weights = check_weights(np.ones(len(FACTORS)) if weights is None else weights)
        self.policy = policy or ValuePolicy()
        self.value_profile = None if value_profile is None else _unit(np.asarray(value_profile, dtype=np.float64))
        self._embed_fn = embed
        self._texts: list[str] = []
        self._roles: list[str] = []
        self._speakers: list[str] = []
        self._sessions: list[str] = []
        self._ids: list[int] = []
        self._time = np.zeros(0)
        self._emb = np.zeros((0, DIM), np.float32)
        self._factors = np.zeros((0, len(FACTORS)))
        self._valence = np.zeros(0)
        self._retrievals = np.zeros(0)
        self._last_access = np.zeros(0)
        self._level = np.zeros(0)
        self._user_sum = np.zeros(DIM)
        self._speaker_sums: dict[str, np.ndarray] = {}
        self._session_sum = np.zeros(DIM)
        self._session_all_sum = np.zeros(DIM)
        self._session_has_user = False
        self._current_session: str | None = None
        self._next_id = 0
        self._now = -np.inf
        self.forgotten: list[dict] = []  # (id, text, reason) of dropped items, for inspection

    # ------------------------------------------------------------------ writing
    def add(self, text: str, role: str = "user", time=None, speaker: str | None = None,
            session: str | None = None, embedding=None, emotion: float | None = None,
            task_utility: float = 0.0) -> int:
        """Store one turn; return its id.

        Parameters
        ----------
        text : str
        role : {'user', 'assistant'}
        time : float (days) or datetime
            Must not go backwards. Default: the latest time seen.
        speaker : str, optional
            Default: the role. A user turn's self relevance compares it with the
            same speaker's earlier turns.
        session : str, optional
            Session label; a new label ends the previous session's goal anchor
            (call :meth:`consolidate` at session ends to forget).
        embedding : array_like (384,), optional
            Precomputed unit embedding of ``text``.
        emotion : float, optional
            Precomputed emotional intensity in [0, 1].
        task_utility : float
            Task utility in [0, 1] from a judge, if any.
        """
        if not isinstance(text, str) or not text.strip():
            raise ParameterError("text must be a non-empty string")
        if role not in ("user", "assistant"):
            raise ParameterError(f"role must be 'user' or 'assistant', got {role!r}")
        t = self._now if time is None else to_days(time)
        if time is None and not np.isfinite(t):
            raise ParameterError("the first add needs a time")
        if t < self._now:
            raise ParameterError(f"time goes backwards: {t} days is before the latest time {self._now} days")
        if not 0.0 <= float(task_utility) <= 1.0:
            raise ParameterError(f"task_utility must be in [0, 1], got {task_utility}")
        speaker = role if speaker is None else str(speaker)
        session = "" if session is None else str(session)
        if session != self._current_session:
            self._start_session(session)
        e = self._embedding(text, embedding)

        f = np.zeros(len(FACTORS))
        if emotion is None:
            emo, val = emotion_and_valence([text])
            emotion, text_valence = emo[0], val[0]
        else:
            text_valence = _valence_cached(text)
        f[_FI["emotional_intensity"]] = float(emotion)
        f[_FI["reliability"]] = reliability([role], [text])[0]
        before = self._speaker_sums.get(speaker, np.zeros(DIM)) if role == "user" else self._user_sum
        f[_FI["self_relevance"]] = _cos01(e, before)
        f[_FI["task_utility"]] = float(task_utility)
        if self.value_profile is not None:
            f[_FI["value_alignment"]] = (1.0 + float(e @ self.value_profile)) / 2.0
        if role == "user":
            self._speaker_sums[speaker] = self._speaker_sums.get(speaker, np.zeros(DIM)) + e
            self._user_sum = self._user_sum + e
            self._session_sum = self._session_sum + e
            self._session_has_user = True
        self._session_all_sum = self._session_all_sum + e
        anchor = self._session_sum if self._session_has_user else self._session_all_sum
        f[_FI["goal_relevance"]] = _cos01(e, anchor)  # provisional; final at the session's end
        if not np.all((f >= 0) & (f <= 1)):
            raise ParameterError("emotion must be in [0, 1]")

        self._texts.append(text)
        self._roles.append(role)
        self._speakers.append(speaker)
        self._sessions.append(session)
        self._ids.append(self._next_id)
        self._time = np.append(self._time, t)
        self._emb = np.vstack([self._emb, e[None, :].astype(np.float32)])
        self._factors = np.vstack([self._factors, f[None, :]])
        self._valence = np.append(self._valence, text_valence)
        self._retrievals = np.append(self._retrievals, 0.0)
        self._last_access = np.append(self._last_access, t)
        self._level = np.append(self._level, 0.0)
        self._now = t
        self._next_id += 1
        return self._ids[-1]

    def _start_session(self, session: str) -> None:
        self._finalise_goal()
        self._current_session = session
        self._session_sum = np.zeros(DIM)
        self._session_all_sum = np.zeros(DIM)
        self._session_has_user = False

    def _finalise_goal(self) -> None:
        """Goal relevance of the current session's items against the whole session's user centroid."""
        if self._current_session is None or not len(self._texts):
            return
        idx = np.flatnonzero(np.asarray(self._sessions) == self._current_session)
        anchor = self._session_sum if self._session_has_user else self._session_all_sum
        for i in idx:
            self._factors[i, _FI["goal_relevance"]] = _cos01(self._emb[i].astype(np.float64), anchor)

    def consolidate(self, budget, now=None) -> list[int]:
        """End the session and forget down to ``budget`` items; return the dropped ids.

        The items with the highest forget score under the policy go first
        (ties: the older item first). ``now`` (default: the latest time) is the
        time at which ages are measured.
        """
        budget = check_int("budget", budget, minimum=0)
        now = self._now if now is None else to_days(now)
        if now < self._now:
            raise ParameterError(f"time goes backwards: now={now} days is before the latest time {self._now} days")
        self._finalise_goal()
        self._now = now
        if not self.policy.bounded or len(self) <= budget:
            return []
        keep = drop_to_budget(self.policy.forget_scores(self, now), budget)
        dropped = [self._ids[i] for i in np.flatnonzero(~keep)]
        for i in np.flatnonzero(~keep):
            self.forgotten.append({"id": self._ids[i], "text": self._texts[i], "time": float(self._time[i]),
                                   "value": float(self.values()[i]), "tier": str(self.tiers()[i])})
        self._select(keep)
        return dropped

    def _select(self, keep: np.ndarray) -> None:
        pick = np.flatnonzero(keep)
        for name in ("_texts", "_roles", "_speakers", "_sessions", "_ids"):
            setattr(self, name, [getattr(self, name)[i] for i in pick])
        for name in ("_time", "_emb", "_factors", "_valence", "_retrievals", "_last_access", "_level"):
            setattr(self, name, getattr(self, name)[pick])

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self._texts)

    @property
    def ids(self) -> list[int]:
        return list(self._ids)

    @property
    def embeddings(self) -> np.ndarray:
        return self._emb

    @property
    def factors(self) -> np.ndarray:
        """(n, 7) factor values of the retained items."""
        return self._factors

    def values(self) -> np.ndarray:
        """Value ``V = f @ w`` of every retained item."""
        return self._factors @ self.weights

    def normalised_values(self) -> np.ndarray:
        total = self.weights.sum()
        return self.values() / total if total > 0 else np.zeros(len(self))

    def tiers(self) -> np.ndarray:
        """Encoding tier of every retained item (from its normalised value)."""
        return encoding_tier(np.clip(self.normalised_values(), 0, 1))

    def similarity(self, query_vec) -> np.ndarray:
        """``(1 + cos) / 2`` between a unit query vector and every item."""
        return (1.0 + self._emb.astype(np.float64) @ np.asarray(query_vec, dtype=np.float64)) / 2.0

    def items(self) -> list[dict]:
        """The retained items with their factors, value and tier, oldest first."""
        v, tiers = self.values(), self.tiers()
        return [{"id": self._ids[i], "text": self._texts[i], "role": self._roles[i], "speaker": self._speakers[i],
                 "session": self._sessions[i], "time": float(self._time[i]), "retrievals": int(self._retrievals[i]),
                 "value": float(v[i]), "tier": str(tiers[i]), **dict(zip(FACTORS, self._factors[i].tolist()))}
                for i in range(len(self))]

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.items())

    def retrieve(self, query: str | None = None, k: int = 5, query_embedding=None, now=None,
                 update: bool = True) -> list[dict]:
        """The ``k`` best items for a query, best first (each dict has a ``score``).

        Returned items' retrieval counts grow by one (``update=False`` leaves
        the store unchanged, for evaluation on a snapshot).
        """
        k = check_int("k", k, minimum=1)
        if query_embedding is None:
            if not isinstance(query, str) or not query.strip():
                raise ParameterError("retrieve needs a query string or a query_embedding")
            query_embedding = self._embed([query])[0]
        q = _unit(np.asarray(query_embedding, dtype=np.float64))
        qv = valence([query])[0] if isinstance(query, str) else 0.0
        now = self._now if now is None else to_days(now)
        if not len(self):
            return []
        scores = self.policy.retrieval_scores(self, q, qv, now)
        order = np.argsort(-scores, kind="stable")[:k]
        out = [dict(self.items()[i], score=float(scores[i])) for i in order]
        if update:
            self.policy.on_retrieve(self, order, now)
        return out

    def rank(self, query_embedding, query_valence: float = 0.0, now=None) -> np.ndarray:
        """Indices of all retained items in retrieval order (no state change)."""
        if not len(self):
            return np.zeros(0, dtype=np.int64)
        now = self._now if now is None else to_days(now)
        q = _unit(np.asarray(query_embedding, dtype=np.float64))
        return np.argsort(-self.policy.retrieval_scores(self, q, query_valence, now), kind="stable")

    def _refresh_usage(self, idx) -> None:
        r = self._retrievals[idx]
        self._factors[idx, _FI["usage_history"]] = r / (1.0 + r)

    # ------------------------------------------------------------------ embeddings
    def _embedding(self, text, embedding) -> np.ndarray:
        if embedding is None:
            return self._embed([text])[0]
        e = np.asarray(embedding, dtype=np.float64).reshape(-1)
        if e.shape != (DIM,) or not np.all(np.isfinite(e)):
            raise ParameterError(f"embedding must be {DIM} finite numbers")
        return _unit(e)

    def _embed(self, texts) -> np.ndarray:
        if self._embed_fn is not None:
            return np.asarray(self._embed_fn(texts), dtype=np.float64)
        from memlib.embeddings import embed

        return embed(texts, progress=False).astype(np.float64)

    # ------------------------------------------------------------------ persistence
    def save(self, path) -> None:
        """Write the store to one ``.npz`` file (arrays plus a JSON header; no pickle), atomically."""
        from memlib.embeddings import atomic_savez

        header = {
            "format": "memlib.MemoryStore", "version": FORMAT_VERSION,
            "policy": type(self.policy).__name__, "policy_config": self.policy.config(),
            "texts": self._texts, "roles": self._roles, "speakers": self._speakers, "sessions": self._sessions,
            "ids": self._ids, "current_session": self._current_session, "next_id": self._next_id,
            "now": None if not np.isfinite(self._now) else self._now, "session_has_user": self._session_has_user,
            "speakers_with_sums": list(self._speaker_sums), "forgotten": self.forgotten,
        }
        speaker_sums = (np.stack(list(self._speaker_sums.values())) if self._speaker_sums
                        else np.zeros((0, DIM)))
        atomic_savez(path, header=np.array(json.dumps(header)), weights=self.weights, time=self._time,
                     embeddings=self._emb, factors=self._factors, valence=self._valence,
                     retrievals=self._retrievals, last_access=self._last_access, level=self._level,
                     user_sum=self._user_sum, speaker_sums=speaker_sums, session_sum=self._session_sum,
                     session_all_sum=self._session_all_sum,
                     value_profile=np.zeros(0) if self.value_profile is None else self.value_profile)

    @classmethod
    def load(cls, path, policy: Policy | None = None, embed=None) -> "MemoryStore":
        """Read a store written by :meth:`save`.

        The policy is rebuilt from its saved name and settings (built-in
        policies); pass ``policy`` to supply another.
        """
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise StoreError(f"{path}: no such store file") from None
        except Exception as exc:  # zipfile / format errors
            raise StoreError(f"{path}: not a readable store file ({exc})") from None
        try:
            header = json.loads(str(arrays.pop("header")))
        except (KeyError, ValueError) as exc:
            raise StoreError(f"{path}: the store header is missing or not JSON ({exc})") from None
        if header.get("format") != "memlib.MemoryStore":
            raise StoreError(f"{path}: not a memlib MemoryStore file")
        if header.get("version") != FORMAT_VERSION:
            raise StoreError(f"{path}: store format version {header.get('version')} is not {FORMAT_VERSION}")
        need = ("weights", "time", "embeddings", "factors", "valence", "retrievals", "last_access", "level",
                "user_sum", "speaker_sums", "session_sum", "session_all_sum", "value_profile")
        missing = [k for k in need if k not in arrays]
        if missing:
            raise StoreError(f"{path}: missing arrays {', '.join(missing)}")
        n = len(header.get("texts", []))
        shapes = {"time": (n,), "embeddings": (n, DIM), "factors": (n, len(FACTORS)), "valence": (n,),
                  "retrievals": (n,), "last_access": (n,), "level": (n,)}
        for k, shape in shapes.items():
            if arrays[k].shape != shape:
                raise StoreError(f"{path}: {k} has shape {arrays[k].shape}, expected {shape} for {n} items")
        for k in ("roles", "speakers", "sessions", "ids"):
            if len(header.get(k, [])) != n:
                raise StoreError(f"{path}: {k} lists {len(header.get(k, []))} entries for {n} items")
        if policy is None:
            from memlib import baselines

            known = {c.__name__: c for c in baselines.POLICY_CLASSES}
            if header["policy"] not in known:
                raise StoreError(f"{path}: unknown policy {header['policy']!r}; pass policy= to load it")
            policy = known[header["policy"]](**header["policy_config"])
        vp = arrays["value_profile"]
        store = cls(weights=arrays["weights"], policy=policy, value_profile=vp if len(vp) else None, embed=embed)
        store._texts, store._roles = list(header["texts"]), list(header["roles"])
        store._speakers, store._sessions = list(header["speakers"]), list(header["sessions"])
        store._ids = [int(i) for i in header["ids"]]
        store._time, store._emb, store._factors = arrays["time"], arrays["embeddings"], arrays["factors"]
        store._valence, store._retrievals = arrays["valence"], arrays["retrievals"]
        store._last_access, store._level = arrays["last_access"], arrays["level"]
        store._user_sum, store._session_sum = arrays["user_sum"], arrays["session_sum"]
        store._session_all_sum = arrays["session_all_sum"]
        store._speaker_sums = dict(zip(header["speakers_with_sums"], arrays["speaker_sums"]))
        store._session_has_user = bool(header["session_has_user"])
        store._current_session = header["current_session"]
        store._next_id = int(header["next_id"])
        store._now = -np.inf if header["now"] is None else float(header["now"])
        store.forgotten = list(header["forgotten"])
        return store


_VALENCE_CACHE: dict[str, float] = {}


def _valence_cached(text: str) -> float:
    v = _VALENCE_CACHE.get(text)
    if v is None:
        v = _VALENCE_CACHE[text] = float(valence([text])[0])
    return v


def _unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v)
    if n == 0:
        raise ParameterError("an embedding must not be the zero vector")
    return v / n


def _cos01(e: np.ndarray, anchor: np.ndarray) -> float:
    n = np.linalg.norm(anchor)
    if n == 0:
        return 0.5
    return float(np.clip((1.0 + float(e @ anchor) / n) / 2.0, 0.0, 1.0))
