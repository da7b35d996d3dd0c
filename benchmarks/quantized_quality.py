"""Quality of each ``--quantization`` on the default model against its fp32 weights (the Q4_1 blocks
dequantized): perplexity and top-1 agreement, teacher-forced on a fixed text (README.md's start).

    python benchmarks/quantized_quality.py [--tokens 400] [--methods auto,int8,q4_0]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    from tests.helpers.model_helpers import PagedSession, make_runner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--methods", default="auto,int8,q4_0")
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
    for method in ["none", *args.methods.split(",")]:
        runner = base if method == "none" else make_runner("smollm2-135m", context_length=2048,
                                                           num_threads=2, quantization=method)
        out = ref if method == "none" else logits(runner, ids)
        ppl = torch.exp(-torch.log_softmax(out[:-1].float(), -1).gather(1, targets).mean()).item()
        agree = (out.argmax(-1) == ref.argmax(-1)).float().mean().item()
        print(f"| {method} ({runner.quantization}) | {ppl:.2f} | {agree:.1%} |", flush=True)


if __name__ == "__main__":
    main()
