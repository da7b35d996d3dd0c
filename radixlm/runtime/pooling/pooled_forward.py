"""The forward of an extend batch that holds embedding sequences (``PooledSeq``) beside prompts.

One pass through the decoder's layers; then the generating requests' rows go through the logits
step as usual, and each embedding sequence's rows go to its pooling. The logits keep the batch's
layout (``logits_indices``): an embedding sequence's row is left zero, as nothing samples from it.
"""

from __future__ import annotations

from typing import Any

import torch

from radixlm.runtime.scheduler.scheduled_batch import ScheduledBatch


def pooled_forward(runner: Any, batch: ScheduledBatch) -> torch.Tensor:
    """``runner.forward``'s logits for ``batch``; its embedding sequences pool their states on the way."""
    fb = batch.forward_batch
    if not any(r.pool is not None for r in batch.reqs):
        return runner.forward(fb)
    model = runner.model
    h, residual = runner.forward_hidden(fb)
    pooled_rows = {row for req, row in zip(batch.reqs, batch.sample_rows) if req.pool is not None}
    keep = [i for i in range(int(fb.logits_indices.numel())) if i not in pooled_rows]
    if keep:
        index = fb.logits_indices[torch.tensor(keep, device=fb.logits_indices.device)]
        computed = model.compute_logits(h[index], residual[index])
        logits = computed.new_zeros((int(fb.logits_indices.numel()), computed.shape[-1]))
        logits[torch.tensor(keep, device=logits.device)] = computed
    else:
        logits = h.new_zeros((int(fb.logits_indices.numel()), 0), dtype=torch.float32)
    start = 0
    for req in batch.reqs:
        n = req.extend_len
        if req.pool is not None:
            rows = slice(start, start + n)
            req.pool.add(model, h[rows], residual[rows], req.kv_len == 0, req.kv_len + n == req.seq_len)
        start += n
    return logits
