"""Dense attention over many queries on the CPU, as two matrix products per block of queries.

torch's CPU ``scaled_dot_product_attention`` with a mask runs at 20-40 GFLOP/s here (fp32, head sizes
64-128), while its matrix products run at ~140: a 1,867-token prompt of SmolLM2-135M spent 5 of its
6.3 s of prefill in it. Blocks of ``QUERY_BLOCK`` queries instead take ``scores = q @ k^T`` and
``softmax(scores) @ v`` as ``matmul`` calls, each over only the keys some query of the block sees
(a causal block skips the keys after it, a windowed block the keys before its window). The grouped
query heads that share a key head are stacked into one product, so keys are never repeated.
``benchmarks/kernels/prefill_attention.py`` measures it against SDPA.
"""

from __future__ import annotations

import torch

# NOTE: 32, 64 and 128 measure within ~10% of each other, which one leads changes from run to run
# (benchmarks/kernels/prefill_attention.py); 64 bounds a block's scores at 64 x group x keys floats.
QUERY_BLOCK = 64


def blocked_attention_applies(q: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether :func:`attend_blocked` serves this call: a CPU tensor with more than two blocks of
    queries and a mask shared by all heads (``[..., 1, Q, K]`` or ``[Q, K]``)."""
    if q.device.type != "cpu" or q.shape[-2] <= 2 * QUERY_BLOCK:
        return False
    return mask is None or mask.dim() < 3 or mask.shape[-3] == 1


def attend_blocked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    sm_scale: float,
    softcap: float | None = None,
) -> torch.Tensor:
    """``attend``'s result (``q`` ``[..., Hq, Q, D]``, ``k``/``v`` ``[..., Hkv, K, D]``, ``mask`` bool
    broadcastable to ``[..., 1, Q, K]``, True = visible), computed block by block of queries."""
    *lead, hq, nq, d = q.shape
    hkv = k.shape[-3]
    group = hq // hkv
    q_grouped = q.reshape(*lead, hkv, group, nq, d)
    out = torch.empty(*lead, hkv, group, nq, v.shape[-1], dtype=q.dtype, device=q.device)
    for start in range(0, nq, QUERY_BLOCK):
        end = min(nq, start + QUERY_BLOCK)
        rows = end - start
        block_mask = None if mask is None else mask[..., start:end, :]
        first, last = _visible_key_range(block_mask, k.shape[-2])
        qb = q_grouped[..., start:end, :].reshape(*lead, hkv, group * rows, d)
        scores = torch.matmul(qb, k[..., first:last, :].transpose(-1, -2))
        if softcap is None:
            scores.mul_(sm_scale)
        else:
            scores = torch.tanh(scores * (sm_scale / softcap)) * softcap
        scores = scores.view(*lead, hkv, group, rows, last - first)
        if block_mask is not None:
            scores.masked_fill_(~block_mask[..., first:last].unsqueeze(-3), float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        probs = probs.view(*lead, hkv, group * rows, last - first)
        out[..., start:end, :] = torch.matmul(probs, v[..., first:last, :]).view(*lead, hkv, group, rows, -1)
    return out.view(*lead, hq, nq, -1)


def _visible_key_range(block_mask: torch.Tensor | None, keys: int) -> tuple[int, int]:
    """``[first, last)``: the keys any query of the block sees (all of them without a mask)."""
    if block_mask is None:
        return 0, keys
    seen = block_mask.reshape(-1, block_mask.shape[-1]).any(0).nonzero()
    if seen.numel() == 0:  # no query sees anything: softmax gives NaN, as SDPA's masked rows do
        return 0, keys
    return int(seen[0]), int(seen[-1]) + 1
