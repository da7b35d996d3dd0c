"""Prompt-token logprobs, gathered from an extend step's logits."""

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
