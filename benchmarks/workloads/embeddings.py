"""Embedding throughput: sentences/s of ``Engine.encode`` against sentence-transformers on the same
model and threads, at batch 1 (one call per sentence), 32 and 256 (one call per batch). radixlm runs
twice: fp32 weights (``radixlm_s``) and ``encoder_fp16_weights`` (``fp16w_s``, its weights rounded to
fp16); all three alternate pass by pass.

    python -m benchmarks.workloads.embeddings [--model all-minilm-l6-v2] [--threads 2] [--sentences 256]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip

WORDS = (
    "the a model server token cache prefix request batch vector query document search engine fast slow "
    "city river mountain music film book friend market price weather morning night learns reads writes"
).split()


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 6 to 30 words (varied lengths, as real inputs are)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 30))) + "." for _ in range(n)]


def rates(fns: list, texts: list[str], batch: int, repeats: int) -> list[float]:
    """Each of ``fns``' best sentences/s over ``repeats`` passes of ``texts`` in calls of ``batch``
    sentences; the passes alternate between the functions, so a busy machine slows both alike."""
    best = [0.0] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            for lo in range(0, len(texts), batch):
                fn(texts[lo : lo + batch])
            best[k] = max(best[k], len(texts) / (time.perf_counter() - start))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch

    from radixlm.runtime.engine.engine import Engine
    from radixlm.runtime.weights.model_registry import resolve_model
    from tests.helpers.sentence_transformers_ref import sentence_transformers

    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    texts = sentences(args.sentences)
    st_model = sentence_transformers().SentenceTransformer(path, device="cpu")
    common = dict(model=path, device="cpu", dtype="float32", num_threads=args.threads, is_embedding=True)
    engine = Engine(**common)
    engine16 = Engine(**common, encoder_fp16_weights=True)
    rows = []
    try:
        for batch in (1, 32, 256):
            n = min(len(texts), 64) if batch == 1 else len(texts)

            def st_encode(chunk: list[str], b: int = batch) -> None:
                st_model.encode(chunk, batch_size=b, convert_to_numpy=True)

            ours, ours16, theirs = rates(
                [engine.encode, engine16.encode, st_encode], texts[:n], batch, args.repeats
            )
            rows.append({"batch": batch, "radixlm_s": round(ours, 1), "fp16w_s": round(ours16, 1)})
            rows[-1].update(
                st_s=round(theirs, 1), ratio=round(ours / theirs, 2), fp16w_ratio=round(ours16 / theirs, 2)
            )
    finally:
        engine.shutdown()
        engine16.shutdown()
    print(json.dumps({"model": args.model, "threads": args.threads, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
