"""Speculative decoding's options: checks and defaults that ``ServerArgs`` needs.

Kept free of torch and of the scheduler: ``ServerArgs`` imports it, and a spawned scheduler process
unpickles its ``ServerArgs`` before it sets its thread variables, so anything imported here loads
before them (torch imported that early runs with the server process's thread limits).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

# NGRAM: prompt lookup (ngram.py); STANDALONE: a draft model (draft_model.py)
ALGORITHMS = ("NGRAM", "STANDALONE")
# --speculative-algorithm's values: an algorithm, AUTO (the default) or NONE (no speculation)
CHOICES = ("AUTO", *ALGORITHMS, "NONE")
# NOTE: AUTO speculates (NGRAM) on the devices where the verify path has been measured to pay and
# checked exact: the CPU (benchmarks/log/speculative.md). The CUDA verify step (its CUDA graphs,
# tests/kernels/test_gpu_speculative.py) has not yet run on a GPU: there it waits for an explicit
# --speculative-algorithm NGRAM until benchmarks/gpu_check.sh has passed it on one.
AUTO_DEVICES = ("cpu",)
# NOTE: on the CPU, requests speculate while at most this many run. Measured on a quiet 2-core box
# with speculation allowed at every size (benchmarks/log/speculative.md, 2026-12-04): at 4 running
# requests copy-heavy work still gains 1.09-1.30x and chat breaks even; at 8 the gain is <= 1.07x
# with single runs at 0.96x; at 16 and 32 a verify step costs 3-7x a plain one and the speed check's
# warm-up, its probes and the proposals alone lose 4-14%. A GPU stays memory-bound much longer.
CPU_DEFAULT_MAX_BATCH = 4
DEFAULT_MAX_DRAFT_LEN = 8


def resolve_algorithm(algorithm: str | None, draft_model_path: str | None, device_type: str) -> str | None:
    """The algorithm a scheduler on ``device_type`` runs, None for none. AUTO: STANDALONE when a draft
    model is named, NGRAM on the devices of ``AUTO_DEVICES``, else none; None and NONE: none."""
    if algorithm is None or algorithm == "NONE":
        return None
    if algorithm != "AUTO":
        return algorithm
    if draft_model_path:
        return "STANDALONE"
    return "NGRAM" if device_type in AUTO_DEVICES else None


def resolve_spec_max_batch(max_batch: int | None, device_type: str) -> int:
    """The running-batch size up to which requests speculate (``None``: the device's default)."""
    if max_batch is not None:
        return max_batch
    return CPU_DEFAULT_MAX_BATCH if device_type == "cpu" else 1 << 30


def resolve_max_draft_len(num_steps: int | None, num_draft_tokens: int | None) -> int:
    """The longest draft: a chain verifies ``num_draft_tokens`` positions, the last token plus
    ``num_steps`` drafts (SGLang's relation at top-k 1). Either flag alone sets the length; given
    both (an EAGLE tree's launch line), the shorter chain."""
    if num_steps is not None and num_steps < 1:
        raise ValueError(f"speculative_num_steps must be >= 1, got {num_steps}")
    if num_draft_tokens is not None and num_draft_tokens < 2:
        raise ValueError(f"speculative_num_draft_tokens must be >= 2, got {num_draft_tokens}")
    lengths = [n for n in (num_steps, None if num_draft_tokens is None else num_draft_tokens - 1) if n]
    return min(lengths) if lengths else DEFAULT_MAX_DRAFT_LEN


def check_speculative_args(
    algorithm: str, num_steps: int | None, num_draft_tokens: int | None, draft_model_path: str | None
) -> None:
    """Raise ValueError naming a bad speculative option (``ServerArgs`` calls it, ``None`` already
    spelled ``NONE``)."""
    if algorithm not in CHOICES:
        raise ValueError(f"speculative_algorithm must be one of {CHOICES}, got {algorithm!r}")
    if algorithm == "STANDALONE" and not draft_model_path:
        raise ValueError("speculative_algorithm STANDALONE needs speculative_draft_model_path")
    if draft_model_path and algorithm not in ("STANDALONE", "AUTO"):
        # SGLang's EAGLE launch lines name an EAGLE head here; they are served by NGRAM
        logger.warning("speculative_draft_model_path is ignored: only STANDALONE runs a draft model")
    resolve_max_draft_len(num_steps, num_draft_tokens)


def draft_pool_slots(target_slots: int, max_batch: int, context_length: int, max_draft_len: int) -> int:
    """KV slots of a draft model's pool: room for ``max_batch`` speculating requests at full context
    with their drafts, never more than the target's pool."""
    return min(target_slots, max_batch * (context_length + max_draft_len))
