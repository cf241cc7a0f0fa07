"""Hostile text and caches that look well formed (issue 22, parts 2, 3, 4, 7 and 10): one test per case.

Giant turns are cut before the tokenizer with their first word pieces kept, so ordinary texts embed bit for bit
as before; lone surrogates become U+FFFD at load with one warning per file; deep nesting is one line; a cache
file whose content is invalid (non-finite or non-unit vectors, a manifest that disagrees with its arrays, NaN
factors) is named, set aside and recomputed; the int8 setting writes nothing outside the cache.
"""

import gzip
import importlib.util
import json
import os
import random
import stat
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from fixtures import FakeModel, jsonl_records, longmemeval_records, write_jsonl, write_longmemeval
from memlib import _text as T
from memlib import cues as Cues
from memlib import datasets as D
from memlib import embeddings as Emb
from memlib import factors as Fm


def token_ids(text, max_seq_length):
    """The word-piece ids the model reads of ``text`` ([CLS], the first pieces, [SEP])."""
    return Emb._tokenizer()(text, truncation=True, max_length=max_seq_length)["input_ids"]


# --------------------------------------------------------------------------- giant turns (part 2)

#: Texts built to defeat a cut: runs of white space and of characters the tokenizer deletes, words longer
#: than 100 letters (one [UNK] each) in several scripts, text without white space, combining marks.
HOSTILE = {
    "spaces, then words": " " * 600_000 + "hello world " * 300,
    "control characters, then words": "\x00\x01\x1c\x85\u200b\ufffd" * 100_000 + " hello world " * 300,
    "every kind of white space": "\t\x0b \x0c\n\r\xa0\u3000\u2028 \x01" * 60_000 + "x y " * 300,
    "one ASCII word of 600,000 letters, then words": "a" * 600_000 + " then more words here " * 100,
    "one accented word of 600,000 letters, then words": "é" * 600_000 + " then more words here " * 100,
    "one Cyrillic word, then words": "ж" * 300_000 + " и слова " * 200,
    "Hangul without spaces, then words": "한" * 300_000 + " 한국어 " * 300,
    "Chinese without spaces or punctuation": "中文字" * 50_000,
    "punctuation only": "." * 200_000,
    "many [UNK] words, then words": ("q" * 150 + " ") * 4000 + "end words " * 300,
    "one emoji word, then words": "😀" * 100_000 + " hi " * 300,
    "dotted capital I (lower-cases to two characters)": "İ" * 500 + " İstanbul " * 3000,
    "stacked combining marks": ("e" + "\u0301" * 50 + " ") * 8_000,
    "ordinary words": "lorem ipsum dolor sit amet " * 10_000,
    # the tokenizer reads [MASK] whole in the raw text: a cut just after its "[" would change the piece
    "a special token where the cut falls (128)": "a " * 124 + "ŝ" * 900 + "[MASK]" + " more" * 1000,
    "a special token where the cut falls (256)": "a " * 252 + "ŝ" * 1800 + "[SEP]" + " more" * 1000,
}


def _random_texts(n=120, seed=0):
    """Seeded random texts over an alphabet of the characters the tokenizer treats specially."""
    rng = random.Random(seed)
    alphabet = list("abcdefghij ABC.,!?;:'-\t\n\r") + [
        *"\x00\x01\x0b\x0c\x1c\x85\xa0\u2028\u200b\ufeff\ufffd\u3000\u00ad\u180e\u1fef\u037e",
        *["é", "e\u0301", "\u0301", "\u0323", "İ", "ß", "Σ", "中", "文", "の", "한", "😀", "ﬁ", "Å"],
        *["x" * 120, "é" * 120, " " * 50, "\x00" * 60],
    ]
    words = ["word", "the", "antidisestablishment", "hello.", "x,y", "中文", "a" * 95, "a" * 105, "é" * 105]
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(500, 4000))))
        else:
            seps = [" ", "  ", "\n", "\x01", "", "\t\x00 "]
            out.append("".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(100, 1500))))
    return out


@pytest.mark.slow
def test_the_cut_keeps_the_first_word_pieces_of_hostile_texts():
    tok = Emb._tokenizer()
    assert tok.backend_tokenizer.model.max_input_chars_per_word == T.MAX_WORD_CHARS

    def pieces_of(text, n):
        return tok(text, add_special_tokens=False, truncation=True, max_length=n)["input_ids"]

    texts = {**HOSTILE, **{f"random text {i}": t for i, t in enumerate(_random_texts())}}
    for name, text in texts.items():
        whole = pieces_of(text, 254)  # the text tokenized whole, once
        for max_seq_length in (128, 256):
            pieces = max_seq_length - 2
            (cut,) = Emb.model_input([text], max_seq_length)
            assert len(cut) <= T.CUT_LIMIT_CHARS_PER_PIECE * pieces, name  # all the tokenizer is handed
            assert pieces_of(cut, pieces) == whole[:pieces], (name, max_seq_length)
    text = HOSTILE["spaces, then words"]  # and as the model reads it, with [CLS] and [SEP]
    assert token_ids(Emb.model_input([text], 128)[0], 128) == token_ids(text, 128)


