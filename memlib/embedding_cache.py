"""The content-addressed embedding cache: ``.npz`` shards of text keys and float32 unit vectors.

A text's key is the sha256 of the model tag, the maximum sequence length and
the text; each setting has its own folder ``<model tag>-<max_seq_length>``
in the cache's directory (by default ``<cache>/embeddings``). Each :meth:`EmbeddingCache.put` writes one new
shard atomically (:func:`memlib._cachefiles.atomic_savez`), so an interrupted run
leaves only whole shards behind; a shard that cannot be read, or whose vectors
are not finite unit vectors (:func:`_check_vectors`), is set aside when the
cache loads, and a folder that cannot be written keeps new vectors in memory
only (with a :class:`~memlib._cachefiles.CacheWarning`). :func:`memlib.embeddings.embed_cached`
is what fills it; :mod:`memlib.embeddings` re-exports every name here.

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> cache = EmbeddingCache(folder, model_tag="test", max_seq_length=8)
>>> cache.put(["a", "b"], np.eye(2, DIM, dtype=np.float32))
>>> again = EmbeddingCache(folder, model_tag="test", max_seq_length=8)   # read back from its shard
>>> len(again), again.get(["b", "c"])[1].tolist(), cache.directory.name
(2, [True, False], 'test-8')
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np

from memlib._cachefiles import (
    CORRUPT_ERRORS,
    atomic_savez,
    cache_folder_ok,
    cache_root,
    read_npz,
    report_unwritable,
    set_aside,
)

#: The model whose vectors a cache holds by default (part of every key and folder name).
MODEL_TAG = "all-MiniLM-L6-v2"
#: The width of a cached vector.
DIM = 384
#: How far from 1 the length of a cached vector may be (they are stored as float32 unit vectors).
UNIT_TOLERANCE = 1e-3


def _check_vectors(vecs: np.ndarray) -> None:
    """Raise ValueError unless ``vecs`` are finite float vectors of unit length (what a shard must hold)."""
    if vecs.dtype.kind != "f" or vecs.shape[1] != DIM:
        raise ValueError(f"vectors of dtype {vecs.dtype} and shape {vecs.shape}, not {DIM} floats each")
    finite = np.isfinite(vecs).all(axis=1)
    if not finite.all():
        raise ValueError(f"{int((~finite).sum())} of {len(vecs)} vectors are not finite (NaN or infinite)")
    norm = np.linalg.norm(vecs.astype(np.float64), axis=1)
    off = np.abs(norm - 1.0) > UNIT_TOLERANCE
    if off.any():
        raise ValueError(
            f"{int(off.sum())} of {len(vecs)} vectors are not of unit length (e.g. {norm[off][0]:.6g}); "
            "the cache holds normalised embeddings"
        )


class EmbeddingCache:
    """Content-addressed store of text embeddings in ``.npz`` shards (checked when read: :func:`_check_vectors`)."""

    def __init__(self, directory=None, model_tag: str = MODEL_TAG, max_seq_length: int = 256):
        self.model_tag = model_tag
        self.max_seq_length = max_seq_length
        self.directory = Path(directory or cache_root() / "embeddings") / f"{model_tag}-{max_seq_length}"
        self._index: dict[bytes, int] = {}
        self._blocks: list[np.ndarray] = []
        self._vectors: np.ndarray | None = None
        self._writable: bool | None = None
        self._load()

    def key(self, text: str) -> bytes:
        """Return the 32-byte key of ``text``: the sha256 of the model tag, the length and the text."""
        return hashlib.sha256(f"{self.model_tag}\0{self.max_seq_length}\0{text}".encode()).digest()

    def _load(self):
        if not self.directory.is_dir():
            return
        for shard in sorted(self.directory.glob("shard-*.npz")):
            try:
                z = read_npz(shard, ("keys", "vectors"))
                keys, vecs = z["keys"], z["vectors"]
                if keys.dtype != np.uint8 or keys.shape[1:] != (32,) or vecs.ndim != 2 or len(vecs) != len(keys):
                    raise ValueError(f"keys of shape {keys.shape} do not match vectors of shape {vecs.shape}")
                _check_vectors(vecs)
            except FileNotFoundError:  # removed since the folder was listed
                continue
            except CORRUPT_ERRORS as exc:
                set_aside(shard, exc)
                continue
            self._add(keys, vecs)

    def writable(self) -> bool:
        """Whether new shards can be written (checked once; see :func:`cache_folder_ok`)."""
        if self._writable is None:
            self._writable = cache_folder_ok(self.directory)
        return self._writable

    def _add(self, keys: np.ndarray, vecs: np.ndarray):
        base = sum(len(b) for b in self._blocks)
        new = 0
        rows = []
        for i, k in enumerate(keys):
            kb = bytes(k)
            if kb not in self._index:
                self._index[kb] = base + new
                rows.append(i)
                new += 1
        if rows:
            self._blocks.append(np.asarray(vecs[rows], dtype=np.float32))
            self._vectors = None

    def __len__(self) -> int:
        """Return the number of texts cached."""
        return len(self._index)

    @property
    def vectors(self) -> np.ndarray:
        """All cached vectors, shape (len(self), 384), in the order the keys were added."""
        if self._vectors is None:
            self._vectors = np.concatenate(self._blocks) if self._blocks else np.zeros((0, DIM), np.float32)
        return self._vectors

    def get(self, texts) -> tuple[np.ndarray, np.ndarray]:
        """Return the cached vectors of ``texts`` (zeros where missing) and a mask of those found."""
        idx = np.array([self._index.get(self.key(t), -1) for t in texts], dtype=np.int64)
        found = idx >= 0
        dim = self.vectors.shape[1] if len(self) else DIM
        out = np.zeros((len(texts), dim), np.float32)
        if found.any():
            out[found] = self.vectors[idx[found]]
        return out, found

    def put(self, texts, vectors) -> None:
        """Add vectors and write them as one new shard (atomically).

        When the folder cannot take the shard, the vectors are kept in memory
        only, with a :class:`CacheWarning`.
        """
        keys = np.frombuffer(b"".join(self.key(t) for t in texts), dtype=np.uint8).reshape(-1, 32)
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.writable():
            name = f"shard-{time.time_ns():020d}-{os.getpid()}.npz"
            try:
                atomic_savez(self.directory / name, keys=keys, vectors=vectors)
            except OSError as exc:  # e.g. the disk filled up, or the folder turned read-only
                self._writable = False
                report_unwritable(self.directory, exc)
        self._add(keys, vectors)
