"""What the sampler needs to know about a sequence (the scheduler's ``Req`` provides it)."""

from __future__ import annotations

from typing import Protocol

import torch

from radixlm.runtime.sampling.sampling_params import SamplingParams


class SamplingSequence(Protocol):
    """A sequence whose next token is sampled: its parameters, its tokens, its own random stream."""

    sampling_params: SamplingParams
    output_ids: list[int]
    return_logprob: bool
    top_logprobs_num: int

    @property
    def fill_ids(self) -> list[int]:
        """Prompt plus generated tokens."""
        ...

    def generator(self, step: int) -> torch.Generator:
        """The random stream for output token ``step``."""
        ...
