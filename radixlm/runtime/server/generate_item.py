"""``GenerateItem``: one validated prompt of a request, what every front end hands the TokenizerManager."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from radixlm.runtime.sampling.sampling_params import SamplingParams


@dataclass
class GenerateItem:
    """One validated prompt of a request (the native and OpenAI front ends both build these)."""

    sampling_params: SamplingParams
    text: str | None = None
    input_ids: list[int] | None = None
    input_segments: list[dict[str, Any]] | None = None  # [{"text": str} | {"ids": [int]}]
    image_data: list[Any] = dataclasses.field(default_factory=list)  # one per image placeholder in text
    rid: str | None = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    add_special_tokens: bool = True  # False for text that already holds them (chat templates)
    fill_context: bool = False  # max_new_tokens = what the context leaves after the prompt
    pin_children: int = 0  # keep the finished context locked for this many children (programs)
    unpin_rids: list[str] = dataclasses.field(default_factory=list)  # parents to release once admitted
    pin_timeout_s: float | None = None  # sessions: their pins last as long as the session may idle
    priority: int | None = None  # SGLang's; see runtime/scheduler/priority.py
    lora_name: str | None = None  # the LoRA adapter that serves it (None: the base model)
