"""The in-process engine: the scheduler loop on a background thread, no HTTP, no extra processes.

    engine = radixlm.Engine(model="smollm2-135m")
    out = engine.generate("The capital of France is", {"max_new_tokens": 16, "temperature": 0})
    print(out["text"], out["meta_info"]["cached_tokens"])
"""
from __future__ import annotations

import radixlm._env  # noqa: F401  (thread settings before torch)

import asyncio
import itertools
import logging
import queue
import threading
import time
import traceback
import uuid
from concurrent.futures import Future
from typing import Any, AsyncIterator, Callable, Iterator, Optional, Union

import numpy as np

from radixlm.runtime.detokenizer.incremental import IncrementalDetokenizer
from radixlm.runtime.messages import (
    AbortReq,
    FlushCacheReq,
    GetStatsReq,
    ReqTokenOut,
    TokenizedGenerateReq,
    expand_parallel_samples,
)
from radixlm.runtime.output_format import format_logprobs, format_top_logprobs, public_finish_reason
from radixlm.runtime.sampling.sampling_params import SamplingParams, as_sampling_params
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.server_info import build_server_info

logger = logging.getLogger(__name__)

Prompt = Union[str, list[str], None]


class EngineError(RuntimeError):
    """The engine's loop died; every pending and later call raises this with the cause."""


class _Tracker:
    """Collects one request's outputs on the loop thread and hands them to the caller's sink."""

    def __init__(self, rid: str, tokenizer, params: SamplingParams, return_text_in_logprobs: bool,
                 sink: Callable[[Optional[dict]], None], stream: bool) -> None:
        self.rid = rid
        self.tokenizer = tokenizer
        self.with_text = return_text_in_logprobs
        self.sink = sink
        self.stream = stream
        self.detok = IncrementalDetokenizer(tokenizer, params.skip_special_tokens,
                                            params.spaces_between_special_tokens, params.stop, params.no_stop_trim)
        self.output_ids: list[int] = []
        self.meta: dict[str, Any] = {"id": rid, "input_token_logprobs": [], "output_token_logprobs": [],
                                     "input_top_logprobs": [], "output_top_logprobs": []}
        self.start = time.monotonic()

    def on_output(self, out: ReqTokenOut) -> None:
        ids = out.new_token_ids.tolist()
        self.output_ids.extend(ids)
        if out.finished:
            self.detok.finish(out.finish_reason, ids)
        else:
            self.detok.feed(ids)
        meta = self.meta
        meta.update(finish_reason=public_finish_reason(out.finish_reason), prompt_tokens=out.prompt_tokens,
                    completion_tokens=out.completion_tokens, cached_tokens=out.cached_tokens,
                    e2e_latency=time.monotonic() - self.start)
        if out.input_token_logprobs is not None:
            meta["input_token_logprobs"] = format_logprobs(out.input_token_logprobs, self.tokenizer, self.with_text)
            meta["input_top_logprobs"] = format_top_logprobs(out.input_top_logprobs, self.tokenizer, self.with_text)
        if out.output_token_logprobs:
            meta["output_token_logprobs"] += format_logprobs(out.output_token_logprobs, self.tokenizer, self.with_text)
        if out.output_top_logprobs:
            meta["output_top_logprobs"] += format_top_logprobs(out.output_top_logprobs, self.tokenizer, self.with_text)
        if self.stream or out.finished:
            self.sink(self.snapshot(out))

    def snapshot(self, out: ReqTokenOut) -> dict:
        result = {"text": self.detok.text, "output_ids": list(self.output_ids), "meta_info": dict(self.meta)}
        if out.finished and (out.finish_reason or {}).get("type") == "abort":
            result["error"] = out.finish_reason
        return result


