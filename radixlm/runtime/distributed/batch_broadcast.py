"""Rank 0's forward batch, sent to the other ranks as two int64 broadcasts (a fixed header, then one
flat payload), and rebuilt there against each rank's own KV pool and ``req_to_token`` mirror.

Only rank 0 schedules and allocates KV slots. The others keep a mirror of the ``req_to_token`` rows,
and every batch carries the full rows of its requests: the cache manager rewrites a row outside
any forward (a committed prefix that was already in the tree points at the tree's slots, the
request's duplicates freed), so a row sent once cannot be trusted later.

With LoRA the payload also carries the batch's adapter plan and rank 0's slot changes
(``LoRASync``); a LoRA load or unload travels as its own command (``lora_broadcast.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from radixlm.runtime.distributed import comm
from radixlm.runtime.distributed.lora_broadcast import CMD_LORA, send_lora_op, serve_lora_op
from radixlm.runtime.executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.runtime.lora.manager import LoRASync

CMD_STOP, CMD_FORWARD = 0, 1
# cmd, mode, batch size, tokens, logits rows, row entries, LoRA requests, LoRA slot fills, LoRA drops
_HEADER = 9
_MODES = (ForwardMode.EXTEND, ForwardMode.DECODE)


def send_batch(fb: ForwardBatch, lora: LoRASync | None = None) -> None:
    """Rank 0: broadcast ``fb`` (its tensors and, for an extend, its requests' slot rows), with
    ``lora``, its adapter plan and slot changes."""
    parts = [
        fb.input_ids,
        fb.positions,
        fb.req_pool_indices,
        fb.seq_lens,
        fb.extend_prefix_lens,
        fb.extend_seq_lens,
        fb.out_cache_loc,
        fb.logits_indices,
    ]
    table = fb.req_to_token_pool.req_to_token
    lens = fb.seq_lens_cpu if fb.seq_lens_cpu is not None else fb.seq_lens.tolist()
    rows = torch.cat([table[r, :n] for r, n in zip(fb.req_pool_indices.tolist(), lens)])
    lora = lora or LoRASync([], [], [], [])
    extra = [*lora.slots, *lora.tokens, *(v for fill in lora.fills for v in fill), *lora.drops]
    payload = torch.cat(
        [p.to(torch.int64) for p in parts]
        + [rows.to(torch.int64), torch.tensor(extra, dtype=torch.int64, device=rows.device)]
    )
    header = torch.tensor(
        [
            CMD_FORWARD,
            _MODES.index(fb.mode),
            fb.batch_size,
            int(fb.input_ids.shape[0]),
            int(fb.logits_indices.shape[0]),
            int(rows.shape[0]),
            len(lora.slots),
            len(lora.fills),
            len(lora.drops),
        ],
        dtype=torch.int64,
    )
    comm.broadcast(header.to(payload.device))
    comm.broadcast(payload)


def send_lora(op: dict, device: torch.device) -> bool:
    """Rank 0: have every other rank apply LoRA ``op`` (``LoRAManager.apply_op``); whether all did."""
    return send_lora_op(op, _HEADER, device)


def send_stop(device: torch.device) -> None:
    """Rank 0: tell the other ranks to exit their loop."""
    comm.broadcast(torch.tensor([CMD_STOP] + [0] * (_HEADER - 1), dtype=torch.int64, device=device))


def recv_batch(runner: Any) -> ForwardBatch | None:
    """Ranks > 0: the next batch against ``runner``'s pools (its mirror rows updated, its LoRA slots
    and plan set), None on stop. LoRA loads and unloads before it are applied on the way."""
    device = runner.device
    while True:
        header = comm.broadcast(torch.empty(_HEADER, dtype=torch.int64, device=device)).tolist()
        if header[0] != CMD_LORA:
            break
        serve_lora_op(runner.lora, header[1], device)
    cmd, mode_index, bs, tokens, n_logits, n_rows, n_lora, n_fills, n_drops = header
    if cmd == CMD_STOP:
        return None
    n_extra = 2 * n_lora + 2 * n_fills + n_drops
    payload = comm.broadcast(
        torch.empty(3 * tokens + 4 * bs + n_logits + n_rows + n_extra, dtype=torch.int64, device=device)
    )
    sizes = [tokens, tokens, bs, bs, bs, bs, tokens, n_logits, n_rows, n_extra]
    ids, pos, rpi, seq, prefix, ext, loc, logits_idx, rows, extra = payload.split(sizes)
    if runner.lora is not None:
        values = extra.tolist()
        fills = values[2 * n_lora : 2 * n_lora + 2 * n_fills]
        runner.lora.apply_sync(
            LoRASync(
                values[:n_lora],
                values[n_lora : 2 * n_lora],
                list(zip(fills[::2], fills[1::2])),
                values[2 * n_lora + 2 * n_fills :],
            )
        )
    mode = _MODES[mode_index]
    table = runner.req_to_token_pool.req_to_token
    offset = 0
    for r, n in zip(rpi.tolist(), seq.tolist()):
        table[r, :n] = rows[offset : offset + n]
        offset += n
    return ForwardBatch(
        mode=mode,
        input_ids=ids,
        positions=pos,
        req_pool_indices=rpi,
        seq_lens=seq,
        extend_prefix_lens=prefix,
        extend_seq_lens=ext,
        out_cache_loc=loc,
        logits_indices=logits_idx,
        req_to_token_pool=runner.req_to_token_pool,
        kv_pool=runner.kv_pool,
        attn_backend=runner.attn_backend,
    )
