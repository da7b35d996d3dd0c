"""What one ``Engine.generate`` / ``async_generate`` call asks for, and the requests it becomes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from radixlm.runtime.messages import TokenizedGenerateReq, expand_parallel_samples
from radixlm.runtime.multimodal.image_source import ImagePolicy
from radixlm.runtime.multimodal.items import MultimodalInputs
from radixlm.runtime.multimodal.processor import ImagePromptProcessor
from radixlm.runtime.multimodal.request_images import (
    NO_INPUT_LOGPROBS,
    per_prompt_images,
    tokenize_with_images,
)
from radixlm.runtime.requests.request_ids import InvalidRid, check_client_rid
from radixlm.runtime.requests.request_validation import (
    InvalidRequest,
    ModelLimits,
    prompt_ids_array,
    validate_request,
)
from radixlm.runtime.sampling.sampling_params import SamplingParams, as_sampling_params

Prompt = str | list[str] | None
SamplingParamsArg = dict | SamplingParams | list | None
InputIds = list[int] | list[list[int]] | None


@dataclass(frozen=True)
class GenerateArgs:
    """The arguments of one generate call (the same for the sync and the async API)."""

    prompt: Prompt = None
    sampling_params: SamplingParamsArg = None
    input_ids: InputIds = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    rid: str | list[str] | None = None
    pin_children: int = 0
    unpin_rids: list[str] | None = None
    priority: int | None = None
    image_data: Any = None  # SGLang's: per prompt an image (bytes, path, data URL, base64) or a list

    def to_requests(
        self,
        tokenizer: Any,
        limits: ModelLimits,
        new_rid: Callable[[], str],
        release_pins: Callable[[list[str]], None],
        images: tuple[ImagePromptProcessor | None, ImagePolicy] | None = None,
    ) -> tuple[list[TokenizedGenerateReq], bool]:
        """The checked scheduler requests (``n`` samples split off) and whether the caller gets a
        single result rather than a list. Raises ``ValueError`` naming the problem; when a prompt
        the model cannot serve rejects the call, ``release_pins`` gets ``unpin_rids`` once per
        sample that will not be admitted."""
        if self.priority is not None and (
            not isinstance(self.priority, int) or isinstance(self.priority, bool)
        ):
            raise ValueError(f"priority must be an integer, got {self.priority!r}")
        ids_list, single = self._prompts(tokenizer)
        mm_list = self._images(images, single, len(ids_list))
        if any(mm is not None for mm in mm_list):
            ids_list = [ids if mm is None else mm[0] for ids, mm in zip(ids_list, mm_list)]
        params = self._params(len(ids_list))
        rids = self._rids(len(ids_list))
        reqs: list[TokenizedGenerateReq] = []
        try:
            for ids, p, rid, mm in zip(ids_list, params, rids, mm_list):
                req = TokenizedGenerateReq(
                    rid=rid or new_rid(),
                    input_ids=prompt_ids_array(ids, limits),
                    sampling_params=p,
                    return_logprob=self.return_logprob,
                    logprob_start_len=self.logprob_start_len,
                    top_logprobs_num=self.top_logprobs_num,
                    stream=self.stream,
                    pin_children=self.pin_children,
                    unpin_rids=list(self.unpin_rids or []),
                    priority=self.priority,
                    mm_inputs=None if mm is None else mm[1],
                )
                validate_request(req, limits)
                reqs.extend(expand_parallel_samples(req))
        except InvalidRequest:
            for _ in range(sum(p.n for p in params) if self.unpin_rids else 0):
                release_pins(list(self.unpin_rids or []))
            raise
        if len(reqs) > 1:
            single = False
        if self.stream and len(reqs) != 1:
            raise ValueError("stream=True takes a single prompt with n == 1")
        return reqs, single

    def _prompts(self, tokenizer: Any) -> tuple[list[list[int]], bool]:
        """Each prompt's ids, and whether a single one was given."""
        prompt, input_ids = self.prompt, self.input_ids
        if (prompt is None) == (input_ids is None):
            raise ValueError("give exactly one of prompt or input_ids")
        if prompt is not None:
            single = isinstance(prompt, str)
            prompts = [prompt] if single else list(prompt)
            if not all(isinstance(p, str) for p in prompts):
                raise ValueError("prompt must be a string or a list of strings")
            ids_list = [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        else:
            single = bool(input_ids) and not isinstance(input_ids[0], (list, tuple, np.ndarray))
            ids_list = [list(input_ids)] if single else [list(x) for x in input_ids]
        if not ids_list:
            raise ValueError("prompt must not be an empty list")
        return ids_list, single

    def _images(
        self, images: tuple[ImagePromptProcessor | None, ImagePolicy] | None, single: bool, count: int
    ) -> list[tuple[list[int], MultimodalInputs] | None]:
        """Per prompt, its ids and images when ``image_data`` gives it any."""
        if self.image_data is None:
            return [None] * count
        if self.prompt is None:
            raise ValueError("image_data needs a text prompt (with one image placeholder per image)")
        if self.return_logprob and self.logprob_start_len >= 0:
            raise ValueError(NO_INPUT_LOGPROBS)
        processor, policy = images if images is not None else (None, ImagePolicy())
        texts = [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)
        refs = per_prompt_images(self.image_data, count, single)
        return [tokenize_with_images(processor, policy, t, r) if r else None for t, r in zip(texts, refs)]

    def _rids(self, count: int) -> list[str | None]:
        """One client rid (or None: the engine makes one) per prompt; ``ValueError`` for a rid that
        is not a valid client rid or is named twice."""
        rids = list(self.rid) if isinstance(self.rid, list) else [self.rid] * count
        if len(rids) != count:
            raise ValueError(f"rid must name one rid per prompt ({count}), not {len(rids)}")
        given = [r for r in rids if r is not None]
        for i, rid in enumerate(given):
            try:
                check_client_rid(rid)
            except InvalidRid as e:
                raise ValueError(str(e)) from e
            if rid in given[:i]:
                raise ValueError(f"a request with rid {rid!r} is already running (named twice in one call)")
        return rids

    def _params(self, count: int) -> list[SamplingParams]:
        if isinstance(self.sampling_params, list):
            if len(self.sampling_params) != count:
                raise ValueError("sampling_params list must match the number of prompts")
            return [as_sampling_params(p) for p in self.sampling_params]
        return [as_sampling_params(self.sampling_params)] * count
