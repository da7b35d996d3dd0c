"""``--model-impl``: our native model code, or transformers' modeling code on our runtime.

``auto`` serves an architecture natively when ``MODEL_CLASSES`` has it and through the transformers
fallback (``models/transformers_fallback.py``) otherwise; ``native`` refuses an unknown architecture;
``transformers`` forces the fallback. The fallback reads Hugging Face directories only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from radixlm.runtime.models.architectures import get_model_class
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.weights.model_registry import ALIASES, KNOWN_MODELS

logger = logging.getLogger(__name__)

Impl = Literal["native", "transformers"]


@dataclass(frozen=True)
class ModelDims:
    """What the runtime sizes its pools and limits from, whichever implementation serves."""

    architecture: str
    vocab_size: int
    context_length: int
    num_layers: int  # layers holding KV in the pool
    num_kv_heads: int
    head_dim: int
    impl: Impl

    @classmethod
    def native(cls, cfg: ModelConfig, context_length: int) -> ModelDims:
        return cls(
            architecture=cfg.architecture,
            vocab_size=cfg.vocab_size,
            context_length=context_length,
            num_layers=cfg.num_layers,
            num_kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
            impl="native",
        )


def choose_model_impl(model: str, hf_config: dict[str, Any], requested: str) -> Impl:
    """The implementation serving ``model`` (as asked for on the command line) per ``requested``.

    Raises ValueError for an unknown architecture under ``native`` (listing the supported ones),
    for a GGUF model under the fallback, and for an unknown ``requested``.
    """
    archs = hf_config.get("architectures") or []
    if not archs:
        raise ValueError("config.json has no 'architectures' entry")
    arch = str(archs[0])
    if requested == "native":
        get_model_class(arch)  # the ValueError naming the supported architectures
        return "native"
    if requested == "auto":
        try:
            get_model_class(arch)
        except ValueError:
            _check_not_gguf(model, arch)
            logger.warning("architecture %s has no native implementation: transformers serves it", arch)
            return "transformers"
        logger.info("architecture %s: native implementation", arch)
        return "native"
    if requested == "transformers":
        _check_not_gguf(model, arch)
        logger.info("architecture %s: transformers implementation (asked for)", arch)
        return "transformers"
    raise ValueError(f"unknown model_impl {requested!r} (expected auto, native or transformers)")


def _check_not_gguf(model: str, arch: str) -> None:
    if Path(model).suffix == ".gguf" or ALIASES.get(model, model) in KNOWN_MODELS:
        raise ValueError(
            f"the transformers fallback serves Hugging Face directories (safetensors), not GGUF "
            f"({model!r}, architecture {arch}): convert it to a Hugging Face directory, or serve it "
            f"natively (model_impl='native')"
        )
