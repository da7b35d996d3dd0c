"""Gemma 3 with images (``Gemma3ForConditionalGeneration``): a plain SigLIP tower, Gemma 3's projector
and the Gemma 3 language model (``models/gemma.py``).

What differs from Idefics3 (``idefics3.py``):

- the tower takes images of exactly ``image_size`` (no NaViT buckets) and the processor resizes to it;
- the projector average-pools the patch grid down to ``mm_tokens_per_image`` tokens, norms them with
  Gemma's RMSNorm (``1 + w``) and multiplies by ``mm_input_projection_weight`` ``[vision, text]``;
- the prompt carries ``<start_of_image>`` per image, which the processor expands into the image's
  soft tokens between ``<start_of_image>`` and ``<end_of_image>``;
- the image rows go in after the embedding scale (only token embeddings are scaled, as transformers);
- the soft tokens of one image attend to each other both ways in prefill (``bidirectional_images``:
  the scheduler keeps each image inside one extend and the attention unmasks within it,
  ``runtime/multimodal/image_spans.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.module import Module
from radixlm.runtime.layers.rmsnorm import RMSNorm
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.gemma import GemmaForCausalLM, GemmaModel
from radixlm.runtime.models.vision.siglip import SiglipVisionTower

# checkpoint prefixes (the original release, transformers 5's in-memory names) -> ours
PREFIXES = (
    ("model.language_model.", "model."),
    ("language_model.model.", "model."),
    ("language_model.lm_head.", "lm_head."),
    ("model.vision_tower.", "vision_tower."),
    ("model.multi_modal_projector.", "multi_modal_projector."),
)


class MultimodalGemmaModel(GemmaModel):
    """The Gemma stack whose input rows at ``fb.mm_positions`` are ``fb.mm_embeds``."""

    def input_rows(self, fb: ForwardBatch) -> torch.Tensor:
        vocab = self.embed_tokens.weight.shape[0]
        ids = fb.input_ids
        h = self.embed_tokens(torch.where(ids < vocab, ids, torch.zeros_like(ids)))  # pads: any row
        h = h * torch.tensor(self.embed_scale, dtype=h.dtype)
        if fb.mm_embeds is not None and fb.mm_positions is not None:
            h = h.index_copy(0, fb.mm_positions, fb.mm_embeds.to(h.dtype))
        return h


class Gemma3Projector(Module):
    """``[n, side*side, vision]`` patches -> ``[n, tokens_per_image, text]`` image rows."""

    def __init__(self, vision: dict[str, Any], text_hidden: int, tokens_per_image: int) -> None:
        super().__init__()
        hidden = int(vision["hidden_size"])
        self.side = int(vision["image_size"]) // int(vision["patch_size"])
        per_side = int(round(tokens_per_image**0.5))
        if per_side * per_side != tokens_per_image or self.side % per_side:
            raise ValueError(
                f"mm_tokens_per_image {tokens_per_image} must be a square whose side divides the "
                f"{self.side} x {self.side} patch grid"
            )
        self.kernel = self.side // per_side
        self.mm_soft_emb_norm = RMSNorm(hidden, float(vision.get("layer_norm_eps", 1e-6)))
        self.mm_input_projection_weight = nn.Parameter(torch.empty(hidden, text_hidden))

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        n, _, hidden = patches.shape
        grid = patches.transpose(1, 2).reshape(n, hidden, self.side, self.side)
        pooled = F.avg_pool2d(grid, self.kernel).flatten(2).transpose(1, 2)
        normed = self.mm_soft_emb_norm(pooled.reshape(-1, hidden)).view(pooled.shape)
        return torch.matmul(normed, self.mm_input_projection_weight).to(patches.dtype)


class Gemma3ForConditionalGeneration(GemmaForCausalLM):
    """``encode_images`` -> the rows replacing each image's soft tokens; ``forward(fb)`` as Gemma 3."""

    model_cls = MultimodalGemmaModel  # type: ignore[assignment]  # same interface as LlamaModel
    supports_tensor_parallel = False
    is_multimodal = True
    bidirectional_images = True  # an image's tokens attend to each other both ways in prefill
    plain_norms = "vision_tower."  # SigLIP's LayerNorms load as stored

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        vision, text = cfg.hf.get("vision_config") or {}, cfg.hf.get("text_config") or {}
        if not vision or not text:
            raise ValueError("Gemma3ForConditionalGeneration config.json needs text_config and vision_config")
        if vision.get("vision_use_head"):
            raise ValueError("a Gemma 3 vision tower with a pooling head (vision_use_head) is not supported")
        # the language model reads its own fields (windows, rope, scalars) from the text config
        tied = text.get("tie_word_embeddings", cfg.hf.get("tie_word_embeddings", True))
        lm = replace(
            cfg,
            architecture="Gemma3ForCausalLM",
            tie_word_embeddings=bool(tied),
            hf={**text, "architectures": ["Gemma3ForCausalLM"]},
        )
        super().__init__(lm, max_positions)
        # NOTE: the placeholder a prompt carries per image is <start_of_image>, not the soft token
        self.image_token_id = int(cfg.hf.get("boi_token_index", cfg.hf.get("boi_token_id", 255_999)))
        self.vision_tower = SiglipVisionTower(vision, buckets=False)
        self.multi_modal_projector = Gemma3Projector(
            vision, lm.hidden_size, int(cfg.hf.get("mm_tokens_per_image", 256))
        )

    @torch.inference_mode()
    def encode_images(self, pixels: torch.Tensor, pixel_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``pixels`` ``[n, C, H, W]`` (n crops, any mix of images) -> ``[n, tokens_per_image, hidden]``."""
        dtype = self.multi_modal_projector.mm_input_projection_weight.dtype
        return self.multi_modal_projector(self.vision_tower(pixels.to(dtype), pixel_mask))

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        super().load_weights((_our_name(name), tensor) for name, tensor in weights)


def _our_name(name: str) -> str:
    """A checkpoint tensor's name in this model (the tower's ``vision_model.encoder.`` dropped)."""
    for old, new in PREFIXES:
        if name.startswith(old):
            name = new + name[len(old) :]
            break
    if name.startswith("vision_tower."):
        rest = name[len("vision_tower.") :].removeprefix("vision_model.").removeprefix("encoder.")
        name = "vision_tower." + rest
    return name
