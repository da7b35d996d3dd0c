"""Cost of ``--enable-deterministic-inference``: Engine throughput with it on and off, in one run.

    python -m benchmarks.workloads.deterministic [--prompts 32] [--tokens 32] [--json PATH]

Same workload for both (distinct prompts, greedy, EOS ignored), each variant in a fresh Engine,
alternating on/off/on/off so a load change on a busy machine hits both. Prints output tok/s per
variant and the on/off ratio (the flag would become the default under a 10% cost).
"""

from __future__ import annotations

import argparse
import json
import time

from benchmarks.harness import add_json_argument, write_results
from radixlm.runtime.engine import Engine


def throughput(deterministic: bool, prompts: list[str], tokens: int, model: str) -> float:
    engine = Engine(model=model, kv_cache_gb=0.5, enable_deterministic_inference=deterministic)
    try:
        engine.generate(prompts[:2], {"max_new_tokens": 2})  # warm-up
        engine.flush_cache()
        start = time.perf_counter()
        outs = engine.generate(prompts, {"temperature": 0, "max_new_tokens": tokens, "ignore_eos": True})
        elapsed = time.perf_counter() - start
        return sum(o["meta_info"]["completion_tokens"] for o in outs) / elapsed
    finally:
        engine.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    add_json_argument(ap)
    args = ap.parse_args()
    prompts = [
        f"Request {i}: write two sentences about the number {i * 13} and why it matters."
        for i in range(args.prompts)
    ]
    runs: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.rounds):
        for name in ("on", "off"):
            runs[name].append(throughput(name == "on", prompts, args.tokens, args.model))
    on, off = max(runs["on"]), max(runs["off"])
    summary = {
        "command": vars(args),
        "tok_s": runs,
        "best_on": round(on, 1),
        "best_off": round(off, 1),
        "on_over_off": round(on / off, 3),
    }
    print(json.dumps(summary, indent=1))
    headline = [
        {"label": "deterministic on", "metric": "output tok/s", "value": on},
        {"label": "deterministic off", "metric": "output tok/s", "value": off},
        {"label": "on/off", "metric": "ratio", "value": on / off},
    ]
    write_results(args.json, __spec__.name, headline, summary)


if __name__ == "__main__":
    main()
