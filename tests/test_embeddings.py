import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

from memlib import ParameterError
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
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: first)
    with pytest.raises(KeyboardInterrupt):
        Emb.embed_cached(texts, cache=Emb.EmbeddingCache(cache_dir), progress=False)
    shards = list((cache_dir / "all-MiniLM-L6-v2-256").glob("shard-*.npz"))
    assert len(shards) == 1 and not list(cache_dir.rglob("*.tmp"))  # one whole shard, nothing half-written
    second = FakeModel()
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: second)
    out = Emb.embed_cached(texts, cache=Emb.EmbeddingCache(cache_dir), progress=False)
    assert len(second.seen) == 6  # only what the interrupted run had not stored
    np.testing.assert_allclose(out, FakeModel().encode(texts))
    third = FakeModel()
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: third)
    Emb.embed_cached(texts + texts[:3], cache=Emb.EmbeddingCache(cache_dir), progress=False)
    assert third.calls == 0  # everything served from the cache


def test_each_unique_text_is_embedded_once(tmp_path, monkeypatch):
    model = FakeModel()
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: model)
    out = Emb.embed_cached(["a", "b", "a", "a"], cache=Emb.EmbeddingCache(tmp_path), progress=False)
    assert sorted(model.seen) == ["a", "b"]
    np.testing.assert_array_equal(out[0], out[2])


def test_cache_key_depends_on_model_and_length(tmp_path):
    a = Emb.EmbeddingCache(tmp_path, model_tag="m", max_seq_length=128)
    b = Emb.EmbeddingCache(tmp_path, model_tag="m", max_seq_length=256)
    assert a.key("x") != b.key("x") and a.directory != b.directory


def test_named_settings_and_devices():
    assert Emb.setting_length("reference") == 256 and Emb.setting_length("fast") == 128
    assert Emb.setting_length(64) == 64
    with pytest.raises(ParameterError, match="embedding setting must be one of reference, fast, int8, got 'quick'"):
        Emb.setting_length("quick")
    with pytest.raises(ParameterError, match="device"):
        Emb.check_device("tpu")
    assert Emb.default_device() in Emb.DEVICES


def test_int8_setting_is_the_fast_length_on_its_own_cache():
    assert Emb.resolve_setting("int8") == (128, "onnx-int8")
    assert Emb.resolve_setting("fast") == (128, "torch")
    assert Emb.model_tag("onnx-int8") != Emb.model_tag("torch")
    with pytest.raises(ParameterError, match="int8 embedding setting runs on the CPU only, got device='cuda'"):
        Emb.embed_uncached(["a"], setting="int8", device="cuda")


@pytest.mark.slow
@pytest.mark.integration
def test_int8_export_agrees_with_the_torch_model(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(Emb, "_MODELS", {k: v for k, v in Emb._MODELS.items() if k[1] in Emb.DEVICES})
    texts = ["I am allergic to peanuts.", "Peanuts make me ill.", "The train leaves at nine.", "lol ok"]
    e8 = Emb.embed_uncached(texts, setting="int8")
    ref = Emb.embed_uncached(texts, setting="fast", device="cpu")
    assert e8.shape == (4, 384) and e8.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e8, axis=1), 1.0, rtol=1e-5)
    cos = np.einsum("ij,ij->i", e8, ref)
    assert cos.min() > 0.9, cos  # quantised, so close to the float model but not equal to it
    assert e8[0] @ e8[1] > e8[0] @ e8[2]  # the peanut pair is still the closest
    # the export is built once, in place, with nothing half-written left beside it
    models = tmp_path / "models"
    assert [p.name for p in models.iterdir()] == [f"{Emb.model_tag('onnx-int8')}.onnx"]
    # a dataset embedding goes to the int8 cache, not to the torch one
    Emb.embed_cached(texts, "int8", progress=False)
    folders = {p.name for p in (tmp_path / "embeddings").iterdir()}
    assert folders == {f"{Emb.model_tag('onnx-int8')}-128"}
    # a damaged model file is set aside and rebuilt, not trusted
    model = models / f"{Emb.model_tag('onnx-int8')}.onnx"
    model.write_bytes(b"not a model")
    with pytest.warns(Emb.CacheWarning, match="unreadable cache file"):
        again = Emb.OnnxEncoder().encode(texts)
    np.testing.assert_allclose(again, e8, atol=1e-5)
    assert (models / (model.name + ".corrupt")).is_file()


def test_a_cache_of_another_setting_is_refused(tmp_path):
    cache = Emb.EmbeddingCache(tmp_path, max_seq_length=256)
    with pytest.raises(ParameterError, match="the cache holds all-MiniLM-L6-v2 at 256 word pieces, not the setting"):
        Emb.embed_cached(["a"], "fast", cache=cache, progress=False)


