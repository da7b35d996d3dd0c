"""An embedding server (``--is-embedding``) answers only the embedding routes, a generating server
only the generation routes: the other kind gets a 400 saying which server it reached."""

from __future__ import annotations

import json
from typing import Any

from radixlm.runtime.server.errors import error_body_for_path

EMBEDDING_PATHS = frozenset(
    {"/v1/embeddings", "/encode", "/v1/rerank", "/rerank", "/classify", "/v1/classify"}
)
GENERATION_PATHS = frozenset(
    {
        "/generate",
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/infill",
        "/program",
        "/ui/api/program",
        "/health_generate",
        "/open_session",
    }
)


def mode_error(path: str, is_embedding: bool) -> str | None:
    """Why ``path`` is not served by this kind of server, or None when it is."""
    if is_embedding and path in GENERATION_PATHS:
        return (
            f"{path}: this server serves an embedding model (--is-embedding); use /v1/embeddings, "
            "/encode, /v1/rerank or /classify"
        )
    if not is_embedding and path in EMBEDDING_PATHS:
        return f"{path}: this server generates text; start one with --is-embedding to embed, rerank, classify"
    return None


class ServingModeGate:
    """ASGI middleware: a 400 for a route of the other kind of server, before its body is read."""

    def __init__(self, app: Any, is_embedding: bool) -> None:
        self.app = app
        self.is_embedding = is_embedding

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        error = mode_error(scope.get("path", ""), self.is_embedding) if scope["type"] == "http" else None
        if error is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps(error_body_for_path(scope["path"], error, 400)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})
