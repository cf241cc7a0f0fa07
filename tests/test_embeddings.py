import numpy as np
import pytest

from memlib import embeddings as Emb


class FakeModel:
    """Deterministic stand-in for the sentence model; can fail on a chosen call."""

    def __init__(self, fail_on_call=None):
        self.calls = 0
        self.seen = []
        self.fail_on_call = fail_on_call

    def encode(self, texts, **kw):
        self.calls += 1
        if self.fail_on_call == self.calls:
            raise KeyboardInterrupt("simulated interrupt")
        self.seen.extend(texts)
        out = np.array([[len(t), sum(map(ord, t)) % 97, 1.0] + [0.0] * 381 for t in texts], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_interrupted_run_keeps_whole_shards_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setattr(Emb, "SHARD_SIZE", 4)
    texts = [f"text number {i}" for i in range(10)]
    cache_dir = tmp_path / "emb"
    first = FakeModel(fail_on_call=2)
    monkeypatch.setattr(Emb, "load_model", lambda max_seq_length=256: first)
    with pytest.raises(KeyboardInterrupt):
        Emb.embed(texts, cache=Emb.EmbeddingCache(cache_dir), progress=False)
    shards = list((cache_dir / "all-MiniLM-L6-v2-256").glob("shard-*.npz"))
    assert len(shards) == 1 and not list(cache_dir.rglob("*.tmp"))  # one whole shard, nothing half-written
    second = FakeModel()
    monkeypatch.setattr(Emb, "load_model", lambda max_seq_length=256: second)
    out = Emb.embed(texts, cache=Emb.EmbeddingCache(cache_dir), progress=False)
    assert len(second.seen) == 6  # only what the interrupted run had not stored
    np.testing.assert_allclose(out, FakeModel().encode(texts))
    third = FakeModel()
    monkeypatch.setattr(Emb, "load_model", lambda max_seq_length=256: third)
    Emb.embed(texts + texts[:3], cache=Emb.EmbeddingCache(cache_dir), progress=False)
    assert third.calls == 0  # everything served from the cache


def test_each_unique_text_is_embedded_once(tmp_path, monkeypatch):
    model = FakeModel()
    monkeypatch.setattr(Emb, "load_model", lambda max_seq_length=256: model)
    out = Emb.embed(["a", "b", "a", "a"], cache=Emb.EmbeddingCache(tmp_path), progress=False)
    assert sorted(model.seen) == ["a", "b"]
    np.testing.assert_array_equal(out[0], out[2])


def test_cache_key_depends_on_model_and_length(tmp_path):
    a = Emb.EmbeddingCache(tmp_path, model_tag="m", max_seq_length=128)
    b = Emb.EmbeddingCache(tmp_path, model_tag="m", max_seq_length=256)
    assert a.key("x") != b.key("x") and a.directory != b.directory
