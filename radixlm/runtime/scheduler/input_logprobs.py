"""Prompt-token logprobs, gathered from an extend step's logits, and the next-token logprobs of a
prefill-only request."""

from __future__ import annotations

import torch

from radixlm.runtime.scheduler.req import Req


def collect_input_logprobs(req: Req, logits: torch.Tensor, rows: tuple[int, int, int]) -> None:
    """Append the logprobs of the prompt tokens this step predicted (``kv_len`` already advanced).

    ``rows`` is ``(first_row, count, first_position)``: ``logits[first_row + j]`` predicts prompt
    token ``first_position + 1 + j``. The first prompt token has no prediction: it gets ``None``.
    """
    if not req.needs_input_logprobs:
        return
    first, count, first_pos = rows
    state = req.logprobs
    if req.logprob_start_len == 0 and not state.input_tokens and req.kv_len - req.extend_len == 0:
        state.input_tokens.append((None, req.origin_input_ids[0]))
        state.input_top.append(None)
    if count == 0:
        return
    logprobs = torch.log_softmax(logits[first : first + count].float(), dim=-1)
    targets = torch.tensor(
        req.origin_input_ids[first_pos + 1 : first_pos + 1 + count], dtype=torch.int64, device=logprobs.device
    )
    chosen = logprobs.gather(1, targets[:, None]).squeeze(1).tolist()
    state.input_tokens.extend(zip(chosen, targets.tolist()))
    if req.top_logprobs_num > 0:
        vals, ids = torch.topk(logprobs, req.top_logprobs_num, dim=-1)
        state.input_top.extend(list(zip(v, t)) for v, t in zip(vals.tolist(), ids.tolist()))
    else:
        state.input_top.extend([None] * count)


def record_next_token_logprobs(req: Req, row_logits: torch.Tensor) -> None:
    """A prefill-only request (``max_new_tokens=0``) answers, as SGLang does, one output logprob
    entry and one top list for the token after the prompt, though it generates none. The entry's
    token is the most likely one (nothing is sampled); logprobs are the raw model's."""
    logprobs = torch.log_softmax(row_logits.float(), dim=-1)
    token = int(torch.argmax(logprobs))
    req.logprobs.output_tokens.append((float(logprobs[token]), token))
    top: list[tuple[float, int]] = []
    if req.top_logprobs_num > 0:
        vals, ids = torch.topk(logprobs, req.top_logprobs_num)
        top = list(zip(vals.tolist(), ids.tolist()))
    req.logprobs.output_top.append(top)