def test_default_device_follows_the_environment(monkeypatch):
    monkeypatch.setenv("MEMLIB_DEVICE", "cpu")
    assert Emb.default_device() == "cpu"
    monkeypatch.setenv("MEMLIB_DEVICE", "gpu0")
    with pytest.raises(ParameterError, match="device"):
        Emb.default_device()


def test_progress_moves_after_every_batch(tmp_path, monkeypatch):
    model = FakeModel()
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: model)
    monkeypatch.setattr(Emb, "SHARD_SIZE", 100)
    Emb.embed_cached([f"t{i}" for i in range(20)], batch_size=4, cache=Emb.EmbeddingCache(tmp_path), progress=False)
    assert model.calls == 5  # five batches of four inside one 100-text chunk, each reported on its own


_KILLABLE = textwrap.dedent("""
    import sys, time
    import numpy as np
    from memlib import embeddings as E
    E.SHARD_SIZE = 4
    class Slow:
        def encode(self, texts, **kw):
            with open(sys.argv[2], "a") as log:
                log.write("".join(t + "\\n" for t in texts))
            time.sleep(float(sys.argv[3]))
            out = np.array([[len(t), sum(map(ord, t)) % 97, 1.0] + [0.0] * 381 for t in texts], np.float32)
            return out / np.linalg.norm(out, axis=1, keepdims=True)
    E.load_model = lambda *a, **k: Slow()
    E.embed_cached([f"text {i}" for i in range(40)], cache=E.EmbeddingCache(sys.argv[1]), progress=False, batch_size=4)
""")


def test_sigkilled_run_resumes_in_a_new_process(tmp_path):
    """Kill -9 mid-run, then a fresh process (as after a reboot) embeds only what no whole shard holds."""
    script = tmp_path / "run.py"
    script.write_text(_KILLABLE)
    cache_dir = tmp_path / "emb"
    shard_dir = cache_dir / "all-MiniLM-L6-v2-256"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(script), str(cache_dir), str(tmp_path / "first.log"), "0.15"], env=env)
    deadline = time.monotonic() + 30
    while len(list(shard_dir.glob("shard-*.npz"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    stored = len(Emb.EmbeddingCache(cache_dir))
    assert 8 <= stored < 40, stored
    subprocess.run(
        [sys.executable, str(script), str(cache_dir), str(tmp_path / "second.log"), "0"],
        env=env,
        check=True,
        timeout=60,
    )
    second = (tmp_path / "second.log").read_text().split("\n")[:-1]
    assert len(second) == 40 - stored  # nothing stored is embedded again
    cache = Emb.EmbeddingCache(cache_dir)
    assert len(cache) == 40 and not list(cache_dir.rglob("*.tmp"))
    vecs, found = cache.get([f"text {i}" for i in range(40)])
    assert found.all()
    np.testing.assert_allclose(vecs, FakeModel().encode([f"text {i}" for i in range(40)]), rtol=1e-6)


def test_the_cache_is_the_one_memlib_embeddings_names(tmp_path, monkeypatch):
    from memlib import embedding_cache

    for name in ("EmbeddingCache", "MODEL_TAG", "DIM", "UNIT_TOLERANCE", "_check_vectors"):
        assert getattr(Emb, name) is getattr(embedding_cache, name), name
    # the folder and key of a text are the ones the cache has always used (sha256 of tag, length and text)
    cache = Emb.EmbeddingCache(tmp_path, max_seq_length=128)
    assert cache.directory == tmp_path / "all-MiniLM-L6-v2-128"
    assert cache.key("a").hex() == "45ebc94f0b4050c989c0e6aa8129987a1f9b5acc57009ae70b22a74694d5eb4e"
    # embed_cached still loads the model through memlib.embeddings.load_model, so a patched one is used
    model = FakeModel()
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: model)
    out = Emb.embed_cached(["x", "yy"], 128, cache=cache, progress=False)
    assert model.calls == 1 and out.shape == (2, 384) and len(cache) == 2


def test_embed_cached_and_embed_uncached_warn_about_nothing_and_the_0_1_names_are_gone(tmp_path, monkeypatch):
    """embed and encode, the 0.1 names of embed_cached and embed_uncached, were removed in 0.2.0."""
    model = FakeModel()
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: model)
    texts = ["a", "bb", "a"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cached = Emb.embed_cached(
            texts, 128, cache=Emb.EmbeddingCache(tmp_path / "new", max_seq_length=128), progress=False
        )
        uncached = Emb.embed_uncached(texts, "fast")
    np.testing.assert_allclose(cached, uncached, rtol=1e-6)
    for old in ("embed", "encode"):
        with pytest.raises(AttributeError, match=f"has no attribute '{old}'"):
            getattr(Emb, old)
