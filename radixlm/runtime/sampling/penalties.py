"""Logit adjustments that depend on a request's history: penalties and min_new_tokens."""

from __future__ import annotations

import torch

from radixlm.runtime.sampling.sequence import SamplingSequence


def apply_penalties(logits: torch.Tensor, reqs: list[SamplingSequence], eos_token_ids: list[int]) -> None:
    """In place, only on the rows that ask for it (the common case costs one Python check per row).

    - frequency/presence penalty (OpenAI semantics) over the generated tokens;
    - repetition penalty (Hugging Face semantics) over prompt and generated tokens;
    - min_new_tokens: EOS and stop token ids are banned until that many tokens exist, unless nothing
      else is allowed (a grammar that can only end).
    """
    for i, req in enumerate(reqs):
        apply_row_penalties(logits, i, req, eos_token_ids)


def apply_row_penalties(
    logits: torch.Tensor, i: int, req: SamplingSequence, eos_token_ids: list[int]
) -> None:
    """``apply_penalties`` for row ``i`` only (it touches no other row)."""
    vocab = logits.shape[1]
    p = req.sampling_params
    if p.frequency_penalty or p.presence_penalty:
        if req.output_ids:
            generated = torch.tensor(req.output_ids, dtype=torch.int64)
            counts = torch.bincount(generated, minlength=vocab)[:vocab]
            counts = counts.to(device=logits.device, dtype=logits.dtype)
            logits[i] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(logits.dtype)
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(req.fill_ids)), dtype=torch.int64, device=logits.device)
        seen = seen[seen < vocab]
        vals = logits[i, seen].double()  # NOTE: a penalty float32 rounds to 0 (5e-324) must not divide
        penalised = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
        limit = torch.finfo(logits.dtype).max
        logits[i, seen] = penalised.clamp(-limit, limit).to(logits.dtype)
    if len(req.output_ids) < p.min_new_tokens:
        banned = [t for t in (*eos_token_ids, *p.stop_token_ids) if t < vocab]
        if banned:
            kept = logits[i, banned].clone()
            logits[i, banned] = float("-inf")
            # NOTE: a grammar that can only end (a forced tool call complete, a regex matched) leaves
            # nothing else: then its end wins over min_new_tokens (else no token is left to draw)
            if not torch.isfinite(logits[i]).any():
                logits[i, banned] = kept
