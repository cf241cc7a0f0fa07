"""Embedding throughput: memlib's embed path per setting beside bare sentence-transformers, and what reuse saves.

In one run, on a seeded sample of a dataset's distinct turn texts (default: 256 of LongMemEval-S, four batches):

  * ``bare``: a SentenceTransformer of the packaged all-MiniLM-L6-v2 of its own (not memlib's),
    ``encode(texts, batch_size=64)`` at 128 and at 256 word pieces;
  * ``memlib``: ``memlib.embeddings.embed_cached`` per setting (``fast``, ``reference``, and
    ``int8`` when onnxruntime is installed) into an empty cache of its own: cleaning, cutting,
    hashing, length-sorted batches and shard writes included;
  * ``memlib, after the other``: the same call when the other torch setting has already filled
    the cache, so the texts read alike at both lengths (``memlib.embeddings.read_alike``) are
    taken from it.

Each row gives texts/s and tokens/s (tokens: what the model reads of each text, ``[CLS]`` and
``[SEP]`` included, padding not). Then, over the dataset's distinct texts (a seeded sample of
20,000 of them unless ``--corpus-texts 0``; word pieces counted with the model's tokenizer, no
model run), the share of texts and tokens the reuse spares: the texts read alike at 128 and 256
word pieces are embedded once for the two settings instead of twice. The int8 export is built in
the temporary cache (timed apart) and removed at the end, as everything this writes.

Run: nice -n 19 .venv/bin/python benchmarks/embedding_throughput.py [--dataset longmemeval_s] [--n 256]
     [--no-int8] [--corpus-texts N]
Compare rows within one run: this machine is shared and noisy (the load is printed).
"""

import argparse
import json
import os
import shutil
import tempfile
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", default="longmemeval_s")
    p.add_argument("--n", type=int, default=256, help="texts in the timed sample")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-int8", action="store_true", help="leave out the int8 setting (and its one-off export)")
    p.add_argument("--corpus-texts", type=int, default=20000, help="count the reuse on a sample this big (0: all)")
    args = p.parse_args()
    cache = tempfile.mkdtemp(prefix="memlib-throughput-")  # everything written here, removed at the end
    os.environ["MEMLIB_CACHE_DIR"] = cache
    start = time.perf_counter()
    try:
        result = run_benchmark(args, cache)
        print(json.dumps({**result, "total_seconds": round(time.perf_counter() - start)}, indent=1))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def distinct_texts(ds) -> list:
    """The distinct texts of the sessions the dataset's questions read, cleaned as memlib keys them."""
    from memlib._text import clean_text

    used = ds.turns["session"].isin(set().union(*ds.cases["haystack"]))
    return list(dict.fromkeys(clean_text(ds.texts[i]) for i in np.unique(ds.turns.loc[used, "text_id"])))


def word_pieces(texts, cap: int = 300) -> np.ndarray:
    """Word pieces of each text (counted up to ``cap``), by the model's tokenizer."""
    from memlib.embeddings import _tokenizer

    tok, out = _tokenizer(), []
    for start in range(0, len(texts), 4096):
        ids = tok(texts[start : start + 4096], add_special_tokens=False, truncation=True, max_length=cap)
        out.extend(map(len, ids["input_ids"]))
    return np.array(out)


