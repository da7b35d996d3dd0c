"""The mixture-of-experts layer's experts (``runtime/layers/moe.py``), in one run, alternating:

- grouped (ours): the batch's (token, expert) pairs sorted by expert, each active expert run once
  on all its rows, against a per-token loop (each token through each of its k experts in turn) and
  against transformers 5's ``Qwen3MoeExperts.forward`` (one-hot masks, a loop over the hit experts)
  on the same weights;
- the same grouped layer with its experts as GGUF blocks (Q4_0, Q8_0: ``GGUFExperts``, our C++
  kernel) against the float experts.

Default shape: an OLMoE-1B-7B layer (hidden 2048, 64 experts of 1024, top 8; 1.6 GB of fp32
experts, far beyond the cache, so every step reads its experts from memory as a model does). Routes
come from a random router over random tokens, fixed per batch; the router itself is not timed.

    python -m benchmarks.kernels.moe_layer [--batches 1,16] [--threads 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch
import torch.nn.functional as F

from benchmarks.harness import add_json_argument, interleaved_ms, write_results
from radixlm.kernels.cpu.build import load_decode_kernels, load_gguf_kernels
from radixlm.runtime.layers.moe import Experts, GroupedExperts, SparseMoeBlock


def per_token(experts: Experts) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The experts run token by token: each token's k experts one after the other."""
    inter = experts.intermediate_size

    def run(x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for t, expert_ids in enumerate(ids.tolist()):
            row = x[t : t + 1]
            for slot, e in enumerate(expert_ids):
                h = F.linear(row, experts.gate_up_proj[e])
                h = F.silu(h[:, :inter]) * h[:, inter:]
                out[t : t + 1] += weights[t, slot] * F.linear(h, experts.down_proj[e])
        return out

    return run


def transformers_experts(experts: Experts, hidden: int, top_k: int) -> Callable[..., torch.Tensor]:
    """transformers' ``Qwen3MoeExperts`` sharing our float weights (no copy)."""
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

    config = Qwen3MoeConfig(
        hidden_size=hidden,
        moe_intermediate_size=experts.intermediate_size,
        num_experts=experts.num_experts,
        num_experts_per_tok=top_k,
    )
    with torch.device("meta"):
        theirs = Qwen3MoeExperts(config)
    theirs.gate_up_proj = experts.gate_up_proj
    theirs.down_proj = experts.down_proj
    return lambda x, weights, ids: theirs(x, ids, weights)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=1024)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    add_json_argument(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if load_decode_kernels() is None or load_gguf_kernels() is None:
        raise SystemExit("the CPU kernels cannot be built here")
    gen = torch.Generator().manual_seed(0)
    block = SparseMoeBlock(args.hidden, args.inter, args.experts, args.top_k, renormalize=True)
    experts = block.experts
    assert isinstance(experts, Experts)
    with torch.no_grad():
        for param in (block.gate.weight, experts.gate_up_proj, experts.down_proj):
            param.normal_(0, 0.02, generator=gen)
    variants: dict[str, Callable[..., torch.Tensor]] = {
        "grouped fp32": experts,
        "per-token fp32": per_token(experts),
        "transformers fp32": transformers_experts(experts, args.hidden, args.top_k),
    }
    quantized: dict[str, GroupedExperts] = {fmt: experts.quantized(fmt) for fmt in ("q4_0", "q8_0")}
    variants.update({f"grouped {fmt}": q for fmt, q in quantized.items()})
    print(
        f"experts: {args.experts} x (2x{args.inter}x{args.hidden} + {args.hidden}x{args.inter}), "
        f"top {args.top_k}, {args.threads} threads"
    )
    print("| batch | active experts | " + " | ".join(f"{n} ms" for n in variants) + " |")
    print("|---:|---:|" + "---:|" * len(variants))
    results, headline = [], []
    for bs in (int(b) for b in args.batches.split(",")):
        x = torch.randn(bs, args.hidden, generator=gen)
        with torch.inference_mode():
            weights, ids = block.gate(x)
            calls = [functools.partial(fn, x, weights, ids) for fn in variants.values()]
            ms = dict(zip(variants, interleaved_ms(calls, args.iters)))
        active = int(ids.unique().numel())
        results.append({"batch": bs, "active_experts": active, "ms": ms})
        print(f"| {bs} | {active} | " + " | ".join(f"{v:.2f}" for v in ms.values()) + " |", flush=True)
        grouped = ms["grouped fp32"]
        for label, value in (
            ("per-token / grouped", ms["per-token fp32"] / grouped),
            ("transformers / grouped", ms["transformers fp32"] / grouped),
            ("fp32 / q4_0", grouped / ms["grouped q4_0"]),
            ("fp32 / q8_0", grouped / ms["grouped q8_0"]),
        ):
            headline.append({"label": f"{label}, batch {bs}", "metric": "speedup", "value": round(value, 2)})
    for h in headline:
        print(f"{h['label']}: {h['value']:.2f}x")
    write_results(args.json, __spec__.name if __spec__ else "benchmarks.kernels.moe_layer", headline, results)


if __name__ == "__main__":
    main()
