"""The one interface through which the language talks to a runtime.

A backend answers /generate-style requests (see ``radixlm.program.protocols`` for their shape),
optionally streams them, optionally executes a whole compiled request graph next to the KV cache,
and reports the chat template its model was trained with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from radixlm.frontend.chat_template import ChatTemplate, from_jinja, get_chat_template
from radixlm.frontend.errors import UnsupportedFeatureError
from radixlm.program.choices import method_name
from radixlm.program.context import Context
from radixlm.program.protocols import Request, drive, select_protocol


class Backend:
    """Base class; subclasses implement ``generate`` and ``model_info`` at least."""

    #: Short name used in error messages.
    name = "backend"
    #: Whether ``run_graph`` can execute compiled programs.
    supports_graphs = False
    #: Whether gen requests must carry the conversation as ``messages`` (chat-completion APIs).
    chat_mode = False
    #: Whether ``@function(num_api_spec_tokens=...)`` speculates on this backend (remote APIs; see
    #: ``radixlm.frontend.api_speculation``). The others keep their prefix cache and ignore it.
    api_speculation = False

    def __init__(self, chat_template: str | ChatTemplate | None = None) -> None:
        self._chat_template_override = chat_template
        self._chat_template: ChatTemplate | None = None

    # ---- generation -------------------------------------------------------------------------
    def generate(self, req: Request) -> Any:
        """Answer one /generate request (a list of responses for a batch or ``n > 1``)."""
        raise NotImplementedError

    async def agenerate(self, req: Request) -> Any:
        """``generate`` on asyncio; the default runs the blocking call in a worker thread."""
        return await asyncio.to_thread(self.generate, req)

    def generate_stream(self, req: Request) -> Iterator[dict[str, Any]]:
        """Responses with cumulative text as tokens arrive; the last one is final."""
        yield self.generate(req)

    def select(
        self, context: Context, choices: list[str], method: Any, messages: list | None = None
    ) -> tuple[str, dict]:
        """Pick a choice continuing ``context``; returns ``(choice, meta_info)``."""
        value, meta, _ = drive(select_protocol(context, choices, method_name(method)), self.generate)
        return value, meta

    def cache_prefix(self, context: Context) -> None:
        """Prefill ``context`` without generating, so the forks that continue it share its KV."""
        self.generate({"input_segments": list(context), "sampling_params": {"max_new_tokens": 0}})

    def check_request(self, req: Request) -> None:
        """Raise ``UnsupportedFeatureError`` for what this backend cannot serve."""

    def image_input(self, ref: str | bytes) -> tuple[str, str]:
        """(the text placeholder the prompt carries, what the request's ``image_data`` carries) for
        one image; raises ``UnsupportedFeatureError`` where images are not served."""
        model = self.model_info().get("model_path") or self.model_info().get("model") or "the model"
        raise UnsupportedFeatureError(self.name, "image inputs", f"{model} is a text-only model")

    # ---- whole programs ---------------------------------------------------------------------
    def run_graph(self, graph: dict[str, Any]) -> dict[str, Any] | None:
        """Execute a compiled request graph; None when this backend cannot (use the interpreter)."""
        return None

    async def arun_graph(self, graph: dict[str, Any]) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.run_graph, graph)

    # ---- model and server -------------------------------------------------------------------
    def model_info(self) -> dict[str, Any]:
        raise NotImplementedError

    def get_model_name(self) -> str:
        """The served model's name as the server reports it (SGLang's backend method)."""
        info = self.model_info()
        return str(info.get("model_path") or info.get("model") or "")

    def get_chat_template(self) -> ChatTemplate:
        """SGLang's backend method: ``chat_template``."""
        return self.chat_template

    def get_server_info(self) -> dict[str, Any]:
        return {}

    def flush_cache(self, empty_cache: bool = False) -> Any:
        return None

    def shutdown(self) -> None:
        """Release what the backend started (nothing by default)."""

    @property
    def chat_template(self) -> ChatTemplate:
        """The override if given, else the template the server reports, else the ``default`` one."""
        if self._chat_template is None:
            self._chat_template = self._resolve_chat_template()
        return self._chat_template

    def _resolve_chat_template(self) -> ChatTemplate:
        override = self._chat_template_override
        if isinstance(override, ChatTemplate):
            return override
        if isinstance(override, str):
            return get_chat_template(override)
        info = self.model_info()
        source = info.get("chat_template")
        if source:
            return from_jinja(source, name=str(info.get("model_path", "model")), special=info)
        return get_chat_template("default")
