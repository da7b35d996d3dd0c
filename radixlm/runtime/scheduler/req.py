"""A request's life inside the scheduler: tokens, KV ownership, sampling and output state."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from radixlm.runtime.constrained.matcher_protocol import Matcher
from radixlm.runtime.lora.namespace import namespaced
from radixlm.runtime.multimodal.image_spans import Span, image_spans
from radixlm.runtime.multimodal.items import MultimodalInputs
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.sampling.stop_regex import StopRegexes
from radixlm.runtime.scheduler.finish_reason import FinishReason
from radixlm.runtime.scheduler.jump_draft import JumpDraft
from radixlm.runtime.speculative.spec_state import SpecState

TokenLogprob = tuple[float | None, int]  # (logprob, token id); None for the first prompt token
TopLogprobs = list[tuple[float, int]]


@dataclass
class LogprobState:
    """The logprobs a request returns, and how much of them was sent."""

    input_done: bool  # every requested prompt logprob is gathered (True when none are requested)
    input_tokens: list[TokenLogprob] = field(default_factory=list)
    input_top: list[TopLogprobs | None] = field(default_factory=list)
    output_tokens: list[tuple[float, int]] = field(default_factory=list)
    output_top: list[TopLogprobs] = field(default_factory=list)
    sent_input: bool = False
    sent_output_len: int = 0


class Req:
    """One sequence being generated.

    KV ownership (see ``cache_manager.py``): tokens ``[0, prefix_len)`` are owned by the radix tree
    and protected by a lock on ``last_node``; tokens ``[prefix_len, kv_len)`` are this request's
    private slots; ``req_to_token[row, :kv_len]`` holds all of them while the request is running.
    """

    def __init__(
        self,
        rid: str,
        input_ids: list[int],
        sampling_params: SamplingParams,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
        stream: bool = False,
        seed: int = 0,
    ) -> None:
        self.rid = rid
        self.origin_input_ids = input_ids
        self.sampling_params = sampling_params
        self.return_logprob = return_logprob
        self.logprob_start_len = logprob_start_len if return_logprob else -1
        self.top_logprobs_num = top_logprobs_num if return_logprob else 0
        self.stream = stream
        self.seed = seed
        self.output_ids: list[int] = []
        self.mm: MultimodalInputs | None = None  # its images (prompt ids then carry their pads)
        self.image_spans: list[Span] = []  # prompt ranges that attend both ways (Gemma 3's images)

        # KV state
        self.row: int | None = None
        self.prefix_len = 0  # tokens owned by the tree, locked via last_node
        self.kv_len = 0  # tokens whose KV is computed and recorded in req_to_token[row]
        self.last_node: Any = None
        self.cached_tokens = 0  # prompt tokens served from the cache at first admission
        self.first_token_at: float | None = None  # time.perf_counter() of the first output token
        self.admitted_once = False
        self.arrived_at = time.monotonic()  # for --queue-timeout
        self.priority = 0  # SGLang's request priority (scheduler/priority.py)
        self.passed_over_s = 0.0  # seconds waited while a higher priority ran (priority aging)
        self.extend_len = 0  # tokens computed in the current step

        # LoRA: the adapter (``runtime/lora/adapter.py``) and the radix namespace of its KV (0: base)
        self.lora_name: str | None = None
        self.lora: Any = None
        self.cache_namespace = 0

        # Output state
        self.finish_reason: FinishReason | None = None
        self.to_abort: str | None = None
        self.sent_output_len = 0
        self.num_retractions = 0

        self.logprobs = LogprobState(input_done=self.logprob_start_len < 0)
        if return_logprob and self.logprob_start_len < 0 and input_ids:
            # SGLang's default start is the last prompt token, whose entry is always None there
            # (its first entry is padded): the one entry costs no logits row.
            self.logprobs.input_tokens.append((None, input_ids[-1]))
            self.logprobs.input_top.append(None)

        # Program graphs (see TokenizedGenerateReq.pin_children)
        self.pin_children = 0
        self.unpin_rids: list[str] = []
        self.pin_timeout_s: float | None = None  # None: the server's pin_timeout_s (sessions set theirs)
        self.group_rid: str | None = None  # the client's rid of the n > 1 request this sample is of

        # Constrained decoding
        self.grammar: Matcher | None = None
        self.grammar_key: tuple[str, str] | None = sampling_params.constraint
        self.jump_draft: JumpDraft | None = None  # forced tokens awaiting greedy verification
        self.stop_regexes: StopRegexes | None = None  # compiled on the first check (stop_checker.py)

        # Speculative decoding: draft length and acceptance counts (None until it first speculates)
        self.spec: SpecState | None = None

        # An embedding or score sequence (``pooling/pooled_seq.py``): pooled, never sampled
        self.pool: Any = None

    def attach_images(self, mm: MultimodalInputs, vocab_size: int, bidirectional: bool) -> None:
        """Its images: the prompt's image tokens become their pads; ``bidirectional`` (a model whose
        image tokens attend both ways) records their spans for the chunk and prefix rules
        (``runtime/multimodal/image_spans.py``)."""
        self.mm = mm
        self.origin_input_ids = mm.padded(self.origin_input_ids, vocab_size)
        self.image_spans = image_spans(mm) if bidirectional else []

    def output_changed_from(self, index: int) -> None:
        """Output tokens from ``index`` on were removed or replaced (jump-forward): checks of the
        output that remember what they saw (``stop_regexes``) must look at them again."""
        if self.stop_regexes is not None:
            self.stop_regexes.forget_from(index)

    # ---- token views -------------------------------------------------------------------------
    @property
    def fill_ids(self) -> list[int]:
        """Every token whose KV the request needs: prompt plus generated tokens."""
        return self.origin_input_ids + self.output_ids

    @property
    def seq_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def is_prefill_only(self) -> bool:
        return self.sampling_params.max_new_tokens == 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def cache_key(self, length: int) -> list[int]:
        """The radix-cache key of ``fill_ids[:length]``: the ids themselves under the base model,
        moved into the request's LoRA namespace otherwise (``lora/namespace.py``)."""
        return namespaced(self.fill_ids[:length], self.cache_namespace)

    def max_prefix_len(self) -> int:
        """The longest cached prefix the next extend may reuse.

        At least one token must be computed to get logits; input logprobs from position ``k`` need the
        logit at ``k - 1``.
        """
        limit = self.seq_len - 1
        if self.pool is not None and self.pool.needs_every_token:
            limit = 0  # mean/first-token pooling reads every token's state, which the KV cache lacks
        if self.needs_input_logprobs:
            limit = min(limit, max(self.logprob_start_len - 1, 0))
        return max(limit, 0)

    @property
    def needs_input_logprobs(self) -> bool:
        return not self.logprobs.input_done

    def remaining_new_tokens(self) -> int:
        return max(self.sampling_params.max_new_tokens - len(self.output_ids), 0)

    def generator(self, step: int) -> torch.Generator:
        """A generator for output token ``step``: the same draw whatever else is in the batch."""
        g = torch.Generator()
        g.manual_seed((self.seed * 1_000_003 + step) & 0x7FFF_FFFF_FFFF_FFFF)
        return g

    def __repr__(self) -> str:
        return (
            f"Req(rid={self.rid!r}, prompt={len(self.origin_input_ids)}, out={len(self.output_ids)}, "
            f"prefix={self.prefix_len}, kv={self.kv_len}, row={self.row})"
        )
