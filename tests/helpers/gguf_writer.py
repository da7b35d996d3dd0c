"""A GGUF writer for tiny transformers models, laying tensors and metadata out as llama.cpp's converter does.

Covers llama (+ Mixtral experts), qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, granite, olmo2,
smollm3 and olmoe: GGUF names, Q/K rows permuted (llama, granite, smollm3), Gemma's norms stored as
``1 + w``, Phi-3's fused ``attn_qkv``/``ffn_up`` and LongRoPE factor tensors, experts stacked
``[experts, rows, in]``, and a tiny byte-level gpt2 tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

_GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    # Phi-3's fused projections
    "self_attn.qkv_proj": "attn_qkv",
    "mlp.gate_up_proj": "ffn_up",
    # mixture of experts: the router and the stacked experts (transformers 5's fused gate_up is split)
    "mlp.gate": "ffn_gate_inp",
    "mlp.experts.down_proj": "ffn_down_exps",
}
_GEMMA_LAYER_NAMES = {
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}
_OLMO2_LAYER_NAMES = {
    "post_attention_layernorm": "post_attention_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}
_GGUF_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_PERMUTED = ("llama", "granite", "smollm3")  # llama.cpp's converter permutes these (its LlamaModel)
_GGUF_ARCH = {"gemma3_text": "gemma3", "qwen3_moe": "qwen3moe", "mixtral": "llama", "mistral": "llama"}


def llamacpp_permute(w, num_heads: int):
    """llama.cpp's converter layout for Q/K rows (pairs interleaved per head)."""
    return w.reshape(num_heads, 2, w.shape[0] // num_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _metadata(writer, config, arch: str) -> None:
    import gguf

    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    rope = config.rope_parameters
    rope = rope.get("full_attention", rope)
    writer.add_rope_freq_base(float(rope["rope_theta"]))
    if rope.get("rope_type") == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if arch != "phi3" and getattr(config, "head_dim", None):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if getattr(config, "sliding_window", None) and config.model_type in (
        "gemma2",
        "gemma3_text",
        "phi3",
        "mistral",
    ):
        writer.add_sliding_window(config.sliding_window)
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(config.attn_logit_softcapping)
        writer.add_final_logit_softcapping(config.final_logit_softcapping)
    if arch == "phi3":
        writer.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 1.0)))
        if rope.get("rope_type") == "longrope":
            writer.add_rope_scaling_orig_ctx_len(config.original_max_position_embeddings)
    if arch == "granite":
        writer.add_attention_scale(config.attention_multiplier)
        writer.add_embedding_scale(config.embedding_multiplier)
        writer.add_residual_scale(config.residual_multiplier)
        writer.add_logit_scale(config.logits_scaling)
    experts = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(config.num_experts_per_tok)
        if arch == "qwen3moe":
            writer.add_expert_feed_forward_length(config.moe_intermediate_size)


def _tokenizer(writer, vocab_size: int, hf_tokenizer=None) -> None:
    """The tiny byte-level vocabulary, or ``hf_tokenizer``'s (a byte-level one without merges, such as
    ``save_tiny_tokenizer``'s with added tokens) in its own ids, special tokens marked control."""
    from tokenizers import pre_tokenizers

    from tests.helpers.model_helpers import CHATML_TEMPLATE, SPECIAL_TOKENS

    if hf_tokenizer is None:
        # NOTE: two merges, not one: transformers 5.17's GGUF reader unwraps a one-element array
        # into its element, and then reads the merge string as a list of one-character merges.
        tokens = SPECIAL_TOKENS + pre_tokenizers.ByteLevel.alphabet() + ["Ġt", "Ġa"]
        special, merges = set(SPECIAL_TOKENS), ["Ġ t", "Ġ a"]
    else:
        vocab = hf_tokenizer.get_vocab()
        tokens = sorted(vocab, key=vocab.__getitem__)
        assert [vocab[t] for t in tokens] == list(range(len(tokens))), "token ids must be 0..n-1"
        special = {a.content for a in hf_tokenizer.added_tokens_decoder.values() if a.special}
        merges = []
    tokens += [f"<extra_{i}>" for i in range(vocab_size - len(tokens))]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])
    if merges:
        writer.add_token_merges(merges)
    else:  # transformers derives merges from scores: none here, as only single bytes are tokens
        writer.add_token_scores([0.0] * len(tokens))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(CHATML_TEMPLATE)


