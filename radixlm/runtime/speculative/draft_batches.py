"""The draft model's forward batches: an extend catching rows up to their request's tokens, then
one-token decodes, each with logits at every row's last position."""

from __future__ import annotations

from typing import Any

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch, ForwardMode


def draft_extend_batch(
    runner: Any, rows: list[int], starts: list[int], tokens: list[list[int]], slots: list[torch.Tensor]
) -> ForwardBatch:
    """Row ``rows[i]`` computes ``tokens[i]`` at positions ``starts[i]..`` into ``slots[i]`` (already
    written to its row); logits come back for each row's last token."""
    device = runner.device
    lens = [len(t) for t in tokens]
    seq_lens = [s + n for s, n in zip(starts, lens)]
    ends = torch.tensor(lens, dtype=torch.int64).cumsum(0) - 1
    return ForwardBatch(
        mode=ForwardMode.EXTEND,
        input_ids=torch.tensor([t for ts in tokens for t in ts], dtype=torch.int64, device=device),
        positions=torch.cat([torch.arange(s, s + n, dtype=torch.int64) for s, n in zip(starts, lens)]).to(
            device
        ),
        req_pool_indices=torch.tensor(rows, dtype=torch.int64, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int64, device=device),
        extend_prefix_lens=torch.tensor(starts, dtype=torch.int64, device=device),
        extend_seq_lens=torch.tensor(lens, dtype=torch.int64, device=device),
        out_cache_loc=torch.cat(slots).to(device),
        logits_indices=ends.to(device),
        req_to_token_pool=runner.req_to_token_pool,
        kv_pool=runner.kv_pool,
        attn_backend=runner.attn_backend,
        seq_lens_cpu=seq_lens,
        extend_prefix_lens_cpu=list(starts),
        extend_seq_lens_cpu=lens,
    )


def draft_decode_batch(
    runner: Any,
    rows: list[int],
    positions: list[int],
    tokens: list[int],
    slots: torch.Tensor,
    logits_rows: list[int] | None = None,
) -> ForwardBatch:
    """Batch row ``i`` computes ``tokens[i]`` at ``positions[i]`` of request row ``rows[i]`` into
    ``slots[i]``; logits come back for ``logits_rows`` (default: every row).

    Several rows may extend one request at consecutive positions: each attends to the first
    ``positions[i] + 1`` keys, the earlier rows' keys written by the same layer before it attends
    (as the target's verify step does), so a short catch-up runs on the decode kernels."""
    device = runner.device
    bs = len(rows)
    seq_lens = [p + 1 for p in positions]
    out_rows = list(range(bs)) if logits_rows is None else logits_rows
    if any(b <= a for a, b in zip(out_rows, out_rows[1:])):  # all rows: arange (returns_all_rows)
        raise ValueError(f"logits_rows must be increasing, got {out_rows}")
    return ForwardBatch(
        mode=ForwardMode.DECODE,
        input_ids=torch.tensor(tokens, dtype=torch.int64, device=device),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        req_pool_indices=torch.tensor(rows, dtype=torch.int64, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int64, device=device),
        extend_prefix_lens=torch.tensor(positions, dtype=torch.int64, device=device),
        extend_seq_lens=torch.ones(bs, dtype=torch.int64, device=device),
        out_cache_loc=slots.to(device),
        logits_indices=torch.tensor(out_rows, dtype=torch.int64, device=device),
        req_to_token_pool=runner.req_to_token_pool,
        kv_pool=runner.kv_pool,
        attn_backend=runner.attn_backend,
        seq_lens_cpu=seq_lens,
    )
