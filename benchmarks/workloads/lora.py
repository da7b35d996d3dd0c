"""Multi-LoRA serving cost on SmolLM2-135M (issue 33): 32 concurrent requests over 8 random adapters
against the same 32 on the base model alone, and an adapter loaded while streams decode.

The scheduler is driven in-process (no HTTP), so the figures are the runtime's own: throughput of
each run (generated tokens / wall time), its ratio (goal >= 0.7x at rank 16), the decode step's
mean time in each and so the low-rank products' share of a step, then the load time of an adapter
(read + validate; its copy into a device slot happens in the first step that uses it) and the
running streams' TPOT around it.

    python -m benchmarks.workloads.lora                   # ~1-2 min on 2 cores
    python -m benchmarks.workloads.lora --rank 8 --adapters 4 --requests 16
    python -m benchmarks.workloads.lora --pairs 3    # base and mixed runs alternated, medians
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from radixlm.runtime.lora.targets import projection_shapes
from radixlm.runtime.messages import LoRAAdapterReq, TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.weights.model_registry import resolve_model

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def write_random_adapter(
    path: Path, shapes: dict[str, tuple[int, int]], layers: int, rank: int, seed: int
) -> None:
    """A PEFT-layout adapter with random A and B on every projection of every layer."""
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(layers):
        for module, (fan_in, fan_out) in shapes.items():
            group = "self_attn" if module in TARGETS[:4] else "mlp"
            key = f"base_model.model.model.layers.{layer}.{group}.{module}"
            tensors[f"{key}.lora_A.weight"] = torch.randn(rank, fan_in, generator=gen) * 0.02
            tensors[f"{key}.lora_B.weight"] = torch.randn(fan_out, rank, generator=gen) * 0.02
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(TARGETS)}
    (path / "adapter_config.json").write_text(json.dumps(config))


def run(
    sched: Scheduler, loras: list[str | None], prompt_len: int, new: int, tag: str, salt: int = 0
) -> dict:
    """All requests at once; returns throughput and the mean decode-step time. A new ``salt`` gives
    new prompts (no radix-cache hits on an earlier run's)."""
    for i, lora in enumerate(loras):
        ids = np.asarray([(7 * i + j + 101 * salt) % 400 + 10 for j in range(prompt_len)], dtype=np.int32)
        params = SamplingParams(temperature=0, max_new_tokens=new, ignore_eos=True)
        sched.handle(TokenizedGenerateReq(f"{tag}-{i}", ids, params, lora_name=lora))
    steps: list[tuple[bool, float]] = []
    tokens = 0
    start = time.perf_counter()
    while sched.has_work():
        t0 = time.perf_counter()
        outs = sched.step()
        decode = len(sched.running) == len(loras) and not sched.waiting
        steps.append((decode, time.perf_counter() - t0))
        tokens += sum(len(o.new_token_ids) for o in outs)
    wall = time.perf_counter() - start
    decode_steps = [t for d, t in steps if d][1:]  # the first is the last prefill (and the slots' fill)
    first = next(i for i, (d, _) in enumerate(steps) if d)
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tok_s": tokens / wall,
        "decode_step_ms": 1e3 * statistics.mean(decode_steps),
        "prefill_s": sum(t for _, t in steps[: first + 1]),  # up to all requests running
    }


def load_while_streaming(sched: Scheduler, path: Path, streams: int, new: int) -> dict:
    """``streams`` base streams decode; an adapter loads mid-way. TPOT without and across the load."""
    for i in range(streams):
        ids = np.asarray([(11 * i + j) % 400 + 10 for j in range(32)], dtype=np.int32)
        params = SamplingParams(temperature=0, max_new_tokens=new, ignore_eos=True)
        sched.handle(TokenizedGenerateReq(f"stream-{i}", ids, params))
    gaps: list[tuple[bool, float]] = []  # (an adapter loaded before this step, the step's gap)
    load_s = 0.0
    last = time.perf_counter()
    while sched.has_work():
        loading = len(gaps) == new // 2
        if loading:
            t0 = time.perf_counter()
            reply = sched.handle(LoRAAdapterReq("late", str(path)))
            load_s = time.perf_counter() - t0
            assert reply.success, reply.message
        sched.step()
        now = time.perf_counter()
        gaps.append((loading, now - last))
        last = now
    plain = [g for loading, g in gaps[2:] if not loading]
    load_gap = next(g for loading, g in gaps if loading)
    return {
        "load_ms": 1e3 * load_s,
        "tpot_ms": 1e3 * statistics.median(plain),
        "tpot_at_load_ms": 1e3 * load_gap,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--pairs", type=int, default=1, help="alternate this many base and mixed runs; report the medians"
    )
    args = parser.parse_args()
    model = resolve_model(args.model)
    server_args = ServerArgs(
        model=model,
        device="cpu",
        num_threads=args.threads,
        enable_lora=True,
        max_loras_per_batch=args.adapters,
        max_lora_rank=args.rank,
        max_running_requests=args.requests,
    )
    sched = Scheduler(server_args)
    lora = sched.runner.lora
    assert lora is not None
    shapes = {m: (s.in_features, s.out_features) for m, s in projection_shapes(lora.cfg).items()}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.adapters + 1):
            write_random_adapter(Path(tmp, f"a{k}"), shapes, lora.cfg.num_layers, args.rank, seed=k)
        for k in range(args.adapters):
            sched.handle(LoRAAdapterReq(f"a{k}", str(Path(tmp, f"a{k}"))))
        run(sched, [None] * 4, 16, 4, "warmup")
        pairs = []
        for k in range(args.pairs):  # alternated, so a swing in the machine's load hits both sides
            base = run(sched, [None] * args.requests, args.prompt_tokens, args.new_tokens, f"base{k}", k)
            print(json.dumps({"base": base}), flush=True)
            mixed = run(
                sched,
                [f"a{i % args.adapters}" for i in range(args.requests)],
                args.prompt_tokens,
                args.new_tokens,
                f"lora{k}",
                k,
            )
            ratios = {
                "throughput_ratio": mixed["tok_s"] / base["tok_s"],
                "decode_step_ratio": base["decode_step_ms"] / mixed["decode_step_ms"],
            }
            print(json.dumps({"lora": mixed, **ratios}), flush=True)
            pairs.append({"base": base, "lora": mixed, **ratios})
        late = load_while_streaming(sched, Path(tmp, f"a{args.adapters}"), 8, 24)
    step_ratio = statistics.median(p["decode_step_ratio"] for p in pairs)
    print(
        json.dumps(
            {
                "model": model,
                "rank": args.rank,
                "adapters": args.adapters,
                "requests": args.requests,
                "pairs": pairs,
                "throughput_ratio": statistics.median(p["throughput_ratio"] for p in pairs),
                "decode_step_ratio": step_ratio,
                "low_rank_share_of_decode_step": 1 - step_ratio,
                "load_while_streaming": late,
            },
            indent=1,
        )
    )
    sched.shutdown()


if __name__ == "__main__":
    main()
