"""Rotary embedding kernel (the "rotate half" / NeoX layout used by Llama in Hugging Face)."""

import triton
import triton.language as tl


@triton.jit
def rotary_kernel(
    X,
    Out,
    Positions,
    CosSin,
    stride_xt,
    stride_xh,
    stride_ot,
    stride_oh,
    stride_cs,
    HALF: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Program ``(t, head)``: rotate the two halves of one head vector by its position's angles."""
    t = tl.program_id(0)
    head = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    mask = offs < HALF
    pos = tl.load(Positions + t)
    cos = tl.load(CosSin + pos * stride_cs + offs, mask=mask, other=0.0).to(tl.float32)
    sin = tl.load(CosSin + pos * stride_cs + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    x = X + t * stride_xt + head * stride_xh
    x1 = tl.load(x + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    o = Out + t * stride_ot + head * stride_oh
    tl.store(o + offs, x1 * cos - x2 * sin, mask=mask)
    tl.store(o + HALF + offs, x2 * cos + x1 * sin, mask=mask)