def _gguf_tensors(config, arch: str, state_dict: dict[str, torch.Tensor]):
    """``(gguf name, hf name, float32 array)`` in llama.cpp's layout."""
    heads = {"self_attn.q_proj": config.num_attention_heads, "self_attn.k_proj": config.num_key_value_heads}
    own = {"gemma2": _GEMMA_LAYER_NAMES, "gemma3": _GEMMA_LAYER_NAMES, "olmo2": _OLMO2_LAYER_NAMES}
    layer_names = _GGUF_LAYER_NAMES | own.get(arch, {})
    for name, tensor in state_dict.items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        array = tensor.float().numpy()
        if arch.startswith("gemma") and name.endswith("norm.weight"):
            array = array + 1.0  # llama.cpp stores Gemma's 1 + w
        if name in _GGUF_GLOBAL_NAMES:
            yield _GGUF_GLOBAL_NAMES[name], name, array
            continue
        parts = name.split(".")
        module, leaf = ".".join(parts[3:-1]), parts[-1]
        blk = f"blk.{parts[2]}"
        if name.endswith("mlp.experts.gate_up_proj"):  # [experts, 2 * inter, hidden]: gate rows first
            gate, up = np.split(array, 2, axis=1)
            yield f"{blk}.ffn_gate_exps.weight", name, gate
            yield f"{blk}.ffn_up_exps.weight", name, up
            continue
        if name.endswith("mlp.experts.down_proj"):
            module, leaf = "mlp.experts.down_proj", "weight"
        if arch in _PERMUTED and module in heads:
            array = llamacpp_permute(array, heads[module])
        yield f"{blk}.{layer_names[module]}.{leaf}", name, array


def save_tiny_gguf(
    config,
    state_dict: dict[str, torch.Tensor],
    path: str | Path,
    block_types: dict[str, str] | None = None,
    tokenizer=None,
) -> Path:
    """Write a transformers model's ``state_dict`` as a fp32 GGUF file the way llama.cpp's converter
    lays it out.

    ``block_types`` maps a substring of HF tensor names to a GGML type name (e.g.
    ``{"proj": "Q4_0", "embed_tokens": "Q8_0"}``): matching 2-D (or stacked 3-D) weights are stored
    in that type. ``tokenizer``: a transformers tokenizer whose vocabulary the file carries (default
    the tiny byte-level one)."""
    import gguf

    arch = _GGUF_ARCH.get(config.model_type, config.model_type)
    writer = gguf.GGUFWriter(str(path), arch)
    _metadata(writer, config, arch)
    _tokenizer(writer, config.vocab_size, tokenizer)
    rope = config.rope_parameters
    if arch == "phi3" and rope.get("rope_type") == "longrope":
        writer.add_tensor("rope_factors_long.weight", np.asarray(rope["long_factor"], dtype=np.float32))
        writer.add_tensor("rope_factors_short.weight", np.asarray(rope["short_factor"], dtype=np.float32))
    for gguf_name, name, array in _gguf_tensors(config, arch, state_dict):
        block_type = next((t for key, t in (block_types or {}).items() if key in name), None)
        if block_type is not None and array.ndim >= 2:
            qtype = gguf.GGMLQuantizationType[block_type]
            if block_type in ("Q4_K", "Q6_K"):  # gguf-py only dequantizes these; ours writes them
                from radixlm.kernels.cpu import gguf_blocks

                rows = torch.from_numpy(np.ascontiguousarray(array.reshape(-1, array.shape[-1])))
                data = gguf_blocks.quantize(rows, block_type.lower()).numpy()
                data = data.reshape(*array.shape[:-1], data.shape[-1])
            else:
                data = gguf.quants.quantize(np.ascontiguousarray(array), qtype)
            writer.add_tensor(gguf_name, data, raw_dtype=qtype)
            continue
        writer.add_tensor(gguf_name, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)
