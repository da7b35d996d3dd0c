"""One check of a tokenized generation request against the model, for every front end.

The Engine raises the ``ValueError`` to its caller; the HTTP server answers it with a 400. The
scheduler keeps only what needs its own state (whether the request can ever fit the KV pool).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.requests.request_limits import (
    LimitExceeded,
    RequestLimits,
    check_logprob_limits,
    check_sampling_limits,
)


@dataclass(frozen=True)
class ModelLimits:
    """What a request is checked against: the vocabulary, the context window and the server's caps."""

    vocab_size: int
    context_length: int
    caps: RequestLimits = RequestLimits()

    @classmethod
    def from_model_info(cls, model_info: dict[str, Any], server_args: Any = None) -> ModelLimits:
        """From the scheduler's ``model_info()`` (the Engine's and the server's ``get_model_info``)
        and the caps of ``server_args`` (defaults when None)."""
        caps = RequestLimits() if server_args is None else RequestLimits.from_server_args(server_args)
        return cls(
            vocab_size=int(model_info["vocab_size"]),
            context_length=int(model_info["context_length"]),
            caps=caps,
        )


class InvalidRequest(ValueError):
    """A request the model cannot serve; ``param`` names the offending field when there is one."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def prompt_ids_array(ids: Sequence[int], limits: ModelLimits) -> np.ndarray:
    """``ids`` as the int32 array a request carries; an id outside the vocabulary (one too large for
    int32 included) raises ``InvalidRequest``."""
    try:
        wide = np.asarray(ids, dtype=np.int64)
    except (OverflowError, TypeError, ValueError) as e:
        raise InvalidRequest(f"input_ids must be token ids: {e}", "input_ids") from e
    bad = wide[(wide < 0) | (wide >= limits.vocab_size)]
    if len(bad):
        raise _outside_vocabulary(bad.tolist(), limits)
    return wide.astype(np.int32)


def validate_request(req: TokenizedGenerateReq, limits: ModelLimits) -> None:
    """Raise ``InvalidRequest`` (a ``ValueError``) naming the first problem of ``req``; call it
    before ``expand_parallel_samples`` splits off the ``n`` samples.

    Checks: the prompt is not empty; every id is in ``[0, vocab_size)``; the prompt leaves room for
    at least one new token in the context; ``logprob_start_len`` is smaller than the prompt length;
    ``top_logprobs_num`` lies in ``[0, vocab_size]`` and under ``--max-top-logprobs``, and times the positions
    under ``--max-logprob-entries``; ``pin_children >= 0`` and only with ``n == 1``;
    the caps of ``limits.caps`` (``request_limits``: ``n``, prompt tokens, stop strings, grammars).
    """
    ids = np.asarray(req.input_ids)
    n = len(ids)
    if n == 0:
        raise InvalidRequest("the prompt is empty: at least one token is needed")
    bad = ids[(ids < 0) | (ids >= limits.vocab_size)]
    if len(bad):
        raise _outside_vocabulary(bad.tolist(), limits)
    max_prompt = limits.caps.max_prompt_tokens
    if max_prompt is not None and n > max_prompt:
        raise InvalidRequest(f"the prompt has {n} tokens, above this server's limit of {max_prompt}")
    try:
        check_sampling_limits(req.sampling_params, limits.caps)
    except LimitExceeded as e:
        raise InvalidRequest(str(e), e.param) from e
    if n >= limits.context_length:
        raise InvalidRequest(
            f"the prompt has {n} tokens, but the model's context length is "
            f"{limits.context_length} (the prompt and one new token must fit in it)"
        )
    if req.logprob_start_len >= n:
        raise InvalidRequest(
            f"logprob_start_len ({req.logprob_start_len}) must be smaller than the prompt length ({n})",
            "logprob_start_len",
        )
    if not 0 <= req.top_logprobs_num <= limits.vocab_size:
        raise InvalidRequest(
            f"top_logprobs_num must be in [0, {limits.vocab_size}], not {req.top_logprobs_num}",
            "top_logprobs_num",
        )
    if req.return_logprob:
        try:
            new = min(req.sampling_params.max_new_tokens, limits.context_length - n)
            check_logprob_limits(n, req.logprob_start_len, req.top_logprobs_num, new, limits.caps)
        except LimitExceeded as e:
            raise InvalidRequest(str(e), e.param) from e
    if not isinstance(req.pin_children, int) or req.pin_children < 0:
        raise InvalidRequest("pin_children must be an integer >= 0", "pin_children")
    if req.pin_children and req.sampling_params.n != 1:
        raise InvalidRequest("pin_children needs n == 1", "pin_children")
    biased = [t for t, _ in req.sampling_params.logit_bias_items() if t >= limits.vocab_size]
    if biased:
        raise InvalidRequest(
            f"logit_bias names token ids outside the vocabulary [0, {limits.vocab_size}): {biased[:5]}",
            "logit_bias",
        )


def _outside_vocabulary(bad: list[int], limits: ModelLimits) -> InvalidRequest:
    message = f"input_ids outside the vocabulary [0, {limits.vocab_size}): {bad[:5]}"
    return InvalidRequest(message, "input_ids")
