"""LoRA adapters over HTTP (SGLang's endpoints): ``POST /load_lora_adapter`` ``{"lora_name",
"lora_path"}`` and ``POST /unload_lora_adapter`` ``{"lora_name"}`` while serving; the OpenAI ``model``
field naming an adapter (``base:adapter`` or the adapter's name); ``/v1/models`` cards for adapters.

The scheduler owns the adapters (``runtime/lora/manager.py``); this process keeps the names it last
heard of, to route OpenAI model names. A request for an adapter unloaded meanwhile is still a 400,
from the scheduler.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from radixlm.runtime.messages import LoRAAdapterOut, LoRAAdapterReq
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.http_util import read_json

router = APIRouter()


class LoRANames:
    """The adapters the scheduler last reported loaded: name -> path."""

    def __init__(self, enabled: bool, adapters: list[dict[str, Any]]) -> None:
        self.enabled = enabled
        self.paths = {a["name"]: a["path"] for a in adapters}

    def update(self, adapters: list[dict[str, Any]]) -> None:
        self.paths = {a["name"]: a["path"] for a in adapters}

    def adapter_for_model(self, model: str | None, served_name: str) -> str | None:
        """The adapter an OpenAI ``model`` names (None: the base model); a 400 for an unknown one."""
        if not model or model == served_name or not self.enabled:
            return None
        base, sep, adapter = model.rpartition(":")
        name = adapter if sep and base == served_name else model
        if name in self.paths:
            return name
        if sep and base == served_name:
            raise ApiError(
                f"LoRA adapter {name!r} is not loaded (loaded: {sorted(self.paths)})", param="model"
            )
        return None  # another model name: served by the base model, as before


def _names(request: Request) -> LoRANames:
    return request.app.state.lora_names


async def _change(request: Request, msg: LoRAAdapterReq) -> dict[str, Any]:
    names = _names(request)
    if not names.enabled:
        raise ApiError("LoRA is not enabled (start the server with --enable-lora)")
    out: LoRAAdapterOut = await request.app.state.tokenizer_manager.request_reply(msg, LoRAAdapterOut)
    if out.adapters or out.success:
        names.update(out.adapters)
    if not out.success:
        raise ApiError(out.message, param="lora_path" if msg.path is not None else "lora_name")
    return {"success": True, "error_message": None, "loaded_adapters": dict(names.paths)}


def _field(body: Any, name: str) -> str:
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ApiError(f"{name} must be a non-empty string", param=name)
    return value


@router.post("/load_lora_adapter")
async def load_lora_adapter(request: Request) -> dict[str, Any]:
    """Load ``lora_path`` (a PEFT directory or a GGUF LoRA file) as ``lora_name``; a bad adapter is a 400
    naming it."""
    body = await read_json(request)
    name, path = _field(body, "lora_name"), _field(body, "lora_path")
    if not isinstance(body.get("pinned", False), bool):
        raise ApiError("pinned must be a boolean", param="pinned")
    return await _change(request, LoRAAdapterReq(name, path))


@router.post("/unload_lora_adapter")
async def unload_lora_adapter(request: Request) -> dict[str, Any]:
    """Unload ``lora_name``: new requests for it get a 400; requests already running finish with it."""
    body = await read_json(request)
    return await _change(request, LoRAAdapterReq(_field(body, "lora_name")))


def adapter_cards(request: Request, base_card: dict[str, Any]) -> list[dict[str, Any]]:
    """``/v1/models`` cards for the loaded adapters (``parent``: the base model)."""
    return [
        {**base_card, "id": name, "root": path, "parent": base_card["id"]}
        for name, path in _names(request).paths.items()
    ]
