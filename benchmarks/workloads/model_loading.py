"""Load time and peak memory of a model through ``ModelRunner`` (``--quantization auto``), then a few
decode steps at batch 1. Run it in a fresh process per model (peak RSS is the process's own).

    python -m benchmarks.workloads.model_loading MODEL [--decode 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--decode", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quantization", default="auto")
    args = ap.parse_args()
    from radixlm.runtime.executor.model_runner import ModelRunner
    from radixlm.runtime.server_args import ServerArgs
    from tests.helpers.model_helpers import PagedSession

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    runner = ModelRunner(
        ServerArgs(
            model=args.model,
            quantization=args.quantization,
            device="cpu",
            num_threads=args.threads,
            max_total_tokens=512,
            max_running_requests=4,
            context_length=256,
        )
    )
    load_s = time.perf_counter() - start
    peak_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    session = PagedSession(runner)
    row = session.open()
    session.extend([row], [list(range(10, 26))])
    session.decode([row], [30])  # warm-up
    start = time.perf_counter()
    for step in range(args.decode):
        session.decode([row], [31 + step])
    tok_s = args.decode / (time.perf_counter() - start)
    result = {
        "model": args.model,
        "quantization": runner.quantization,
        "load_s": round(load_s, 1),
        "rss_before_load_mib": round(before),
        "peak_rss_after_load_mib": round(peak_load),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "decode_tok_s_bs1": round(tok_s, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
