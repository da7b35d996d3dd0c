"""SmolLM3 (``SmolLM3ForCausalLM``): the Llama block, with rotary skipped in the layers
``no_rope_layers`` marks 0 (by default every ``no_rope_layer_interval``-th layer: NoPE layers)."""

from __future__ import annotations

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaModel


def rope_layers(cfg: ModelConfig) -> list[bool]:
    """Per layer, whether it applies rotary (transformers' ``no_rope_layers``: 1 = rope, 0 = NoPE)."""
    flags = cfg.hf.get("no_rope_layers")
    if flags is None:
        interval = int(cfg.hf.get("no_rope_layer_interval") or 4)
        flags = [(i + 1) % interval != 0 for i in range(cfg.num_layers)]
    if len(flags) != cfg.num_layers:
        raise ValueError(f"no_rope_layers has {len(flags)} entries for {cfg.num_layers} layers")
    return [bool(f) for f in flags]


class SmolLM3Attention(LlamaAttention):
    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__(cfg, layer_id)
        self.use_rope = rope_layers(cfg)[layer_id]


class SmolLM3DecoderLayer(LlamaDecoderLayer):
    attention_cls = SmolLM3Attention


class SmolLM3Model(LlamaModel):
    layer_cls = SmolLM3DecoderLayer


class SmolLM3ForCausalLM(LlamaForCausalLM):
    model_cls = SmolLM3Model

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        if cfg.hf.get("use_sliding_window") and cfg.hf.get("sliding_window"):
            raise ValueError("SmolLM3 with use_sliding_window is not supported (sliding-window attention)")
        super().__init__(cfg, max_positions)
