"""Mixture-of-experts feed-forward: a top-k router and SiLU-gated experts run grouped by expert.

``SparseMoeBlock`` = ``TopKRouter`` (``gate``) + experts (``experts``). The router's softmax is taken
in float32 over all experts, then the top k, then (``renormalize``) the k weights are divided by
their sum: the order of Qwen3-MoE, Mixtral (always renormalized) and OLMoE in transformers.

The experts take a batch's (token, expert) pairs sorted by expert: each expert that got rows runs
once, on all of them (one gate/up product, SiLU-and-mul, one down product), the outputs are scaled by
their routing weights and added back to their tokens. ``Experts`` holds float weights stacked
``[E, 2 * inter, hidden]`` (gate rows then up rows) and ``[E, hidden, inter]``; ``GGUFExperts`` holds
the same matrices as GGUF blocks ``[E, rows, row bytes]``, one expert's blocks a slice multiplied by
``GGUFProduct`` (our C++ kernel).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from radixlm.kernels.activation import silu_and_mul
from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.gguf_linear import GGUFProduct
from radixlm.kernels.linear import linear
from radixlm.runtime.layers.linear import copy_checked
from radixlm.runtime.layers.module import Module


class TopKRouter(Module):
    """``x`` ``[T, hidden]`` -> (routing weights float32 ``[T, k]``, expert ids ``[T, k]``).

    Its weight ``[E, hidden]`` stays float when the model is quantized: a rounded router picks
    other experts, an error no later layer undoes."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, renormalize: bool) -> None:
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k must be in [1, num_experts={num_experts}], got {top_k}")
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size))
        self.top_k, self.renormalize = top_k, renormalize

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(linear(x, self.weight).float(), dim=-1)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            weights /= weights.sum(dim=-1, keepdim=True)
        return weights, ids


