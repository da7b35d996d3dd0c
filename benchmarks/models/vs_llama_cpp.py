"""One GGUF file, radixlm against llama.cpp (llama-cpp-python, same file, same threads): load time, peak
RSS, prefill and one-stream decode tok/s, with the memory-bandwidth floor beside them.

Each side runs in a fresh process (peak RSS is that process's own ``ru_maxrss``), ``--rounds`` times,
alternating which goes first (llama.cpp first in round one) with ``--settle`` idle seconds before each
run: on a VM whose freed memory goes back to the host (free page reporting) a process started right after
another reuses memory the host already backs, and loads several times faster than one started cold (the
1.5B Q4_0 file: llama.cpp 0.7 s right after radixlm, ~4 s after a pause). Each figure is the side's best
run; ``*_load_s_runs`` and ``*_decode_tok_s_runs`` list every run in order (the host's load moves a
run's decode by 10-30% here). The prompt is the
same token ids for both (``--prompt-tokens`` ids drawn from the vocabulary; random-weight files have no
meaningful text). The floor is the decode rate if every weight byte a token reads (the file minus the
embedding table, of which a token reads one row) streamed at the copy bandwidth measured here, now.

    python -m benchmarks.models.vs_llama_cpp FILE.gguf [--threads 2] [--prompt-tokens 128] [--tokens 32] \
        [--rounds 2] [--settle 10]
    python -m benchmarks.models.random_gguf --shape 1.5b --quant Q4_0 /tmp/llama-1.5b-q4_0.gguf
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import add_json_argument, write_results
from benchmarks.peers.llama_cpp_peer import ensure_llama_cpp

# run in the llama-cpp-python venv: load, prefill the ids, greedy decode, each timed
LLAMA_CPP = """
import json, resource, sys, time, llama_cpp
path, threads, tokens, ids = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
n_ctx = int(sys.argv[5])
t0 = time.perf_counter()
llm = llama_cpp.Llama(
    path, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx, n_batch=512, verbose=False
)
load_s = time.perf_counter() - t0
t0 = time.perf_counter()
llm.eval(ids)
prefill_s = time.perf_counter() - t0
out, t0 = [], time.perf_counter()
for _ in range(tokens):
    tok = llm.sample(top_k=1, temp=0.0)
    out.append(int(tok))
    llm.eval([tok])
decode_s = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"load_s": load_s, "prefill_tok_s": len(ids) / prefill_s, "decode_tok_s": tokens / decode_s,
                  "peak_rss_mib": peak, "output_ids": out}))
