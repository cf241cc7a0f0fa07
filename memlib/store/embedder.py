"""The embedder adapter: how a store turns texts into its unit vectors, and checks every vector it is given.

:class:`Embedder` wraps the ``embedder`` argument of a store (any callable from a
list of texts to an ``(n, 384)`` array; by default :func:`memlib.embeddings.embed_uncached`
at the ``fast`` setting) and checks what it returns, so that a wrong shape, a NaN or a
zero row is one :class:`~memlib._checks.ParameterError` naming the embedder.
:func:`check_vector` checks a vector a caller passes (an embedding, a query
embedding, a value profile) and makes it unit length.

>>> import numpy as np
>>> Embedder(lambda texts: np.ones((len(texts), 384)))(["a", "b"]).shape
(2, 384)
>>> Embedder(lambda texts: np.zeros((len(texts), 3)))(["a"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
memlib._checks.ParameterError: the embedder <lambda> returned shape (1, 3) for 1 texts; it must return (1, 384): ...
>>> float(np.linalg.norm(check_vector("embedding", np.arange(384.0))))
1.0
>>> check_vector("embedding", np.full(384, 1e308))[:2]   # huge but finite: its direction, not a zero vector
array([0.05103104, 0.05103104])
"""

from __future__ import annotations

import threading

import numpy as np

from memlib._checks import ParameterError
from memlib.store.state import DIM

#: Serialises calls of the default embedder: a fast tokenizer raises "Already borrowed" when two
#: threads use it at once, and the model runs on every core anyway.
_DEFAULT_EMBEDDER_LOCK = threading.Lock()


def check_vector(name: str, v) -> np.ndarray:
    """Return a unit float64 copy of ``v``, which must be 384 finite real numbers in one row (1-D), not all zero."""
    try:
        a = np.asarray(v)
        if a.dtype.kind == "c":
            raise ParameterError(f"{name} must be real numbers, got {a.dtype.name} numbers")
        e = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ParameterError):
            raise
        raise ParameterError(f"{name} must be {DIM} finite numbers") from None
    if e.ndim != 1:
        raise ParameterError(f"{name} must be {DIM} finite numbers in one 1-D row, got shape {e.shape}")
    if e.shape != (DIM,) or not np.all(np.isfinite(e)):
        raise ParameterError(
            f"{name} must be {DIM} finite numbers, got shape {e.shape}"
            + ("" if e.shape != (DIM,) else " with a NaN or infinity")
        )
    with np.errstate(over="ignore", under="ignore"):
        n = np.linalg.norm(e)
    if not np.isfinite(n) or (n == 0 and e.any()):  # finite numbers whose squares overflow (1e308) or vanish
        e = e / np.abs(e).max()
        n = np.linalg.norm(e)
    if n == 0:
        raise ParameterError(f"{name} must not be the zero vector")
    return e / n


def embedder_argument(embedder):
    """Return the ``embedder`` argument of a store: None (the default model) or a callable."""
    if embedder is not None and not callable(embedder):
        raise ParameterError(
            f"embedder must be a callable, list of str -> (n, {DIM}) array, got {type(embedder).__name__}"
        )
    return embedder


class Embedder:
    """A store's embedder: ``fn`` (None: the default model), called once per batch and checked.

    Parameters
    ----------
    fn : callable or None
        ``fn(list of str) -> (n, 384)`` array-like; checked by :func:`embedder_argument`.
    """

    def __init__(self, fn=None):
        self.fn = fn

    def __call__(self, texts: list[str]) -> np.ndarray:
        """(n, 384) float64 embeddings of ``texts``, in one call, checked (rows are not yet unit length)."""
        if self.fn is None:
            from memlib.embeddings import embed_uncached

            with _DEFAULT_EMBEDDER_LOCK:
                name, raw = "memlib.embeddings.embed_uncached (the default)", embed_uncached(texts, setting="fast")
        else:
            name = getattr(self.fn, "__qualname__", None) or repr(self.fn)[:80]
            raw = self.fn(list(texts))  # a copy: an embedder that changes its list changes nothing here
        try:
            out = np.asarray(raw)
            if out.dtype.kind == "c":
                raise ParameterError(
                    f"the embedder {name} must return real numbers, got an array of {out.dtype.name} numbers"
                )
            out = np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ParameterError):
                raise
            raise ParameterError(
                f"the embedder {name} must return an (n, {DIM}) array of numbers, got {type(raw).__name__}"
            ) from None
        if out.shape != (len(texts), DIM):
            raise ParameterError(
                f"the embedder {name} returned shape {out.shape} for {len(texts)} texts; "
                f"it must return ({len(texts)}, {DIM}): one row of {DIM} numbers per text"
            )
        bad = ~np.isfinite(out).all(axis=1) | ~out.any(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "a zero vector" if np.isfinite(out[i]).all() else "a NaN or infinity"
            raise ParameterError(f"the embedder {name} returned {what} for text {i} ({texts[i][:60]!r})")
        return out

    def fill(self, turns) -> None:
        """Give every turn without an ``embedding`` its unit embedding, all in one call of the embedder."""
        need = [turn for turn in turns if turn.embedding is None]
        if need:
            for turn, e in zip(need, self([turn.text for turn in need])):
                turn.embedding = check_vector("embedding", e)

    def vector(self, text: str, embedding=None) -> np.ndarray:
        """Return the unit embedding of ``text``: ``embedding`` checked, or the embedder's."""
        if embedding is None:
            embedding = self([text])[0]
        return check_vector("embedding", embedding)
