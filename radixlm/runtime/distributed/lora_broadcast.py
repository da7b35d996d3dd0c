"""A LoRA adapter load or unload, sent by rank 0 to the other tensor-parallel ranks between batches.

The command header (``batch_broadcast``'s, ``CMD_LORA`` first) is followed by the op as JSON bytes.
Every rank then applies it and the ranks agree on the outcome (the smallest of their 0/1 flags), so an
adapter one rank cannot load is refused on all of them and each undoes its own load.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from radixlm.runtime.distributed import comm

CMD_LORA = 2


def send_lora_op(op: dict, header_size: int, device: torch.device) -> bool:
    """Rank 0: send ``op`` (which rank 0 has applied); whether every rank applied it."""
    data = torch.tensor(list(json.dumps(op).encode()), dtype=torch.uint8, device=device)
    header = [CMD_LORA, int(data.shape[0])] + [0] * (header_size - 2)
    comm.broadcast(torch.tensor(header, dtype=torch.int64, device=device))
    comm.broadcast(data)
    return comm.agree_min(1, device) == 1


def serve_lora_op(lora: Any, nbytes: int, device: torch.device) -> None:
    """A rank > 0: receive rank 0's op, apply it to ``lora`` (its ``LoRAManager``), agree on the outcome,
    and undo a load that another rank refused."""
    data = comm.broadcast(torch.empty(nbytes, dtype=torch.uint8, device=device))
    op = json.loads(bytes(data.cpu().tolist()).decode())
    ok = lora is not None and lora.apply_op(op)
    if comm.agree_min(int(ok), device) != 1 and ok and op["op"] == "load":
        lora.revert_load(op["name"])
