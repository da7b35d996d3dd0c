"""Greedy chats on the embedded model with a 16-bit KV cache against the fp32 cache (fp32 weights).

Six chat prompts, 128 greedy tokens each (EOS ignored), through ``Engine``; prints how many outputs
are identical to the fp32 cache's and where each first differs.

    python -m benchmarks.quality.kv_cache_dtype [--dtypes float16,bfloat16] [--tokens 128]
"""

from __future__ import annotations

import argparse

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
from radixlm import Engine

PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a radix tree works.",
    "List five facts about the Moon.",
    "What is the capital of France? Answer in one sentence.",
    "Give me a recipe for pancakes.",
    "Translate 'good morning' into Spanish, French and German.",
]


def greedy_outputs(kv_cache_dtype: str, tokens: int) -> list[list[int]]:
    engine = Engine(model="smollm2-135m", quantization="none", kv_cache_dtype=kv_cache_dtype)
    try:
        chats = [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n" for p in PROMPTS]
        outs = engine.generate(chats, {"temperature": 0, "max_new_tokens": tokens, "ignore_eos": True})
        return [o["output_ids"] for o in outs]
    finally:
        engine.shutdown()


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    reference = greedy_outputs("auto", args.tokens)
    for dtype in args.dtypes.split(","):
        outs = greedy_outputs(dtype, args.tokens)
        first = [first_difference(a, b) for a, b in zip(reference, outs)]
        same = sum(f is None for f in first)
        print(
            f"{dtype}: {same}/{len(PROMPTS)} outputs identical to the fp32 cache's; first differing token "
            f"per prompt: {first}",
            flush=True,
        )


if __name__ == "__main__":
    main()