def _long_real_turns():
    """Real long turns (LongMemEval oracle), if the file is here: each is cut at both lengths."""
    try:
        ds = D.load_longmemeval(D.resolve_dataset("longmemeval_oracle"))
    except D.DatasetError:
        return []
    return sorted((t for t in ds.texts if len(t) > 2100), key=len)[::100][:24]


def _locomo_turns(n=30):
    try:
        ds = D.load_locomo(D.resolve_dataset("locomo"))
    except D.DatasetError:
        return []
    return list(np.random.default_rng(0).choice(ds.texts, n, replace=False))


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["fast", "reference"])
def test_ordinary_texts_embed_bit_for_bit_as_uncut(setting, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path))
    length = Emb.setting_length(setting)
    rng = random.Random(1)
    vocab = (
        "the a memory agent store remember forget peanut allergy Lisbon trip marathon knee dog salmon kibble, "
        "recipe. garlic! spaghetti? I my we 2023 10:30 March"
    ).split()
    synthetic = [" ".join(rng.choice(vocab) for _ in range(n)) for n in (300, 500, 700, 1500, 3000, 5000)]
    texts = _locomo_turns() + synthetic + _long_real_turns()
    cut = [a != b for a, b in zip(Emb.model_input(texts, length), texts)]
    assert sum(cut) >= len(synthetic) - 2, cut  # the comparison is of cut texts (LoCoMo's are all short)
    model = Emb.load_model(length, "cpu")
    uncut = model.encode(
        texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
    )
    np.testing.assert_array_equal(Emb.embed_uncached(texts, setting, device="cpu"), uncut)
    np.testing.assert_array_equal(Emb.embed_cached(texts, setting, progress=False, device="cpu"), uncut)


class Recording:
    """The real model, recording the longest text it is handed."""

    def __init__(self, model):
        self.model, self.longest = model, 0

    @property
    def tokenizer(self):
        return self.model.tokenizer

    def encode(self, texts, **kw):
        self.longest = max([self.longest, *map(len, texts)])
        return self.model.encode(texts, **kw)


