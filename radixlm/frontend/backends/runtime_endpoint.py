"""``RuntimeEndpoint``: a radixlm server over its native HTTP API.

Prompts go as ``input_segments`` (text pieces and the token ids of earlier generations), a radixlm
extension of SGLang's ``/generate``, so programs continue exactly the tokens the model generated.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.chat_template import ChatTemplate, get_chat_template
from radixlm.frontend.media import image_payload
from radixlm.program.protocols import Request


class RuntimeEndpoint(Backend):
    """Talks to ``/generate``, ``/get_model_info``, ``/get_server_info``, ``/flush_cache`` and
    ``/program`` (compiled request graphs; a server without it makes programs run in the
    interpreter)."""

    name = "RuntimeEndpoint"
    supports_graphs = True

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        verify: str | bool | None = None,
        chat_template_name: str | None = None,
        *,
        chat_template: str | ChatTemplate | None = None,
        timeout: float | None = None,
    ) -> None:
        """SGLang's arguments: ``verify`` (TLS: a CA bundle path, or False), ``chat_template_name``
        (one of ``get_chat_template``'s names; else the template the server reports). ``chat_template``
        also takes a ``ChatTemplate``."""
        if chat_template_name is not None and chat_template is not None:
            raise ValueError("give chat_template_name or chat_template, not both")
        if chat_template_name is not None:
            get_chat_template(chat_template_name)  # an unknown name fails here, naming the known ones
        super().__init__(chat_template_name if chat_template is None else chat_template)
        import requests

        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self._session = requests.Session()
        self._verify = verify
        if verify is not None:
            self._session.verify = verify
        self._model_info: dict[str, Any] | None = None
        self._has_program_endpoint = True

    @property
    def url(self) -> str:
        return self.base_url

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        resp = self._session.request(
            method, self.base_url + path, json=body, headers=self._headers(), timeout=self.timeout
        )
        _raise_for_status(resp.status_code, resp.text, path)
        return resp.json() if resp.content else None

    # ---- Backend ----------------------------------------------------------------------------
    def generate(self, req: Request) -> Any:
        return self._request("POST", "/generate", req)

    async def agenerate(self, req: Request) -> Any:
        return await self._apost("/generate", req)

    def generate_stream(self, req: Request) -> Iterator[dict[str, Any]]:
        with self._session.post(
            self.base_url + "/generate",
            json={**req, "stream": True},
            headers=self._headers(),
            stream=True,
            timeout=self.timeout,
        ) as resp:
            _raise_for_status(resp.status_code, resp.text if resp.status_code >= 400 else "", "/generate")
            # Bytes, decoded here: server-sent events are UTF-8 by definition, whatever charset
            # the Content-Type names (requests would decode a bare text/event-stream as Latin-1).
            for raw in resp.iter_lines():
                line = raw.decode("utf-8")
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeError(f"/generate stream failed: {event['error']}")
                yield event

    def run_graph(self, graph: dict[str, Any]) -> dict[str, Any] | None:
        if not self._has_program_endpoint:
            return None
        resp = self._session.post(
            self.base_url + "/program", json={"graph": graph}, headers=self._headers(), timeout=self.timeout
        )
        if resp.status_code in (404, 405):
            self._has_program_endpoint = False
            return None
        _raise_for_status(resp.status_code, resp.text, "/program")
        return resp.json()

    async def arun_graph(self, graph: dict[str, Any]) -> dict[str, Any] | None:
        if not self._has_program_endpoint:
            return None
        try:
            return await self._apost("/program", {"graph": graph})
        except _NotFound:
            self._has_program_endpoint = False
            return None

    async def _apost(self, path: str, body: Any) -> Any:
        import aiohttp

        async with aiohttp.ClientSession(headers=self._headers()) as session:
            async with session.post(self.base_url + path, json=body, ssl=self._ssl()) as resp:
                text = await resp.text()
                if resp.status in (404, 405) and path == "/program":
                    raise _NotFound(path)
                _raise_for_status(resp.status, text, path)
                return json.loads(text)

    def _ssl(self) -> Any:
        """``verify`` for aiohttp: None (its default checks), False (no checks) or a CA bundle."""
        if self._verify is None or self._verify is True:
            return None
        if self._verify is False:
            return False
        import ssl

        return ssl.create_default_context(cafile=self._verify)

    def model_info(self) -> dict[str, Any]:
        if self._model_info is None:
            self._model_info = self._request("GET", "/get_model_info")
        return self._model_info

    def image_input(self, ref: str | bytes) -> tuple[str, str]:
        """A vision-language model's image placeholder, and the image as a data URL (files are read
        here, so the server needs no access to them)."""
        token = self.model_info().get("image_token")
        if not token:
            return super().image_input(ref)
        return str(token), image_payload(ref)

    def get_server_info(self) -> dict[str, Any]:
        return self._request("GET", "/get_server_info")

    def flush_cache(self, empty_cache: bool = False) -> Any:
        params = {"empty_cache": "true"} if empty_cache else None
        resp = self._session.post(
            self.base_url + "/flush_cache", headers=self._headers(), params=params, timeout=self.timeout
        )
        _raise_for_status(resp.status_code, resp.text, "/flush_cache")
        return resp.text


class _NotFound(Exception):
    pass


def _raise_for_status(status: int, body: str, path: str) -> None:
    if status < 400:
        return
    try:
        message = json.loads(body)["error"]["message"]
    except Exception:  # noqa: BLE001 - not our error shape: show the raw body
        message = body[:500]
    raise RuntimeError(f"{path} returned HTTP {status}: {message}")
