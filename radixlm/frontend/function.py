"""``SglFunction``: a program made with ``@function``, and the ways to run it.

``run()`` picks the path itself: a static program (no Python control flow reading generated
values) is traced, compiled to a request graph and executed whole by the runtime, and its state is
rebuilt locally from the results; anything else runs in the interpreter. With greedy decoding both
paths give the same variables.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.compiled import CompiledFunction
from radixlm.frontend.compiler import compile_program
from radixlm.frontend.default_backend import resolve_backend
from radixlm.frontend.errors import DynamicProgramError, ProgramError, UnsupportedFeatureError
from radixlm.frontend.global_config import global_config
from radixlm.frontend.interpreter import RunContext, StreamExecutor
from radixlm.frontend.program_ir import ProgramIR
from radixlm.frontend.replay import arun_graph, replay, run_graph
from radixlm.frontend.state import ProgramState
from radixlm.frontend.tracer import ArgumentFormatError, trace_call, trace_program, tracing
from radixlm.program.protocols import adrive, drive
from radixlm.program.sampling import RUN_DEFAULTS, run_defaults, split_run_defaults

EXECUTION_PATHS = ("auto", "graph", "interpreter")
MIN_CACHED_PREFIX = 8  # characters: shorter shared prefixes are not worth a prefill request
#: The graph path of one run: yields the compiled graph, receives the backend's result, returns the
#: replayed state (or ``None``: run the interpreter). See ``SglFunction._graph_attempt``.
GraphAttempt = Generator[dict[str, Any], dict[str, Any] | None, ProgramState | None]
#: The backend of the program running in the interpreter in this thread: a ``@function`` it calls
#: runs there too.
_running_backend: contextvars.ContextVar[Backend | None] = contextvars.ContextVar(
    "radixlm_backend", default=None
)


class SglFunction:
    """A program: ``func(s, *args, **kwargs)`` appends to the state ``s``."""

    def __init__(
        self,
        func: Callable[..., Any],
        num_api_spec_tokens: int | None = None,
        bind_arguments: dict[str, Any] | None = None,
    ) -> None:
        self.func = func
        self.num_api_spec_tokens = num_api_spec_tokens
        self.bind_arguments = dict(bind_arguments or {})
        params = list(inspect.signature(func).parameters.values())[1:]
        self.arg_names = [p.name for p in params]
        #: Default values of the trailing arguments that have one (SGLang's ``arg_defaults``).
        self.arg_defaults = [p.default for p in params if p.default is not p.empty]
        functools.update_wrapper(self, func)

    def bind(self, **kwargs: Any) -> SglFunction:
        """A copy with some arguments fixed."""
        unknown = sorted(set(kwargs) - set(self.arg_names))
        if unknown:
            raise TypeError(f"{self.func.__name__}() has no argument(s) {', '.join(unknown)}")
        return SglFunction(self.func, self.num_api_spec_tokens, {**self.bind_arguments, **kwargs})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the program; called by a program being traced, trace it into that program (and
        return its traced state, as SGLang does). Called by a program running in the
        interpreter, it runs on that program's backend unless given one."""
        if tracing():
            kwargs.pop("backend", None)
            return trace_call(self.func, args, {**self.bind_arguments, **kwargs})
        if kwargs.get("backend") is None and _running_backend.get() is not None:
            kwargs["backend"] = _running_backend.get()
        return self.run(*args, **kwargs)

    # ---- running ----------------------------------------------------------------------------
    def run(
        self,
        *args: Any,
        max_new_tokens: int = 128,
        n: int = 1,
        stop: str | list[str] | None = None,
        stop_token_ids: list[int] | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        min_p: float = 0.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        ignore_eos: bool = False,
        return_logprob: bool | None = None,
        logprob_start_len: int | None = None,
        top_logprobs_num: int | None = None,
        return_text_in_logprobs: bool | None = None,
        stream: bool = False,
        backend: Backend | None = None,
        use_thread: bool = True,
        execution: str = "auto",
        **kwargs: Any,
    ) -> ProgramState:
        """Run the program once and return its state (raises ``ProgramError`` if a generation
        failed). ``stream=True`` returns at once; read ``state.text_iter()``. ``execution``:
        ``auto`` (default), ``graph`` (compiled, or raise) or ``interpreter``."""
        defaults = run_defaults(
            {
                "max_new_tokens": max_new_tokens,
                "n": n,
                "stop": stop,
                "stop_token_ids": stop_token_ids,
                "temperature": temperature,
                "top_p": top_p,
                "top_k": top_k,
                "min_p": min_p,
                "frequency_penalty": frequency_penalty,
                "presence_penalty": presence_penalty,
                "ignore_eos": ignore_eos,
                "return_logprob": return_logprob,
                "logprob_start_len": logprob_start_len,
                "top_logprobs_num": top_logprobs_num,
                "return_text_in_logprobs": return_text_in_logprobs,
            }
        )
        return self._run_one(args, kwargs, defaults, resolve_backend(backend), stream, use_thread, execution)

    def run_batch(
        self,
        batch_kwargs: list[dict[str, Any] | tuple],
        *,
        backend: Backend | None = None,
        num_threads: str | int = "auto",
        progress_bar: bool = False,
        generator_style: bool = False,
        execution: str = "auto",
        **sampling_defaults: Any,
    ) -> list[ProgramState] | Iterator[ProgramState]:
        """Run the program on each argument dict; states come back in input order. The traced
        shared prefix of the batch is prefilled once first. ``num_threads="auto"`` uses up to 64
        workers (not one thread per program); ``progress_bar`` shows a tqdm bar. If programs fail,
        raises ``ProgramError`` for the first failure after all have finished."""
        defaults = run_defaults(sampling_defaults, strict=True)
        be = resolve_backend(backend)
        items = [_as_call(b) for b in batch_kwargs]
        if not items:
            return iter([]) if generator_style else []
        if global_config.enable_precache_with_tracing:
            self._warm_cache(items, be)
        workers = min(len(items), 64) if num_threads == "auto" else max(1, int(num_threads))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="radixlm-batch")
        futures = [pool.submit(self._run_one, a, k, defaults, be, False, False, execution) for a, k in items]
        pool.shutdown(wait=False)
        if generator_style:
            return (f.result() for f in futures)
        bar = _progress(len(items)) if progress_bar else None
        lock = threading.Lock()
        if bar is not None:
            for f in futures:
                f.add_done_callback(lambda _f: _tick(bar, lock))
        errors = [(i, f.exception()) for i, f in enumerate(futures) if f.exception() is not None]
        if bar is not None:
            bar.close()
        if errors:
            i, exc = errors[0]
            raise ProgramError(
                f"{len(errors)} of {len(items)} programs failed; the first (#{i}): {exc}"
            ) from exc
        return [f.result() for f in futures]

    async def arun(
        self, *args: Any, backend: Backend | None = None, execution: str = "auto", **kwargs: Any
    ) -> ProgramState:
        """``run`` on asyncio. Static programs await the runtime directly; dynamic ones run the
        interpreter in a worker thread."""
        defaults, kwargs = split_run_defaults(kwargs)
        be = resolve_backend(backend)
        attempt = self._graph_attempt(args, kwargs, defaults, be, execution, stream=False)
        state = await adrive(attempt, functools.partial(arun_graph, be))
        if state is not None:
            return state
        return await asyncio.to_thread(
            self._interpret, args, {**self.bind_arguments, **kwargs}, defaults, be, False, True
        )

    async def arun_batch(
        self,
        batch_kwargs: list[dict[str, Any] | tuple],
        *,
        backend: Backend | None = None,
        max_concurrency: int = 64,
        execution: str = "auto",
        **sampling_defaults: Any,
    ) -> list[ProgramState]:
        """``run_batch`` on asyncio; raises ``ProgramError`` for the first failure."""
        be = resolve_backend(backend)
        items = [_as_call(b) for b in batch_kwargs]
        if items and global_config.enable_precache_with_tracing:
            await asyncio.to_thread(self._warm_cache, items, be)
        gate = asyncio.Semaphore(max_concurrency)

        async def one(args: tuple, kwargs: dict[str, Any]) -> ProgramState:
            async with gate:
                return await self.arun(*args, backend=be, execution=execution, **kwargs, **sampling_defaults)

        results = await asyncio.gather(*(one(a, k) for a, k in items), return_exceptions=True)
        states: list[ProgramState] = []
        for i, r in enumerate(results):
            if isinstance(r, BaseException):
                raise ProgramError(f"program #{i} of {len(items)} failed: {r}") from r
            states.append(r)
        return states

    # ---- tracing and compiling --------------------------------------------------------------
    def trace(self, *args: Any, backend: Any | None = None, **kwargs: Any) -> ProgramIR:
        """The program's IR; arguments not given become placeholders (``print()`` it, ``to_dot()``,
        or ``last_node.print_graph_dfs()``). ``ir.is_static`` tells whether it compiles to a
        request graph. ``backend`` is accepted for SGLang's signature (roles stay unrendered in
        the IR). An f-string over an argument placeholder raises ``TypeError``."""
        return trace_program(self.func, args, {**self.bind_arguments, **kwargs}, placeholders=True)

    def compile(self, *args: Any, backend: Any | None = None, **kwargs: Any) -> CompiledFunction:
        """Trace once and return a ``CompiledFunction`` (``run(**arguments)``, ``run_batch``,
        ``print_graph()``; ``graph`` is the JSON request graph). Arguments given here are fixed;
        the rest are bound at each run. Sampling keywords here are the compiled defaults. An
        f-string over an argument not given raises ``TypeError``."""
        sampling = {k: v for k, v in kwargs.items() if k in RUN_DEFAULTS}
        fixed = {**self.bind_arguments, **dict(zip(self.arg_names, args))}
        fixed.update({k: v for k, v in kwargs.items() if k not in RUN_DEFAULTS})
        ir = trace_program(self.func, (), fixed, placeholders=True)
        be = resolve_backend(backend) if backend is not None else None
        return CompiledFunction(self, ir, fixed, sampling, be)

    def cache(self, backend: Any | None = None) -> str:
        """Prefill the text the program starts with whatever its arguments (found by tracing with
        placeholders), so later runs reuse its KV cache; returns that text ("" if too short)."""
        be = resolve_backend(backend)
        try:
            ir = trace_program(self.func, (), dict(self.bind_arguments), placeholders=True)
        except ArgumentFormatError:
            return ""
        prefix = ir.leading_text(be.chat_template)
        if len(prefix) < MIN_CACHED_PREFIX:
            return ""
        be.cache_prefix([{"text": prefix}])
        return prefix

    # ---- internals --------------------------------------------------------------------------
    def _run_one(
        self,
        args: tuple,
        kwargs: dict[str, Any],
        defaults: dict[str, Any],
        backend: Backend,
        stream: bool,
        use_thread: bool,
        execution: str,
    ) -> ProgramState:
        attempt = self._graph_attempt(args, kwargs, defaults, backend, execution, stream)
        state = drive(attempt, functools.partial(run_graph, backend))
        if state is None:
            state = self._interpret(
                args, {**self.bind_arguments, **kwargs}, defaults, backend, stream, use_thread
            )
        if global_config.verbosity >= 2 and not stream:
            print(state.text())
        return state

    def _graph_attempt(
        self,
        args: tuple,
        kwargs: dict[str, Any],
        defaults: dict[str, Any],
        backend: Backend,
        execution: str,
        stream: bool,
    ) -> GraphAttempt:
        """Try the graph path (``run`` drives this with ``drive``, ``arun`` with ``adrive``).

        Traces and compiles the program, yields the request graph, and receives the backend's
        result; returns the state replayed from it, or ``None`` when the run falls back to the
        interpreter (a dynamic program, a backend without graphs, ``stream=True``). Raises
        instead of falling back under ``execution="graph"``."""
        if execution not in EXECUTION_PATHS:
            raise ValueError(f"execution must be one of {', '.join(EXECUTION_PATHS)}, not {execution!r}")
        if execution == "interpreter":
            return None
        if stream or not backend.supports_graphs:
            if execution == "graph":
                feature = "request graphs" + (" with stream=True" if stream else "")
                raise UnsupportedFeatureError(backend.name, feature)
            return None
        ir = trace_program(self.func, args, {**self.bind_arguments, **kwargs}, placeholders=False)
        try:
            graph = compile_program(ir, backend.chat_template, defaults)
        except DynamicProgramError:
            if execution == "graph":
                raise
            return None
        result = yield graph
        if result is not None:
            return replay(ir, graph, result, backend, defaults)
        if execution == "graph":
            raise UnsupportedFeatureError(backend.name, "request graphs")
        return None

    def _interpret(
        self,
        args: tuple,
        kwargs: dict[str, Any],
        defaults: dict[str, Any],
        backend: Backend,
        stream: bool,
        use_thread: bool,
    ) -> ProgramState:
        ctx = RunContext(
            backend, defaults, backend.chat_template, stream=stream, api_spec_tokens=self.num_api_spec_tokens
        )
        state = ProgramState(StreamExecutor(ctx, use_thread=use_thread or stream))
        if stream:
            threading.Thread(
                target=self._body_then_end,
                args=(state, ctx, args, kwargs),
                daemon=True,
                name="radixlm-program",
            ).start()
            return state
        token = _running_backend.set(backend)
        try:
            state.ret_value = self.func(state, *args, **kwargs)
            state.sync()
        finally:
            _running_backend.reset(token)
            ctx.end_all()
        return state

    def _body_then_end(
        self, state: ProgramState, ctx: RunContext, args: tuple, kwargs: dict[str, Any]
    ) -> None:
        _running_backend.set(ctx.backend)  # this thread runs only this program
        try:
            state.ret_value = self.func(state, *args, **kwargs)
            state.executor.sync()
        except BaseException as exc:  # noqa: BLE001 - surfaces from text_iter()/sync()
            if state.executor.error_ is None:
                state.executor.error_ = exc
        finally:
            ctx.end_all()

    def _warm_cache(self, items: list[tuple[tuple, dict[str, Any]]], backend: Backend) -> None:
        """Prefill the text every program of the batch starts with, once."""
        if len(items) < 2:
            return
        texts = [
            trace_program(self.func, a, {**self.bind_arguments, **k}, placeholders=False).leading_text(
                backend.chat_template
            )
            for a, k in items
        ]
        shared = os.path.commonprefix(texts)
        if len(shared) >= MIN_CACHED_PREFIX:
            backend.cache_prefix([{"text": shared}])


def _as_call(item: dict[str, Any] | tuple | list) -> tuple[tuple, dict[str, Any]]:
    if isinstance(item, dict):
        return (), dict(item)
    if isinstance(item, (tuple, list)):
        return tuple(item), {}
    raise TypeError(f"run_batch takes argument dicts (or tuples), not {type(item).__name__}")


def _progress(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="programs")


def _tick(bar: Any, lock: threading.Lock) -> None:
    with lock:
        bar.update(1)
