"""Benchmark the annotator: cold and warm throughput against the bare model.

Prints, for one dataset (default LoCoMo, all conversations):
  * the bare model first: SentenceTransformer.encode on the dataset's unique texts;
  * our embedding stage (hashing, cache lookup, length-ordered chunks, atomic shard writes) on
    the same texts with an empty cache;
  * cold: a full blind annotation (embeddings, emotion lexicon, all factors) with empty caches;
  * warm: the same annotation again (served from the factor cache), and the oracle regime with
    only the embedding cache warm;
  * the unique-text ratio (unique texts / turn occurrences over all cases);

With ``--setting fast`` the embedding stage truncates at 128 word pieces (``reference``: 256);
``--sample N`` annotates a seeded random sample of N conversations or questions.
The figures include the time beyond embeddings (emotion lexicon, cues, centroids) and peak memory.

Run: .venv/bin/python benchmarks/annotate.py [--dataset locomo] [--sample N | --limit N] [--setting fast]
Compare ratios within one run: this machine is shared and noisy.
"""

import argparse
import json
import os
import tempfile
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", default="locomo")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--sample", type=int, default=None)
    p.add_argument("--setting", default="reference", choices=["reference", "fast"])
    p.add_argument("--device", default=None)
    args = p.parse_args()
    os.environ["MEMLIB_CACHE_DIR"] = tempfile.mkdtemp(prefix="memlib-bench-")
    from memlib import datasets, embeddings, factors

    ds = datasets.load(args.dataset)
    if args.limit:
        ds = ds.limit(args.limit)
    if args.sample:
        ds = ds.sample(args.sample)
    st = ds.stats()
    length = embeddings.setting_length(args.setting)
    model = embeddings.load_model(length, args.device)  # model load is not part of any throughput figure
    used = ds.turns["session"].isin(set().union(*ds.usable().cases["haystack"]))
    texts = [ds.texts[i] for i in np.unique(ds.turns.loc[used, "text_id"])]
    model.encode(texts[:64], batch_size=64, show_progress_bar=False)  # warm-up, same for both

    t = time.perf_counter()
    model.encode(texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    bare = time.perf_counter() - t

    cache = embeddings.EmbeddingCache(tempfile.mkdtemp(prefix="memlib-bench-emb-"), max_seq_length=length)
    t = time.perf_counter()
    embeddings.embed(texts, max_seq_length=length, cache=cache, progress=False, device=args.device)
    embed_stage = time.perf_counter() - t

    kw = {"embedding": args.setting, "device": args.device, "progress": False}
    t = time.perf_counter()
    ann = factors.annotate(ds, "blind", **kw)  # empty caches: embeds, scores and stores everything
    cold = time.perf_counter() - t

    t = time.perf_counter()
    factors.annotate(ds, "blind", **kw)
    warm = time.perf_counter() - t

    t = time.perf_counter()
    factors.annotate(ds, "oracle", **kw)  # embeddings warm, oracle factors computed
    oracle_warm_embeddings = time.perf_counter() - t

    n = len(texts)
    out = {
        "dataset": st["dataset"],
        "setting": f"{args.setting} ({length} word pieces)",
        "unique_texts": n,
        "turns": st["turns"],
        "turn_occurrences": st["turn_occurrences"],
        "unique_text_ratio": round(n / st["turn_occurrences"], 4),
        "cold_seconds": round(cold, 2),
        "cold_texts_per_s": round(n / cold, 1),
        "bare_model_seconds": round(bare, 2),
        "bare_model_texts_per_s": round(n / bare, 1),
        "embed_stage_seconds": round(embed_stage, 2),
        "embed_stage_over_bare": round(embed_stage / bare, 3),
        "cold_annotate_over_bare": round(cold / bare, 3),
        "warm_seconds": round(warm, 3),
        "oracle_with_warm_embeddings_seconds": round(oracle_warm_embeddings, 2),
        "cold_seconds_beyond_embedding": round(ann.info["seconds_beyond_embedding"], 2),
        "peak_rss_gb": ann.info["peak_rss_gb"],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
