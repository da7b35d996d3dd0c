"""``Runtime``: start a local radixlm server subprocess and talk to it over HTTP."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from radixlm.frontend.backends.runtime_endpoint import RuntimeEndpoint
from radixlm.frontend.chat_template import ChatTemplate

if TYPE_CHECKING:
    from radixlm.runtime.server.launch import ServerHandle


class Runtime(RuntimeEndpoint):
    """``Runtime(model_path="HuggingFaceTB/SmolLM2-135M-Instruct", **server_args)`` (or ``model=``;
    default: the default model): a server of our own, shut down with ``shutdown()`` or by leaving
    a ``with`` block."""

    name = "Runtime"

    def __init__(
        self, model: str | None = None, chat_template: str | ChatTemplate | None = None, **server_args: Any
    ) -> None:
        from radixlm.runtime.server.launch import launch_server

        server = launch_server(model=model, **server_args)
        self._server: ServerHandle | None = server
        super().__init__(server.url, api_key=server_args.get("api_key"), chat_template=chat_template)

    @property
    def endpoint(self) -> RuntimeEndpoint:
        """SGLang compatibility: the endpoint backend (this object)."""
        return self

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