class Engine:
    """Serve many requests at once in this process, sharing KV through the radix cache.

    Thread-safe: ``generate`` may be called from many threads; ``async_generate`` from any event loop.
    Keyword arguments are ``ServerArgs`` fields (``kv_cache_gb``, ``disable_radix_cache``, ...).
    """

    def __init__(self, model: str = "smollm2-135m", **server_args: Any) -> None:
        from radixlm.runtime.scheduler.scheduler import Scheduler

        self.server_args = ServerArgs.from_kwargs(model=model, **server_args)
        self.scheduler = Scheduler(self.server_args)
        self.tokenizer = self.scheduler.tokenizer
        self._inbox: "queue.Queue[tuple[Any, Optional[Future]]]" = queue.Queue()
        self._trackers: dict[str, _Tracker] = {}
        self._rid_counter = itertools.count()
        self._error: Optional[BaseException] = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="radixlm-engine", daemon=True)
        self._thread.start()

    # ---- public API ----------------------------------------------------------------------------
    def generate(
        self,
        prompt: Prompt = None,
        sampling_params: Union[dict, SamplingParams, list, None] = None,
        input_ids: Optional[Union[list[int], list[list[int]]]] = None,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
        return_text_in_logprobs: bool = False,
        stream: bool = False,
        rid: Optional[Union[str, list[str]]] = None,
        pin_children: int = 0,
        unpin_rids: Optional[list[str]] = None,
    ) -> Union[dict, list[dict], Iterator[dict]]:
        """Generate for one prompt (returns a dict) or a list of prompts (returns a list of dicts).

        A single prompt with ``n > 1`` returns a list of ``n`` results. With ``stream=True`` (single
        prompt, n == 1) returns an iterator of dicts with the cumulative text.
        Raises ``ValueError`` naming the bad parameter for invalid input. ``pin_children`` and
        ``unpin_rids`` keep a program node's context locked in the cache until its children are
        admitted (see ``TokenizedGenerateReq``).
        """
        reqs, single = self._build_requests(prompt, input_ids, sampling_params, return_logprob,
                                            logprob_start_len, top_logprobs_num, stream, rid,
                                            pin_children, unpin_rids)
        if stream:
            return self._stream_sync(reqs[0], return_text_in_logprobs)
        waiters = [self._submit(r, return_text_in_logprobs) for r in reqs]
        return _collect([w.result() for w in waiters], single)

    async def async_generate(self, prompt: Prompt = None, sampling_params=None, input_ids=None,
                             return_logprob: bool = False, logprob_start_len: int = -1,
                             top_logprobs_num: int = 0, return_text_in_logprobs: bool = False,
                             stream: bool = False, rid=None, pin_children: int = 0,
                             unpin_rids: Optional[list[str]] = None):
        """The asyncio version of ``generate``; with ``stream=True`` returns an async iterator."""
        reqs, single = self._build_requests(prompt, input_ids, sampling_params, return_logprob,
                                            logprob_start_len, top_logprobs_num, stream, rid,
                                            pin_children, unpin_rids)
        if stream:
            return self._stream_async(reqs[0], return_text_in_logprobs)
        futures = [asyncio.wrap_future(self._submit(r, return_text_in_logprobs)) for r in reqs]
        return _collect(list(await asyncio.gather(*futures)), single)

    def abort(self, rid: str) -> None:
        self._inbox.put((AbortReq(rid), None))

    def flush_cache(self) -> bool:
        """Drop the prefix cache; False (and nothing done) while requests are running."""
        return self._call(FlushCacheReq()).success

    def get_server_info(self) -> dict[str, Any]:
        from radixlm import __version__

        return build_server_info(self.server_args.to_dict(), self.model_info(), self._call(GetStatsReq()).stats,
                                 __version__)

    def model_info(self) -> dict[str, Any]:
        return self.scheduler.model_info()

    def check_kv_integrity(self) -> None:
        """Assert that every KV slot is free, cached or owned by a running request (waits for idle)."""
        self._call(_IntegrityCheck())

    def shutdown(self) -> None:
        self._stopping.set()
        self._inbox.put((None, None))
        self._thread.join(timeout=30)
        self.scheduler.shutdown()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ---- request building ----------------------------------------------------------------------
    def _build_requests(self, prompt, input_ids, sampling_params, return_logprob, logprob_start_len,
                        top_logprobs_num, stream, rid, pin_children: int = 0,
                        unpin_rids: Optional[list[str]] = None) -> tuple[list[TokenizedGenerateReq], bool]:
        if (prompt is None) == (input_ids is None):
            raise ValueError("give exactly one of prompt or input_ids")
        if prompt is not None:
            single = isinstance(prompt, str)
            prompts = [prompt] if single else list(prompt)
            if not all(isinstance(p, str) for p in prompts):
                raise ValueError("prompt must be a string or a list of strings")
            ids_list = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
            texts: list[Optional[str]] = list(prompts)
        else:
            single = bool(input_ids) and not isinstance(input_ids[0], (list, tuple, np.ndarray))
            ids_list = [list(input_ids)] if single else [list(x) for x in input_ids]
            texts = [None] * len(ids_list)
        if not ids_list:
            raise ValueError("prompt must not be an empty list")
        for ids in ids_list:
            if len(ids) == 0:
                raise ValueError("prompt is empty: at least one token is needed")
        if isinstance(sampling_params, list):
            if len(sampling_params) != len(ids_list):
                raise ValueError("sampling_params list must match the number of prompts")
            params = [as_sampling_params(p) for p in sampling_params]
        else:
            params = [as_sampling_params(sampling_params)] * len(ids_list)
        if top_logprobs_num < 0:
            raise ValueError("top_logprobs_num must be >= 0")
        if not isinstance(pin_children, int) or pin_children < 0:
            raise ValueError("pin_children must be an integer >= 0")
        rids = rid if isinstance(rid, list) else [rid] * len(ids_list)
        reqs: list[TokenizedGenerateReq] = []
        for ids, text, p, r in zip(ids_list, texts, params, rids):
            r = r or f"eng-{next(self._rid_counter)}-{uuid.uuid4().hex[:8]}"
            base = TokenizedGenerateReq(r, np.asarray(ids, dtype=np.int32), p, return_logprob, logprob_start_len,
                                        top_logprobs_num, stream, text, pin_children, list(unpin_rids or []))
            reqs.extend(expand_parallel_samples(base))
        if len(reqs) > 1:
            single = False
        if stream and len(reqs) != 1:
            raise ValueError("stream=True takes a single prompt with n == 1")
        return reqs, single

    # ---- plumbing ------------------------------------------------------------------------------
    def _submit(self, req: TokenizedGenerateReq, with_text: bool, stream_sink=None) -> Future:
        self._check_alive()
        done: Future = Future()

        def sink(result: Optional[dict]) -> None:
            if stream_sink is not None:
                stream_sink(result)
            elif done.done():
                return
            elif result is None:  # the loop died
                done.set_exception(EngineError(f"the engine loop died: {self._error!r}"))
            elif result["meta_info"].get("finish_reason") is not None or "error" in result:
                done.set_result(result)

        self._inbox.put((("generate", req, with_text, sink), None))
        return done

    def _stream_sync(self, req: TokenizedGenerateReq, with_text: bool) -> Iterator[dict]:
        q: "queue.Queue[Optional[dict]]" = queue.Queue()
        self._submit(req, with_text, stream_sink=q.put)
        while True:
            item = q.get()
            if item is None:
                raise EngineError("the engine stopped") from self._error
            _raise_for_error(item)
            yield item
            if item["meta_info"].get("finish_reason") is not None:
                return

    async def _stream_async(self, req: TokenizedGenerateReq, with_text: bool) -> AsyncIterator[dict]:
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        self._submit(req, with_text, stream_sink=lambda item: loop.call_soon_threadsafe(q.put_nowait, item))
        while True:
            item = await q.get()
            if item is None:
                raise EngineError("the engine stopped") from self._error
            _raise_for_error(item)
            yield item
            if item["meta_info"].get("finish_reason") is not None:
                return

    def _call(self, msg: Any) -> Any:
        self._check_alive()
        fut: Future = Future()
        self._inbox.put((msg, fut))
        return fut.result()

    def _check_alive(self) -> None:
        if self._error is not None:
            raise EngineError(f"the engine loop died: {self._error!r}") from self._error
        if self._stopping.is_set():
            raise EngineError("the engine is shut down")

    def _loop(self) -> None:
        sched = self.scheduler
        deferred: list[tuple[Any, Future]] = []  # integrity checks wait for idle
        try:
            while not self._stopping.is_set():
                block = not sched.has_work() and not deferred
                items = []
                try:
                    items.append(self._inbox.get(timeout=0.05) if block else self._inbox.get_nowait())
                    while True:
                        items.append(self._inbox.get_nowait())
                except queue.Empty:
                    pass
                for msg, fut in items:
                    self._dispatch(msg, fut, deferred)
                for out in sched.step():
                    tracker = self._trackers.get(out.rid)
                    if tracker is not None:
                        tracker.on_output(out)
                        if out.finished:
                            del self._trackers[out.rid]
                if deferred and not sched.has_work():
                    for _, fut in deferred:
                        try:
                            sched.check_kv_integrity()
                            fut.set_result(True)
                        except BaseException as e:  # report to the caller, keep serving
                            fut.set_exception(e)
                    deferred = []
        except BaseException as e:
            logger.error("engine loop died:\n%s", traceback.format_exc())
            self._error = e
        finally:
            for tracker in self._trackers.values():
                tracker.sink(None)
            self._trackers.clear()
            for _, fut in deferred:
                fut.set_exception(EngineError("the engine stopped"))

    def _dispatch(self, msg: Any, fut: Optional[Future], deferred: list) -> None:
        if msg is None:
            return
        if isinstance(msg, tuple) and msg[0] == "generate":
            _, req, with_text, sink = msg
            self._trackers[req.rid] = _Tracker(req.rid, self.tokenizer, req.sampling_params, with_text, sink,
                                               req.stream)
            self.scheduler.handle(req)
            return
        if isinstance(msg, _IntegrityCheck):
            deferred.append((msg, fut))
            return
        try:
            reply = self.scheduler.handle(msg)
        except Exception as e:
            if fut is not None:
                fut.set_exception(e)
            return
        if fut is not None:
            fut.set_result(reply)


class _IntegrityCheck:
    pass


def _collect(results: list[dict], single: bool) -> Union[dict, list[dict]]:
    """Raise the first failed request's error; one result for a single prompt, else the list."""
    for r in results:
        _raise_for_error(r)
    return results[0] if single and len(results) == 1 else results


def _raise_for_error(result: dict) -> None:
    err = result.get("error")
    if err is None:
        return
    if err.get("status_code") == 400:
        raise ValueError(err.get("message", "invalid request"))
    raise RuntimeError(f"request {result['meta_info'].get('id')} failed: {err.get('message')}")
