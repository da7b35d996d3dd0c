"""Quality of each ``--quantization`` on the default model against its fp32 weights (the Q4_1 blocks
dequantized): perplexity and top-1 agreement, teacher-forced on a fixed text (README.md's start);
``--kv-cache-dtypes`` adds the fp32 weights over a 16-bit KV cache (the prefill reads its K and V
back from the cache, so their rounding shows in every position's logits).

    python -m benchmarks.quality.quantized_quality [--tokens 400] [--methods auto,int8,q4_0]
    python -m benchmarks.quality.quantized_quality --methods '' --kv-cache-dtypes float16,bfloat16
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.harness import REPO


def main() -> None:
    from tests.helpers.model_helpers import PagedSession, make_runner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--methods", default="auto,int8,q4_0")
    ap.add_argument("--kv-cache-dtypes", default="", help="e.g. float16,bfloat16 (fp32 weights)")
    args = ap.parse_args()

    def logits(runner, ids: list[int]) -> torch.Tensor:
        session = PagedSession(runner)
        row = session.open()
        out = session.extend([row], [ids], all_logits=True)[0]
        session.close(row)
        return out

    base = make_runner("smollm2-135m", context_length=2048, num_threads=2)
    ids = base.loaded.tokenizer((REPO / "README.md").read_text()[:4000])["input_ids"][: args.tokens]
    ref = logits(base, ids)
    targets = torch.tensor(ids[1:])[:, None]
    print("| weights | perplexity | top-1 agreement with fp32 |\n|---|---:|---:|")
    variants = [("none", "auto")] + [(m, "auto") for m in args.methods.split(",") if m]
    variants += [("none", d) for d in args.kv_cache_dtypes.split(",") if d]
    for method, kv_dtype in variants:
        runner = (
            base
            if (method, kv_dtype) == ("none", "auto")
            else make_runner(
                "smollm2-135m",
                context_length=2048,
                num_threads=2,
                quantization=method,
                kv_cache_dtype=kv_dtype,
            )
        )
        out = ref if runner is base else logits(runner, ids)
        ppl = torch.exp(-torch.log_softmax(out[:-1].float(), -1).gather(1, targets).mean()).item()
        agree = (out.argmax(-1) == ref.argmax(-1)).float().mean().item()
        kv = "" if kv_dtype == "auto" else f", KV cache {kv_dtype}"
        print(f"| {method} ({runner.quantization}{kv}) | {ppl:.2f} | {agree:.1%} |", flush=True)


if __name__ == "__main__":
    main()
