"""Random-weight GGUF files of every architecture we serve, laid out as llama.cpp's converter writes
them (names, fused and stacked tensors, each family's metadata keys), one small-but-real shape for all:
hidden 1024, 8 layers, 16 heads of 64 (4 KV heads), feed-forward 2816 (MoE: 8 experts of 1024, top 2),
the embedded model's 49152-token vocabulary and tokenizer. Block tensors come from ``random_blocks``
(no float model in memory); norms are ones, biases and rope factors small fixed values.

    python -m benchmarks.models.arch_gguf --arch gemma2 --quant Q4_0 /tmp/gemma2.gguf
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

from benchmarks.models.random_gguf import copy_tokenizer, random_blocks

Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class Shape:
    hidden: int = 1024
    intermediate: int = 2816
    layers: int = 8
    heads: int = 16
    kv_heads: int = 4
    head_dim: int = 64
    vocab: int = 49152
    experts: int = 8
    experts_used: int = 2
    expert_intermediate: int = 1024


# benchmark name -> llama.cpp's general.architecture
ARCHITECTURES = {
    "llama": "llama",
    "llama3-rope": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "phi3": "phi3",
    "granite": "granite",
    "olmo2": "olmo2",
    "smollm3": "smollm3",
    "qwen3moe": "qwen3moe",
    "mixtral": "llama",
    "olmoe": "olmoe",
}
_MOE = ("qwen3moe", "mixtral", "olmoe")
_TIED = ("gemma2", "gemma3")  # llama.cpp's Gemma files have no output tensor
_WINDOW = 4096  # sliding windows (Mistral, Gemma): wider than a benchmark's context, so both sides agree

Tensor = tuple[str, tuple[int, ...], str]  # (name, numpy shape [..., rows, cols], kind: block/ones/small)


def _layer(name: str, s: Shape, i: int) -> Iterator[Tensor]:
    q, kv, h = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.hidden
    b = f"blk.{i}."
    if name != "olmo2":  # OLMo 2 has no pre-norms, only the norms after attention and feed-forward
        yield b + "attn_norm.weight", (h,), "ones"
        yield b + "ffn_norm.weight", (h,), "ones"
    if name == "phi3":
        yield b + "attn_qkv.weight", (q + 2 * kv, h), "block"
    else:
        yield from (
            (b + f"attn_{p}.weight", (rows, h), "block") for p, rows in (("q", q), ("k", kv), ("v", kv))
        )
    yield b + "attn_output.weight", (h, q), "block"
    if name == "qwen2":
        yield from ((b + f"attn_{p}.bias", (rows,), "small") for p, rows in (("q", q), ("k", kv), ("v", kv)))
    if name in ("qwen3", "gemma3", "qwen3moe"):  # per-head q/k norms
        yield b + "attn_q_norm.weight", (s.head_dim,), "ones"
        yield b + "attn_k_norm.weight", (s.head_dim,), "ones"
    if name in ("olmo2", "olmoe"):  # q/k norms over all heads at once
        yield b + "attn_q_norm.weight", (q,), "ones"
        yield b + "attn_k_norm.weight", (kv,), "ones"
    if name in ("gemma2", "gemma3", "olmo2"):
        yield b + "post_attention_norm.weight", (h,), "ones"
        yield b + "post_ffw_norm.weight", (h,), "ones"
    if name in _MOE:
        e, inter = s.experts, s.expert_intermediate
        yield b + "ffn_gate_inp.weight", (e, h), "small"
        yield b + "ffn_gate_exps.weight", (e, inter, h), "block"
        yield b + "ffn_up_exps.weight", (e, inter, h), "block"
        yield b + "ffn_down_exps.weight", (e, h, inter), "block"
    elif name == "phi3":
        yield b + "ffn_up.weight", (2 * s.intermediate, h), "block"
        yield b + "ffn_down.weight", (h, s.intermediate), "block"
    else:
        yield b + "ffn_gate.weight", (s.intermediate, h), "block"
        yield b + "ffn_up.weight", (s.intermediate, h), "block"
        yield b + "ffn_down.weight", (h, s.intermediate), "block"


def tensors(name: str, s: Shape) -> list[Tensor]:
    """Every tensor of architecture ``name`` in llama.cpp's names and order."""
    out: list[Tensor] = [("token_embd.weight", (s.vocab, s.hidden), "block")]
    if name == "llama3-rope":
        out.append(("rope_freqs.weight", (s.head_dim // 2,), "factors"))
    for i in range(s.layers):
        out += _layer(name, s, i)
    out.append(("output_norm.weight", (s.hidden,), "ones"))
    if name not in _TIED:
        out.append(("output.weight", (s.vocab, s.hidden), "block"))
    return out


def _metadata(w: gguf.GGUFWriter, name: str, s: Shape) -> None:
    w.add_block_count(s.layers)
    w.add_context_length(4096)
    w.add_embedding_length(s.hidden)
    w.add_feed_forward_length(s.expert_intermediate if name in ("mixtral", "olmoe") else s.intermediate)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_freq_base(1000000.0 if name.startswith(("qwen", "gemma3")) else 500000.0)
    w.add_layer_norm_rms_eps(1e-6)
    if name in ("mistral", "gemma2", "gemma3"):
        w.add_sliding_window(_WINDOW)
    if name == "gemma2":
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
    if name == "gemma3":
        w.add_rope_freq_base_swa(10000.0)
    if name == "phi3":
        w.add_rope_dimension_count(s.head_dim)
    if name == "granite":
        w.add_attention_scale(1.0 / s.head_dim)
        w.add_embedding_scale(12.0)
        w.add_residual_scale(0.22)
        w.add_logit_scale(8.0)
    if name in _MOE:
        w.add_expert_count(s.experts)
        w.add_expert_used_count(s.experts_used)
        if name == "qwen3moe":
            w.add_expert_feed_forward_length(s.expert_intermediate)


def _data(shape: tuple[int, ...], kind: str, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    if kind == "ones":
        return np.ones(shape, dtype=np.float32)
    if kind == "small":
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)
    if kind == "factors":  # Llama 3's: 1 for the fast frequencies rising to 8 for the slowest
        return np.linspace(1.0, 8.0, shape[0], dtype=np.float32)
    rows = int(np.prod(shape[:-1]))
    return random_blocks(rows, shape[-1], qtype, rng).reshape(*shape[:-1], -1)


def write_arch_gguf(
    path: str | Path, name: str, quant: str = "Q4_0", seed: int = 0, shape: Shape = Shape()
) -> Path:
    """Write a random ``name`` (a key of ``ARCHITECTURES``) file with its linear weights in ``quant``."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}")
    from radixlm.runtime.weights.model_registry import known_model_gguf

    if name == "olmoe":  # llama.cpp's OLMoE has no grouped-query attention (its k norm spans hidden)
        shape = replace(shape, kv_heads=shape.heads)
    qtype, rng = Q[quant], np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), ARCHITECTURES[name])
    # not the architecture's name: llama.cpp gives a model *named* phi3 sentencepiece token attributes
    # (it looks up "</s>", "<s>", "<unk>"), which this file's gpt2 vocabulary does not have
    w.add_name(f"random-weights-{quant}")
    _metadata(w, name, shape)
    copy_tokenizer(w, shape.vocab, known_model_gguf("smollm2-135m"))
    table = tensors(name, shape)
    for tname, tshape, kind in table:
        if kind == "block":
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            nbytes = int(np.prod(tshape)) // block * size
            w.add_tensor_info(
                tname, (*tshape[:-1], tshape[-1] // block * size), np.dtype(np.uint8), nbytes, qtype
            )
        else:
            w.add_tensor_info(tname, tshape, np.dtype(np.float32), int(np.prod(tshape)) * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, tshape, kind in table:
        w.write_tensor_data(_data(tshape, kind, qtype, rng))
    w.close()
    return Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("--arch", choices=list(ARCHITECTURES), default="llama")
    ap.add_argument("--quant", choices=["Q4_0", "Q8_0"], default="Q4_0")
    args = ap.parse_args()
    path = write_arch_gguf(args.path, args.arch, args.quant)
    print(f"{path}: {path.stat().st_size / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
