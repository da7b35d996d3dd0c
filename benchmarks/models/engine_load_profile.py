"""Where an Engine's start goes on one model file: the engine module's import timed, then
``Engine(...)`` under ``cProfile`` (the top of its cumulative table printed). Run it in a fresh
process (the 8B file under ``flock /tmp/big-model.lock``):

    python -m benchmarks.models.engine_load_profile /tmp/llama-8b-q4_0.gguf [--rows 45]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=45, help="rows of the cumulative profile to print")
    args = ap.parse_args()
    t0 = time.perf_counter()
    from radixlm.runtime.engine.engine import Engine

    print(f"import {time.perf_counter() - t0:.1f} s", flush=True)
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    engine = Engine(
        model=args.model, device="cpu", num_threads=args.threads, context_length=1024, kv_cache_gb=0.25
    )
    profile.disable()
    print(f"Engine(...) {time.perf_counter() - t0:.1f} s", flush=True)
    engine.shutdown()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.rows)


if __name__ == "__main__":
    main()