class GroupedExperts(Module):
    """The experts' forward over a batch grouped by expert; subclasses supply the two products."""

    num_experts: int
    intermediate_size: int  # per expert

    def gate_up(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        """``x @ gate_up[expert]^T``: ``[n, hidden]`` -> ``[n, 2 * inter]``."""
        raise NotImplementedError

    def down(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        """``x @ down[expert]^T``: ``[n, inter]`` -> ``[n, hidden]``."""
        raise NotImplementedError

    def shard(self, start: int, count: int) -> GroupedExperts:
        """Every expert cut to intermediate units ``[start, start + count)``: its gate and up rows and
        its down columns there. The experts' outputs over a partition of the units sum to the whole
        (tensor parallelism: each rank a slice, then an all-reduce)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``x`` ``[T, hidden]``, ``weights``/``ids`` ``[T, k]`` from the router -> ``[T, hidden]``."""
        if x.shape[0] == 1:
            return self._one_token(x, weights, ids)
        k = ids.shape[1]
        flat = ids.reshape(-1)
        order = flat.argsort(stable=True)  # (token, slot) pairs grouped by expert, tokens in order
        token = order // k
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        rows = x.index_select(0, token)
        out = torch.empty_like(rows)
        start = 0
        for expert, n in enumerate(counts):
            if n:
                end = start + n
                out[start:end] = self.down(expert, silu_and_mul(self.gate_up(expert, rows[start:end])))
                start = end
        out.mul_(weights.reshape(-1)[order].unsqueeze(1).to(out.dtype))
        # back in (token, slot) order, then each token's k slots summed: index_add_ would sort the
        # indices in an OpenMP region on every call (measured: a third of a small MoE's decode step)
        by_slot = torch.empty_like(out).index_copy_(0, order, out)
        return by_slot.view(-1, k, x.shape[1]).sum(dim=1)

    def _one_token(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """One token (a decode step at batch 1): its k distinct experts in slot order, with no sort,
        gather or scatter around them (those were a fifth of a small MoE's decode step). Each slot
        gets the operations the grouped path gives it, so the token's bits do not change."""
        k = ids.shape[1]
        by_slot = torch.empty(k, x.shape[1], dtype=x.dtype)
        for slot, expert in enumerate(ids[0].tolist()):
            by_slot[slot] = self.down(expert, silu_and_mul(self.gate_up(expert, x)))[0]
        by_slot.mul_(weights.reshape(-1, 1).to(by_slot.dtype))
        return by_slot.view(1, k, x.shape[1]).sum(dim=1)


class Experts(GroupedExperts):
    """Float experts: ``gate_up_proj`` ``[E, 2 * inter, hidden]``, ``down_proj`` ``[E, hidden, inter]``
    (the layout transformers 5 holds in memory, so its fused tensors load as they are)."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.num_experts, self.intermediate_size = num_experts, intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate_size, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size))

    def gate_up(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.gate_up_proj[expert])

    def down(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.down_proj[expert])

    def shard(self, start: int, count: int) -> Experts:
        inter = self.intermediate_size
        part = Experts(self.num_experts, self.down_proj.shape[1], count)
        gate_up = self.gate_up_proj.data
        part.gate_up_proj.data = torch.cat(
            [gate_up[:, start : start + count], gate_up[:, inter + start : inter + start + count]], dim=1
        )
        part.down_proj.data = self.down_proj.data[:, :, start : start + count].contiguous()
        return part.requires_grad_(False)

    def shard_keys(self, param_name: str) -> list[tuple[int, int]]:
        """The ``(expert, part)`` pieces a checkpoint stores ``param_name`` in, one tensor each."""
        parts = 2 if param_name == "gate_up_proj" else 1
        return [(e, p) for e in range(self.num_experts) for p in range(parts)]

    def load_shard(self, param_name: str, shard: tuple[int, int], tensor: torch.Tensor) -> None:
        """Copy one expert's checkpoint tensor: part 0/1 = its gate/up rows of ``gate_up_proj``, part
        0 = its ``down_proj``."""
        target = self.shard_view(param_name, shard, getattr(self, param_name).data)
        copy_checked(target, tensor, f"{param_name}[expert {shard[0]}][{shard[1]}]")

    def shard_view(self, param_name: str, shard: tuple[int, int], data: torch.Tensor) -> torch.Tensor:
        """The rows of ``data`` (``param_name``'s full tensor) that checkpoint piece ``shard`` fills."""
        expert, part = shard
        if not 0 <= expert < self.num_experts:
            raise ValueError(f"expert {expert} out of range: the model has {self.num_experts} experts")
        if param_name == "gate_up_proj":
            return data[expert].narrow(0, part * self.intermediate_size, self.intermediate_size)
        return data[expert]

    def quantized(self, fmt: str) -> GGUFExperts:
        """The same experts as GGUF blocks of ``fmt`` (each matrix rounded as llama.cpp would)."""
        return GGUFExperts(
            _quantize_stacked(self.gate_up_proj.data, fmt), _quantize_stacked(self.down_proj.data, fmt), fmt
        )


def _quantize_stacked(weights: torch.Tensor, fmt: str) -> torch.Tensor:
    """Float ``[E, N, K]`` -> blocks ``[E, N, row bytes]``, one expert at a time (a layer's experts
    are GBs in fp32: the whole stack at once would need several times that in temporaries)."""
    e, n, k = weights.shape
    out = torch.empty(e, n, gguf_blocks.row_bytes(fmt, k), dtype=torch.uint8)
    for expert in range(e):
        out[expert] = gguf_blocks.quantize(weights[expert], fmt)
    return out


class GGUFExperts(GroupedExperts):
    """Experts as GGUF blocks: ``gate_up_blocks`` ``[E, 2 * inter, row bytes of hidden]`` and
    ``down_blocks`` ``[E, hidden, row bytes of inter]``; ``down_fmt`` defaults to ``fmt`` (a
    Q4_K_M file keeps its down projections in another format).

    ``from_pieces`` serves a file's experts without a stacked copy: each expert's gate and up rows
    stay views of the file until its product repacks them (``GGUFKernels.bind_rows``), so the
    experts cost the weights as served once, not twice. ``gate_up_blocks`` and ``down_blocks`` are
    then built on demand (tensor-parallel shards, ``dequantized``)."""

    def __init__(
        self, gate_up_blocks: torch.Tensor, down_blocks: torch.Tensor, fmt: str, down_fmt: str | None = None
    ) -> None:
        if gate_up_blocks.dim() != 3 or down_blocks.dim() != 3 or len(gate_up_blocks) != len(down_blocks):
            raise ValueError(
                f"expert blocks must be [E, rows, row bytes] for the same E, got "
                f"{tuple(gate_up_blocks.shape)} and {tuple(down_blocks.shape)}"
            )
        super().__init__()
        self._build([[b] for b in gate_up_blocks.contiguous()], list(down_blocks.contiguous()), fmt, down_fmt)

    @classmethod
    def from_pieces(
        cls,
        gate_up: list[list[torch.Tensor]],
        down: list[torch.Tensor],
        fmt: str,
        down_fmt: str | None = None,
        releases: list[tuple[Callable[[], None], Callable[[], None]]] | None = None,
    ) -> GGUFExperts:
        """Expert e: rows ``gate_up[e]`` (its gate rows, then its up rows) and ``down[e]``, blocks of
        ``fmt`` / ``down_fmt``; ``releases[e]``: what drops the file pages behind its gate/up pieces
        and behind its down piece, each called once that product reads a copy of its own."""
        if len(gate_up) != len(down) or not down:
            raise ValueError(f"{len(gate_up)} experts' gate/up rows but {len(down)} down projections")
        experts = cls.__new__(cls)
        GroupedExperts.__init__(experts)
        experts._build(gate_up, down, fmt, down_fmt, releases)
        return experts

    def _build(
        self,
        gate_up: list[list[torch.Tensor]],
        down: list[torch.Tensor],
        fmt: str,
        down_fmt: str | None,
        releases: list[tuple[Callable[[], None], Callable[[], None]]] | None = None,
    ) -> None:
        down_fmt = down_fmt or fmt
        self.num_experts, hidden = len(down), down[0].shape[0]
        self.intermediate_size = sum(int(p.shape[0]) for p in gate_up[0]) // 2
        self.fmt, self.down_fmt = fmt, down_fmt
        gate_up_releases, down_releases = zip(*releases) if releases else ([None] * len(down),) * 2
        # GGUFProduct checks each piece against its in_features (a ValueError on a mismatch)
        self._gate_up = [GGUFProduct(p, fmt, hidden, r) for p, r in zip(gate_up, gate_up_releases)]
        inter = self.intermediate_size
        self._down = [GGUFProduct(d, down_fmt, inter, r) for d, r in zip(down, down_releases)]

    def products(self, expert: int) -> tuple[GGUFProduct, GGUFProduct]:
        """Expert ``expert``'s gate/up and down products."""
        return self._gate_up[expert], self._down[expert]

    @property
    def gate_up_blocks(self) -> torch.Tensor:
        """``[E, 2 * inter, row bytes]`` (a copy when the experts came in pieces)."""
        return torch.stack([p.blocks for p in self._gate_up])

    @property
    def down_blocks(self) -> torch.Tensor:
        """``[E, hidden, row bytes]`` (a copy)."""
        return torch.stack([p.blocks for p in self._down])

    def gate_up(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        return self._gate_up[expert](x.float())

    def down(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        return self._down[expert](x.float())

    def shard(self, start: int, count: int) -> GGUFExperts:
        elements = gguf_blocks.BLOCK_ELEMENTS[self.down_fmt]
        if start % elements or count % elements:
            raise ValueError(
                f"{self.down_fmt} experts split only at whole blocks of {elements} intermediate units, "
                f"not [{start}, {start + count}): use a --tp size that leaves each rank whole blocks"
            )
        inter = self.intermediate_size
        rows = self.gate_up_blocks
        gate_up = torch.cat(
            [rows[:, start : start + count], rows[:, inter + start : inter + start + count]], 1
        )
        width = gguf_blocks.BLOCK_BYTES[self.down_fmt]
        down = self.down_blocks[:, :, start // elements * width : (start + count) // elements * width]
        return GGUFExperts(gate_up, down, self.fmt, self.down_fmt)

    def dequantized(self) -> Experts:
        """The same experts as float weights (the values these blocks hold)."""
        experts = Experts(self.num_experts, self.down_blocks.shape[1], self.gate_up_blocks.shape[1] // 2)
        for param, blocks, fmt in (
            (experts.gate_up_proj, self.gate_up_blocks, self.fmt),
            (experts.down_proj, self.down_blocks, self.down_fmt),
        ):
            e, n, _ = blocks.shape
            param.data.copy_(gguf_blocks.dequantize(blocks.reshape(e * n, -1), fmt).reshape(e, n, -1))
        return experts

    def weight_bytes(self) -> int:
        return sum(piece.nbytes for p in (*self._gate_up, *self._down) for piece in p.pieces)


class SparseMoeBlock(Module):
    """The MoE feed-forward of one decoder layer: ``gate`` (the router) and ``experts``."""

    def __init__(
        self, hidden_size: int, intermediate_size: int, num_experts: int, top_k: int, renormalize: bool
    ) -> None:
        super().__init__()
        self.gate = TopKRouter(hidden_size, num_experts, top_k, renormalize)
        self.experts: GroupedExperts = Experts(num_experts, hidden_size, intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = self.gate(x)
        return self.experts(x, weights, ids)
