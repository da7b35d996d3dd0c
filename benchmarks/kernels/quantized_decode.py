"""Decode speed and memory of a ~1B random-weight Llama (Llama-3.2-1B shapes) per quantization.

Each variant (fp32, int8, q4_0, q4_1) runs in its own subprocess, so peak RSS is its own: the model
is built with random weights (std 0.02), quantized by the runtime's own ``--quantization`` path, and
decoded through ``ModelRunner`` on paged KV (a 32-token prompt per request, then decode steps at
batch 1, 8 and 32). Also the single-layer ratios of each kernel against fp32 ``F.linear``.

    python -m benchmarks.kernels.quantized_decode [--layers 16] [--steps 8] [--threads 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.harness import add_json_argument, child_env, module_command, write_results
from radixlm._env import weight_process_env

LLAMA_1B = dict(
    architectures=["LlamaForCausalLM"],
    model_type="llama",
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    vocab_size=128256,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    hidden_act="silu",
    tie_word_embeddings=True,
    torch_dtype="float32",
)
VARIANTS = ["none", "int8", "q4_0", "q4_1"]
BATCHES = [1, 8, 32]


def _rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size in MB."""
    current = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()
    return current / 2**20, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _random_loaded(config: dict, context: int, quantization: str):
    from radixlm.runtime.models.architectures import get_model_class
    from radixlm.runtime.models.config import ModelConfig
    from radixlm.runtime.quantization.apply import quantize_model
    from radixlm.runtime.quantization.methods import resolve_method
    from radixlm.runtime.weights.loader import LoadedModel

    cfg = ModelConfig.from_hf(config)
    net = get_model_class(cfg.architecture)(cfg, max_positions=context)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    net.eval().requires_grad_(False)
    method = resolve_method(quantization, torch.device("cpu"), None)
    quantize_model(net, method, torch.device("cpu"))
    return LoadedModel(
        model=net,
        tokenizer=None,
        hf_config=config,
        model_path="random-llama-1b",
        tokenizer_path=None,
        chat_template=None,
        eos_token_ids=[],
        vocab_size=cfg.vocab_size,
        context_length=context,
        num_layers=cfg.num_layers,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        architecture=cfg.architecture,
        quantization=method,
    )


def _weight_bytes(model: torch.nn.Module) -> int:
    """Parameters + buffers (GGUF blocks, int8 embedding rows) + FBGEMM's packed int8 weights."""
    tensors = [*model.parameters(), *(b for name, b in model.named_buffers() if "rotary" not in name)]
    packed = sum(m.weight_bytes() for m in model.modules() if type(m).__name__ == "Int8Linear")
    return sum(t.numel() * t.element_size() for t in tensors) + packed


def run_variant(method: str, layers: int, steps: int, threads: int) -> dict:
    from radixlm.runtime.executor import model_runner
    from radixlm.runtime.server_args import ServerArgs
    from tests.helpers.model_helpers import PagedSession

    config = {**LLAMA_1B, "num_hidden_layers": layers}
    model_runner.load_model = lambda *a, **k: _random_loaded(config, 256, k["quantization"])
    args = ServerArgs(
        model="random-llama-1b",
        quantization=method,
        device="cpu",
        dtype="float32",
        attention_backend="torch",
        num_threads=threads,
        max_total_tokens=max(BATCHES) * 80,
        max_running_requests=max(BATCHES),
        context_length=256,
    )
    runner = model_runner.ModelRunner(args)
    gc.collect()
    rss_loaded, _ = _rss_mb()
    result = {
        "method": runner.quantization,
        "weight_mb": round(_weight_bytes(runner.model) / 2**20),
        "rss_after_load_mb": round(rss_loaded),
    }
    for bs in BATCHES:
        session = PagedSession(runner)
        rows = [session.open() for _ in range(bs)]
        session.extend(rows, [[(7 * i + j) % 1000 + 10 for j in range(32)] for i in range(bs)])
        session.decode(rows, [11] * bs)  # warm-up
        start = time.perf_counter()
        for step in range(steps):
            session.decode(rows, [12 + step] * bs)
        result[f"decode_tok_s_bs{bs}"] = round(bs * steps / (time.perf_counter() - start), 2)
        for row in rows:
            session.close(row)
    result["peak_rss_mb"] = round(_rss_mb()[1])
    return result


def layer_ratios(threads: int, repeats: int = 10) -> list[dict]:
    """Time of one linear layer per method, as a ratio of fp32 F.linear's (higher = faster)."""
    from radixlm.kernels.cpu import gguf_blocks
    from radixlm.runtime.layers.quantized_linear import GGUFLinear, Int8Linear

    torch.set_num_threads(threads)
    rows = []
    for n, k in [(8192, 2048), (2048, 8192), (128256, 2048)]:
        w = torch.randn(n, k) * 0.02
        layers = {"int8": Int8Linear(w)}
        for fmt in ("q4_0", "q4_1"):
            layers[fmt] = GGUFLinear(gguf_blocks.quantize(w, fmt), fmt, k)
        for bs in BATCHES:
            x = torch.randn(bs, k)

            def timed(fn, x=x) -> float:
                fn(x)
                start = time.perf_counter()
                for _ in range(repeats):
                    fn(x)
                return (time.perf_counter() - start) / repeats

            base = timed(lambda inp, w=w: F.linear(inp, w))
            row = {"shape": f"{n}x{k}", "batch": bs, "fp32_ms": round(base * 1e3, 2)}
            for name, layer in layers.items():
                row[f"{name}_speedup"] = round(base / timed(layer), 2)
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    add_json_argument(ap)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.layers, args.steps, args.threads)))
        return
    results = []
    for method in VARIANTS:
        cmd = module_command(
            __spec__.name,
            "--variant",
            method,
            "--layers",
            str(args.layers),
            "--steps",
            str(args.steps),
            "--threads",
            str(args.threads),
        )
        env = weight_process_env(method, child_env())  # the variant's malloc as the server would start it
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(f"{method} failed (exit {out.returncode}):\n{out.stderr[-2000:]}", file=sys.stderr)
            continue
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    base = next((r for r in results if r["method"] == "none"), None)
    if base:
        print(
            "\n| method | "
            + " | ".join(f"bs{b} tok/s (x fp32)" for b in BATCHES)
            + " | weights MB | RSS after load MB | peak RSS MB |"
        )
        print("|---|" + "---:|" * (len(BATCHES) + 3))
        for r in results:
            keys = [f"decode_tok_s_bs{b}" for b in BATCHES]
            cells = [f"{r[key]} ({r[key] / base[key]:.2f}x)" for key in keys]
            tail = f" | {r['weight_mb']} | {r['rss_after_load_mb']} | {r['peak_rss_mb']} |"
            print(f"| {r['method']} | " + " | ".join(cells) + tail)
    print("\nsingle layer, speedup over fp32 F.linear:")
    layers = layer_ratios(args.threads)
    for row in layers:
        print(json.dumps(row), flush=True)
    headline = [
        {"label": f"{r['method']}, batch {b}", "metric": "decode tok/s", "value": r[f"decode_tok_s_bs{b}"]}
        for r in results
        for b in BATCHES
    ]
    write_results(args.json, __spec__.name, headline, {"variants": results, "single_layer": layers})


if __name__ == "__main__":
    main()