def tokens_read(pieces: np.ndarray, max_seq_length: int) -> int:
    """Tokens the model reads of texts of ``pieces`` word pieces at ``max_seq_length`` ([CLS], [SEP] counted)."""
    return int((np.minimum(pieces, max_seq_length - 2) + 2).sum())


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_benchmark(args, cache: str) -> dict:
    from memlib import ParameterError, datasets, embeddings
    from memlib.embeddings import SETTINGS, EmbeddingCache, embed_cached, read_alike

    ds = datasets.load(args.dataset)
    corpus = distinct_texts(ds)
    rng = np.random.default_rng(args.seed)
    texts = [corpus[i] for i in rng.choice(len(corpus), min(args.n, len(corpus)), replace=False)]
    pieces = word_pieces(texts)
    settings = ["fast", "reference"]
    if not args.no_int8:
        try:
            embeddings._onnx_versions()
            settings.append("int8")
        except ParameterError:  # onnxruntime or onnx not installed: no int8 row
            pass
    rows = []

    def row(kind, setting, seconds):
        n_texts, tokens = len(texts), tokens_read(pieces, SETTINGS[setting])
        rows.append(
            {
                "path": kind,
                "setting": setting,
                "texts": n_texts,
                "seconds": round(seconds, 2),
                "texts_per_s": round(n_texts / seconds, 1),
                "tokens_per_s": round(tokens / seconds),
            }
        )

    from sentence_transformers import SentenceTransformer

    bare = SentenceTransformer(str(embeddings._model_path()), device="cpu")
    export_s = 0.0
    if "int8" in settings:  # the one-off export, into the temporary cache
        export_s = timed(lambda: embed_cached(texts[:2], "int8", use_cache=False, progress=False))
    for setting in settings:  # the same warm-up for each
        embed_cached(texts[:64], setting, use_cache=False, progress=False, device="cpu")
    bare.encode(texts[:64], batch_size=64, show_progress_bar=False)

    def run(setting, folder):  # the call, into a cache of its own under ``folder``
        tag = embeddings.model_tag(embeddings.BACKENDS[setting])
        own = EmbeddingCache(os.path.join(cache, folder), model_tag=tag, max_seq_length=SETTINGS[setting])
        return lambda: embed_cached(texts, setting, cache=own, progress=False, device="cpu")

    for length, setting in ((128, "fast"), (256, "reference")):
        bare.max_seq_length = length
        bare_s = timed(lambda: bare.encode(texts, batch_size=64, show_progress_bar=False))
        row("bare sentence-transformers", setting, bare_s)
        row("memlib", setting, timed(run(setting, f"alone-{setting}")))
    if "int8" in settings:
        row("memlib", "int8", timed(run("int8", "alone-int8")))
    alike = read_alike(texts, 128)
    rest = pieces[~alike]
    for first, then in (("reference", "fast"), ("fast", "reference")):
        run(first, f"after-{then}")()
        row(f"memlib, after {first}", then, timed(run(then, f"after-{then}")))
        rows[-1]["texts_embedded"] = int((~alike).sum())
        rows[-1]["tokens_embedded"] = tokens_read(rest, SETTINGS[then])

    start = time.perf_counter()
    every = corpus
    if args.corpus_texts and args.corpus_texts < len(corpus):
        every = [corpus[i] for i in rng.choice(len(corpus), args.corpus_texts, replace=False)]
    every_pieces = word_pieces(every)
    every_alike = read_alike(every, 128)
    count_s = time.perf_counter() - start
    tok128, tok256 = tokens_read(every_pieces, 128), tokens_read(every_pieces, 256)
    spared = tokens_read(every_pieces[every_alike], 128)
    return {
        "dataset": ds.name,
        "sample_texts": len(texts),
        "sample_mean_word_pieces": round(float(pieces.mean()), 1),
        "sample_share_read_alike": round(float(alike.mean()), 3),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "int8_export_seconds": round(export_s, 1),
        "throughput": rows,
        "reuse_over_the_corpus": {
            "distinct_texts": len(corpus),
            "texts_counted": len(every),
            "read_alike_at_128_and_256": int(every_alike.sum()),
            "share_of_texts": round(float(every_alike.mean()), 4),
            "share_of_the_256_pass_tokens": round(spared / tok256, 4),
            "share_of_the_128_pass_tokens": round(spared / tok128, 4),
            "share_of_both_passes_tokens": round(spared / (tok128 + tok256), 4),
            "counting_seconds": round(count_s, 1),
        },
    }


if __name__ == "__main__":
    main()
