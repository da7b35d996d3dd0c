"""Our paged attention behind transformers' attention interface (``config._attn_implementation``).

A transformers attention module hands ``query`` ``[1, Hq, T, D]`` and ``key``/``value``
``[1, Hkv, T, D]`` for the whole step (every request's new tokens flattened into one sequence) to
``paged_attention``, which writes this layer's K/V into our KV pool and attends per request through
the step's attention backend. The step's ``ForwardBatch`` reaches it through a context variable set
around the forward (``batch_context``), never through transformers' own arguments.

``probe_attention`` runs the model once with a recorder in place of the attention, so that a model
our backends cannot serve exactly (no calls through the interface, soft-capping, sinks, a window
shorter than the context) is refused at load rather than serving wrong logits.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch

ATTN_IMPLEMENTATION = "radixlm"

_BATCH: contextvars.ContextVar[ForwardBatch | None] = contextvars.ContextVar("radixlm_batch", default=None)
_PROBE: contextvars.ContextVar[AttentionProbe | None] = contextvars.ContextVar("radixlm_probe", default=None)

# kwargs whose non-None value changes the scores in a way our backends do not compute
_UNSUPPORTED_KWARGS = ("softcap", "s_aux", "sinks", "position_bias")


@dataclass
class AttentionProbe:
    """What every attention call of one probe forward passed: layer index, shapes and options."""

    calls: list[dict[str, Any]] = field(default_factory=list)


def register_attention() -> None:
    """Make ``ATTN_IMPLEMENTATION`` a valid ``attn_implementation`` (idempotent). transformers
    builds no mask for an implementation without a mask function, and we need none."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention)


@contextlib.contextmanager
def batch_context(fb: ForwardBatch) -> Iterator[None]:
    """Route the attention calls of the forward run inside the block to ``fb``."""
    token = _BATCH.set(fb)
    try:
        yield
    finally:
        _BATCH.reset(token)


@contextlib.contextmanager
def probing(probe: AttentionProbe) -> Iterator[None]:
    """Record the attention calls made inside the block into ``probe`` (outputs are zeros)."""
    token = _PROBE.set(probe)
    try:
        yield
    finally:
        _PROBE.reset(token)


def paged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature; returns ``([1, T, Hq, D], None)``."""
    probe = _PROBE.get()
    if probe is not None:
        probe.calls.append(_describe_call(module, query, key, value, scaling, kwargs))
        return query.new_zeros(1, query.shape[2], query.shape[1], value.shape[-1]), None
    fb = _BATCH.get()
    if fb is None:
        raise RuntimeError("radixlm attention ran outside a forward batch (use batch_context)")
    q = query[0].transpose(0, 1).contiguous()
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    out = fb.attn_backend.forward(q, k, v, int(module.layer_idx), fb, scale)  # type: ignore[arg-type]
    return out.unsqueeze(0), None


def _describe_call(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scaling: float | None,
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    return {
        "module": type(module).__name__,
        "layer_idx": getattr(module, "layer_idx", None),
        "num_heads": query.shape[1],
        "num_kv_heads": key.shape[1],
        "head_dim": query.shape[-1],
        "key_dim": key.shape[-1],
        "value_dim": value.shape[-1],
        "value_heads": value.shape[1],
        "scaling": scaling,
        "sliding_window": kwargs.get("sliding_window"),
        "is_causal": kwargs.get("is_causal"),
        "unsupported": sorted(k for k in _UNSUPPORTED_KWARGS if kwargs.get(k) is not None),
    }


@dataclass(frozen=True)
class AttentionShape:
    """The KV pool's shape, read from the model's real attention calls."""

    num_layers: int
    num_kv_heads: int
    head_dim: int


def check_probe(
    probe: AttentionProbe, architecture: str, num_layers: int, context_length: int
) -> AttentionShape:
    """The pool shape the probed model needs; ValueError naming what our attention cannot serve."""
    calls = probe.calls
    where = f"{architecture} through the transformers fallback"
    if not calls:
        raise ValueError(
            f"cannot serve {where}: its attention does not go through transformers' attention "
            f"interface (AttentionInterface), so it cannot use our KV cache"
        )
    layers = [c["layer_idx"] for c in calls]
    if None in layers or sorted(layers) != list(range(len(calls))) or len(calls) != num_layers:
        raise ValueError(
            f"cannot serve {where}: expected one attention call per layer with layer_idx "
            f"0..{num_layers - 1}, got {layers}"
        )
    first = calls[0]
    for c in calls:
        problem = _unservable(c, context_length)
        if problem is None and (c["num_kv_heads"], c["key_dim"]) != (first["num_kv_heads"], first["key_dim"]):
            problem = "layers differ in KV heads or head size"
        if problem is not None:
            raise ValueError(f"cannot serve {where}: layer {c['layer_idx']}: {problem}")
    return AttentionShape(len(calls), int(first["num_kv_heads"]), int(first["key_dim"]))


def _unservable(call: dict[str, Any], context_length: int) -> str | None:
    """Why our backends cannot compute this attention call exactly, or None."""
    if call["unsupported"]:
        return f"our attention backends do not apply {', '.join(call['unsupported'])}"
    if call["is_causal"] is False:
        return "it attends bidirectionally"
    window = call["sliding_window"]
    if window is not None and int(window) < context_length:
        return (
            f"a sliding window of {window} tokens, which our attention backends do not apply "
            f"(a context_length of at most {window} is exact)"
        )
    same_dims = call["head_dim"] == call["key_dim"] == call["value_dim"]
    if not same_dims or call["value_heads"] != call["num_kv_heads"]:
        return f"query/key/value head shapes differ ({call})"
    if call["num_heads"] % call["num_kv_heads"]:
        return f"{call['num_heads']} query heads over {call['num_kv_heads']} KV heads"
    return None
