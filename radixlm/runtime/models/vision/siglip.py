"""A SigLIP-style vision tower, with NaViT position buckets (Idefics2/3's, SmolVLM's) or without
(plain SigLIP at a fixed image size: Gemma 3's).

Patches come from a strided convolution; with buckets, each image's real (unpadded) patch grid is
mapped onto the learned ``num_patches_per_side``-squared position table by fractional buckets, so an
image smaller than ``image_size`` still sees positions spread over the whole table; without, patch
``i`` of an ``image_size`` image takes position ``i``. Attention is bidirectional within an image,
with padded patches masked out as keys.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.layers.linear import Linear, MergedLinear
from radixlm.runtime.layers.module import Module


class VisionAttention(Module):
    def __init__(self, hidden: int, num_heads: int) -> None:
        super().__init__()
        if hidden % num_heads:
            raise ValueError(
                f"vision hidden_size {hidden} is not a multiple of num_attention_heads {num_heads}"
            )
        self.num_heads, self.head_dim = num_heads, hidden // num_heads
        self.qkv_proj = MergedLinear(hidden, [hidden] * 3, bias=True)
        self.out_proj = Linear(hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (
            part.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
            for part in self.qkv_proj(x).split(d, dim=-1)
        )
        mask = None if key_mask is None else key_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, d))


class VisionMLP(Module):
    def __init__(self, hidden: int, inter: int, act: str) -> None:
        super().__init__()
        if act not in ("gelu_pytorch_tanh", "gelu"):
            raise ValueError(f"unsupported vision hidden_act {act!r} (gelu or gelu_pytorch_tanh)")
        self.approximate = "tanh" if act == "gelu_pytorch_tanh" else "none"
        self.fc1 = Linear(hidden, inter, bias=True)
        self.fc2 = Linear(inter, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class VisionLayer(Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        hidden, eps = int(cfg["hidden_size"]), float(cfg.get("layer_norm_eps", 1e-6))
        self.layer_norm1 = nn.LayerNorm(hidden, eps=eps)
        self.self_attn = VisionAttention(hidden, int(cfg["num_attention_heads"]))
        self.layer_norm2 = nn.LayerNorm(hidden, eps=eps)
        self.mlp = VisionMLP(
            hidden, int(cfg["intermediate_size"]), str(cfg.get("hidden_act", "gelu_pytorch_tanh"))
        )

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x), key_mask)
        return x + self.mlp(self.layer_norm2(x))


class VisionEmbeddings(Module):
    def __init__(self, cfg: dict[str, Any], buckets: bool = True) -> None:
        super().__init__()
        self.buckets = buckets
        hidden, self.patch_size = int(cfg["hidden_size"]), int(cfg["patch_size"])
        self.side = int(cfg["image_size"]) // self.patch_size
        channels = int(cfg.get("num_channels", 3))
        self.patch_embedding = nn.Conv2d(channels, hidden, self.patch_size, stride=self.patch_size)
        self.position_embedding = nn.Embedding(self.side**2, hidden)

    def forward(self, pixels: torch.Tensor, patch_mask: torch.Tensor) -> torch.Tensor:
        """``pixels`` ``[n, C, H, W]``, ``patch_mask`` ``[n, H/p, W/p]`` (True: a real patch)."""
        x = self.patch_embedding(pixels).flatten(2).transpose(1, 2)
        n, rows, cols = patch_mask.shape
        if not self.buckets:
            if (rows, cols) != (self.side, self.side):
                raise ValueError(
                    f"this vision tower takes {self.side * self.patch_size} px square images, "
                    f"got {rows * self.patch_size}x{cols * self.patch_size}"
                )
            return x + self.position_embedding.weight
        edges = torch.arange(1 / self.side, 1.0, 1 / self.side, device=pixels.device)

        def buckets(count: int, real: torch.Tensor) -> torch.Tensor:
            frac = torch.arange(count, device=pixels.device, dtype=torch.float32)[None, :] / real[:, None]
            return torch.bucketize(frac.clamp(max=1.0 - 1e-6), edges, right=True)

        h = buckets(rows, patch_mask[:, :, 0].sum(1))
        w = buckets(cols, patch_mask[:, 0, :].sum(1))
        ids = (h[:, :, None] * self.side + w[:, None, :]).reshape(n, -1)
        ids = torch.where(patch_mask.reshape(n, -1), ids, torch.zeros_like(ids))
        return x + self.position_embedding(ids)


class SiglipVisionTower(Module):
    """``forward(pixels, pixel_mask)`` -> ``[n, patches, hidden]`` after the post-layernorm;
    ``buckets=False``: plain SigLIP positions, for images of exactly ``image_size``."""

    def __init__(self, cfg: dict[str, Any], buckets: bool = True) -> None:
        super().__init__()
        self.embeddings = VisionEmbeddings(cfg, buckets)
        self.layers = nn.ModuleList(VisionLayer(cfg) for _ in range(int(cfg["num_hidden_layers"])))
        self.post_layernorm = nn.LayerNorm(
            int(cfg["hidden_size"]), eps=float(cfg.get("layer_norm_eps", 1e-6))
        )

    def forward(self, pixels: torch.Tensor, pixel_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``pixels`` ``[n, C, H, W]``; ``pixel_mask`` ``[n, H, W]`` (nonzero: a real pixel), default all."""
        p = self.embeddings.patch_size
        if pixel_mask is None:
            patch_mask = torch.ones(
                pixels.shape[0], pixels.shape[2] // p, pixels.shape[3] // p, dtype=torch.bool
            )
            patch_mask = patch_mask.to(pixels.device)
        else:
            grid = pixel_mask.unfold(1, p, p).unfold(2, p, p)
            patch_mask = grid.sum(dim=(-1, -2)) > 0
        x = self.embeddings(pixels, patch_mask)
        flat = patch_mask.reshape(pixels.shape[0], -1)
        key_mask = None if bool(flat.all()) else flat
        for layer in self.layers:
            x = layer(x, key_mask)
        return self.post_layernorm(x)
