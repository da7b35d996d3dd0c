"""Attention computed one query position at a time, for ``--enable-deterministic-inference``.

``scaled_dot_product_attention`` on the CPU rounds a query row differently depending on the other
rows of its call: keys padded to the batch's longest sequence change a row's result (measured: a
40-key row equals itself only padded to >= 48 keys, and not for every length), and the query block
size follows the number of new tokens (so a prompt's attention depends on how it was chunked or
how much of it came from the cache). Here every query position ``p`` of every request attends in
its own call to exactly the keys ``0..p`` with a single query row: the same computation whether it
is a decode step, part of a prefill chunk, or alone, so its bits depend on nothing else (a
sliding-window layer's position sees only its window's keys, the same way in every case).
"""

from __future__ import annotations

import torch

from radixlm.kernels.windowed_attention import attend, window_start
from radixlm.runtime.executor.forward_batch import ForwardBatch


def _attend_one(
    q_row: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    slots: torch.Tensor,
    sm_scale: float,
    window: int | None,
    softcap: float | None,
) -> torch.Tensor:
    """``q_row`` ``[Hq, D]`` against the keys at ``slots`` (its last ``window``); returns ``[Hq, D]``."""
    slots = slots[window_start(len(slots), window) :]
    k = k_buffer[slots].to(q_row.dtype).transpose(0, 1)  # [Hkv, L, D]
    v = v_buffer[slots].to(q_row.dtype).transpose(0, 1)
    return attend(q_row.unsqueeze(1), k, v, None, sm_scale, softcap).squeeze(1)


def extend_per_position(
    q: torch.Tensor,
    layer_id: int,
    fb: ForwardBatch,
    sm_scale: float,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Like ``forward_extend``: ``q`` ``[T, Hq, D]``, the new tokens of all requests in order. A
    position inside an image span that attends both ways (``fb.image_spans``) sees on to the span's
    end (each span lies whole in one extend: ``runtime/multimodal/image_spans.py``)."""
    k_buffer, v_buffer = fb.kv_pool.get_kv_buffer(layer_id)
    req_to_token = fb.req_to_token_pool.req_to_token
    out = torch.empty_like(q)
    t = 0
    rows = fb.req_pool_indices.tolist()
    for i, (row, prefix, ext) in enumerate(zip(rows, fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu)):
        slots = req_to_token[row, : prefix + ext]
        spans = fb.image_spans[i] if fb.image_spans is not None else []
        for j in range(ext):
            pos = prefix + j
            end = next((e for s, e in spans if s <= pos < e), pos + 1)
            keys = slots[window_start(pos + 1, window) : end]
            out[t + j] = _attend_one(q[t + j], k_buffer, v_buffer, keys, sm_scale, None, softcap)
        t += ext
    return out


def decode_per_position(
    q: torch.Tensor,
    layer_id: int,
    fb: ForwardBatch,
    sm_scale: float,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Like ``forward_decode``: ``q`` ``[bs, Hq, D]``, one new token per request."""
    k_buffer, v_buffer = fb.kv_pool.get_kv_buffer(layer_id)
    req_to_token = fb.req_to_token_pool.req_to_token
    out = torch.empty_like(q)
    for i, (row, seq_len) in enumerate(zip(fb.req_pool_indices.tolist(), fb.seq_lens_cpu)):
        keys = req_to_token[row, :seq_len]
        out[i] = _attend_one(q[i], k_buffer, v_buffer, keys, sm_scale, window, softcap)
    return out
