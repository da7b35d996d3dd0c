"""Load a model by name or path: resolve, build our module, copy weights, load the tokenizer."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from radixlm.runtime.models.architectures import get_model_class
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.model_impl import ModelDims, choose_model_impl
from radixlm.runtime.weights.checkpoint import iter_safetensors
from radixlm.runtime.weights.model_registry import resolve_model

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass
class LoadedModel:
    """A model ready to run, with what the rest of the runtime needs to know about it."""

    model: nn.Module
    tokenizer: Any  # a transformers tokenizer, or None when the directory has no tokenizer files
    hf_config: dict[str, Any]
    model_path: str
    tokenizer_path: str | None
    chat_template: str | None
    eos_token_ids: list[int]
    vocab_size: int
    context_length: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    architecture: str
    model_impl: str = "native"  # or "transformers": the fallback serves it


def load_model(
    model: str,
    device: torch.device,
    dtype: torch.dtype,
    tokenizer: str | None = None,
    context_length: int | None = None,
    model_impl: str = "auto",
) -> LoadedModel:
    """Load ``model`` (a known name, HF directory or .gguf file) onto ``device`` in ``dtype``.

    ``tokenizer`` optionally names a different tokenizer (name or path). ``context_length``
    (default: the model's max positions) sizes the rotary tables. ``model_impl``: ``auto``,
    ``native`` or ``transformers`` (see ``models/model_impl.py``).
    """
    model_path = resolve_model(model)
    hf_config = json.loads((Path(model_path) / "config.json").read_text())
    if choose_model_impl(model, hf_config, model_impl) == "transformers":
        from radixlm.runtime.models.transformers_fallback import load_transformers_model

        fallback, dims = load_transformers_model(model_path, hf_config, device, dtype, context_length)
        return _loaded(fallback, dims, model_path, hf_config, tokenizer)
    cfg = ModelConfig.from_hf(hf_config)
    context = context_length or cfg.max_position_embeddings
    with _default_dtype(dtype), torch.device(device):
        net = get_model_class(cfg.architecture)(cfg, max_positions=context)
    net.load_weights(iter_safetensors(model_path))
    net.eval().requires_grad_(False)
    return _loaded(net, ModelDims.native(cfg, context), model_path, hf_config, tokenizer)


def _loaded(
    net: nn.Module, dims: ModelDims, model_path: str, hf_config: dict[str, Any], tokenizer: str | None
) -> LoadedModel:
    """``net`` with its tokenizer (``tokenizer``, default the model's own) and dimensions."""
    tokenizer_path = (
        model_path if not tokenizer else tokenizer if Path(tokenizer).is_dir() else resolve_model(tokenizer)
    )
    tok = _load_tokenizer(tokenizer_path)
    return LoadedModel(
        model=net,
        tokenizer=tok,
        hf_config=hf_config,
        model_path=model_path,
        tokenizer_path=tokenizer_path if tok is not None else None,
        chat_template=getattr(tok, "chat_template", None),
        eos_token_ids=_eos_token_ids(model_path, hf_config, tok),
        vocab_size=dims.vocab_size,
        context_length=dims.context_length,
        num_layers=dims.num_layers,
        num_kv_heads=dims.num_kv_heads,
        head_dim=dims.head_dim,
        architecture=dims.architecture,
        model_impl=dims.impl,
    )


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _load_tokenizer(path: str) -> Any:
    if not any((Path(path) / f).is_file() for f in _TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _eos_token_ids(model_path: str, hf_config: dict[str, Any], tokenizer: Any) -> list[int]:
    """Union of the generation config's, the model config's and the tokenizer's EOS ids, in order."""
    sources: list[Any] = []
    gen_path = Path(model_path) / "generation_config.json"
    if gen_path.is_file():
        sources.append(json.loads(gen_path.read_text()).get("eos_token_id"))
    sources.append(hf_config.get("eos_token_id"))
    sources.append(getattr(tokenizer, "eos_token_id", None))
    ids: list[int] = []
    for value in sources:
        for i in value if isinstance(value, list) else [value]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids
