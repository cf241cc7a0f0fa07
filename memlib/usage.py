"""Usage history made live: an agent's own retrievals, replayed (issue 20).

The paper holds usage history (Table 1: ``r / (1 + r)``, ``r`` the retrieval count) at 0
because it needs access logs. But an agent that reads its memory before it answers each
new user turn writes those logs itself. :func:`replay_usage` replays them, causally and
with no API: in each history, every user turn ``j`` retrieves the ``k`` turns most
similar to it (cosine of their sentence embeddings) among *all* the turns stored before
it (positions ``< j``: the store of the replay is unbounded), and ``r[i]`` counts how
often position ``i`` came back. Only retrievals made before the consolidation point
count (by default the end of the history, the moment the blind regime consolidates);
the evaluation question is not a turn of the history and never retrieves, so the
function takes no question at all.

Ties in similarity go to the earlier position, so a replay is deterministic; identical
vectors get bit-identical similarities (each history's distinct vectors are compared
once).

:func:`replay_annotation` replays the histories of a factor annotation from the embedding
cache the annotation filled, and :func:`with_usage` puts the factor into its cases.

>>> E = np.array([[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [1.0, 0.0]]])  # one history, four turns
>>> user = np.array([[True, False, True, True]])                       # turn 1 is the assistant's
>>> r, f = replay_usage(E, user, length=[4], k=1)
>>> r.tolist(), f.tolist()
([[1, 1, 0, 0]], [[0.5, 0.5, 0.0, 0.0]])
>>> replay_usage(E, user, length=[4], k=2)[0].tolist()
[[2, 1, 1, 0]]
"""

from __future__ import annotations

import dataclasses

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError, check_int

#: Turns each user turn retrieves in the replay unless told.
DEFAULT_K = 10
#: The column of :data:`memlib.FACTORS` the usage factor fills.
USAGE_COLUMN = FACTORS.index("usage_history")


def usage_factor(r) -> np.ndarray:
    """Return the paper's usage-history factor ``r / (1 + r)`` of retrieval counts ``r >= 0`` (float32).

    >>> usage_factor([0, 1, 3]).tolist()
    [0.0, 0.5, 0.75]
    """
    r = np.asarray(r, dtype=np.float64)
    if r.size and (not np.all(np.isfinite(r)) or r.min() < 0):
        raise ParameterError("retrieval counts must be finite and >= 0")
    return (r / (1.0 + r)).astype(np.float32)


def replay_usage(embeddings, user, length, k: int = DEFAULT_K, consolidate_at=None, rows=None):
    """Replay an agent's retrievals over histories and count how often each turn came back.

    Parameters
    ----------
    embeddings : array_like, shape (G, N, d), or (T, d) with ``rows``
        Sentence embedding of each position of each history (the (G, N) layout of
        :class:`memlib.cases.CaseSet`: history ``g``, positions ``0 .. length[g] - 1`` in
        time order). With ``rows``, a table of vectors that ``rows`` indexes. Rows are
        normalised to unit length (a zero row is similar to nothing: cosine 0).
    user : array_like of bool, shape (G, N)
        True where the position is a user turn: the turns that retrieve.
    length : array_like of int, shape (G,)
        Real positions per history (the rest is padding).
    k : int
        Turns each user turn retrieves (>= 1). With fewer turns stored, it retrieves them all.
    consolidate_at : array_like of int, shape (G,), optional
        The consolidation point of each history: only user turns at positions
        ``< consolidate_at[g]`` retrieve (and so only turns before it can be counted).
        Defaults to ``length`` (the end of the history). At most ``length``.
    rows : array_like of int, shape (G, N), optional
        Row of ``embeddings`` of each position (any value on padding).

    Returns
    -------
    r : ndarray, shape (G, N), int64
        ``r[g, i]``: retrievals of position ``i`` by the user turns ``j`` with
        ``i < j < consolidate_at[g]``. 0 on padding.
    factor : ndarray, shape (G, N), float32
        :func:`usage_factor` of ``r``: the paper's ``r / (1 + r)``.

    Notes
    -----
    User turn ``j`` scores the ``j`` turns before it by cosine and takes the ``min(k, j)``
    best, the earlier of two equally similar turns first. Per history it costs one product
    of its distinct vectors, one partition and one cumulative sum over a (user turns x
    positions) array: tens of milliseconds for a history of 500 turns on a busy two-core machine.

    >>> E = np.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])  # turns 0 and 1 tie for turn 2's
    >>> replay_usage(E, [[True, True, True]], [3], k=1)[0].tolist()
    [[2, 0, 0]]
    """
    k = check_int("k", k, minimum=1)
    user = np.asarray(user)
    if user.ndim != 2:
        raise ParameterError(f"user must be a (G, N) array of bool, got shape {user.shape}")
    if user.dtype.kind != "b":
        if user.dtype.kind not in "iu" or not np.isin(user, (0, 1)).all():
            raise ParameterError(f"user must hold True/False (or 1/0) per position, got dtype {user.dtype}")
        user = user.astype(bool)
    G, N = user.shape
    length = _counts("length", length, G, np.full(G, N), f"the N = {N} positions of user")
    until = length if consolidate_at is None else _counts("consolidate_at", consolidate_at, G, length, "length")
    E = np.asarray(embeddings)
    if E.dtype.kind not in "fiu":
        raise ParameterError(f"embeddings must be numbers, got dtype {E.dtype}")
    if not np.all(np.isfinite(E)):
        raise ParameterError("embeddings must be finite (no NaN or infinity)")
    if rows is None:
        if E.ndim != 3 or E.shape[:2] != (G, N):
            raise ParameterError(f"embeddings must have shape (G, N, d) = ({G}, {N}, d) as user, got {E.shape}")
    else:
        rows = np.asarray(rows)
        if rows.shape != (G, N) or rows.dtype.kind not in "iu":
            raise ParameterError(f"rows must be a ({G}, {N}) array of int as user, got {rows.dtype} {rows.shape}")
        if E.ndim != 2:
            raise ParameterError(f"embeddings must be a (T, d) table when rows is given, got shape {E.shape}")
        real = np.arange(N)[None, :] < length[:, None]
        if real.any() and (rows[real].min() < 0 or rows[real].max() >= len(E)):
            raise ParameterError(f"rows must index the {len(E)} rows of embeddings on every real position")
    r = np.zeros((G, N), np.int64)
    for g in range(G):
        c = int(until[g])
        if rows is None:  # each distinct unit vector once
            vectors, inv = np.unique(_unit(E[g, :c]), axis=0, return_inverse=True)
        else:
            ids, inv = np.unique(rows[g, :c], return_inverse=True)
            vectors = _unit(E[ids])
        r[g, :c] = _replay_history(vectors, inv.reshape(-1), user[g, :c], k)
    return r, usage_factor(r)


def _counts(name: str, value, G: int, upper, upper_name: str) -> np.ndarray:
    """``value`` as G integers in ``[0, upper]`` (elementwise), or a ParameterError naming ``name``."""
    a = np.asarray(value)
    if a.shape != (G,) or not (a.dtype.kind in "iu" or (a.size == 0 and a.dtype.kind == "f")):
        raise ParameterError(f"{name} must hold one integer per history ({G}), got {a.dtype} of shape {a.shape}")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or np.any(a > upper)):
        raise ParameterError(f"{name} must be between 0 and {upper_name}, got values from {a.min()} to {a.max()}")
    return a


def _unit(X) -> np.ndarray:
    """Return the rows of ``X`` scaled to unit length, in float64 (a zero row stays 0)."""
    X = np.asarray(X, dtype=np.float64)
    norm = np.linalg.norm(X, axis=-1, keepdims=True)
    return np.divide(X, norm, out=np.zeros_like(X), where=norm > 0)


def _replay_history(unit: np.ndarray, inv: np.ndarray, user: np.ndarray, k: int) -> np.ndarray:
    """Count the retrievals of the positions ``0 .. len(inv) - 1`` of one history (see :func:`replay_usage`).

    ``unit`` holds its distinct unit vectors (float64) and ``inv`` each position's row among them.
    """
    n = len(inv)
    q = np.flatnonzero(user)
    q = q[q > 0]  # the first turn finds an empty store
    if len(q) == 0:
        return np.zeros(n, np.int64)
    # (queries, positions), each distinct pair once, so identical vectors get identical similarities
    asked, which = np.unique(inv[q], return_inverse=True)
    S = (unit[asked] @ unit.T)[np.ix_(which.reshape(-1), inv)]
    stored = np.arange(n)[None, :] < q[:, None]  # what each query can retrieve: the turns before it
    S[~stored] = -np.inf
    take = min(k, n)
    kth = np.partition(S, n - take, axis=1)[:, n - take][:, None]  # each query's take-th best (-inf: fewer stored)
    above = S > kth
    tie = stored & (S == kth)
    room = take - above.sum(axis=1, keepdims=True)  # ties fill the rest, earliest first
    chosen = above | (tie & (np.cumsum(tie, axis=1) <= room))
    return chosen.sum(axis=0).astype(np.int64)


def position_inputs(ds, annotation, embedding_setting="fast", progress: bool = False):
    """Return what :func:`replay_usage` reads of an annotation's histories: vectors, their rows, user turns.

    Parameters
    ----------
    ds : memlib.datasets.Dataset
        The dataset that was annotated.
    annotation : memlib.factors.Annotation
        Its factor annotation (either regime: the replay reads only the histories).
    embedding_setting : {'fast', 'reference', 'int8'} or int
        The embedding setting (:data:`memlib.embeddings.SETTINGS`); served from the cache
        the annotation filled.
    progress : bool
        Show the embedding progress bar when texts are missing from the cache.

    Returns
    -------
    embeddings : ndarray, shape (T, 384), float32
        One unit row per distinct text the histories hold.
    rows : ndarray, shape (G, N), int64
        Each position's row of ``embeddings`` (0 on padding).
    user : ndarray, shape (G, N), bool
        True where the position is a user's turn.
    """
    from memlib.embeddings import DIM, embed_cached

    turn_rows = np.asarray(annotation.turn_rows)
    valid = turn_rows >= 0
    at = np.where(valid, turn_rows, 0)
    text_ids = ds.turns["text_id"].to_numpy()[at]
    used, rows = np.unique(np.where(valid, text_ids, -1), return_inverse=True)
    rows = rows.reshape(turn_rows.shape)
    if len(used) and used[0] == -1:  # padding: its own row of zeros
        texts = [ds.texts[i] for i in used[1:]]
        vectors = np.zeros((len(used), DIM), np.float32)
        if texts:
            vectors[1:] = embed_cached(texts, setting=embedding_setting, progress=progress)
    else:
        vectors = embed_cached([ds.texts[i] for i in used], setting=embedding_setting, progress=progress)
    user = valid & (ds.turns["role"].to_numpy()[at] == "user")
    return vectors, np.where(valid, rows, 0).astype(np.int64), user


def replay_annotation(ds, annotation, k: int = DEFAULT_K, embedding_setting="fast", progress: bool = False):
    """Replay the retrievals over every history of an annotation: ``(r, factor)`` as :func:`replay_usage`.

    The consolidation point is the end of each history; what is read is each turn's text
    embedding and role (:func:`position_inputs`), never a question.
    """
    k = check_int("k", k, minimum=1)
    vectors, rows, user = position_inputs(ds, annotation, embedding_setting, progress)
    return replay_usage(vectors, user, annotation.cases.length, k=k, rows=rows)


def with_usage(cases, factor):
    """Return ``cases`` (a :class:`memlib.cases.CaseSet`) with the usage-history column set to ``factor``.

    ``factor`` is (G, N) in [0, 1] (padding is set to 0); the other columns are kept.

    >>> from memlib.cases import CaseSet
    >>> cs = CaseSet.from_cases([np.zeros((2, 7))], [np.arange(2.0)], gold=[[0]])
    >>> live = with_usage(cs, [[0.5, 0.0]])
    >>> live.factors[0, :, USAGE_COLUMN].tolist(), bool(live.live_factors[USAGE_COLUMN])
    ([0.5, 0.0], True)
    """
    f = np.asarray(factor, dtype=np.float64)
    if f.shape != cases.time.shape:
        raise ParameterError(f"factor must have the (G, N) shape {cases.time.shape} of the cases, got {f.shape}")
    if not np.all(np.isfinite(f)) or (f.size and (f.min() < 0 or f.max() > 1)):
        raise ParameterError("factor must hold values in [0, 1]")
    F = cases.factors.copy()
    F[..., USAGE_COLUMN] = np.where(cases.valid, f, 0.0)
    return dataclasses.replace(cases, factors=F)


__all__ = [
    "DEFAULT_K",
    "USAGE_COLUMN",
    "position_inputs",
    "replay_annotation",
    "replay_usage",
    "usage_factor",
    "with_usage",
]
