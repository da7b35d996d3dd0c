"""The HTTP front door: checks every request passes before any route sees it (plain ASGI middleware,
so streaming and disconnect detection stay intact).

In order: the ``Host`` header names this server (DNS rebinding: a web page's hostname resolving
to 127.0.0.1 must not reach it); a browser's cross-origin request comes from an allowed origin
(``--allowed-origins``, answered with CORS headers and preflights); a body is JSON (a web page can
POST ``text/plain`` or forms without a preflight); the API key (``Authorization: Bearer`` or
Anthropic's ``x-api-key``), compared in constant time; the body is at most ``--max-request-bytes``
(413), read here in full before the route runs, within ``--body-timeout`` seconds (408: a body
trickled in, or chunked without end, holds nothing for long). Refusals on the Anthropic paths answer
in Anthropic's error shape (``error_body_for_path``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from radixlm.runtime.server.errors import error_body_for_path
from radixlm.web.assets import is_web_asset

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})
JSON_TYPES = ("application/json", "application/problem+json")
CORS_METHODS = "GET, POST, OPTIONS"
CORS_HEADERS = "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta"


API_KEY_ENV = "RADIXLM_API_KEY"


def resolve_api_key(server_args: Any, environ: Mapping[str, str] | None = None) -> Any:
    """``server_args`` with the API key from ``--api-key``, else ``--api-key-file``, else the
    ``RADIXLM_API_KEY`` variable of ``environ`` (default: this process's; the last two keep the key
    out of ``ps``)."""
    environ = os.environ if environ is None else environ
    key = server_args.api_key
    if not key and server_args.api_key_file:
        with open(server_args.api_key_file, encoding="utf-8") as f:
            key = f.read().strip()
        if not key:
            raise ValueError(f"--api-key-file {server_args.api_key_file} is empty")
    key = key or environ.get(API_KEY_ENV) or None
    return server_args if key == server_args.api_key else server_args.replace(api_key=key)


def host_name(value: str) -> str:
    """``[::1]:30000`` -> ``::1``; ``Example.COM:80`` -> ``example.com``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _split(option: str | None) -> set[str]:
    return {part.strip() for part in (option or "").split(",") if part.strip()}


class FrontDoor:
    """The settings the middleware checks against, from ``ServerArgs``."""

    def __init__(self, server_args: Any) -> None:
        named = {*LOCAL_HOSTS, server_args.host, *_split(server_args.allowed_hosts)}
        self.hosts = {host_name(h) for h in named}
        self.any_host = "*" in _split(server_args.allowed_hosts) or _is_wildcard(server_args.host)
        self.origins = {o.rstrip("/").lower() for o in _split(server_args.allowed_origins)}
        self.api_key = server_args.api_key.encode() if server_args.api_key else None
        self.max_body = server_args.max_request_bytes
        self.body_timeout = server_args.body_timeout
        self.web_ui = not getattr(server_args, "disable_web_ui", False)

    def host_allowed(self, host: str) -> bool:
        return self.any_host or host_name(host) in self.hosts

    def origin_allowed(self, origin: str, host: str) -> bool:
        """Same origin as the Host header, or configured (``*``: any)."""
        origin = origin.rstrip("/").lower()
        if "*" in self.origins or origin in self.origins:
            return True
        return origin.split("://", 1)[-1] == host.strip().lower()

    def key_ok(self, authorization: bytes, x_api_key: bytes = b"") -> bool:
        """``Authorization: Bearer <key>`` (OpenAI) or ``x-api-key: <key>`` (Anthropic)."""
        if self.api_key is None:
            return True
        scheme, _, token = authorization.partition(b" ")
        bearer = scheme.lower() == b"bearer" and secrets.compare_digest(token.strip(), self.api_key)
        return bearer or (bool(x_api_key) and secrets.compare_digest(x_api_key.strip(), self.api_key))


def _is_wildcard(host: str) -> bool:
    """Bound to every interface: any Host may name it (the operator chose to expose it)."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


class FrontDoorMiddleware:
    """ASGI middleware applying ``FrontDoor``'s checks (see the module doc)."""

    def __init__(self, app: Any, front_door: FrontDoor) -> None:
        self.app = app
        self.door = front_door

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        origin = headers.get("origin")
        cors = _cors_headers(origin)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _reply(scope, receive, send, *refusal, cors if refusal[0] != 403 else [])
            return
        if scope["method"] == "OPTIONS" and origin is not None:
            await _preflight(send, cors)
            return
        try:
            body = await asyncio.wait_for(_read_body(receive, self.door.max_body), self.door.body_timeout)
        except asyncio.TimeoutError:
            message = f"the request body did not arrive within {self.door.body_timeout:g} s (--body-timeout)"
            await _reply(scope, receive, send, 408, message, cors)
            return
        if body is None:
            await _reply(scope, receive, send, 413, _too_large(self.door.max_body), cors)
            return
        await self.app(scope, _replay(body, receive), _with_headers(send, cors))

    def _refusal(self, scope: dict, headers: dict[str, str]) -> tuple[int, str] | None:
        """The status and message refusing this request, or None to let it in."""
        host, origin = headers.get("host", ""), headers.get("origin")
        if not self.door.host_allowed(host):
            return 421, f"Host {host[:100]!r} is not served here (see --allowed-hosts)"
        if origin is not None and not self.door.origin_allowed(origin, host):
            return 403, "cross-origin requests are refused (see --allowed-origins)"
        if scope["method"] == "OPTIONS":
            return None
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if scope["method"] not in ("GET", "HEAD") and ctype and ctype not in JSON_TYPES:
            return 415, f"the body must be JSON (Content-Type: application/json), not {ctype[:60]!r}"
        authorization = headers.get("authorization", "").encode("latin-1")
        # NOTE: a browser cannot send a key while loading a page; the playground's files hold no
        # data (its JSON endpoints under /ui/api/ need the key like every other route).
        public = self.door.web_ui and scope["method"] in ("GET", "HEAD") and is_web_asset(scope["path"])
        if not public and not self.door.key_ok(authorization, headers.get("x-api-key", "").encode("latin-1")):
            return 401, "invalid or missing API key (send Authorization: Bearer <key> or x-api-key: <key>)"
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.door.max_body:
            return 413, _too_large(self.door.max_body)
        return None


def _cors_headers(origin: str | None) -> list[tuple[bytes, bytes]]:
    if origin is None:
        return []
    return [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]


def _too_large(limit: int) -> str:
    return f"the request body is larger than this server's limit of {limit} bytes (--max-request-bytes)"


async def _read_body(receive: Callable, limit: int) -> bytes | None:
    """The whole body, or None once it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # disconnected: the route will notice
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Callable) -> Callable:
    """A ``receive`` that hands out ``body`` once, then the real one (disconnect notices)."""
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _with_headers(send: Callable, extra: list[tuple[bytes, bytes]]) -> Callable:
    if not extra:
        return send

    async def sender(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sender


async def _preflight(send: Callable, cors: list[tuple[bytes, bytes]]) -> None:
    headers = [
        *cors,
        (b"access-control-allow-methods", CORS_METHODS.encode()),
        (b"access-control-allow-headers", CORS_HEADERS.encode()),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _reply(
    scope: dict,
    receive: Callable,
    send: Callable,
    status: int,
    message: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    from fastapi.responses import JSONResponse

    response = JSONResponse(error_body_for_path(scope.get("path", ""), message, status), status_code=status)
    await response(scope, receive, _with_headers(send, extra or []))
