"""RMSNorm kernel, optionally fused with the residual add before it."""

import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(
    X,
    Residual,
    ResidualOut,
    Weight,
    Out,
    eps,
    hidden,
    stride_x,
    stride_r,
    stride_ro,
    stride_o,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Program ``t``: one token row. With a residual, ``h = x + residual`` is rounded to the input
    dtype, stored to ``ResidualOut`` and normalised, exactly like the unfused torch code."""
    t = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < hidden
    x = tl.load(X + t * stride_x + offs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(Residual + t * stride_r + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(ResidualOut.dtype.element_ty)
        tl.store(ResidualOut + t * stride_ro + offs, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / hidden + eps)
    normed = (xf * rstd).to(X.dtype.element_ty).to(tl.float32)
    w = tl.load(Weight + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + t * stride_o + offs, normed * w, mask=mask)
