"""Tensor-parallel overhead on this machine (issue 14): the decode step at tp 1 vs 2, one thread
per rank, measured end to end through the Engine (time for N + 1 tokens minus time for 1 token).

SmolLM2-135M has 9 attention heads, which do not split over 2 ranks, so the default model here is a
random Llama of the same shape with 8 heads of 64 (hidden 512, 4 KV heads, 30 layers, vocabulary
49152): the same work per token, divisible by 2. ``--model smollm2-135m --tp 1,3`` runs the real one.
``--quantization none,q4_1,int8`` compares the weights served (quantized whole, then sharded).

    python -m benchmarks.distributed.tp_decode --batch 1,8 --steps 32 [--json PATH]
    python -m benchmarks.distributed.tp_decode --quantization q4_1 --steps 16
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks.harness import add_json_argument, write_results


def decode_step_ms(engine, batch: int, steps: int) -> float:
    prompts = [f"Question {i}: tell me about the number {i * 7}." for i in range(batch)]

    def run(n: int) -> float:
        engine.flush_cache()
        t0 = time.perf_counter()
        engine.generate(prompts, {"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
        return time.perf_counter() - t0

    run(2)  # warm up
    one = min(run(1) for _ in range(2))
    many = min(run(steps + 1) for _ in range(2))
    return (many - one) / steps * 1000


def random_smollm2_shape(path: str) -> str:
    """A random SmolLM2-135M-shaped Llama with 8 heads (saved once under ``path``)."""
    from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config

    if not os.path.isfile(os.path.join(path, "config.json")):
        config = tiny_llama_config(
            vocab_size=49152,
            hidden_size=512,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=8,
            num_key_value_heads=4,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
        )
        save_tiny_model(config, path)
    return path


def main() -> None:
    from radixlm.runtime.engine import Engine

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="random-8-heads", help="a model name or path, or random-8-heads")
    p.add_argument("--batch", default="1,8")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--tp", default="1,2")
    p.add_argument("--quantization", default="none", help="comma-separated --quantization values")
    add_json_argument(p)
    args = p.parse_args()
    rows = []
    if args.model == "random-8-heads":
        args.model = random_smollm2_shape("/tmp/radixlm-bench-random-8-heads")
    print("| quantization | tp_size | batch | decode step ms |")
    print("|---|---:|---:|---:|")
    for method in args.quantization.split(","):
        for tp in (int(x) for x in args.tp.split(",")):
            engine = Engine(
                model=args.model,
                tp_size=tp,
                num_threads=1,
                device="cpu",
                kv_cache_gb=0.25,
                quantization=method,
            )
            served = engine.get_server_info()["quantization"]
            try:
                for batch in (int(b) for b in args.batch.split(",")):
                    ms = decode_step_ms(engine, batch, args.steps)
                    print(f"| {served} | {tp} | {batch} | {ms:.1f} |", flush=True)
                    rows.append({"quantization": served, "tp_size": tp, "batch": batch, "decode_step_ms": ms})
            finally:
                engine.shutdown()
    headline = [
        {
            "label": f"{r['quantization']}, tp {r['tp_size']}, batch {r['batch']}",
            "metric": "decode step ms",
            "value": r["decode_step_ms"],
        }
        for r in rows
    ]
    write_results(args.json, __spec__.name, headline, rows)


if __name__ == "__main__":
    main()
