"""The ``int8`` embedding setting's runtime: the packaged model exported to ONNX and quantised to int8.

:func:`onnx_int8_model` builds the export once (kept in the cache, named by
:func:`onnx_model_tag`, which names how it was built); :class:`OnnxEncoder` runs it
behind the ``encode`` call the embedders make of a SentenceTransformer, with mean
pooling and normalisation in numpy as sentence-transformers does them. Nothing is
downloaded. :mod:`memlib.embeddings` re-exports every name here.
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

from memlib._cachefiles import cache_folder_ok, cache_root, set_aside
from memlib._cores import thread_budget
from memlib._safewrite import write_file
from memlib.embedding_cache import DIM, MODEL_TAG
from memlib.embedding_model import _tokenizer, load_model, model_input

#: How :func:`onnx_int8_model` builds the int8 model (part of its cache tag, :func:`onnx_model_tag`).
ONNX_EXPORT = {"opset": 17, "quantisation": "dynamic, int8 weights, per channel"}
#: The length of the torch model the export is taken from: the transformer is the same at every
#: length (the export's sequence axis is dynamic), and the ``fast`` model is the one most often loaded.
EXPORT_FROM_LENGTH = 128


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


def onnx_model_tag(backend: str = "onnx-int8") -> str:
    """Return the name the int8 export and its vectors are cached under.

    It names how the model was built (:data:`ONNX_EXPORT` and the torch and
    onnxruntime versions), so vectors of two different exports never share a cache.
    """
    torch_version, ort_version = _onnx_versions()
    recipe = json.dumps([ONNX_EXPORT, torch_version, ort_version], sort_keys=True)
    return f"{MODEL_TAG}-{backend}-{hashlib.sha256(recipe.encode()).hexdigest()[:8]}"


def onnx_int8_model(folder=None) -> Path:
    """Return the path of the packaged model exported to ONNX and quantised to int8 (built once, kept in the cache).

    The transformer of :func:`~memlib.embedding_model.load_model` (float32, torch) is exported with
    ``torch.onnx.export`` and its weights quantised with ONNX Runtime's
    ``quantize_dynamic`` (:data:`ONNX_EXPORT`), in a temporary folder; the result
    is flushed to disk and renamed into ``<cache>/models/`` (mode 0600, as every
    cache file), so a reader never sees half a model. onnxruntime is imported
    with its telemetry off (:func:`_onnxruntime`), so nothing is written outside
    the cache. Nothing is downloaded. Mean pooling and normalisation stay
    in numpy, as the sentence-transformers model does them. When the cache
    folder cannot be written the model is built in a temporary folder (with a
    :class:`~memlib._cachefiles.CacheWarning`) and rebuilt by the next process.
    """
    folder = Path(folder or cache_root() / "models")
    path = folder / f"{onnx_model_tag()}.onnx"
    if path.is_file():
        return path
    _onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if not cache_folder_ok(folder):
        folder = Path(tempfile.mkdtemp(prefix="memlib-models-"))
        path = folder / path.name
    import torch

    hf = load_model(EXPORT_FROM_LENGTH, "cpu")[0].auto_model.eval()

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
        # the cores this process may use, or its share of them beside other runs (OMP_NUM_THREADS, which torch reads
        # and ONNX Runtime does not)
        so.intra_op_num_threads = thread_budget()
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
