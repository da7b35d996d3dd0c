"""The scheduler's side of LoRA: binding a request to its adapter, loading and unloading adapters."""

from __future__ import annotations

from typing import Any

from radixlm.runtime.lora.manager import LoRAManager
from radixlm.runtime.messages import LoRAAdapterOut, LoRAAdapterReq

NOT_ENABLED = "LoRA is not enabled (start the server with --enable-lora)"


def bind_adapter(req: Any, lora: LoRAManager | None) -> str | None:
    """Give the scheduler's ``req`` its adapter and radix namespace; the 400 message when it names an
    adapter that is not loaded (it may have been unloaded since the front end checked)."""
    if req.lora_name is None:
        return None
    if lora is None:
        return f"lora_path {req.lora_name!r}: {NOT_ENABLED}"
    adapter = lora.adapters.get(req.lora_name)
    if adapter is None:
        return f"LoRA adapter {req.lora_name!r} is not loaded (loaded: {sorted(lora.adapters)})"
    req.lora, req.cache_namespace = adapter, lora.namespace_of(adapter)
    return None


def change_adapters(lora: LoRAManager | None, msg: LoRAAdapterReq) -> LoRAAdapterOut:
    """Load (``msg.path`` set) or unload an adapter while serving; a bad one fails only this call."""
    if lora is None:
        return LoRAAdapterOut(False, NOT_ENABLED)
    try:
        if msg.path is None:
            lora.unload(msg.name)
        else:
            lora.load(msg.name, msg.path)
    except ValueError as exc:
        return LoRAAdapterOut(False, str(exc), lora.info())
    return LoRAAdapterOut(True, "Success", lora.info())
