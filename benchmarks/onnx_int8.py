"""Benchmark the ``int8`` embedding setting against ``fast`` (the same 128 word pieces on torch).

``int8`` runs the packaged all-MiniLM-L6-v2 exported locally to ONNX and quantised to int8
per channel (``memlib.embeddings.onnx_int8_model``; nothing is fetched from a hub). This embeds
the same texts both ways in one run, in the same length-sorted batches of 64, and prints texts
per second for each, the speed-up, and the per-text cosine of the int8 embedding to the torch one
(mean, 5th percentile, minimum): what the faster setting changes in every factor. The one-off
export is timed apart. Texts: a seeded sample of distinct LongMemEval-S turn texts (else pass
``--dataset locomo``).

Run: .venv/bin/python benchmarks/onnx_int8.py [--texts 1500] [--dataset longmemeval_s]
Compare ratios within one run: this machine is shared and noisy.
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
    p.add_argument("--texts", type=int, default=1500)
    p.add_argument("--dataset", default="longmemeval_s")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    cache = tempfile.mkdtemp(prefix="memlib-onnx-bench-")  # a cold export, removed at the end
    os.environ["MEMLIB_CACHE_DIR"] = cache
    try:
        run_benchmark(args)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def run_benchmark(args):
    from memlib import datasets, embeddings

    ds = datasets.load(args.dataset)
    texts = list(dict.fromkeys(ds.texts))
    rng = np.random.default_rng(args.seed)
    texts = [texts[i] for i in rng.choice(len(texts), min(args.texts, len(texts)), replace=False)]
    order = np.argsort([len(t) for t in texts])[::-1]  # longest first, as the library batches
    batches = [[texts[i] for i in order[j : j + 64]] for j in range(0, len(order), 64)]

    t = time.perf_counter()
    embeddings.embed_uncached(texts[:2], setting="int8")  # builds the int8 export once (then cached)
    export_s = time.perf_counter() - t
    for setting in ("fast", "int8"):  # the same warm-up for both
        embeddings.embed_uncached(texts[:64], setting=setting, device="cpu")

    def run(setting, **kw):
        t = time.perf_counter()
        out = np.concatenate([embeddings.embed_uncached(b, setting=setting, **kw) for b in batches])
        return out, time.perf_counter() - t

    ref, torch_s = run("fast", device="cpu")
    e8, int8_s = run("int8")
    cos = np.einsum("ij,ij->i", e8, ref)
    n = len(texts)
    print(
        json.dumps(
            {
                "dataset": ds.name,
                "texts": n,
                "torch_fast_texts_per_s": round(n / torch_s, 1),
                "int8_texts_per_s": round(n / int8_s, 1),
                "speedup_int8_over_torch": round(torch_s / int8_s, 2),
                "cosine_int8_to_torch": {
                    "mean": round(float(cos.mean()), 4),
                    "p5": round(float(np.percentile(cos, 5)), 4),
                    "min": round(float(cos.min()), 4),
                },
                "one_off_export_seconds": round(export_s, 1),
                "model_mb_int8": round(embeddings.onnx_int8_model().stat().st_size / 1e6, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
