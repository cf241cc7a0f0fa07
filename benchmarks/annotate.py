"""Benchmark the annotator: cold and warm throughput against the bare model.

Prints, for one dataset (default LoCoMo, all conversations):
  * the bare model first: SentenceTransformer.encode on the dataset's unique texts;
  * our embedding stage (hashing, cache lookup, length-ordered chunks, atomic shard writes) on
    the same texts with an empty cache;
  * cold: a full blind annotation (embeddings, emotion lexicon, all factors) with empty caches;
  * warm: the same annotation again (served from the factor cache), and the oracle regime with
    only the embedding cache warm;
  * the unique-text ratio (unique texts / turn occurrences over all cases);

With ``--setting fast`` the embedding stage truncates at 128 word pieces (``reference``: 256;
``int8``: 128 on the int8 ONNX export, whose bare model is that export);
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
    p.add_argument("--setting", default="reference", choices=["reference", "fast", "int8"])
    p.add_argument("--device", default=None)
    p.add_argument(
        "--bare-sample",
        type=int,
        default=None,
        help="time the bare model on a seeded random sample of N of the same texts, before and after "
        "the cold run (for the full LongMemEval-S file, where timing the bare model on every text "
        "would double the run); the cold run still embeds every text",
    )
    p.add_argument("--cold-only", action="store_true", help="skip the embed-stage and warm timings")
    args = p.parse_args()
    os.environ["MEMLIB_CACHE_DIR"] = tempfile.mkdtemp(prefix="memlib-bench-")
    from memlib import datasets, embeddings, factors

    ds = datasets.load(args.dataset)
    if args.limit:
        ds = ds.limit(args.limit)
    if args.sample:
        ds = ds.sample(args.sample)
    st = ds.stats()
    length, backend = embeddings.resolve_setting(args.setting)
    # the setting's own model (torch, or the int8 ONNX export); its load is not part of any throughput figure
    model = embeddings._encoder(length, backend, args.device)
    used = ds.turns["session"].isin(set().union(*ds.usable().cases["haystack"]))
    texts = [ds.texts[i] for i in np.unique(ds.turns.loc[used, "text_id"])]
    model.encode(texts[:64], batch_size=64, show_progress_bar=False)  # warm-up, same for both

    n = len(texts)
    if args.bare_sample and args.bare_sample < n:
        rng = np.random.default_rng(0)
        bare_texts = [texts[i] for i in sorted(rng.choice(n, args.bare_sample, replace=False))]
    else:
        bare_texts = texts

    def time_bare():
        t = time.perf_counter()
        model.encode(bare_texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        return (time.perf_counter() - t) * n / len(bare_texts)  # seconds for all n texts at this rate

    bare = time_bare()
    print(json.dumps({"bare_model_texts_per_s_before": round(n / bare, 1), "texts": n}), flush=True)

    embed_stage = None
    if not args.cold_only:
        tag = embeddings.model_tag(backend)
        cache = embeddings.EmbeddingCache(tempfile.mkdtemp(prefix="memlib-bench-emb-"), tag, max_seq_length=length)
        t = time.perf_counter()
        embeddings.embed_cached(texts, args.setting, cache=cache, progress=False, device=args.device)
        embed_stage = time.perf_counter() - t

    kw = {"embedding": args.setting, "device": args.device, "progress": False}
    t = time.perf_counter()
    ann = factors.annotate(ds, "blind", **kw)  # empty caches: embeds, scores and stores everything
    cold = time.perf_counter() - t
    print(json.dumps({"cold_seconds": round(cold, 1)}), flush=True)
    if bare_texts is not texts:
        bare_after = time_bare()  # the machine's load may drift over a long run: time the bare model again
        print(json.dumps({"bare_model_texts_per_s_after": round(n / bare_after, 1)}), flush=True)
        bare = (bare + bare_after) / 2

    warm = None
    if not args.cold_only:
        t = time.perf_counter()
        factors.annotate(ds, "blind", **kw)
        warm = time.perf_counter() - t

    t = time.perf_counter()
    factors.annotate(ds, "oracle", **kw)  # embeddings warm, oracle factors computed
    oracle_warm_embeddings = time.perf_counter() - t

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
        "bare_model_timed_on": len(bare_texts),
        "embed_stage_seconds": None if embed_stage is None else round(embed_stage, 2),
        "embed_stage_over_bare": None if embed_stage is None else round(embed_stage / bare, 3),
        "cold_annotate_over_bare": round(cold / bare, 3),
        "warm_seconds": None if warm is None else round(warm, 3),
        "oracle_with_warm_embeddings_seconds": round(oracle_warm_embeddings, 2),
        "cold_seconds_beyond_embedding": round(ann.info["seconds_beyond_embedding"], 2),
        "peak_rss_gb": ann.info["peak_rss_gb"],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
