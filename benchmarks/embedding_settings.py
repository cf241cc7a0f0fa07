"""What each way of speeding up the embedding stage buys, and what it changes.

On a seeded random sample of a dataset's distinct turn texts (default: 400 texts of
LongMemEval-S, as in issue 8), with the bare SentenceTransformer and nothing cached, it times:

  * ``256, shuffled``: the reference length (256 word pieces), texts in random order;
  * ``256, by length``: the same with length bucketing (longest first, as ``memlib.embeddings.embed_cached`` does);
  * ``128, by length``: the ``fast`` setting (the length the model was trained at);

and prints texts/s, the speed-up over the first row, the projected time for all distinct texts
of the dataset, and the cosine of each text's ``fast`` embedding to its reference embedding
(mean, 5th percentile, minimum; by role).

Run: .venv/bin/python benchmarks/embedding_settings.py [--dataset longmemeval_s] [--n 400] [--device cpu]
Compare ratios within one run: this machine is shared and noisy.
"""

import argparse
import json
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", default="longmemeval_s")
    p.add_argument("--n", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    args = p.parse_args()
    from memlib import datasets, embeddings

    ds = datasets.load(args.dataset)
    used = ds.turns["session"].isin(set().union(*ds.cases["haystack"]))
    ids = np.unique(ds.turns.loc[used, "text_id"])
    role = ds.turns.drop_duplicates("text_id").set_index("text_id")["role"]
    rng = np.random.default_rng(args.seed)
    pick = rng.choice(ids, min(args.n, len(ids)), replace=False)
    texts = [ds.texts[i] for i in pick]
    roles = role.loc[pick].to_numpy()
    by_length = np.argsort([-len(t) for t in texts], kind="stable")

    rows, vecs = [], {}
    for length, order_name in ((256, "shuffled"), (256, "by length"), (128, "by length")):
        model = embeddings.load_model(length, args.device)
        model.encode(texts[:32], batch_size=64, show_progress_bar=False)  # warm-up
        order = np.arange(len(texts)) if order_name == "shuffled" else by_length
        t = time.perf_counter()
        out = model.encode(
            [texts[i] for i in order],
            batch_size=64,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        sec = time.perf_counter() - t
        v = np.empty_like(out)
        v[order] = out
        vecs[(length, order_name)] = v
        rows.append({"setting": f"{length}, {order_name}", "texts_per_s": round(len(texts) / sec, 1)})
    base = rows[0]["texts_per_s"]
    for r in rows:
        r["speed_up"] = round(r["texts_per_s"] / base, 2)
        r["projected_minutes_all_texts"] = round(len(ids) / r["texts_per_s"] / 60, 1)
    cos = np.einsum("ij,ij->i", vecs[(128, "by length")], vecs[(256, "by length")])
    agree = {"all": cos}
    for r in ("user", "assistant"):
        if (roles == r).any():
            agree[r] = cos[roles == r]
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "sample_texts": len(texts),
                "distinct_texts_in_dataset": int(len(ids)),
                "mean_chars": round(float(np.mean([len(t) for t in texts])), 1),
                "timings": rows,
                "cosine_fast_to_reference": {
                    k: {
                        "mean": round(float(c.mean()), 4),
                        "p5": round(float(np.percentile(c, 5)), 4),
                        "min": round(float(c.min()), 4),
                        "n": int(len(c)),
                    }
                    for k, c in agree.items()
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
