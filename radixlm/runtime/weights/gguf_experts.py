"""Mixture-of-experts layers served from a GGUF file's own expert blocks (``GGUFExperts``).

``GGUFSource`` gives a file's stacked ``ffn_{gate,up,down}_exps`` tensors one expert at a time as
``BlockTensor`` views; when the serving plan serves the file's blocks (``native``) on the CPU and every
piece of a layer's experts is in a format our kernel reads, the layer becomes ``GGUFExperts`` over
those blocks instead of being dequantized into the float ``Experts``.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from radixlm.runtime.layers.moe import Experts, GGUFExperts
from radixlm.runtime.quantization.apply import ServingPlan
from radixlm.runtime.weights.materialize import BuildModule, Parts
from radixlm.runtime.weights.source import BlockTensor


def experts_from_blocks(module: Experts, parts: Parts) -> GGUFExperts | None:
    """``module``'s experts as the file's blocks, or None when a piece is float or the gate and up
    pieces differ in format (the float path serves those)."""
    pieces: dict[tuple[str, int, int], BlockTensor] = {}
    for (param, shard), stored in parts.items():
        if not isinstance(stored, BlockTensor) or not isinstance(shard, tuple):
            return None
        pieces[(param, *shard)] = stored
    experts = range(module.num_experts)
    gate_up = [(pieces[("gate_up_proj", e, 0)], pieces[("gate_up_proj", e, 1)]) for e in experts]
    down = [pieces[("down_proj", e, 0)] for e in experts]
    if len({p.fmt for pair in gate_up for p in pair}) != 1 or len({p.fmt for p in down}) != 1:
        return None
    # no stacked copy: each expert's pieces stay views of the file until its products repack them
    releases = [(_releasing([gate, up]), down[e].release) for e, (gate, up) in enumerate(gate_up)]
    return GGUFExperts.from_pieces(
        [[gate.blocks, up.blocks] for gate, up in gate_up],
        [p.blocks for p in down],
        gate_up[0][0].fmt,
        down[0].fmt,
        releases,
    )


def _releasing(pieces: list[BlockTensor]) -> Callable[[], None]:
    def release() -> None:
        for piece in pieces:
            piece.release()

    return release


def build_with_file_experts(plan: ServingPlan) -> BuildModule:
    """``plan.build``, except that experts stored in the file's readable blocks are served as such when
    ``plan`` serves the file's own formats on the CPU."""

    def build(model: nn.Module, name: str, module: nn.Module, parts: Parts) -> nn.Module | None:
        if plan.native and plan.device.type == "cpu" and isinstance(module, Experts):
            served = experts_from_blocks(module, parts)
            if served is not None:
                return served
        return plan.build(model, name, module, parts)

    return build
