"""A real llama.cpp K-quant file served natively, against llama.cpp on the same file.

llama.cpp (``llama_model_quantize`` in the llama-cpp-python venv of ``llama_cpp_peer.py``) requantizes
the default model's Q4_1 GGUF to Q4_K_M (or ``--ftype``). SmolLM2's 576-wide rows are not whole
256-weight super-blocks, so llama.cpp writes most tensors in its fallbacks (Q5_0 for Q4_K, Q8_0 for
Q6_K) and only ffn_down (1536 wide) in Q4_K/Q6_K: a file mixing four formats, all of which our
kernels read. Reported: the file's tensor types, the method ``auto`` serves, greedy tokens of
radixlm (``auto``), radixlm on the dequantized file (``none``) and llama.cpp from the same prompt ids
(how many agree), and one-stream decode tok/s of radixlm ``auto`` and llama.cpp (in process, greedy,
``--tokens`` tokens, same threads).

    python -m benchmarks.peers.kquant_llama_cpp [--ftype 15] [--threads 2] [--tokens 64]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import time
from pathlib import Path

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
from benchmarks.peers.cpu_speed import default_gguf
from benchmarks.peers.llama_cpp_peer import cache_dir, ensure_llama_cpp

PROMPT = (
    "<|im_start|>user\nExplain in a few sentences why the sky is blue and why sunsets are red."
    "<|im_end|>\n<|im_start|>assistant\n"
)

# run in the llama-cpp-python venv: quantize, or tokenize + greedy decode with timing
QUANTIZE = """
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.allow_requantize, p.nthread = int(sys.argv[3]), True, 2
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))
"""
GENERATE = """
import json, sys, time, llama_cpp
path, threads, tokens, prompt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
llm = llama_cpp.Llama(path, n_threads=threads, n_ctx=1024, verbose=False)
ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
out, t0, t_first = [], time.perf_counter(), None
for tok in llm.generate(ids, top_k=1, temp=0.0, repeat_penalty=1.0):
    t_first = t_first or time.perf_counter()
    out.append(tok)
    if len(out) == tokens:
        break
decode_s = time.perf_counter() - t_first
print(json.dumps({"prompt_ids": ids, "output_ids": out, "decode_tok_s": (len(out) - 1) / decode_s}))
"""


def llama_cpp(script: str, *args: str) -> str:
    python = ensure_llama_cpp()
    done = subprocess.run([str(python), "-c", script, *args], capture_output=True, text=True, check=True)
    return done.stdout


def radixlm_greedy(path: str, quantization: str, prompt_ids: list[int], tokens: int, threads: int) -> dict:
    from radixlm.runtime.engine.engine import Engine

    engine = Engine(model=path, quantization=quantization, device="cpu", num_threads=threads)
    try:
        served = engine.get_server_info()["quantization"]
        params = {"temperature": 0, "max_new_tokens": tokens, "ignore_eos": True}
        engine.generate(input_ids=prompt_ids, sampling_params={**params, "max_new_tokens": 4})  # warm-up
        t0 = time.perf_counter()
        first = None
        out: list[int] = []
        for chunk in engine.generate(input_ids=prompt_ids, sampling_params=params, stream=True):
            first = first or time.perf_counter()
            out = chunk.get("output_ids", out)
        decode_s = time.perf_counter() - (first or t0)
    finally:
        engine.shutdown()
    return {"quantization": served, "output_ids": out, "decode_tok_s": (tokens - 1) / decode_s}


def agreeing_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--ftype",
        type=int,
        default=15,
        help="llama.cpp file type (15: Q4_K_M, 18: Q6_K; 0: the Q4_1 file itself, to compare)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    from gguf import GGUFReader

    source = default_gguf()
    target = cache_dir() / "gguf" / f"{Path(source).stem}-requantized-ftype{args.ftype}.gguf"
    if args.ftype == 0:
        target = Path(source)
    elif not target.exists():
        llama_cpp(QUANTIZE, source, str(target), str(args.ftype))
    types = collections.Counter(t.tensor_type.name for t in GGUFReader(str(target)).tensors)
    print("file", target, dict(types), flush=True)
    peer = json.loads(llama_cpp(GENERATE, str(target), str(args.threads), str(args.tokens), PROMPT))
    ours = radixlm_greedy(str(target), "auto", peer["prompt_ids"], args.tokens, args.threads)
    dequantized = radixlm_greedy(str(target), "none", peer["prompt_ids"], args.tokens, args.threads)
    print(
        json.dumps(
            {
                "served": ours["quantization"],
                "tokens": args.tokens,
                "auto_agrees_with_none_for": agreeing_prefix(ours["output_ids"], dequantized["output_ids"]),
                "auto_agrees_with_llama_cpp_for": agreeing_prefix(ours["output_ids"], peer["output_ids"]),
                "none_agrees_with_llama_cpp_for": agreeing_prefix(
                    dequantized["output_ids"], peer["output_ids"]
                ),
                "decode_tok_s": {
                    "radixlm_auto": round(ours["decode_tok_s"], 1),
                    "radixlm_none": round(dequantized["decode_tok_s"], 1),
                    "llama_cpp": round(peer["decode_tok_s"], 1),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
