"""fp32 CPU weights prepacked once into oneDNN's blocked layout, for products of many rows.

``F.linear`` on the CPU hands a plain ``[out, in]`` weight to the BLAS, which repacks it into its
kernel's blocked layout on every call. At decode batch sizes that repacking is a large share of the
product: at 64 rows the model's layers ran 1.5-1.6x faster with the weights packed once at load
(``torch.ops.mkldnn._reorder_linear_weight``) and multiplied by oneDNN's matmul (``packed_linear``
in ``radixlm/kernels/linear.py``), 1.7-2.2x at 32 rows, 1.2-1.3x at 331 (a prefill), and
LM heads 1.9x at 64 rows and about even at 1 (``benchmarks/kernels/packed_linear.py``). One to eight rows stay
faster on our own small-batch kernel, which reads the plain weight, so a packed layer keeps both
copies (the memory of its weights doubles; ``--disable-weight-packing`` keeps only the plain one).

A packed product gives each row the same bits whatever the number of rows (checked by
``tests/runtime/test_packed_weights.py``); it differs from ``F.linear`` by rounding only.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from radixlm.runtime.layers.linear import Embedding, Linear
from radixlm.runtime.layers.panel_weights import add_panel_weights, layer_panels

logger = logging.getLogger(__name__)

# The row count oneDNN is told to expect when choosing the packed layout. Any hint of 16 or more
# measured the same from 16 to 331 rows, and made every row's result independent of the row count;
# a hint of 1 chose another layout that was slower from 4 rows on and not row-invariant.
PACK_ROWS_HINT = 64


def packing_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether weights of ``dtype`` on ``device`` can be packed (fp32 on a CPU with oneDNN)."""
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``[out, in]`` (fp32, CPU) in oneDNN's layout for ``linear.packed_linear``."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_ROWS_HINT)


def pack_model_weights(model: nn.Module) -> int:
    """Give every float ``Linear`` in ``model`` and its LM head (``model.lm_head``, a tied embedding
    included) a packed copy of its weight, used for products of many rows; returns the bytes added.

    Call it once the weights are final (after quantization and tensor-parallel sharding): a packed
    copy does not follow later changes to ``weight`` (``repack_weights`` renews the copies). An
    encoder's layers also get their weights in column panels (``panel_weights.py``).
    """
    targets = [m for m in model.modules() if isinstance(m, Linear)]
    lm_head = getattr(model, "lm_head", None)
    lm_head = getattr(lm_head, "part", lm_head)  # this rank's rows of a vocabulary-parallel head
    if isinstance(lm_head, (Linear, Embedding)) and lm_head not in targets:
        targets.append(lm_head)
    added = 0
    for module in targets:
        weight = module.weight
        if weight.dim() != 2 or not packing_supported(weight.device, weight.dtype):
            continue
        module.packed = pack_weight(weight)
        added += weight.numel() * weight.element_size()
    if added:
        logger.info("weights packed for oneDNN: %.0f MB more", added / 1e6)
    return added + add_panel_weights(model)


def repack_weights(model: nn.Module) -> None:
    """Renew the packed copy and the panels of every module in ``model`` that has them, after its
    weight changed."""
    for module in model.modules():
        if getattr(module, "packed", None) is not None:
            module.packed = pack_weight(module.weight)
        if isinstance(module, Linear) and module.panels is not None:
            module.panels = layer_panels(module)
