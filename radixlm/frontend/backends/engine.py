"""The in-process backend: programs run against a ``radixlm.Engine`` in this process."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.chat_template import ChatTemplate
from radixlm.program.context import is_batch, to_ids
from radixlm.program.graph_executor import execute_program
from radixlm.program.protocols import Request
from radixlm.program.sampling import LOGPROB_KEYS

# Request fields passed to the engine as they are: logprob options and the graph executor's pins.
_ENGINE_KEYS = LOGPROB_KEYS + ("rid", "pin_children", "unpin_rids")


class EngineBackend(Backend):
    """Wraps an ``Engine`` (or builds one from a model name and runtime options).

    Compiled programs run through ``radixlm.program.graph_executor`` on the engine's asyncio
    API, exactly as the server runs ``POST /program``. Contexts (``input_segments``) become input
    ids here, each text segment tokenized on its own with the engine's tokenizer, as the server does.
    """

    name = "Engine"
    supports_graphs = True

    def __init__(
        self, engine: Any = None, chat_template: str | ChatTemplate | None = None, **server_args: Any
    ) -> None:
        super().__init__(chat_template)
        if engine is None or isinstance(engine, str):  # a model name (None: the default, or model_path=)
            from radixlm.runtime.engine import Engine

            engine = Engine(model=engine, **server_args)
            self._owns_engine = True
        else:
            self._owns_engine = False
        self.engine = engine

    def _kwargs(self, req: Request) -> dict[str, Any]:
        kwargs = {k: req[k] for k in _ENGINE_KEYS if k in req}
        contexts = req["input_segments"]
        kwargs["input_ids"] = [self._ids(c) for c in contexts] if is_batch(contexts) else self._ids(contexts)
        kwargs["sampling_params"] = req.get("sampling_params")
        return kwargs

    def _ids(self, context: list) -> list[int]:
        tokenizer = self.engine.tokenizer
        return to_ids(context, lambda text: tokenizer.encode(text, add_special_tokens=False))

    def generate(self, req: Request) -> Any:
        return self.engine.generate(**self._kwargs(req))

    async def agenerate(self, req: Request) -> Any:
        return await self.engine.async_generate(**self._kwargs(req))

    def generate_stream(self, req: Request) -> Iterator[dict[str, Any]]:
        return self.engine.generate(**self._kwargs(req), stream=True)

    def run_graph(self, graph: dict[str, Any]) -> dict[str, Any] | None:
        return run_coroutine(self.arun_graph(graph))

    async def arun_graph(self, graph: dict[str, Any]) -> dict[str, Any] | None:
        return await execute_program(graph, self.agenerate)

    def model_info(self) -> dict[str, Any]:
        return self.engine.model_info()

    def get_server_info(self) -> dict[str, Any]:
        return self.engine.get_server_info()

    def flush_cache(self, empty_cache: bool = False) -> Any:
        return self.engine.flush_cache(empty_cache=empty_cache)

    def shutdown(self) -> None:
        if self._owns_engine:
            self.engine.shutdown()


def run_coroutine(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine to completion from synchronous code, even inside a running event loop
    (then on a private thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="radixlm-graph")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