"""


def context_for(prompt_tokens: int, tokens: int) -> int:
    """Both sides' context: 1,024 tokens, or the prompt and output rounded up to 256."""
    return max(1024, -(-(prompt_tokens + tokens) // 256) * 256)


def radixlm_side(path: str, threads: int, tokens: int, ids: list[int]) -> dict:
    """Runs in this (fresh) process: an Engine on ``path``, one request, timed from the stream."""
    import resource

    from radixlm.runtime.engine.engine import Engine

    t0 = time.perf_counter()
    context = context_for(len(ids), tokens)
    engine = Engine(
        model=path,
        device="cpu",
        num_threads=threads,
        context_length=context,
        kv_cache_gb=0.25 * context / 1024,
    )
    load_s = time.perf_counter() - t0
    try:
        params = {"temperature": 0, "max_new_tokens": tokens, "ignore_eos": True}
        engine.generate(input_ids=ids[:8], sampling_params={**params, "max_new_tokens": 2})  # warm-up
        engine.flush_cache()
        t0, first, out = time.perf_counter(), None, []
        for chunk in engine.generate(input_ids=ids, sampling_params=params, stream=True):
            first = first or time.perf_counter()
            out = chunk.get("output_ids", out)
        end = time.perf_counter()
        served = engine.get_server_info()["quantization"]
    finally:
        engine.shutdown()
    return {
        "load_s": load_s,
        "prefill_tok_s": len(ids) / (first - t0),  # first token = prefill + one sampled token
        "decode_tok_s": (len(out) - 1) / (end - first),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "quantization": served,
        "output_ids": out,
    }


def best_run(runs: list[dict]) -> dict:
    """One side's best figures over its runs: the least load time, the most tok/s, the greatest peak
    RSS; the first run's output ids and quantization."""
    return {
        **runs[0],
        "load_s": min(r["load_s"] for r in runs),
        "prefill_tok_s": max(r["prefill_tok_s"] for r in runs),
        "decode_tok_s": max(r["decode_tok_s"] for r in runs),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
    }


def copy_bandwidth_gbs() -> float:
    """GB/s of a 1 GiB tensor copy (2 threads), the best of 5."""
    import torch

    src, dst = torch.ones(1 << 28), torch.empty(1 << 28)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best / 1e9  # read + write


def bytes_per_token(path: str) -> int:
    """Weight bytes one decode step reads: every tensor but the embedding table (one row of it)."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    return sum(int(t.n_bytes) for t in reader.tensors if t.name != "token_embd.weight")


def prompt_ids(path: str, n: int) -> list[int]:
    from gguf import GGUFReader

    vocab = next(int(t.shape[-1]) for t in GGUFReader(path).tensors if t.name == "token_embd.weight")
    return [(1009 * i + 17) % min(vocab, 32000) + 3 for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--side", choices=["radixlm"], help=argparse.SUPPRESS)  # the child process
    ap.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating which goes first")
    ap.add_argument("--settle", type=float, default=10.0, help="idle seconds before each run")
    add_json_argument(ap)
    args = ap.parse_args()
    ids = prompt_ids(args.gguf, args.prompt_tokens)
    if args.side == "radixlm":
        print(json.dumps(radixlm_side(args.gguf, args.threads, args.tokens, ids)))
        return
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "benchmarks.models.vs_llama_cpp", args.gguf, "--side", "radixlm"]
    cmd += [
        "--threads",
        str(args.threads),
        "--tokens",
        str(args.tokens),
        "--prompt-tokens",
        str(args.prompt_tokens),
    ]
    peer_cmd = [str(ensure_llama_cpp()), "-c", LLAMA_CPP, args.gguf, str(args.threads), str(args.tokens)]
    context = str(context_for(len(ids), args.tokens))
    commands = {"radixlm": (cmd, env), "llama_cpp": ([*peer_cmd, json.dumps(ids), context], None)}
    runs: dict[str, list[dict]] = {"radixlm": [], "llama_cpp": []}
    for r in range(args.rounds):
        for side in ("llama_cpp", "radixlm") if r % 2 == 0 else ("radixlm", "llama_cpp"):
            time.sleep(args.settle)
            argv, side_env = commands[side]
            done = subprocess.run(argv, capture_output=True, text=True, check=True, env=side_env)
            runs[side].append(json.loads(done.stdout.splitlines()[-1]))
    ours, peer = best_run(runs["radixlm"]), best_run(runs["llama_cpp"])
    bandwidth = copy_bandwidth_gbs()
    floor = bandwidth * 1e9 / bytes_per_token(args.gguf)
    same = next(
        (i for i, (a, b) in enumerate(zip(ours["output_ids"], peer["output_ids"])) if a != b), args.tokens
    )
    figures = {
        "file": args.gguf,
        "file_gib": round(Path(args.gguf).stat().st_size / 2**30, 2),
        "served_as": ours["quantization"],
        "copy_gb_s": round(bandwidth, 1),
        "bandwidth_floor_tok_s": round(floor, 2),
        "greedy_tokens_agreeing": same,
        "rounds": args.rounds,
        "settle_s": args.settle,
    }
    for side, r in (("radixlm", ours), ("llama_cpp", peer)):
        for key in ("load_s", "peak_rss_mib", "prefill_tok_s", "decode_tok_s"):
            figures[f"{side}_{key}"] = round(r[key], 2)
        for key in ("load_s", "decode_tok_s"):
            figures[f"{side}_{key}_runs"] = [round(run[key], 2) for run in runs[side]]
    figures["load_ratio"] = round(ours["load_s"] / peer["load_s"], 2)
    figures["decode_ratio"] = round(ours["decode_tok_s"] / peer["decode_tok_s"], 2)
    figures["prefill_ratio"] = round(ours["prefill_tok_s"] / peer["prefill_tok_s"], 2)
    figures["decode_of_floor"] = round(ours["decode_tok_s"] / floor, 2)
    print(json.dumps(figures, indent=2))
    headline = [
        {
            "label": f"{Path(args.gguf).name} {what}",
            "metric": f"radixlm / llama.cpp {what} tok/s",
            "value": ratio,
        }
        for what, ratio in (("decode", figures["decode_ratio"]), ("prefill", figures["prefill_ratio"]))
    ]
    write_results(args.json, "benchmarks.models.vs_llama_cpp", headline, figures)


if __name__ == "__main__":
    main()
