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
from benchmarks.models.vs_llama_cpp import LLAMA_CPP, prompt_ids
from benchmarks.peers.llama_cpp_peer import ensure_llama_cpp

_KEYS = ("load_s", "peak_rss_mib", "decode_tok_s")


def _run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """The JSON a side prints last, or ``{"error": the reason}`` when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        return {"error": lines[-1][:200] if lines else f"exit status {proc.returncode}"}
    return json.loads(proc.stdout.splitlines()[-1])


def measure(path: Path, threads: int, tokens: int, prompt_tokens: int) -> dict:
    """One architecture's row: both sides on ``path``."""
    ids = prompt_ids(str(path), prompt_tokens)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ours = _run(
        [sys.executable, "-m", "benchmarks.models.vs_llama_cpp", str(path), "--side", "radixlm"]
        + ["--threads", str(threads), "--tokens", str(tokens), "--prompt-tokens", str(prompt_tokens)],
        env,
    )
    peer = _run(
        [str(ensure_llama_cpp()), "-c", LLAMA_CPP, str(path), str(threads), str(tokens), json.dumps(ids)]
    )
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
    add_json_argument(ap)
    args = ap.parse_args()
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.arch.split(","):
            path = write_arch_gguf(Path(tmp) / f"{name}.gguf", name, args.quant)
            rows[name] = measure(path, args.threads, args.tokens, args.prompt_tokens)
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
