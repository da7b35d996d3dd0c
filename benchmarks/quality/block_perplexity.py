"""Perplexity of every block format we serve as blocks against the same blocks dequantized to fp32.

Served as blocks (``--quantization auto`` on a GGUF file: ``GGUFLinear``, whose kernel rounds the
activations to int8) and dequantized (``--quantization none``: the file's blocks as fp32 weights), the
same model is teacher-forced over the same text (``docs/architecture.md``'s start, tokenized by the
embedded model's tokenizer); the ratio of the two perplexities is the blocks' cost (goal: within 1%).

The files: the embedded model itself (SmolLM2-135M, Q4_1), and its weights written back as GGUF with
every linear weight in Q4_0, Q5_0 or Q8_0. Q4_K and Q6_K blocks need rows of multiples of 256, which
only the 1536-wide ``ffn_down`` has in this model: those files hold ``ffn_down`` in the K format and the
576-wide projections in Q8_0 (as llama.cpp's K-quant mixes fall back on such tensors).

    python -m benchmarks.quality.block_perplexity [--tokens 2048] [--formats q4_1,q4_0,q5_0,q8_0,q4_k,q6_k]
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benchmarks.harness import REPO, add_json_argument, write_results

if TYPE_CHECKING:
    from radixlm.runtime.executor.model_runner import ModelRunner

FORMATS = ("q4_1", "q4_0", "q5_0", "q8_0", "q4_k", "q6_k")
_K_FORMATS = ("q4_k", "q6_k")


def text_ids(tokens: int) -> list[int]:
    """The first ``tokens`` ids of ``docs/architecture.md`` under the embedded model's tokenizer."""
    from radixlm.runtime.weights.tokenizer_files import tokenizer_for

    text = (REPO / "docs" / "architecture.md").read_text()
    ids = tokenizer_for("smollm2-135m")(text[: tokens * 8])["input_ids"][:tokens]
    if len(ids) < tokens:
        raise ValueError(f"docs/architecture.md holds only {len(ids)} tokens; asked for {tokens}")
    return ids


def perplexity(runner: ModelRunner, ids: list[int], chunk: int = 256) -> float:
    """exp(mean NLL of ``ids[1:]``), teacher-forced in extend steps of ``chunk`` tokens on one request
    (each step reads the KV cache of the ones before, as a served prompt does)."""
    from tests.helpers.model_helpers import PagedSession

    session = PagedSession(runner)
    row, total = session.open(), 0.0
    for start in range(0, len(ids) - 1, chunk):
        piece = ids[start : min(start + chunk, len(ids) - 1)]
        logits = session.extend([row], [piece], all_logits=True)[0].float()
        targets = torch.tensor(ids[start + 1 : start + 1 + len(piece)])
        total -= torch.log_softmax(logits, -1).gather(1, targets[:, None]).sum().item()
    session.close(row)
    return math.exp(total / (len(ids) - 1))


def format_file(fmt: str, out_dir: Path) -> Path:
    """The GGUF file holding the embedded model's weights in ``fmt`` (the embedded file for q4_1)."""
    from radixlm.runtime.weights.model_registry import known_model_gguf

    source = known_model_gguf("smollm2-135m")
    if fmt == "q4_1":
        return source
    from transformers import AutoModelForCausalLM

    from tests.helpers.gguf_writer import save_tiny_gguf

    hf = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    types = {"down_proj": fmt.upper(), "proj": "Q8_0"} if fmt in _K_FORMATS else {"proj": fmt.upper()}
    return save_tiny_gguf(hf.config, hf.state_dict(), out_dir / f"smollm2-135m-{fmt}.gguf", block_types=types)


def measure(path: Path, ids: list[int], threads: int) -> dict:
    """Perplexity served as the file's blocks and as the blocks dequantized, and their ratio."""
    from tests.helpers.model_helpers import make_runner

    out: dict = {}
    for key, method in (("blocks", "auto"), ("dequantized", "none")):
        runner = make_runner(
            path,
            quantization=method,
            context_length=len(ids) + 8,
            max_total_tokens=len(ids) + 64,
            num_threads=threads,
        )
        out[f"served_as_{key}"] = runner.quantization
        out[f"ppl_{key}"] = perplexity(runner, ids)
        del runner
    out["ratio"] = out["ppl_blocks"] / out["ppl_dequantized"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--threads", type=int, default=2)
    add_json_argument(ap)
    args = ap.parse_args()
    ids = text_ids(args.tokens)
    rows: dict[str, dict] = {}
    print("| blocks | served as | perplexity, blocks | perplexity, dequantized fp32 | ratio |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats.split(","):
            r = rows[fmt] = measure(format_file(fmt, Path(tmp)), ids, args.threads)
            print(
                f"| {fmt} | {r['served_as_blocks']} | {r['ppl_blocks']:.3f} | {r['ppl_dequantized']:.3f} "
                f"| {r['ratio']:.4f} |",
                flush=True,
            )
    headline = [
        {
            "label": fmt,
            "metric": "perplexity served as blocks / dequantized fp32",
            "value": round(r["ratio"], 4),
        }
        for fmt, r in rows.items()
    ]
    write_results(args.json, "benchmarks.quality.block_perplexity", headline, {"tokens": args.tokens, **rows})


if __name__ == "__main__":
    main()
