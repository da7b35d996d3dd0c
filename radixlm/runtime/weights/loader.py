"""Load a model by name or path: resolve, build our module without weights, stream the checkpoint's
tensors into it module by module (quantizing each as it completes), load the tokenizer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from radixlm.runtime.models.architectures import get_model_class
from radixlm.runtime.models.bert import ENCODER_ARCHITECTURES
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.model_impl import ModelDims, choose_model_impl
from radixlm.runtime.models.weight_loading import loading_into
from radixlm.runtime.quantization.apply import ServingPlan
from radixlm.runtime.weights.encoder_loader import load_encoder
from radixlm.runtime.weights.gguf_experts import build_with_file_experts
from radixlm.runtime.weights.gguf_source import GGUFSource
from radixlm.runtime.weights.materialize import ModuleAssembler, parameters_on_meta, unloaded_parameters
from radixlm.runtime.weights.mmproj import MmprojFile
from radixlm.runtime.weights.model_registry import resolve_model
from radixlm.runtime.weights.safetensors_source import SafetensorsSource
from radixlm.runtime.weights.source import WeightSource
from radixlm.runtime.weights.tokenizer_files import load_tokenizer, tokenizer_dir, tokenizer_for
from radixlm.runtime.weights.tokenizer_prefetch import TokenizerPrefetch
from radixlm.runtime.weights.vision_pair import VisionPairSource


@dataclass
class LoadedModel:
    """A model ready to run, with what the rest of the runtime needs to know about it."""

    model: nn.Module
    tokenizer: Any  # a transformers tokenizer, or None when the checkpoint has no tokenizer
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
    quantization: str = "none"  # the method its weights are served with (``--quantization`` resolved)
    model_impl: str = "native"  # or "transformers": the fallback serves it
    mmproj_path: str | None = None  # the llama.cpp projector file served with a GGUF language model


def load_model(
    model: str,
    device: torch.device,
    dtype: torch.dtype,
    tokenizer: str | None = None,
    context_length: int | None = None,
    quantization: str = "none",
    model_impl: str = "auto",
    config_overrides: dict[str, Any] | None = None,
    mmproj: str | None = None,
) -> LoadedModel:
    """Load ``model`` (a known name, HF directory, hub id or .gguf file) onto ``device`` in ``dtype``.

    ``tokenizer`` optionally names a different tokenizer (name or path). ``context_length``
    (default: the model's max positions) sizes the rotary tables. ``quantization`` is
    ``--quantization`` (``auto``, ``none``, ``int8``, a block format), applied per module while loading.
    ``model_impl``: ``auto``, ``native`` or ``transformers`` (see ``models/model_impl.py``).
    ``config_overrides`` (``--json-model-override-args``) replace top-level fields of ``config.json``.
    ``mmproj``: a llama.cpp projector file (``--mmproj``) served with the language model GGUF ``model``
    as one vision-language model (``weights/vision_pair.py``).
    """
    model_path = resolve_model(model)
    source = open_source(model_path)
    mmproj_path = None
    if mmproj is not None:
        mmproj_path = str(Path(mmproj).expanduser().resolve())
        if not Path(mmproj_path).is_file():
            raise ValueError(f"--mmproj {mmproj!r} is not a file")
        source = VisionPairSource(source, MmprojFile(mmproj_path), tokenizer_for(tokenizer or model_path))
    hf_config = {**source.hf_config(), **(config_overrides or {})}
    if (hf_config.get("architectures") or [""])[0] in ENCODER_ARCHITECTURES:
        net, dims = load_encoder(source, hf_config, device, dtype)
        return _loaded(net, dims, model_path, hf_config, source.generation_config(), tokenizer, "none")
    if choose_model_impl(model, hf_config, model_impl) == "transformers":
        from radixlm.runtime.models.transformers_fallback import load_transformers_model

        fallback, dims = load_transformers_model(model_path, hf_config, device, dtype, context_length)
        return _loaded(fallback, dims, model_path, hf_config, source.generation_config(), tokenizer, "none")
    cfg = ModelConfig.from_hf(hf_config)
    context = context_length or cfg.max_position_embeddings
    plan = ServingPlan.resolve(quantization, source, device)
    with _default_dtype(dtype), torch.device(device), parameters_on_meta():
        net = get_model_class(cfg.architecture)(cfg, max_positions=context)
    plan.check(net)
    tokenizer_load = TokenizerPrefetch(tokenizer or model_path)  # in a thread while the weights load
    with loading_into(ModuleAssembler(build_with_file_experts(plan))):
        net.load_weights(source.tensors())
    unloaded = unloaded_parameters(net)
    if unloaded:
        raise ValueError(f"{model_path}: no checkpoint tensor for {', '.join(unloaded[:8])}")
    net.eval().requires_grad_(False)
    loaded = _loaded(
        net,
        ModelDims.native(cfg, context),
        model_path,
        hf_config,
        source.generation_config(),
        tokenizer_load,
        plan.method,
    )
    loaded.mmproj_path = mmproj_path
    return loaded


def _loaded(
    net: nn.Module,
    dims: ModelDims,
    model_path: str,
    hf_config: dict[str, Any],
    generation: dict[str, Any],
    tokenizer: str | None | TokenizerPrefetch,
    quantization: str,
) -> LoadedModel:
    """``net`` with its tokenizer (``tokenizer``, default the model's own; or one being loaded in a
    thread, waited for here) and dimensions."""
    if isinstance(tokenizer, TokenizerPrefetch):
        tokenizer_path, tok = tokenizer.result()
    else:
        tokenizer_path = tokenizer_dir(tokenizer or model_path)
        tok = load_tokenizer(tokenizer_path)
    bind = getattr(net, "bind_tokenizer", None)
    if bind is not None:  # a yes/no reranker keeps its answer tokens' LM-head rows (ValueError if absent)
        bind(tok)
    return LoadedModel(
        model=net,
        tokenizer=tok,
        hf_config=hf_config,
        model_path=model_path,
        tokenizer_path=tokenizer_path if tok is not None else None,
        chat_template=getattr(tok, "chat_template", None),
        eos_token_ids=_eos_token_ids(generation, hf_config, tok),
        vocab_size=dims.vocab_size,
        context_length=dims.context_length,
        num_layers=dims.num_layers,
        num_kv_heads=dims.num_kv_heads,
        head_dim=dims.head_dim,
        architecture=dims.architecture,
        quantization=quantization,
        model_impl=dims.impl,
    )


def open_source(model_path: str) -> WeightSource:
    """The source for a resolved model path: a ``.gguf`` file or a Hugging Face directory."""
    return GGUFSource(model_path) if Path(model_path).suffix == ".gguf" else SafetensorsSource(model_path)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _eos_token_ids(generation: dict[str, Any], hf_config: dict[str, Any], tokenizer: Any) -> list[int]:
    """Union of the generation config's, the model config's and the tokenizer's EOS ids, in order."""
    sources = [generation.get("eos_token_id"), hf_config.get("eos_token_id")]
    sources.append(getattr(tokenizer, "eos_token_id", None))
    ids: list[int] = []
    for value in sources:
        for i in value if isinstance(value, list) else [value]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids
