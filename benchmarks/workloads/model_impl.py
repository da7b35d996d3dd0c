"""Decode speed of the transformers fallback against our native model code, on the same weights.

A Llama of the embedded model's shape (SmolLM2-135M's config.json) with random weights is saved once;
two model runners load it, one with ``model_impl="native"`` and one with ``model_impl="transformers"``
(transformers' modeling code with our paged attention). For each batch size, a decode step over
``--context`` cached tokens per request is timed on both in alternating rounds (the ratio is what
holds on a machine whose speed drifts), and reported as tokens per second.

    python -m benchmarks.workloads.model_impl [--batch-sizes 1,8] [--context 64] [--json PATH]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch

from benchmarks.harness import add_json_argument, interleaved_ms, write_results
from benchmarks.kernels.decode_step import decode_batch, free_batch
from radixlm.runtime.executor.model_runner import ModelRunner
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.weights.model_registry import resolve_model

IMPLS = ("native", "transformers")


def save_random_llama(shape_of: str, path: Path) -> Path:
    """A random-weight checkpoint with ``shape_of``'s config (fp32), saved to ``path``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(resolve_model(shape_of))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(str(path))
    return path


def runner(model_dir: Path, impl: str, args: argparse.Namespace, max_bs: int) -> ModelRunner:
    return ModelRunner(
        ServerArgs(
            model=str(model_dir),
            model_impl=impl,  # type: ignore[arg-type]
            device="cpu",
            dtype="float32",
            num_threads=args.threads,
            max_running_requests=max_bs + 1,
            max_total_tokens=max_bs * (args.context + 2) + 16,
            context_length=args.context + 64,
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape-of", default="smollm2-135m", help="the model whose config.json is used")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=30)
    add_json_argument(ap)
    args = ap.parse_args()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_random_llama(args.shape_of, Path(tmp))
        runners = {impl: runner(model_dir, impl, args, max(sizes)) for impl in IMPLS}
        for bs in sizes:
            batches = {impl: decode_batch(r, bs, args.context) for impl, r in runners.items()}
            fns = [lambda r=runners[impl], fb=batches[impl]: r.forward(fb) for impl in IMPLS]
            native_ms, fallback_ms = interleaved_ms(fns, args.iters)
            row = {
                "batch": bs,
                "native_ms": native_ms,
                "transformers_ms": fallback_ms,
                "native_tok_s": 1000 * bs / native_ms,
                "transformers_tok_s": 1000 * bs / fallback_ms,
                "fallback_over_native_time": fallback_ms / native_ms,
            }
            rows.append(row)
            print(
                f"batch {bs:3d}: native {native_ms:7.2f} ms ({row['native_tok_s']:7.1f} tok/s), "
                f"transformers {fallback_ms:7.2f} ms ({row['transformers_tok_s']:7.1f} tok/s), "
                f"fallback/native time {row['fallback_over_native_time']:.2f}x",
                flush=True,
            )
            for impl, r in runners.items():
                free_batch(r, batches[impl])
    headline = [
        {"label": f"{impl} bs{r['batch']}", "metric": "decode tok/s", "value": r[f"{impl}_tok_s"]}
        for r in rows
        for impl in IMPLS
    ]
    write_results(args.json, __spec__.name, headline, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
