"""Idefics3 / SmolVLM (``Idefics3ForConditionalGeneration``): a SigLIP tower, a pixel-shuffle connector
and the Llama language model.

The runtime encodes images before prefill (``encode_images``, once per image, cached by content hash)
and hands the prefill step the rows to place at the image tokens (``ForwardBatch.mm_positions`` /
``mm_embeds``); the language model itself is the Llama one. Image token ids in a prompt are
hash-derived pad values at or above the vocabulary size (``runtime/multimodal/``), so they are mapped
to id 0 before the embedding lookup and then overwritten.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.linear import Linear
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaForCausalLM, LlamaModel
from radixlm.runtime.models.vision.siglip import SiglipVisionTower


class MultimodalLlamaModel(LlamaModel):
    """The Llama stack whose input rows at ``fb.mm_positions`` are ``fb.mm_embeds``."""

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        vocab = self.embed_tokens.weight.shape[0]
        return self.embed_tokens(torch.where(input_ids < vocab, input_ids, torch.zeros_like(input_ids)))

    def forward(self, fb: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.embed(fb.input_ids)
        if fb.mm_embeds is not None and fb.mm_positions is not None:
            h = h.index_copy(0, fb.mm_positions, fb.mm_embeds.to(h.dtype))
        residual = None
        for layer in self.layers:
            h, residual = layer(h, residual, self.rotary_emb, fb)
        assert residual is not None, "a model has at least one layer"
        return h, residual


def pixel_shuffle(x: torch.Tensor, scale: int) -> torch.Tensor:
    """``[n, side*side, d]`` -> ``[n, side*side/scale^2, d*scale^2]``: each ``scale`` x ``scale`` block
    of patches becomes one token (Idefics3's order: rows of the block outer, columns inner)."""
    n, seq, d = x.shape
    side = int(seq**0.5)
    if side * side != seq or side % scale:
        raise ValueError(f"pixel shuffle needs a square patch grid divisible by {scale}, got {seq} patches")
    x = x.view(n, side, side // scale, d * scale).permute(0, 2, 1, 3)
    x = x.reshape(n, side // scale, side // scale, d * scale * scale).permute(0, 2, 1, 3)
    return x.reshape(n, seq // (scale * scale), d * scale * scale)


class Idefics3ForConditionalGeneration(LlamaForCausalLM):
    """``encode_images`` -> the rows replacing each image's tokens; ``forward(fb)`` as the Llama LM."""

    model_cls = MultimodalLlamaModel
    supports_tensor_parallel = False
    is_multimodal = True

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        super().__init__(cfg, max_positions)
        vision = cfg.hf.get("vision_config") or {}
        if not vision:
            raise ValueError("Idefics3 config.json has no vision_config")
        self.scale_factor = int(cfg.hf.get("scale_factor") or 2)
        self.image_token_id = int(cfg.hf["image_token_id"])
        self.vision_model = SiglipVisionTower(vision)
        self.proj = Linear(int(vision["hidden_size"]) * self.scale_factor**2, cfg.hidden_size)

    @torch.inference_mode()
    def encode_images(self, pixels: torch.Tensor, pixel_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``pixels`` ``[n, C, H, W]`` (n crops, any mix of images) -> ``[n, tokens_per_crop, hidden]``."""
        dtype = self.proj.weight.dtype
        features = self.vision_model(pixels.to(dtype), pixel_mask)
        return self.proj(pixel_shuffle(features, self.scale_factor))

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        renames = (
            ("model.text_model.", "model."),
            ("model.vision_model.encoder.", "vision_model."),
            ("model.vision_model.", "vision_model."),
            ("model.connector.modality_projection.proj.", "proj."),
        )

        def renamed() -> Iterable[tuple[str, torch.Tensor]]:
            for name, tensor in weights:
                for old, new in renames:
                    if name.startswith(old):
                        name = new + name[len(old) :]
                        break
                yield name, tensor

        super().load_weights(renamed())
