"""The encoder stage before prefill: every image of a step encoded once (cache misses batched into one
tower call per crop shape), then the rows each request's prefill chunk places at its image tokens."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.multimodal.encoder_cache import EncoderCache
from radixlm.runtime.multimodal.items import ImageItem, MultimodalInputs


def encode_images(
    model: torch.nn.Module, cache: EncoderCache, items: list[ImageItem]
) -> dict[str, torch.Tensor]:
    """``key -> [num_tokens, hidden]`` for ``items``; the misses run through ``model.encode_images``
    together, grouped by crop shape, and are put in ``cache``."""
    found: dict[str, torch.Tensor] = {}
    missing: dict[str, ImageItem] = {}
    for item in items:
        if item.key in found or item.key in missing:
            continue
        hit = cache.get(item.key)
        if hit is not None:
            found[item.key] = hit
        else:
            missing[item.key] = item
    groups: dict[tuple[int, ...], list[ImageItem]] = defaultdict(list)
    for item in missing.values():
        groups[tuple(item.pixels.shape[1:])].append(item)
    device = next(model.parameters()).device
    for group in groups.values():
        pixels = torch.cat([it.pixels for it in group]).to(device)
        masks = [it.pixel_mask for it in group]
        mask = None if any(m is None for m in masks) else torch.cat(masks).to(device)  # type: ignore[arg-type]
        out = model.encode_images(pixels, mask)  # type: ignore[operator]
        start = 0
        for it in group:
            crops = int(it.pixels.shape[0])
            rows = out[start : start + crops].reshape(-1, out.shape[-1])
            start += crops
            if rows.shape[0] != it.num_tokens:
                raise ValueError(f"image encoder gave {rows.shape[0]} rows for {it.num_tokens} image tokens")
            found[it.key] = rows
            cache.put(it.key, rows)
    return found


def chunk_rows(
    mm: MultimodalInputs, start: int, end: int, encoded: dict[str, torch.Tensor]
) -> tuple[list[int], list[torch.Tensor]]:
    """For prompt tokens ``[start, end)`` of one request: (offsets into the chunk, image rows)."""
    offsets, rows = [], []
    for pos, i, row in mm.rows_in(start, end):
        offsets.append(pos - start)
        rows.append(encoded[mm.items[i].key][row])
    return offsets, rows


def attach_image_rows(fb: ForwardBatch, reqs: list[Any], model: torch.nn.Module, cache: EncoderCache) -> None:
    """Set ``fb.mm_positions``/``mm_embeds`` for the image tokens among each request's new tokens
    (``req.kv_len`` on, ``req.extend_len`` of them, in batch order), encoding the images they need
    in one pass: an image wholly inside a cached prefix is not encoded again."""
    spans = []
    needed: list[ImageItem] = []
    offset = 0
    for req in reqs:
        mm: MultimodalInputs | None = req.mm
        if mm is not None and req.kv_len < len(req.origin_input_ids):
            start, end = req.kv_len, req.kv_len + req.extend_len
            if mm.rows_in(start, end):
                spans.append((offset, start, end, mm))
                needed.extend(mm.items)
        offset += req.extend_len
    if not spans:
        return
    encoded = encode_images(model, cache, needed)
    positions: list[int] = []
    rows: list[torch.Tensor] = []
    for base, start, end, mm in spans:
        offsets, chunk = chunk_rows(mm, start, end, encoded)
        positions.extend(base + o for o in offsets)
        rows.extend(chunk)
    fb.mm_positions = torch.tensor(positions, dtype=torch.int64, device=fb.input_ids.device)
    fb.mm_embeds = torch.stack(rows)
