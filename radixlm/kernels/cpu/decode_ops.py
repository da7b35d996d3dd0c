"""The compiled CPU decode-attention kernel behind argument checks made in Python (as ``gguf_ops``:
an exception thrown from a torch C++ extension crashed the process on one machine we ran on)."""

from __future__ import annotations

from types import ModuleType

import torch

from radixlm.kernels.cpu.gguf_ops import check_threads
from radixlm.kernels.cpu.row_groups import RowGroups
from radixlm.kernels.windowed_attention import check_window_softcap

# K/V pool dtypes the decode-attention kernel reads (16-bit rows are widened to fp32 as they are read)
POOL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_NO_GROUPS = torch.empty(0, dtype=torch.int64)  # one row per group


class DecodeKernels:
    """``paged_decode_attention``: one query token per request against its K/V in the paged pool
    (fp32, or fp16/bf16 widened as read), read in place (``decode_attention.cpp``); ``rmsnorm`` and
    ``add_rmsnorm`` over fp32 rows (``rmsnorm.cpp``); ``rotary`` of fp32 q and k (``rotary.cpp``);
    ``small_batch_linear``, the fp32 products of a few rows split across threads
    (``small_batch_linear.cpp``); ``panel_linear``, the same for a few dozen rows with the weight in
    column panels (``panel_linear.cpp``); ``silu_and_mul``, the gated MLP activation
    (``silu_and_mul.cpp``)."""

    def __init__(self, compiled: ModuleType) -> None:
        self._compiled = compiled

    def paged_decode_attention(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        req_to_token: torch.Tensor,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: list[int],
        sm_scale: float,
        threads: int | None = None,
        window: int | None = None,
        softcap: float | None = None,
        row_groups: RowGroups | None = None,
        step_checked: bool = False,
    ) -> torch.Tensor:
        """``q`` ``[bs, Hq, D]`` fp32; ``k_pool``/``v_pool`` ``[slots, Hkv, D]``, fp32, fp16 or bf16;
        ``req_to_token`` int64 ``[rows, ctx]``; ``req_pool_indices``/``seq_lens`` int64 ``[bs]`` with
        ``seq_lens_cpu`` their values as a list; ``window``: only each request's last ``window`` keys;
        ``softcap``: scores ``s`` become ``softcap * tanh(s / softcap)``; ``row_groups``: runs of rows
        of one request whose keys are read once for the run (the same bits as without; ignored with a
        ``window``); ``step_checked``: an earlier call passed the same ``req_to_token``,
        ``req_pool_indices``, ``seq_lens`` and ``seq_lens_cpu`` (a decode step's later layers), so
        only ``q`` and the pools are checked. Returns ``[bs, Hq, D]`` fp32."""
        threads = check_threads(threads)
        check_window_softcap(window, softcap)
        _check_decode_arguments(
            q, k_pool, v_pool, req_to_token, req_pool_indices, seq_lens, seq_lens_cpu, 0, step_checked
        )
        if row_groups is not None and row_groups.rows != q.shape[0]:
            raise ValueError(f"row_groups cover {row_groups.rows} rows, the batch has {q.shape[0]}")
        return self._compiled.paged_decode_attention(
            q,
            k_pool,
            v_pool,
            req_to_token,
            req_pool_indices,
            seq_lens,
            float(sm_scale),
            int(window or 0),
            float(softcap or 0.0),
            _NO_GROUPS if row_groups is None else row_groups.starts,
            threads,
        )

    def paged_decode_attention_after_prefix(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        req_to_token: torch.Tensor,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: list[int],
        sm_scale: float,
        key_start: int,
        prefix_out: torch.Tensor,
        prefix_lse: torch.Tensor,
        threads: int | None = None,
    ) -> torch.Tensor:
        """As ``paged_decode_attention`` over each request's keys ``[key_start, seq_len)`` (every
        ``seq_len > key_start``), merged with the attention over the keys before ``key_start`` that
        the caller computed: ``prefix_out`` ``[Hkv, bs * group, D]`` normalised and ``prefix_lse``
        ``[Hkv, bs * group]`` the log-sum-exp of the scaled scores (torch's flash-attention layout,
        queries ``q.view(bs, Hkv, group, D).transpose(0, 1)``)."""
        threads = check_threads(threads)
        _check_decode_arguments(
            q, k_pool, v_pool, req_to_token, req_pool_indices, seq_lens, seq_lens_cpu, key_start
        )
        bs, q_heads, head_dim = q.shape
        kv_heads = k_pool.shape[1]
        for name, t, shape in (
            ("prefix_out", prefix_out, (kv_heads, bs * q_heads // kv_heads, head_dim)),
            ("prefix_lse", prefix_lse, (kv_heads, bs * q_heads // kv_heads)),
        ):
            if tuple(t.shape) != shape or t.dtype != torch.float32 or not t.is_contiguous():
                raise ValueError(
                    f"{name} must be a contiguous float32 tensor of shape {shape}, got "
                    f"{tuple(t.shape)} {t.dtype}"
                )
        return self._compiled.paged_decode_attention_after_prefix(
            q,
            k_pool,
            v_pool,
            req_to_token,
            req_pool_indices,
            seq_lens,
            float(sm_scale),
            int(key_start),
            prefix_out,
            prefix_lse,
            threads,
        )

    def rmsnorm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, threads: int | None = None
    ) -> torch.Tensor:
        """``weight * (x * rsqrt(mean(x^2) + eps))`` per row of fp32 ``x`` ``[T, H]``."""
        threads = _check_norm(x, weight, threads)
        return self._compiled.rmsnorm(x, weight, float(eps), threads)

    def add_rmsnorm(
        self,
        x: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        threads: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``h = x + residual``; returns ``(rmsnorm(h), h)``, fp32 ``[T, H]`` each."""
        threads = _check_norm(x, weight, threads)
        if residual.shape != x.shape:
            raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} differ in shape")
        if residual.dtype != torch.float32 or not residual.is_cpu or not residual.is_contiguous():
            raise ValueError(f"residual must be a contiguous float32 CPU tensor, got {residual.dtype}")
        return self._compiled.add_rmsnorm(x, residual, weight, float(eps), threads)

    def rotary(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        threads: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated copies of ``q`` ``[T, Hq, D]`` and ``k`` ``[T, Hkv, D]`` (fp32, unit stride in D)
        at ``positions`` (int64 ``[T]``, each below ``len(cos_sin_cache)``; the caller checks their
        range, once per step) from ``cos_sin_cache`` ``[max_positions, D]``."""
        threads = check_threads(threads)
        for name, t in (("q", q), ("k", k)):
            if t.dim() != 3 or t.dtype != torch.float32 or not t.is_cpu or t.stride(2) != 1:
                raise ValueError(
                    f"{name} must be a 3-D float32 CPU tensor with unit stride in its last "
                    f"dimension, got {t.dim()}-D {t.dtype} on {t.device}"
                )
        if k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2] or q.shape[2] % 2:
            raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)}: same tokens, same even head_dim")
        if (
            positions.shape != (q.shape[0],)
            or positions.dtype != torch.int64
            or not positions.is_contiguous()
        ):
            raise ValueError(f"positions must be a contiguous int64 tensor of shape ({q.shape[0]},)")
        if (
            cos_sin_cache.dim() != 2
            or cos_sin_cache.dtype != torch.float32
            or cos_sin_cache.shape[1] != q.shape[2]
            or cos_sin_cache.stride(1) != 1
        ):
            raise ValueError(f"cos_sin_cache must be float32 [max_positions, {q.shape[2]}]")
        return self._compiled.rotary(q, k, positions, cos_sin_cache, threads)

    def small_batch_linear(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        threads: int | None = None,
    ) -> torch.Tensor:
        """``x @ weight^T (+ bias)`` for contiguous fp32 ``x`` ``[m, k]`` and ``weight`` ``[n, k]``
        (fp32, or fp16 widened as read); returns fp32 ``[m, n]``. Meant for small ``m`` (each weight
        row is read once for all rows); a row's result does not depend on ``m``."""
        threads = check_threads(threads)
        checks = (("x", x, (torch.float32,)), ("weight", weight, (torch.float32, torch.float16)))
        for name, t, dtypes in checks:
            if t.dim() != 2 or t.dtype not in dtypes or not t.is_cpu or not t.is_contiguous():
                raise ValueError(
                    f"{name} must be a contiguous 2-D {' or '.join(map(str, dtypes))} CPU tensor, got "
                    f"{t.dim()}-D {t.dtype} on {t.device}"
                )
        if weight.shape[1] != x.shape[1]:
            raise ValueError(f"x {tuple(x.shape)} and weight {tuple(weight.shape)}: in_features differ")
        if bias is not None and (
            bias.shape != (weight.shape[0],)
            or bias.dtype != torch.float32
            or not bias.is_cpu
            or not bias.is_contiguous()
        ):
            raise ValueError(f"bias must be a contiguous float32 CPU vector of {weight.shape[0]}")
        return self._compiled.small_batch_linear(x, weight, bias, threads)

    def panel_linear(
        self,
        x: torch.Tensor,
        panels: torch.Tensor,
        out_features: int,
        bias: torch.Tensor | None = None,
        threads: int | None = None,
    ) -> torch.Tensor:
        """``x @ W^T (+ bias)`` for contiguous fp32 ``x`` ``[m, k]``, ``W`` ``[out_features, k]``
        given as ``panels = linear.pack_panels(W)`` (fp32, or fp16 widened as read); returns fp32
        ``[m, out_features]``. Meant for up to a few dozen rows; a row's result does not depend on
        ``m``."""
        threads = check_threads(threads)
        if x.dim() != 2 or x.dtype != torch.float32 or not x.is_cpu or not x.is_contiguous():
            raise ValueError(f"x must be a contiguous 2-D float32 CPU tensor, got {x.dim()}-D {x.dtype}")
        count = -(-out_features // 16)
        if (
            panels.shape != (count, x.shape[1], 16)
            or panels.dtype not in (torch.float32, torch.float16)
            or not panels.is_cpu
            or not panels.is_contiguous()
        ):
            raise ValueError(
                f"panels must be contiguous float32/float16 ({count}, {x.shape[1]}, 16), got "
                f"{tuple(panels.shape)} {panels.dtype}"
            )
        if bias is not None and (
            bias.shape != (out_features,)
            or bias.dtype != torch.float32
            or not bias.is_cpu
            or not bias.is_contiguous()
        ):
            raise ValueError(f"bias must be a contiguous float32 CPU vector of {out_features}")
        return self._compiled.panel_linear(x, panels, out_features, bias, threads)

    def silu_and_mul(self, gate_up: torch.Tensor, threads: int | None = None) -> torch.Tensor:
        """``silu(gate) * up`` of contiguous fp32 rows ``gate_up`` ``[T, 2d]`` = ``[gate | up]``;
        returns fp32 ``[T, d]``, within a few ulp of torch's ``F.silu(gate) * up``."""
        threads = check_threads(threads)
        if (
            gate_up.dim() != 2
            or gate_up.dtype != torch.float32
            or not gate_up.is_cpu
            or not gate_up.is_contiguous()
            or gate_up.shape[1] % 2
        ):
            raise ValueError(
                f"gate_up must be a contiguous 2-D float32 CPU tensor with an even number of "
                f"columns, got {tuple(gate_up.shape)} {gate_up.dtype} on {gate_up.device}"
            )
        return self._compiled.silu_and_mul(gate_up, threads)


def _check_norm(x: torch.Tensor, weight: torch.Tensor, threads: int | None) -> int:
    if x.dim() != 2 or x.dtype != torch.float32 or not x.is_cpu or not x.is_contiguous():
        raise ValueError(
            f"x must be a contiguous 2-D float32 CPU tensor, got {x.dim()}-D {x.dtype} on {x.device}"
        )
    if (
        weight.dim() != 1
        or weight.dtype != torch.float32
        or not weight.is_contiguous()
        or weight.shape[0] != x.shape[1]
    ):
        raise ValueError(
            f"weight must be a contiguous float32 vector of {x.shape[1]}, got "
            f"{tuple(weight.shape)} {weight.dtype}"
        )
    return check_threads(threads)


def _check_decode_arguments(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_lens_cpu: list[int],
    key_start: int,
    step_checked: bool = False,
) -> None:
    """Raise ``ValueError`` unless the arguments fit the kernel; ``step_checked``: those shared by a
    step's layers (all but ``q`` and the pools) passed an earlier call unchanged."""
    for name, t, dtypes in (
        ("q", q, (torch.float32,)),
        ("k_pool", k_pool, POOL_DTYPES),
        ("v_pool", v_pool, (k_pool.dtype,)),
    ):
        if t.dim() != 3 or t.dtype not in dtypes or not t.is_cpu or not t.is_contiguous():
            allowed = " or ".join(str(d) for d in dtypes)
            raise ValueError(
                f"{name} must be a contiguous 3-D CPU tensor of {allowed}, got {t.dim()}-D "
                f"{t.dtype} on {t.device}"
            )
    bs, q_heads, head_dim = q.shape
    if k_pool.shape != v_pool.shape or k_pool.shape[2] != head_dim or q_heads % k_pool.shape[1]:
        raise ValueError(
            f"K/V pools {tuple(k_pool.shape)}/{tuple(v_pool.shape)} do not fit q "
            f"{tuple(q.shape)} (same head_dim, q heads a multiple of kv heads)"
        )
    if step_checked:
        if len(seq_lens_cpu) != bs:
            raise ValueError(f"q has {bs} rows, the step {len(seq_lens_cpu)}")
        return
    if req_to_token.dim() != 2 or req_to_token.dtype != torch.int64 or not req_to_token.is_contiguous():
        raise ValueError("req_to_token must be a contiguous 2-D int64 tensor")
    for name, t in (("req_pool_indices", req_pool_indices), ("seq_lens", seq_lens)):
        if t.shape != (bs,) or t.dtype != torch.int64 or not t.is_contiguous():
            raise ValueError(
                f"{name} must be a contiguous int64 tensor of shape ({bs},), got {tuple(t.shape)} {t.dtype}"
            )
    if key_start < 0:
        raise ValueError(f"key_start must be >= 0, got {key_start}")
    if len(seq_lens_cpu) != bs or (
        bs and not key_start + 1 <= min(seq_lens_cpu) <= max(seq_lens_cpu) <= req_to_token.shape[1]
    ):
        raise ValueError(f"every sequence length must be in [{key_start + 1}, {req_to_token.shape[1]}]")
