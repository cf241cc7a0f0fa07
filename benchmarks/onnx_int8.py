"""Benchmark: what ONNX Runtime with dynamic int8 quantisation would buy the embedding stage.

Issue 8 names it as a way to bring a cold LongMemEval-S annotation under an hour on two cores.
This script measures it without changing the library: it exports the packaged all-MiniLM-L6-v2
(the model memlib loads; nothing is fetched from a hub) to ONNX in a temporary folder, quantises
the weights to int8 with ``onnxruntime.quantization.quantize_dynamic``, and embeds the same
texts three ways in one run, in the same length-sorted batches of 64 at the ``fast`` setting
(128 word pieces):

* the bare sentence-transformers model (torch, float32), as ``embeddings.encode`` runs it;
* the exported ONNX model in float32 (the export alone);
* the int8 ONNX model.

It prints texts per second for each, the speed-up over torch, and the per-text cosine of each
ONNX embedding to the torch one (mean, 5th percentile, minimum), which is what a change of
embedding would change in every factor. Texts: a seeded sample of distinct LongMemEval-S turn
texts when ``MEMLIB_DATA_DIR`` finds it, else LoCoMo.

Needs ``onnxruntime`` and ``onnx`` (not memlib dependencies): ``pip install onnxruntime onnx``.

Run: .venv/bin/python benchmarks/onnx_int8.py [--texts 2000] [--dataset longmemeval_s]
Compare ratios within one run: this machine is shared and noisy.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--texts", type=int, default=2000)
    p.add_argument("--dataset", default="longmemeval_s")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    try:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise SystemExit("benchmarks/onnx_int8.py needs onnxruntime and onnx: pip install onnxruntime onnx") from None
    import torch

    from memlib import datasets, embeddings

    ds = datasets.load(args.dataset)
    texts = list(dict.fromkeys(ds.texts))
    rng = np.random.default_rng(args.seed)
    texts = [texts[i] for i in rng.choice(len(texts), min(args.texts, len(texts)), replace=False)]
    length = embeddings.setting_length("fast")
    model = embeddings.load_model(length, "cpu")
    tok = model.tokenizer
    order = np.argsort([len(t) for t in texts])[::-1]  # longest first, as the library batches
    batches = [[texts[i] for i in order[j : j + 64]] for j in range(0, len(order), 64)]

    def enc(batch):
        return tok(batch, padding=True, truncation=True, max_length=length, return_tensors="np")

    # torch, as the library runs it
    model.encode(texts[:64], batch_size=64, normalize_embeddings=True, show_progress_bar=False)
    t = time.perf_counter()
    ref = np.concatenate(
        [model.encode(b, batch_size=64, normalize_embeddings=True, show_progress_bar=False) for b in batches]
    )
    torch_s = time.perf_counter() - t

    # export the transformer; mean pooling and normalisation stay in numpy, as sentence-transformers does
    hf = model[0].auto_model.eval()

    class Hidden(torch.nn.Module):  # keyword arguments only: the traced signature stays two tensors
        def __init__(self):
            super().__init__()
            self.hf = hf

        def forward(self, input_ids, attention_mask):
            return self.hf(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    folder = Path(tempfile.mkdtemp(prefix="memlib-onnx-"))
    fp32, int8 = folder / "minilm.onnx", folder / "minilm-int8.onnx"
    sample = enc(batches[0][:2])
    with torch.no_grad():
        torch.onnx.export(
            Hidden(),
            (torch.tensor(sample["input_ids"]), torch.tensor(sample["attention_mask"])),
            str(fp32),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "last_hidden_state")},
            opset_version=17,
            dynamo=False,
        )
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)

    def run(path):
        so = ort.SessionOptions()
        so.intra_op_num_threads = torch.get_num_threads()
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}

        def one(batch):
            x = enc(batch)
            h = sess.run(None, {k: x[k].astype(np.int64) for k in ("input_ids", "attention_mask") if k in names})[0]
            m = x["attention_mask"][..., None].astype(np.float32)
            e = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
            return e / np.linalg.norm(e, axis=1, keepdims=True)

        one(batches[-1])  # warm-up
        t = time.perf_counter()
        out = np.concatenate([one(b) for b in batches])
        return out, time.perf_counter() - t

    e32, s32 = run(fp32)
    e8, s8 = run(int8)

    def agree(e):
        c = np.einsum("ij,ij->i", e, ref)
        stats = {"mean": c.mean(), "p5": np.percentile(c, 5), "min": c.min()}
        return {k: round(float(v), 4) for k, v in stats.items()}

    n = len(texts)
    print(
        json.dumps(
            {
                "dataset": ds.name,
                "texts": n,
                "setting": f"fast ({length} word pieces)",
                "torch_texts_per_s": round(n / torch_s, 1),
                "onnx_fp32_texts_per_s": round(n / s32, 1),
                "onnx_int8_texts_per_s": round(n / s8, 1),
                "speedup_onnx_fp32": round(torch_s / s32, 2),
                "speedup_onnx_int8": round(torch_s / s8, 2),
                "cosine_to_torch_onnx_fp32": agree(e32),
                "cosine_to_torch_onnx_int8": agree(e8),
                "model_mb_fp32": round(fp32.stat().st_size / 1e6, 1),
                "model_mb_int8": round(int8.stat().st_size / 1e6, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
