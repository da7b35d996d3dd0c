"""The ``get_server_info`` document, the same from the HTTP server and the in-process Engine."""

from __future__ import annotations

from typing import Any


def build_server_info(
    server_args: dict[str, Any], model_info: dict[str, Any], stats: dict[str, Any], version: str
) -> dict[str, Any]:
    """Server arguments and live statistics at the top level (what scripts read), plus SGLang's
    nested ``stats``/``internal_states`` and the model info. ``quantization`` (the method served),
    ``kv_cache_dtype`` and ``model_impl`` (native or transformers) are taken from the model info,
    ``auto`` resolved. ``model_path`` and ``tokenizer_path`` are SGLang's names for the model and
    tokenizer as the user gave them."""
    return {
        **server_args,
        "model_path": model_info.get("model_path", server_args.get("model")),
        "tokenizer_path": model_info.get("tokenizer_path", server_args.get("tokenizer")),
        "quantization": model_info.get("quantization", server_args.get("quantization")),
        "kv_cache_dtype": model_info.get("kv_cache_dtype", server_args.get("kv_cache_dtype")),
        "model_impl": model_info.get("model_impl", server_args.get("model_impl")),
        **stats,
        "model_info": model_info,
        "stats": stats,
        "internal_states": [stats],
        "version": version,
    }
