"""The kernels' pool with helpers that watch for the next product against helpers that sleep at once:
one-stream decode tok/s of a GGUF file, each setting in a fresh process (the setting is read once per
process), alternating round by round, optionally beside ``--hogs`` busy processes (a loaded machine).

    python -m benchmarks.kernels.pool_watch FILE.gguf [--tokens 300] [--rounds 4] [--hogs 0|1|2]

``sleep`` sets RADIXLM_GGUF_SPIN_US=0; ``watch`` leaves the default (``kernels/cpu/work_pool.h``).
Prints each run's tok/s, the medians and watch/sleep.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

DECODE = """
import json, sys, time
import radixlm._env
from radixlm.runtime.engine.engine import Engine
e = Engine(model=sys.argv[1], device="cpu", num_threads=2, context_length=1024, kv_cache_gb=0.25)
n = int(sys.argv[2])
p = {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}
ids = list(range(10, 74))
e.generate(input_ids=ids, sampling_params={**p, "max_new_tokens": 4})
t = time.perf_counter()
e.generate(input_ids=ids, sampling_params=p)
print(json.dumps({"tok_s": n / (time.perf_counter() - t)}))
e.shutdown()
"""


def decode_rate(path: str, tokens: int, watch: bool) -> float:
    """One fresh process's decode tok/s with the helpers watching (default) or sleeping."""
    env = dict(os.environ)
    env.pop("RADIXLM_GGUF_SPIN_US", None)
    if not watch:
        env["RADIXLM_GGUF_SPIN_US"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", DECODE, path, str(tokens)], env=env, capture_output=True, text=True, check=True
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["tok_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a GGUF file")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--hogs", type=int, default=0, help="busy-loop processes running beside the runs")
    args = ap.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    runs: dict[str, list[float]] = {"sleep": [], "watch": []}
    try:
        for _ in range(args.rounds):
            for name in runs:
                runs[name].append(decode_rate(args.model, args.tokens, watch=name == "watch"))
    finally:
        for hog in hogs:
            hog.kill()
    medians = {name: statistics.median(rates) for name, rates in runs.items()}
    print(
        json.dumps(
            {
                "hogs": args.hogs,
                "runs": {name: [round(r, 1) for r in rates] for name, rates in runs.items()},
                "median_tok_s": {name: round(m, 1) for name, m in medians.items()},
                "watch_over_sleep": round(medians["watch"] / medians["sleep"], 2),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