@pytest.mark.slow
def test_a_2_mb_turn_is_cut_before_the_tokenizer_and_scores_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    real = Emb.load_model(128, "cpu")
    recording = Recording(real)
    monkeypatch.setattr(Emb, "load_model", lambda *a, **k: recording)
    sentence = "I LOVE this, but maybe the ending was awful!! My sister Ana visits on Friday at 10:30. "
    giant = (sentence * (2_000_000 // len(sentence) + 1))[:2_000_000]
    recs = jsonl_records()
    recs[0]["sessions"][0]["turns"][1]["text"] = giant
    path = write_jsonl(tmp_path / "giant.jsonl", recs)
    seen = []
    vader = Fm.vader_scores
    monkeypatch.setattr(Fm, "vader_scores", lambda t, *a: seen.append(len(t)) or vader(t, *a))
    start = time.perf_counter()
    ann = Fm.annotate(D.load(str(path)), "blind", embedding_setting="fast", progress=False, device="cpu")
    seconds = time.perf_counter() - start
    assert recording.longest <= T.CUT_LIMIT_CHARS_PER_PIECE * 126  # the tokenizer never saw 2 MB
    assert max(seen) <= T.TEXT_BOUND  # nor did VADER
    assert np.isfinite(ann.cases.factors).all() and seconds < 30, seconds
    # the cut text embeds as the whole turn does: compare with a prefix short enough to tokenize whole
    whole = real.encode([giant[:30_000]], convert_to_numpy=True, normalize_embeddings=True)
    np.testing.assert_array_equal(Emb.embed_uncached([giant], "fast", device="cpu"), whole)
    start = time.perf_counter()
    cues = Cues.text_cues([giant])
    assert time.perf_counter() - start < 5
    np.testing.assert_array_equal(cues, Cues.text_cues([T.bounded(giant)]))


@pytest.mark.slow
def test_text_heuristics_read_a_bounded_prefix_that_no_real_turn_reaches(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path))
    text = "word " * (T.TEXT_BOUND // 5 + 1000)
    cut = T.bounded(text)
    assert len(cut) <= T.TEXT_BOUND and text.startswith(cut) and not cut.endswith(" ")
    assert T.bounded("short") == "short"
    for name in ("locomo", "longmemeval_oracle"):
        try:
            ds = D.load(name)
        except D.DatasetError:
            continue
        assert max(map(len, ds.texts)) < T.TEXT_BOUND / 3  # several times the longest real turn (76,560)


# --------------------------------------------------------------------------- lone surrogates (part 3)


def _with_surrogates_longmemeval(tmp_path):
    recs = longmemeval_records()
    recs[0]["haystack_sessions"][1][0]["content"] = "My dog Biscuit \ud800 is allergic to chicken."
    recs[1]["question"] = "What was my half marathon time?\udfff"
    recs[1]["answer"] = "1:52\ud800"
    return write_longmemeval(tmp_path / "lme.json", recs), 3, "record 0 (q1) haystack_sessions[1][0].content"


def _with_surrogates_jsonl(tmp_path):
    recs = jsonl_records()
    recs[0]["sessions"][1]["turns"][0]["text"] = "I am allergic to nuts.\ud800"
    recs[0]["sessions"][1]["session_id"] = "s1\udc00"
    for q in recs[0]["questions"]:
        q["evidence"] = [["s1\udc00", 0] if e[0] == "s1" else e for e in q["evidence"]]
    return write_jsonl(tmp_path / "conv.jsonl", recs), 3, "line 1 sessions[1].session_id"


def _with_surrogates_locomo(tmp_path):
    from test_bad_input import locomo_records

    recs = locomo_records()
    recs[1]["conversation"]["session_2"][0]["text"] = "Miso broke a vase \ud83d today."
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(recs))
    return path, 1, "record 1 (conv-b) conversation.session_2[0].text"


@pytest.mark.parametrize("fmt", ["longmemeval", "jsonl", "locomo"])
def test_a_lone_surrogate_becomes_u_fffd_with_one_warning_and_annotates(fmt, tmp_path, monkeypatch, fake_model):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    path, count, first = {
        "longmemeval": _with_surrogates_longmemeval,
        "jsonl": _with_surrogates_jsonl,
        "locomo": _with_surrogates_locomo,
    }[fmt](tmp_path)
    assert "\\ud8" in path.read_text() or "\\udc" in path.read_text() or "\\udf" in path.read_text()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = D.load(str(path))
    notes = [w for w in caught if issubclass(w.category, D.DatasetWarning)]
    assert len(notes) == 1, [str(w.message) for w in caught]
    message = str(notes[0].message)
    assert message.startswith(f"{path}: {count} lone surrogate") and message.endswith(f"the first in {first}"), message
    assert "\n" not in message
    strings = [*ds.texts, *ds.cases["question"], *ds.cases["case_id"], *ds.sessions["label"]]
    assert any("\ufffd" in s for s in ds.texts)
    assert not any(T.count_surrogates(s) for s in strings)
    ann = Fm.annotate(ds, "blind", progress=False)
    assert np.isfinite(ann.cases.factors).all()
    # the parse cache gives the same cleaned text back, and the same warning
    D._LOADED.clear()
    monkeypatch.setattr(D, "load_longmemeval", None)  # a second parse would fail: it is read from the cache
    monkeypatch.setattr(D, "load_jsonl", None)
    monkeypatch.setattr(D, "load_locomo", None)
    with pytest.warns(D.DatasetWarning) as again:
        cached = D.load(str(path))
    assert [str(w.message) for w in again if issubclass(w.category, D.DatasetWarning)] == [message]
    assert D._same_dataset(ds, cached)


def test_paired_surrogate_escapes_and_escaped_backslashes_are_no_lone_surrogates(tmp_path):
    recs = longmemeval_records()
    recs[0]["haystack_sessions"][1][0]["content"] = "Biscuit \U0001f600 and a backslash: \\ud800"
    path = write_longmemeval(tmp_path / "lme.json", recs)  # json.dumps writes the emoji as \ud83d\ude00
    assert "\\ud83d\\ude00" in path.read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = D.load_longmemeval(path)
    assert any("\U0001f600" in t and "\\ud800" in t for t in ds.texts)


@pytest.mark.slow
def test_the_embedders_clean_text_themselves(tmp_path):
    a = Emb.embed_uncached(["a\ud800b", "ok"], "fast", device="cpu")
    np.testing.assert_array_equal(a, Emb.embed_uncached(["a\ufffdb", "ok"], "fast", device="cpu"))
    cache = Emb.EmbeddingCache(tmp_path, max_seq_length=128)
    one = Emb.embed_cached(["a\ud800b"], "fast", cache=cache, progress=False, device="cpu")
    np.testing.assert_array_equal(one, Emb.embed_uncached(["a\ufffdb"], "fast", device="cpu"))
    assert cache.get(["a\ufffdb"])[1].all()  # cached under the text the model read


# --------------------------------------------------------------------------- deep nesting (part 4)

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "name, loader",
    [("lme.json", D.load_longmemeval), ("locomo10.json", D.load_locomo), ("c.jsonl", D.load_jsonl)],
)
def test_deep_nesting_is_one_line_naming_the_file(tmp_path, name, loader):
    path = tmp_path / name
    path.write_text(DEEP + "\n")
    with pytest.raises(D.DatasetError) as err:
        loader(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and "nested too deeply" in msg and "\n" not in msg
    # a value nested just shallower than the decoder gives up at, where an id should be: read, or one line
    for depth in (200, 900, 990):
        lme = tmp_path / f"lme{depth}.json"
        text = json.dumps(longmemeval_records())
        lme.write_text(text.replace('"question_id": "q1"', '"question_id": ' + "[" * depth + "]" * depth, 1))
        try:
            D.load_longmemeval(lme)
        except D.DatasetError as exc:
            assert "\n" not in str(exc)


def test_deep_nesting_on_the_command_line_is_one_line(tmp_path):
    path = tmp_path / "lme.json.gz"
    with gzip.open(path, "wt") as f:
        f.write(DEEP)
    out = subprocess.run(
        [sys.executable, "-m", "memlib", "annotate", "--dataset", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MEMLIB_CACHE_DIR": str(tmp_path / "cache")},
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "nested too deeply" in lines[0] and str(path) in lines[0]


# --------------------------------------------------------------------------- caches well formed but invalid (part 7)


@pytest.mark.parametrize("damage", ["nan", "inf", "not unit", "zero", "wrong width"])
def test_a_shard_of_invalid_vectors_is_named_set_aside_and_recomputed(tmp_path, monkeypatch, fake_model, damage):
    monkeypatch.setattr(Emb, "SHARD_SIZE", 3)
    texts = [f"text {i}" for i in range(6)]
    Emb.embed_cached(texts, cache=Emb.EmbeddingCache(tmp_path), progress=False)
    shard = sorted((tmp_path / "all-MiniLM-L6-v2-256").glob("shard-*.npz"))[0]
    with np.load(shard) as z:
        keys, vecs = z["keys"], z["vectors"].copy()
    vecs = {
        "nan": np.full_like(vecs, np.nan),
        "inf": np.where(np.arange(384) == 0, np.inf, vecs),
        "not unit": vecs * 3,
        "zero": np.zeros_like(vecs),
        "wrong width": vecs[:, :100],
    }[damage].astype(np.float32)
    Emb.atomic_savez(shard, keys=keys, vectors=vecs)  # a well-formed .npz of the right names
    with pytest.warns(Emb.CacheWarning, match=f"{shard}: unreadable cache file .* moved to {shard.name}.corrupt"):
        cache = Emb.EmbeddingCache(tmp_path)
    assert len(cache) == 3 and not shard.exists()
    fake_model.seen.clear()
    out = Emb.embed_cached(texts, cache=cache, progress=False)
    assert len(fake_model.seen) == 3 and np.isfinite(out).all()
    np.testing.assert_allclose(out, FakeModel().encode(texts))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(Emb.EmbeddingCache(tmp_path)) == 6


def test_nan_vectors_in_the_cache_never_reach_the_factors(tmp_path, monkeypatch, fake_model):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(Emb, "_CACHES", {})
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json")))
    first = Fm.annotate(ds, "blind", progress=False, use_cache=False)
    Emb._CACHES.clear()
    Fm.annotate(ds, "blind", progress=False)
    (shard,) = (tmp_path / "cache" / "embeddings").rglob("shard-*.npz")
    with np.load(shard) as z:
        keys, vecs = z["keys"], z["vectors"]
    Emb.atomic_savez(shard, keys=keys, vectors=np.full_like(vecs, np.nan))
    for table in (tmp_path / "cache" / "factors").glob("*.npz"):
        table.unlink()
    Emb._CACHES.clear()
    with pytest.warns(Emb.CacheWarning, match="vectors are not finite"):
        again = Fm.annotate(ds, "blind", progress=False)
    np.testing.assert_array_equal(again.cases.factors, first.cases.factors)


def _edit_manifest(path, edit):
    with open(path, "rb") as f, np.load(f) as z:
        arrays = {k: z[k] for k in z.files}
    manifest = json.loads(arrays["manifest"].tobytes().decode())
    edit(manifest, arrays)
    arrays["manifest"] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    Emb.atomic_savez(path, **arrays)


def _drop_session_column(m, arrays):
    m["turns"] = [s for s in m["turns"] if s["name"] != "session"]
    m["turn_columns"].remove("session")


def _retype_turn(m, arrays):
    next(s for s in m["turns"] if s["name"] == "turn")["dtype"] = "float64"


def _gold_past_the_turns(m, arrays):
    arrays["cases.gold.items"] = arrays["cases.gold.items"] + 1000


MANIFEST_EDITS = {
    "a column dropped": _drop_session_column,
    "a column retyped": _retype_turn,
    "another source": lambda m, a: m.update(source="/elsewhere/lme.json"),
    "a field added": lambda m, a: m.update(extra=1),
    "skipped not counts": lambda m, a: m.update(skipped={"evidence_ids": "three"}),
    "an array not named": lambda m, a: a.update({"turns.spare": np.zeros(3)}),
    "gold past the turns": _gold_past_the_turns,
}


@pytest.mark.parametrize("edit", list(MANIFEST_EDITS))
def test_a_parse_cache_whose_manifest_disagrees_is_set_aside_and_parsed_again(tmp_path, monkeypatch, edit):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    path = str(write_longmemeval(tmp_path / "lme.json"))
    first = D.load(path)
    (cached,) = (tmp_path / "cache" / "datasets").glob("*.npz")
    _edit_manifest(cached, MANIFEST_EDITS[edit])
    D._LOADED.clear()
    with pytest.warns(Emb.CacheWarning, match=f"{cached}: unreadable cache file .* moved to {cached.name}.corrupt"):
        again = D.load(path)
    assert D._same_dataset(first, again) and again.stats() == first.stats()
    assert (cached.parent / (cached.name + ".corrupt")).is_file() and cached.is_file()
    D._LOADED.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert D._same_dataset(first, D.load(path))  # the file parsed again was cached again, whole


def test_a_parse_cache_whose_manifest_is_nested_too_deeply_is_set_aside(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    path = str(write_longmemeval(tmp_path / "lme.json"))
    first = D.load(path)
    (cached,) = (tmp_path / "cache" / "datasets").glob("*.npz")
    with open(cached, "rb") as f, np.load(f) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["manifest"] = np.frombuffer(("[" * 100_000 + "]" * 100_000).encode(), np.uint8)
    Emb.atomic_savez(cached, **arrays)
    D._LOADED.clear()
    with pytest.warns(Emb.CacheWarning, match=f"{cached}: unreadable cache file .*RecursionError"):
        again = D.load(path)
    assert D._same_dataset(first, again)


@pytest.mark.parametrize("damage", ["nan", "inf", "out of range"])
def test_a_factor_table_of_invalid_values_is_named_set_aside_and_recomputed(tmp_path, monkeypatch, fake_model, damage):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json")))
    first = Fm.annotate(ds, "blind", progress=False)
    (path,) = (tmp_path / "cache" / "factors").glob("*.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["factors"] = np.full_like(arrays["factors"], {"nan": np.nan, "inf": np.inf, "out of range": 7.0}[damage])
    Emb.atomic_savez(path, **arrays)
    with pytest.raises(D.DatasetError, match=f"{path}: not a readable factor table"):
        Fm.load_annotation(path)
    with pytest.warns(Emb.CacheWarning, match=f"{path}: unreadable cache file .* moved to {path.name}.corrupt"):
        again = Fm.annotate(ds, "blind", progress=False)
    assert not again.info["cached"]
    np.testing.assert_array_equal(first.cases.factors, again.cases.factors)
    assert Fm.annotate(ds, "blind", progress=False).info["cached"]


# --------------------------------------------------------------------------- the int8 setting (part 10)


@pytest.mark.slow
@pytest.mark.integration
def test_the_int8_setting_writes_nothing_outside_the_cache_and_keeps_its_model_private(tmp_path):
    for package in ("onnxruntime", "onnx"):  # found, not imported: importing onnxruntime here would write ~/.cache
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{package} is not installed (pip install 'memlib[onnx]')")
    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), MEMLIB_CACHE_DIR=str(cache))
    code = "import memlib.embeddings as E; print(E.embed_uncached(['I am allergic to peanuts.'], setting='int8').shape)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0 and "(1, 384)" in out.stdout, out.stderr
    assert [str(p.relative_to(home)) for p in home.rglob("*")] == []  # no ~/.cache/Microsoft/... database
    (model,) = (cache / "models").glob("*.onnx")
    assert stat.S_IMODE(model.stat().st_mode) == 0o600
