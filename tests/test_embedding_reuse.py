"""The two torch settings embed a short text once: what one cached, the other reads (issue 33).

A text the model reads alike at 128 and 256 word pieces (at most 125 of them) gets the same bits at
both lengths; the real model shows it on LoCoMo turns, and a planted pair of fake models shows that
the cache of one length serves the other for those texts and for no others.
"""

import numpy as np
import pytest

from memlib import datasets as D
from memlib import embedding_model
from memlib import embeddings as Emb


class WordTokenizer:
    """Stand-in for the model's tokenizer: one word piece per white-space-separated word."""

    def __call__(self, texts, add_special_tokens=False, truncation=False, max_length=None, **_):
        return {"input_ids": [t.split()[:max_length] if truncation else t.split() for t in texts]}


class LengthModel:
    """Stand-in for the model at one length: its vectors differ from those of any other length."""

    def __init__(self, max_seq_length):
        self.max_seq_length, self.seen = max_seq_length, []

    def encode(self, texts, **kw):
        self.seen.extend(texts)
        out = np.array([[len(t), sum(map(ord, t)) % 97, self.max_seq_length] + [0.0] * 381 for t in texts], np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture
def models(monkeypatch):
    """Fake models by length (one per length, recording what each embedded) and the word tokenizer."""
    made = {}
    monkeypatch.setattr(embedding_model, "_tokenizer", WordTokenizer)
    monkeypatch.setattr(Emb, "load_model", lambda length, device=None: made.setdefault(length, LengthModel(length)))
    return made


def words(tag, n):
    return " ".join([tag] + ["w"] * (n - 1))


#: Planted texts: two the two lengths read alike, and three they do not.
ALIKE = [words("short", 3), words("limit", 125)]
NOT_ALIKE = [
    words("fills-128-tokens", 126),  # padded at 256 but, among longer texts, not at 128
    words("long", 200),  # cut at 128
    "x" * 1100,  # one word, but more than 8 characters per word piece: model_input may cut it at 128
]


@pytest.mark.parametrize(("first", "then"), [("reference", "fast"), ("fast", "reference")])
def test_a_short_text_cached_at_one_torch_length_serves_the_other(tmp_path, models, first, then):
    texts = ALIKE + NOT_ALIKE
    before = Emb.embed_cached(
        texts, first, cache=Emb.EmbeddingCache(tmp_path, max_seq_length=Emb.SETTINGS[first]), progress=False
    )
    length = Emb.SETTINGS[then]
    after = Emb.embed_cached(texts, then, cache=Emb.EmbeddingCache(tmp_path, max_seq_length=length), progress=False)
    # only the three not read alike were embedded (longest first, as the model is given them)
    assert models[length].seen == Emb.model_input(NOT_ALIKE[::-1], length)
    np.testing.assert_array_equal(after[:2], before[:2])  # the first length's vectors, bit for bit
    np.testing.assert_array_equal(after[2:], models[length].encode(Emb.model_input(NOT_ALIKE, length)))
    # what was taken is in this length's own cache too, so it stands on its own
    again = Emb.EmbeddingCache(tmp_path, max_seq_length=length)
    assert len(again) == len(texts)
    np.testing.assert_array_equal(again.get(texts)[0], after)


def test_no_reuse_from_another_model_or_runtime_or_without_the_cache(tmp_path, models):
    other = Emb.EmbeddingCache(tmp_path, model_tag="another-model", max_seq_length=256)
    other.put(ALIKE, np.eye(2, Emb.DIM, dtype=np.float32))
    Emb.embed_cached(ALIKE, "fast", cache=Emb.EmbeddingCache(tmp_path, max_seq_length=128), progress=False)
    assert models[128].seen == ALIKE[::-1]  # another model's vectors beside it are not this model's
    Emb.embed_cached(ALIKE, "reference", use_cache=False, progress=False)
    assert models[256].seen == ALIKE[::-1]  # no cache: nothing read from any
    vecs, found = np.zeros((2, Emb.DIM), np.float32), np.zeros(2, bool)
    int8 = Emb.EmbeddingCache(tmp_path, model_tag="int8-tag", max_seq_length=128)
    assert Emb.reuse_other_lengths(ALIKE, vecs, found, int8) == 0 and not found.any()


def test_an_int_length_reads_the_named_torch_lengths(tmp_path, models):
    Emb.embed_cached(ALIKE, "fast", cache=Emb.EmbeddingCache(tmp_path, max_seq_length=128), progress=False)
    Emb.embed_cached(ALIKE, 64, cache=Emb.EmbeddingCache(tmp_path, max_seq_length=64), progress=False)
    assert models[64].seen == [ALIKE[1]]  # 125 word pieces are cut at 64; 3 are read alike


@pytest.mark.slow
def test_short_real_turns_embed_bit_for_bit_alike_at_128_and_256(tmp_path, monkeypatch):
    """The real model, on LoCoMo turns batched with a long text: it pads them to 128 at one length, 256 at the other."""
    try:
        ds = D.load_locomo(D.resolve_dataset("locomo"))
    except D.DatasetError:
        pytest.skip("LoCoMo is not here")
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path))
    turns = list(dict.fromkeys(np.random.default_rng(0).choice(ds.texts, 24, replace=False)))
    texts = [*turns, " ".join(turns)]  # the last: real turns, more than 256 word pieces in all
    alike = Emb.read_alike(texts, 128)
    assert alike[:-1].all() and not alike[-1]
    fresh = {
        s: Emb.embed_cached(texts, s, use_cache=False, progress=False, device="cpu") for s in ("fast", "reference")
    }
    np.testing.assert_array_equal(fresh["fast"][:-1], fresh["reference"][:-1])
    assert np.abs(fresh["fast"][-1] - fresh["reference"][-1]).max() > 1e-3  # the long text is cut at 128
    # through the caches: the reference run leaves the fast one only the long text to embed
    Emb.embed_cached(texts, "reference", progress=False, device="cpu")
    seen = []
    real = Emb.load_model(128, "cpu")
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: seen.append(a) or real)
    fast = Emb.embed_cached(texts, "fast", progress=False, device="cpu")
    np.testing.assert_array_equal(fast, fresh["fast"])
    assert len(seen) == 1 and len(Emb.shared_cache(128)) == len(texts)
