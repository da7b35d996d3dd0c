"""Every message that crosses a process boundary (ZeroMQ) or the Engine's queues.

Small dataclasses, pickled. Token ids travel as numpy int32 arrays, never Python lists (lists of
ints pickle ~4x slower). The scheduler dispatches on the message type through one table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from radixlm.runtime.multimodal.items import MultimodalInputs
from radixlm.runtime.requests.request_ids import sample_rid
from radixlm.runtime.sampling.sampling_params import SamplingParams

# The ``status_code`` of an abort the client asked for (nginx's "client closed request"): a normal
# end for the front ends, unlike a rejection's 400 or a failure's 500.
CLIENT_ABORT_STATUS = 499


# ---- TokenizerManager / Engine -> Scheduler -------------------------------------------------
@dataclass
class TokenizedGenerateReq:
    """One generation request, validated by the front end (``n > 1`` arrives expanded into ``n`` requests)."""

    rid: str
    input_ids: np.ndarray  # int32 [prompt_len]
    sampling_params: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1  # -1: SGLang's default, (None, last prompt token); k: from position k
    top_logprobs_num: int = 0
    stream: bool = False
    # Program graphs: keep this request's final context locked in the radix tree until
    # ``pin_children`` requests that list its rid in ``unpin_rids`` have been admitted.
    pin_children: int = 0
    unpin_rids: list[str] = field(default_factory=list)
    pin_timeout_s: float | None = None  # how long the pin may last; None: the server's pin_timeout_s
    # The client's rid when this is one sample of an ``n > 1`` request (its parent): aborting the
    # parent aborts every sample.
    group_rid: str | None = None
    priority: int | None = None  # SGLang's; used only with --enable-priority-scheduling (None: 0)
    # A vision-language model's images: ``input_ids`` holds the processor's image token at their
    # positions; the scheduler swaps in hash-derived pads (``runtime/multimodal/items.py``).
    mm_inputs: MultimodalInputs | None = None
    lora_name: str | None = None  # the LoRA adapter to serve it with (None: the base model)


@dataclass
class AbortReq:
    rid: str


@dataclass
class ReleasePinsReq:
    """A child request that the front end rejected (so it never reaches the scheduler): release one
    unit of each parent pin named in ``unpin_rids``, as its admission would have."""

    unpin_rids: list[str]


@dataclass
class LoRAAdapterReq:
    """Load the PEFT adapter at ``path`` as ``name``, or (``path`` None) unload ``name``."""

    name: str
    path: str | None = None


@dataclass
class FlushCacheReq:
    empty_cache: bool = False  # also return the device allocator's cached blocks (CUDA) to the driver


@dataclass
class GetStatsReq:
    tree_nodes: int = 0  # > 0: also a radix tree snapshot of at most this many nodes, and the batch


@dataclass
class UpdateWeightsReq:
    """Load new weights of the same architecture and shapes (``/update_weights_from_disk``)."""

    model_path: str
    load_format: str | None = None


@dataclass
class ProfileReq:
    """Start (``output_dir``, ``num_steps``, ``activities``) or stop the torch profiler."""

    action: Literal["start", "stop"]
    output_dir: str | None = None
    num_steps: int | None = None
    activities: list[str] | None = None


# ---- Scheduler -> Detokenizer / Engine ------------------------------------------------------
# The logprob fields of ``ReqTokenOut``, passed on as deltas (only the new positions).
LOGPROB_FIELDS = (
    "input_token_logprobs",
    "input_top_logprobs",
    "output_token_logprobs",
    "output_top_logprobs",
)
# SGLang's names for a speculating request's counts in meta_info (``SpecState.meta_info``).
SPEC_META_FIELDS = (
    "spec_verify_ct",
    "spec_draft_token_num",
    "spec_accept_token_num",
    "spec_accept_rate",
    "spec_accept_length",
)


@dataclass
class EncodeReq:
    """Embed (``kind="embed"``) or score (``"classify"``) whole sequences: prefill only, no KV kept.

    ``token_type_ids`` (encoders' sentence pairs) is parallel to ``input_ids`` or None; ``dimensions``
    truncates embeddings (Matryoshka). Answered by one ``EncodeOut``, in order of arrival."""

    rid: str
    kind: Literal["embed", "classify"]
    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None = None
    dimensions: int | None = None


@dataclass
class EncodeOut:
    """One vector per sequence (embeddings, or the classification head's logits), or ``error``."""

    rid: str
    vectors: list[list[float]] = field(default_factory=list)
    error: str = ""
    status: int = 400


@dataclass
class ReqTokenOut:
    """New tokens of one request since its last output."""

    rid: str
    new_token_ids: np.ndarray  # int32
    finished: bool
    # {"type": "stop", "matched": ...} | {"type": "length", ...} | {"type": "abort", "message": ...}
    finish_reason: dict[str, Any] | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    # logprobs (present only when asked): lists of (logprob, token_id); top: per position a list
    # of (logprob, token_id)
    input_token_logprobs: list[tuple[float | None, int]] | None = None
    input_top_logprobs: list[list[tuple[float, int]] | None] | None = None
    output_token_logprobs: list[tuple[float, int]] | None = None  # only the new tokens
    output_top_logprobs: list[list[tuple[float, int]]] | None = None  # only the new tokens
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    stop_strings: list[str] = field(default_factory=list)
    no_stop_trim: bool = False
    first_token_at: float | None = None  # time.perf_counter() (system-wide) of the first output token
    # SGLang's speculative meta_info fields (spec_verify_ct, ...), on a finished speculating request
    spec_meta: dict[str, float | int] | None = None


@dataclass
class BatchTokenOut:
    outs: list[ReqTokenOut]


@dataclass
class LoRAAdapterOut:
    """The outcome of a ``LoRAAdapterReq``; ``adapters``: what is loaded afterwards."""

    success: bool
    message: str = ""
    adapters: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FlushCacheOut:
    success: bool
    message: str = ""


@dataclass
class UpdateWeightsOut:
    success: bool
    message: str = ""
    busy: bool = False  # requests still run: the sender retries (new ones wait meanwhile)


@dataclass
class ProfileOut:
    success: bool
    message: str = ""


@dataclass
class StatsOut:
    stats: dict[str, Any]


# ---- Detokenizer -> TokenizerManager --------------------------------------------------------
@dataclass
class ReqTextOut:
    """Cumulative text of one request (never moves backwards) plus the token-level fields."""

    rid: str
    text: str
    output_ids: np.ndarray  # all output ids so far
    finished: bool
    meta_info: dict[str, Any]
    first_token_at: float | None = None  # passed on from ``ReqTokenOut`` (metrics)


@dataclass
class BatchTextOut:
    outs: list[ReqTextOut]


@dataclass
class Heartbeat:
    """Sent by the scheduler loop about once a second: ``/health`` fails when they stop coming."""

    sent_at: float


@dataclass
class SchedulerDied:
    """Sent by a child process's guard before it exits on an exception."""

    where: str
    traceback: str


def expand_parallel_samples(req: TokenizedGenerateReq) -> list[TokenizedGenerateReq]:
    """Split ``n > 1`` into ``n`` requests (seeds ``seed + i``) under the internal ids
    ``request_ids.sample_rid(rid, i)``, each naming ``rid`` as its ``group_rid``; they share the
    prompt's KV through the radix cache. Front ends merge the outputs back in order."""
    n = req.sampling_params.n
    if n == 1:
        return [req]
    seed = req.sampling_params.seed
    out = []
    for i in range(n):
        params = dataclasses.replace(req.sampling_params, n=1, seed=None if seed is None else seed + i)
        out.append(
            dataclasses.replace(req, rid=sample_rid(req.rid, i), group_rid=req.rid, sampling_params=params)
        )
    return out
