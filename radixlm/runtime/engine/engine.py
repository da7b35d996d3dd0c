"""The in-process engine: the scheduler loop on a background thread, no HTTP, no extra processes.

engine = radixlm.Engine(model="smollm2-135m")
out = engine.generate("The capital of France is", {"max_new_tokens": 16, "temperature": 0})
print(out["text"], out["meta_info"]["cached_tokens"])
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import radixlm._env  # noqa: F401  (thread settings before torch)
from radixlm.runtime.engine.encode_api import EncodeMixin
from radixlm.runtime.engine.generate_args import GenerateArgs, InputIds, Prompt, SamplingParamsArg
from radixlm.runtime.engine.loop import EngineError, EngineLoop, GenerateSubmission, SchedulerCall
from radixlm.runtime.engine.result_stream import (
    AsyncResultStream,
    ResultStream,
    SyncResultStream,
    is_final,
    raise_for_error,
)
from radixlm.runtime.messages import (
    AbortReq,
    FlushCacheReq,
    GetStatsReq,
    ProfileReq,
    ReleasePinsReq,
    TokenizedGenerateReq,
    UpdateWeightsReq,
)
from radixlm.runtime.multimodal.image_source import ImagePolicy
from radixlm.runtime.multimodal.request_images import load_prompt_processor
from radixlm.runtime.requests.request_validation import ModelLimits
from radixlm.runtime.requests.server_info import build_server_info
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs
from radixlm.version import __version__

TOKEN_TEXT_CACHE_SIZE = 1 << 16
StreamKind = TypeVar("StreamKind", bound=ResultStream)


class Engine(EncodeMixin):
    """Serve many requests at once in this process, sharing KV through the radix cache.

    Thread-safe: ``generate`` may be called from many threads; ``async_generate`` from any event loop.
    Keyword arguments are ``ServerArgs`` fields (``kv_cache_gb``, ``disable_radix_cache``, ...).
    """

    def __init__(self, model: str | None = None, **server_args: Any) -> None:
        """``model`` (or SGLang's ``model_path``): a registry name, a directory, a .gguf file or a
        Hugging Face hub id; None is the default model."""
        self.server_args = ServerArgs.from_kwargs(model=model, **server_args)
        if self.server_args.dp_size > 1:
            raise ValueError(
                "dp_size > 1 needs the server (radixlm serve / Runtime); the in-process "
                "Engine runs one replica (tp_size works here)"
            )
        if self.server_args.node_rank > 0:
            raise ValueError(
                f"node_rank {self.server_args.node_rank}: a later node only runs its "
                "tensor-parallel ranks (radixlm serve --node-rank k); the Engine is node 0"
            )
        self.scheduler = Scheduler(self.server_args)
        self.tokenizer = self.scheduler.tokenizer
        self.limits = ModelLimits.from_model_info(self.scheduler.model_info(), self.server_args)
        self._token_text = functools.lru_cache(maxsize=TOKEN_TEXT_CACHE_SIZE)(self._decode_one)
        self._rid_counter = itertools.count()
        self._loop = EngineLoop(self.scheduler, self.tokenizer)
        self._images = (
            load_prompt_processor(self.scheduler.model_info()),
            ImagePolicy.from_server_args(self.server_args, trusted=True),
        )

    # ---- public API ----------------------------------------------------------------------------
    def generate(
        self,
        prompt: Prompt = None,
        sampling_params: SamplingParamsArg = None,
        input_ids: InputIds = None,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
        return_text_in_logprobs: bool = False,
        stream: bool = False,
        rid: str | list[str] | None = None,
        pin_children: int = 0,
        unpin_rids: list[str] | None = None,
        priority: int | None = None,
        image_data: Any = None,
    ) -> dict | list[dict] | Iterator[dict]:
        """Generate for one prompt (returns a dict) or a list of prompts (returns a list of dicts).

        A single prompt with ``n > 1`` returns a list of ``n`` results. With ``stream=True`` (single
        prompt, n == 1) returns an iterator of dicts with the cumulative text.
        Raises ``ValueError`` naming the bad parameter for invalid input. ``pin_children`` and
        ``unpin_rids`` keep a program node's context locked in the cache until its children are
        admitted (see ``TokenizedGenerateReq``). ``priority``: SGLang's, used with
        ``enable_priority_scheduling`` (``runtime/scheduler/priority.py``).
        ``image_data`` (a vision-language model): per prompt
        an image or a list (bytes, a path, a data URL, base64, a PIL image), one per image placeholder
        (``model_info()["image_token"]``) in the prompt text.
        """
        args = GenerateArgs(
            prompt,
            sampling_params,
            input_ids,
            return_logprob,
            logprob_start_len,
            top_logprobs_num,
            return_text_in_logprobs,
            stream,
            rid,
            pin_children,
            unpin_rids,
            priority,
            image_data,
        )
        reqs, single = self._requests(args)
        if stream:
            return self._stream(SyncResultStream, reqs[0], args.return_text_in_logprobs)
        waiters = [self._submit(r, args.return_text_in_logprobs) for r in reqs]
        return _collect([w.result() for w in waiters], single)

    async def async_generate(
        self,
        prompt: Prompt = None,
        sampling_params: SamplingParamsArg = None,
        input_ids: InputIds = None,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
        return_text_in_logprobs: bool = False,
        stream: bool = False,
        rid: str | list[str] | None = None,
        pin_children: int = 0,
        unpin_rids: list[str] | None = None,
        priority: int | None = None,
        image_data: Any = None,
    ) -> dict | list[dict] | AsyncIterator[dict]:
        """The asyncio version of ``generate``; with ``stream=True`` returns an async iterator."""
        args = GenerateArgs(
            prompt,
            sampling_params,
            input_ids,
            return_logprob,
            logprob_start_len,
            top_logprobs_num,
            return_text_in_logprobs,
            stream,
            rid,
            pin_children,
            unpin_rids,
            priority,
            image_data,
        )
        reqs, single = self._requests(args)
        if stream:
            return self._stream(AsyncResultStream, reqs[0], args.return_text_in_logprobs)
        futures = [asyncio.wrap_future(self._submit(r, args.return_text_in_logprobs)) for r in reqs]
        return _collect(list(await asyncio.gather(*futures)), single)

    def abort(self, rid: str) -> None:
        """Abort the request with client rid ``rid`` and every sample it spawned (nothing else)."""
        for internal_id in self._loop.family(rid):
            self._loop.post(SchedulerCall(AbortReq(internal_id)))

    def flush_cache(self, empty_cache: bool = False) -> bool:
        """Drop the prefix cache; False (and nothing done) while requests are running. With
        ``empty_cache``, CUDA's cached allocator blocks are released too."""
        return self._loop.call(FlushCacheReq(empty_cache=bool(empty_cache))).success

    def update_weights_from_disk(self, model_path: str, load_format: str | None = None) -> tuple[bool, str]:
        """Load a checkpoint of the same architecture and shapes, no restart: ``(success, message)``.
        Waits for the running requests to finish on the old weights; the prefix cache is dropped."""
        while (out := self._loop.call(UpdateWeightsReq(model_path, load_format))).busy:
            time.sleep(0.02)
        return out.success, out.message

    def start_profile(
        self, output_dir: str | None = None, num_steps: int | None = None, activities: list[str] | None = None
    ) -> None:
        """Start the torch profiler around the forward steps (``StepProfiler``); ValueError when it runs."""
        out = self._loop.call(ProfileReq("start", output_dir, num_steps, activities))
        if not out.success:
            raise ValueError(out.message)

    def stop_profile(self) -> str:
        """Stop the profiler and write its trace; returns the message naming the file."""
        out = self._loop.call(ProfileReq("stop"))
        if not out.success:
            raise ValueError(out.message)
        return out.message

    def get_server_info(self) -> dict[str, Any]:
        stats = self._loop.call(GetStatsReq()).stats
        return build_server_info(self.server_args.to_dict(), self.model_info(), stats, __version__)

    def model_info(self) -> dict[str, Any]:
        return self.scheduler.model_info()

    def check_kv_integrity(self) -> None:
        """Assert that every KV slot is free, cached or owned by a running request (waits for idle)."""
        self._loop.check_integrity()

    def shutdown(self) -> None:
        self._loop.stop()
        self.scheduler.shutdown()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # ---- plumbing ------------------------------------------------------------------------------
    def _requests(self, args: GenerateArgs) -> tuple[list[TokenizedGenerateReq], bool]:
        """The checked requests, their rids claimed; a rid in flight raises ``ValueError``."""
        self._check_logit_processors(args.sampling_params)
        if self.server_args.is_embedding:
            raise ValueError(
                "this engine serves embeddings (is_embedding=True): use encode, rerank or classify"
            )
        reqs, single = args.to_requests(
            self.tokenizer, self.limits, self._new_rid, self._release_pins, self._images
        )
        try:
            self._loop.reserve(reqs)
        except ValueError:
            for req in reqs:  # never admitted: release the parents' pins as a rejection would
                if req.unpin_rids:
                    self._release_pins(list(req.unpin_rids))
            raise
        return reqs, single

    def _check_logit_processors(self, sampling_params: Any) -> None:
        """A ``custom_logit_processor`` needs ``enable_custom_logit_processor``, as on the server."""
        for p in sampling_params if isinstance(sampling_params, list) else [sampling_params]:
            text = (
                p.get("custom_logit_processor")
                if isinstance(p, dict)
                else getattr(p, "custom_logit_processor", None)
            )
            if text is not None and not self.server_args.enable_custom_logit_processor:
                raise ValueError(
                    "custom_logit_processor is disabled: pass enable_custom_logit_processor=True"
                )

    def _release_pins(self, unpin_rids: list[str]) -> None:
        self._loop.post(SchedulerCall(ReleasePinsReq(unpin_rids)))

    def _new_rid(self) -> str:
        return f"eng-{next(self._rid_counter)}-{uuid.uuid4().hex[:8]}"

    def _decode_one(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def _submit(
        self,
        req: TokenizedGenerateReq,
        with_text: bool,
        stream_sink: Callable[[dict | None], None] | None = None,
    ) -> Future:
        """Hand ``req`` to the loop; the future resolves with its final result (unless streaming,
        where every result goes to ``stream_sink``)."""
        done: Future = Future()

        def sink(result: dict | None) -> None:
            if stream_sink is not None:
                stream_sink(result)
            elif done.done():
                return
            elif result is None:  # the loop died
                done.set_exception(EngineError(f"the engine loop died: {self._loop.error!r}"))
            elif is_final(result):
                done.set_result(result)

        self._loop.submit(GenerateSubmission(req, self._token_text if with_text else None, sink))
        return done

    def _stream(self, kind: type[StreamKind], req: TokenizedGenerateReq, with_text: bool) -> StreamKind:
        """``req``'s results as a stream of ``kind`` (submitted on its first read)."""
        return kind(lambda sink: self._submit(req, with_text, stream_sink=sink), lambda: self._loop.error)


def _collect(results: list[dict], single: bool) -> dict | list[dict]:
    """Raise the first failed request's error; one result for a single prompt, else the list."""
    for r in results:
        raise_for_error(r)
    return results[0] if single and len(results) == 1 else results
