"""``--quantization``: which method serves a model on a device, resolving ``auto`` and fallbacks."""

from __future__ import annotations

import logging

import torch

from radixlm.kernels.cpu.build import unavailable_reason

logger = logging.getLogger(__name__)

BLOCK_FORMATS = ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "q5_0")
QUANTIZATION_METHODS = ("none", "int8", *BLOCK_FORMATS)  # what ``resolve_method`` can return


def fbgemm_available() -> bool:
    return "fbgemm" in torch.backends.quantized.supported_engines


def auto_for_16bit(hf_config: dict, device: torch.device) -> str | None:
    """What ``auto`` serves a 16-bit (bf16/fp16) float checkpoint with on the CPU: ``q8_0``, else None
    (the ``resolve_method`` rules). None on CUDA, for fp32 checkpoints (the user chose full precision)
    and where our kernels can never be built.

    Measured (``benchmarks/log/model-loading.md``): on a 2048x8192 layer at batch 1 q8_0 (our kernel)
    takes ~1-1.5 ms against fp32's 11-15 ms and int8's (FBGEMM) 24-28 ms, and about fp32's time at
    batch 16; on the embedded model (perplexity over README.md's start) q8_0 adds 0.2% to fp32's
    perplexity with 95.7% top-1 agreement (as the native Q4_1 blocks: 96.5%), int8 adds 17% (73.5%).
    So q8_0 is the fastest at equal quality; 16-bit weights lose almost nothing to 8-bit blocks of 32.
    """
    dtype = str(hf_config.get("torch_dtype") or hf_config.get("dtype") or "")
    if device.type != "cpu" or dtype not in ("bfloat16", "float16") or unavailable_reason() is not None:
        return None
    return "q8_0"


def resolve_method(requested: str, device: torch.device, gguf_format: str | None) -> str:
    """The method actually served: ``none``, ``int8`` or a block format.

    ``auto``: on CUDA ``none`` (a GGUF file is dequantized to the device dtype at load); on the CPU a
    GGUF file in its own format when our kernel reads it, else ``none`` (int8 is faster but not of
    equal quality; ask for it explicitly). A block format without the C++ kernels falls back to
    int8 (FBGEMM), else fp32, with one warning, where they can never be built here (no AVX2, no
    compiler); while they are being built the blocks are served by torch (``GGUFProduct``).
    """
    if requested == "auto":
        if device.type != "cpu" or gguf_format is None:
            return "none"
        requested = gguf_format
    if device.type != "cpu" or requested == "none":
        return requested
    if requested in BLOCK_FORMATS and unavailable_reason() is not None:
        fallback = "int8" if fbgemm_available() else "none"
        logger.warning("quantization %s needs the GGUF CPU kernels; serving %s instead", requested, fallback)
        return fallback
    if requested == "int8" and not fbgemm_available():
        logger.warning("quantization int8 needs FBGEMM, which this torch build lacks; serving fp32")
        return "none"
    return requested
