"""Token bitmask kernel: set disallowed logits to -inf, one masked store per vocabulary block."""

import triton
import triton.language as tl


@triton.jit
def apply_bitmask_kernel(
    Logits, Bitmask, Rows, vocab_size, stride_logits, stride_mask, HAS_ROWS: tl.constexpr, BLOCK: tl.constexpr
):
    """Program ``(r, block)``: bitmask row ``r`` against ``BLOCK`` logits of its logits row."""
    r = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_vocab = offs < vocab_size
    if HAS_ROWS:
        row = tl.load(Rows + r).to(tl.int64)
    else:
        row = r
    words = tl.load(Bitmask + r * stride_mask + offs // 32, mask=in_vocab, other=-1)
    allowed = ((words >> (offs % 32)) & 1) != 0
    neg_inf = tl.full([BLOCK], float("-inf"), tl.float32)
    tl.store(Logits + row * stride_logits + offs, neg_inf, mask=in_vocab & ~allowed)
