"""Every architecture we serve, from a random-weight GGUF file of one small-but-real shape
(``arch_gguf.py``: ~185M parameters, 104 MiB in Q4_0), radixlm against llama.cpp (llama-cpp-python,
same file, same threads): load time, peak RSS, one stream's decode tok/s, and how many of the first
greedy tokens agree (a sanity column: the same file read the same way gives the same tokens).

Each side runs in a fresh process per architecture (``vs_llama_cpp.py``'s two sides), one after the
other, so the ratios come from one run on whatever load the machine has then. Where llama.cpp refuses
a file, its row says why.

    python -m benchmarks.models.per_architecture [--arch llama,gemma2] [--quant Q4_0] [--threads 2]
        [--tokens 32] [--prompt-tokens 64] [--json benchmarks/results/models-per-architecture.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import REPO, add_json_argument, write_results
from benchmarks.models.arch_gguf import ARCHITECTURES, write_arch_gguf
from benchmarks.models.vs_llama_cpp import prompt_ids
from benchmarks.peers.llama_cpp_peer import ensure_llama_cpp

_KEYS = ("load_s", "peak_rss_mib", "decode_tok_s")
# run in the llama-cpp-python venv: load, then per round prefill the ids and decode greedily (timed)
LLAMA_CPP = """
import json, resource, sys, time, llama_cpp
path, (threads, tokens, rounds), ids = sys.argv[1], map(int, sys.argv[2:5]), json.loads(sys.argv[5])
t0 = time.perf_counter()
llm = llama_cpp.Llama(path, n_threads=threads, n_threads_batch=threads, n_ctx=1024, verbose=True)
load_s, rates, first = time.perf_counter() - t0, [], None
for _ in range(rounds):
    llm.reset()
    llm.eval(ids)
    out, t0 = [], time.perf_counter()
    for _ in range(tokens):
        tok = llm.sample(top_k=1, temp=0.0)
        out.append(int(tok))
        llm.eval([tok])
    rates.append(tokens / (time.perf_counter() - t0))
    first = first or out
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"load_s": load_s, "decode_tok_s": max(rates), "peak_rss_mib": peak, "output_ids": first}))
"""


def radixlm_side(path: str, threads: int, tokens: int, rounds: int, ids: list[int]) -> dict:
    """Runs in a fresh process: an Engine on ``path``; per round one request, its decode timed from
    the stream (after the first token, which ends the prefill)."""
    import resource
    import time

    from radixlm.runtime.engine.engine import Engine

    t0 = time.perf_counter()
    engine = Engine(model=path, device="cpu", num_threads=threads, context_length=1024, kv_cache_gb=0.25)
    load_s, rates, first_out = time.perf_counter() - t0, [], None
    try:
        params = {"temperature": 0, "max_new_tokens": tokens + 1, "ignore_eos": True}
        for _ in range(rounds):
            engine.flush_cache()
            first, out = None, []
            for chunk in engine.generate(input_ids=ids, sampling_params=params, stream=True):
                first = first or time.perf_counter()
                out = chunk.get("output_ids", out)
            rates.append((len(out) - 1) / (time.perf_counter() - first))
            first_out = first_out or out[:tokens]
        served = engine.get_server_info()["quantization"]
    finally:
        engine.shutdown()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "load_s": load_s,
        "decode_tok_s": max(rates),
        "peak_rss_mib": peak,
        "quantization": served,
        "output_ids": first_out,
    }


def _run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """The JSON a side prints last, or ``{"error": the reason}`` when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        reasons = [line for line in lines if "error loading model" in line] or lines  # llama.cpp's log
        return {"error": reasons[-1][:200] if reasons else f"exit status {proc.returncode}"}
    return json.loads(proc.stdout.splitlines()[-1])


def measure(path: Path, threads: int, tokens: int, prompt_tokens: int, rounds: int) -> dict:
    """One architecture's row: both sides on ``path``."""
    ids = prompt_ids(str(path), prompt_tokens)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    counts = [str(threads), str(tokens), str(rounds), json.dumps(ids)]
    ours = _run(
        [sys.executable, "-m", "benchmarks.models.per_architecture", "--side", str(path), *counts], env
    )
    peer = _run([str(ensure_llama_cpp()), "-c", LLAMA_CPP, str(path), *counts])
    row: dict = {"file_mib": round(path.stat().st_size / 2**20)}
    for side, result in (("radixlm", ours), ("llama_cpp", peer)):
        if "error" in result:
            row[f"{side}_error"] = result["error"]
            continue
        row.update({f"{side}_{key}": round(result[key], 2) for key in _KEYS})
    if "error" not in ours:
        row["served_as"] = ours["quantization"]
    if "error" not in ours and "error" not in peer:
        pairs = zip(ours["output_ids"], peer["output_ids"])
        row["greedy_tokens_agreeing"] = next((i for i, (a, b) in enumerate(pairs) if a != b), tokens)
        row["decode_ratio"] = round(ours["decode_tok_s"] / peer["decode_tok_s"], 2)
    return row


def _table(rows: dict[str, dict], tokens: int) -> str:
    head = "| architecture | MiB | served as | load s (ours / llama.cpp) | peak RSS MiB (ours / llama.cpp) "
    head += "| decode tok/s (ours / llama.cpp) | decode ratio | greedy tokens agreeing |\n"
    lines = [head + "|---|---:|---|---:|---:|---:|---:|---:|"]

    def pair(r: dict, key: str) -> str:
        ours = r.get(f"radixlm_{key}", "-")
        return f"{ours} / {r.get(f'llama_cpp_{key}', '-')}"

    for name, r in rows.items():
        agree = f"{r['greedy_tokens_agreeing']}/{tokens}" if "greedy_tokens_agreeing" in r else "-"
        cells = [
            name,
            str(r["file_mib"]),
            r.get("served_as", "-"),
            pair(r, "load_s"),
            pair(r, "peak_rss_mib"),
        ]
        cells += [pair(r, "decode_tok_s"), str(r.get("decode_ratio", "-")), agree]
        lines.append("| " + " | ".join(cells) + " |")
        for side in ("radixlm", "llama_cpp"):
            if f"{side}_error" in r:
                lines.append(f"|  | {side} failed: {r[f'{side}_error']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default=",".join(ARCHITECTURES), help="comma-separated, of: %(default)s")
    ap.add_argument("--quant", choices=["Q4_0", "Q8_0"], default="Q4_0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="decode rounds per side; the best counts")
    ap.add_argument("--side", help=argparse.SUPPRESS)  # the radixlm child: FILE threads tokens rounds ids
    ap.add_argument("side_args", nargs="*", help=argparse.SUPPRESS)
    add_json_argument(ap)
    args = ap.parse_args()
    if args.side:
        threads, tokens, rounds, ids = args.side_args
        print(json.dumps(radixlm_side(args.side, int(threads), int(tokens), int(rounds), json.loads(ids))))
        return
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.arch.split(","):
            path = write_arch_gguf(Path(tmp) / f"{name}.gguf", name, args.quant)
            rows[name] = measure(path, args.threads, args.tokens, args.prompt_tokens, args.rounds)
            path.unlink()
            print(name, json.dumps(rows[name]), flush=True)
    print(_table(rows, args.tokens))
    headline = [
        {"label": name, "metric": "radixlm / llama.cpp decode tok/s (one stream)", "value": r["decode_ratio"]}
        for name, r in rows.items()
        if "decode_ratio" in r
    ]
    write_results(args.json, "benchmarks.models.per_architecture", headline, rows)


if __name__ == "__main__":
    main()
