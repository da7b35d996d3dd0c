"""Turn a batch's logits into next tokens: greedy rows in one argmax, sampled rows with their own
seeded generators, so a request draws the same tokens whatever else shares its batch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from radixlm.runtime.sampling.penalties import apply_row_penalties
from radixlm.runtime.sampling.sequence import SamplingSequence


@dataclass
class SampleOutput:
    next_token_ids: list[int]
    # Per row, the model's (raw) logprob of the chosen token and the top-k, for rows that asked.
    logprobs: list[float | None]
    top_logprobs: list[list[tuple[float, int]] | None]
    # Rows whose sampling failed (their next token is meaningless), by row: what went wrong.
    errors: dict[int, str] = field(default_factory=dict)


def filter_probs(probs: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """Zero out tokens outside top-k / the top-p nucleus / below ``min_p * max_prob`` (1-D)."""
    if top_k > 0 and top_k < probs.numel():
        kth = torch.topk(probs, top_k).values[-1]
        probs = torch.where(probs < kth, torch.zeros_like(probs), probs)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cum = torch.cumsum(sorted_probs, 0)
        # keep the smallest set whose mass reaches top_p (the token crossing the line included), and
        # always the most likely token: a top_p below float32's range (5e-324) compares as 0 here
        drop_sorted = (cum - sorted_probs) >= top_p
        drop_sorted[0] = False
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
    if min_p > 0.0:
        probs = probs.masked_fill(probs < min_p * probs.max(), 0.0)
    return probs


def sample_row(logits: torch.Tensor, req: SamplingSequence) -> int:
    """Sample one token from a row of processed logits with the request's per-step generator."""
    p = req.sampling_params
    probs = torch.softmax(logits.float() / p.temperature, dim=-1)
    probs = filter_probs(probs, p.top_k, p.top_p, p.min_p)
    gen = req.generator(len(req.output_ids))
    # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p; the noise comes from the
    # request's own generator on the CPU, so it does not depend on the batch or the device.
    noise = torch.empty(probs.shape[0], dtype=torch.float32).exponential_(generator=gen).to(probs.device)
    return int(torch.argmax(probs / noise))


def apply_row_logit_bias(logits: torch.Tensor, i: int, req: SamplingSequence) -> None:
    """Add the request's ``logit_bias`` to row ``i`` in place (a request without one costs nothing)."""
    bias = req.sampling_params.logit_bias_tensors
    if bias is not None:
        ids, values = bias
        logits[i, ids.to(logits.device)] += values.to(logits.device, logits.dtype)


def sample(
    logits: torch.Tensor,
    reqs: list[SamplingSequence],
    eos_token_ids: list[int],
    errors: dict[int, str] | None = None,
) -> SampleOutput:
    """``logits``: ``[bs, vocab]`` float32 for ``reqs`` (grammar masks already applied).

    A failure that belongs to one row (its penalties, logit_bias or draw raising, or logits that are
    not finite: NaN, +inf, every token masked) is reported in ``SampleOutput.errors`` and the other
    rows are sampled as if it were not there: each row's processing touches only its own row.
    ``errors`` (rows already failed, e.g. by their grammar mask) are skipped and passed on.
    """
    errors = dict(errors or {})
    want_logprobs = [r.return_logprob for r in reqs]
    raw_logprobs = None
    if any(want_logprobs):
        raw_logprobs = torch.log_softmax(logits.float(), dim=-1)
    for i, req in enumerate(reqs):
        if i not in errors:
            _guarded(errors, i, apply_row_penalties, logits, i, req, eos_token_ids)
            _guarded(errors, i, apply_row_logit_bias, logits, i, req)
    next_ids, not_finite = row_argmax(logits)
    for i in not_finite:
        errors.setdefault(i, "its logits are not finite (NaN, +inf, or every token masked)")

    for i, req in enumerate(reqs):
        if not req.sampling_params.is_greedy and i not in errors:
            drawn = _guarded(errors, i, sample_row, logits[i], req)
            next_ids[i] = next_ids[i] if drawn is None else drawn

    logprobs: list[float | None] = [None] * len(reqs)
    tops: list[list[tuple[float, int]] | None] = [None] * len(reqs)
    if raw_logprobs is not None:
        for i, req in enumerate(reqs):
            if not want_logprobs[i] or i in errors:
                continue
            logprobs[i] = float(raw_logprobs[i, next_ids[i]])
            if req.top_logprobs_num > 0:
                vals, ids = torch.topk(raw_logprobs[i], req.top_logprobs_num)
                tops[i] = list(zip(vals.tolist(), ids.tolist()))
    return SampleOutput(next_ids, logprobs, tops, errors)


# At most this many fp32 CPU rows take numpy's argmax: one thread, no OpenMP region to wake
# (torch's argmax over a 49152-token row opens one: ~115 us against numpy's ~9 us at batch 1).
NUMPY_ARGMAX_ROWS = 8


def row_argmax(logits: torch.Tensor) -> tuple[list[int], list[int]]:
    """Each row's argmax (the first maximum) and the rows whose chosen logit is not finite.

    Both numpy's and torch's argmax pick a NaN when there is one, so the chosen logit alone tells
    NaN, +inf and all -inf rows apart from sound ones: one value per row, no second pass."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.shape[0] <= NUMPY_ARGMAX_ROWS:
        rows = logits.detach().numpy()
        ids = rows.argmax(axis=-1)
        best = rows[np.arange(rows.shape[0]), ids]
        return ids.tolist(), np.flatnonzero(~np.isfinite(best)).tolist()
    argmax = torch.argmax(logits, dim=-1)
    best = logits.gather(1, argmax.unsqueeze(1)).squeeze(1)
    return argmax.tolist(), (~torch.isfinite(best)).nonzero().flatten().tolist()


def _guarded(errors: dict[int, str], row: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; an exception is recorded as row ``row``'s error (and None returned)."""
    if row in errors:
        return None
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - one row's failure must not take the batch down
        errors[row] = f"{fn.__name__} raised {type(e).__name__}: {e}"
        return None
