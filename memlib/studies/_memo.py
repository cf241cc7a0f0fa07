"""Results a study recalls by content while a block is open: one definition for every study that shares work.

A study whose parts compute the same deterministic thing on the same arrays (the cue study's
surrogate fits, the released study's learns) opens a :class:`Recall` block around itself; inside
it, a result is kept under :func:`content_key` of what it read and recalled after. Blocks nest
(an inner block shares the outer one's results) and nothing outlives the outermost block.

>>> memo = Recall("example")
>>> memo.table() is None
True
>>> with memo.block():
...     memo.table()[content_key(np.arange(3))] = "kept"
...     with memo.block():
...         list(memo.table().values())
['kept']
>>> memo.table() is None
True
"""

from __future__ import annotations

import contextlib
import hashlib
from contextvars import ContextVar

import numpy as np


def content_key(*arrays) -> str:
    """Return the sha256 of ``arrays``: each one's dtype, shape and bytes, in order.

    >>> content_key(np.zeros(2)) == content_key(np.zeros(2)) != content_key(np.zeros(2, np.float32))
    True
    """
    digest = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


class Recall:
    """A table of results shared while a :meth:`block` is open (``None`` outside every block)."""

    def __init__(self, name: str):
        self._table: ContextVar[dict | None] = ContextVar(name, default=None)

    def table(self) -> dict | None:
        """Return the open block's results, or None outside every block."""
        return self._table.get()

    @contextlib.contextmanager
    def block(self):
        """Share results within the block (usable as a decorator); an inner block shares the outer one's."""
        token = self._table.set({} if self._table.get() is None else self._table.get())
        try:
            yield
        finally:
            self._table.reset(token)
