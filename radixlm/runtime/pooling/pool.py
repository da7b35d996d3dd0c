"""Pool token states into one vector per sequence, then normalize and truncate (Matryoshka)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixlm.runtime.pooling.pooling_config import PoolingMethod


def pool_padded(
    hidden: torch.Tensor, lens: torch.Tensor, method: PoolingMethod, padded: bool = True
) -> torch.Tensor:
    """``hidden`` ``[bs, L, H]`` right-padded to ``L`` -> ``[bs, H]`` float32; ``padded`` False says
    every sequence is ``L`` long (a single one always is): no mask then, two ops fewer each."""
    if method == "cls":
        return hidden[:, 0].float()
    if not padded:
        return hidden[:, -1].float() if method == "last" else hidden.float().mean(1)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    if method == "last":
        return hidden[rows, lens - 1].float()
    mask = (torch.arange(hidden.shape[1], device=hidden.device)[None] < lens[:, None]).unsqueeze(-1)
    return (hidden.float() * mask).sum(1) / lens[:, None].float()


def finish(vectors: torch.Tensor, normalize: bool, dimensions: int | None) -> torch.Tensor:
    """Truncate to ``dimensions`` (then renormalize when the model normalizes), else normalize as the
    model does."""
    if dimensions is not None:
        vectors = vectors[:, :dimensions]
    return F.normalize(vectors, dim=-1) if normalize else vectors
