// Python bindings of the decode-step kernels (decode_attention.cpp, rmsnorm.cpp, rotary.cpp,
// small_batch_linear.cpp, panel_linear.cpp, silu_and_mul.cpp).
#include "decode_kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  mod.def("paged_decode_attention", &paged_decode_attention,
          "one query token per request against its paged fp32 K/V, read in place (AVX2, threaded)");
  mod.def("paged_decode_attention_after_prefix", &paged_decode_attention_after_prefix,
          "the same over keys [key_start, seq_len), merged with a shared prefix's attention");
  mod.def("rmsnorm", &rmsnorm, "RMSNorm of fp32 rows, one pass each");
  mod.def("rotary", &rotary, "rotate-half rotary embedding of fp32 q and k (strided views in, contiguous out)");
  mod.def("add_rmsnorm", &add_rmsnorm, "h = x + residual and RMSNorm(h) of fp32 rows, one pass each");
  mod.def("small_batch_linear", &small_batch_linear,
          "x @ W^T (+ b) for a few fp32 rows, the weight rows split across threads");
  mod.def("panel_linear", &panel_linear,
          "x @ W^T (+ b) for a few dozen fp32 rows, W packed in panels of 16 outputs (6x16 register tiles)");
  mod.def("silu_and_mul", &silu_and_mul, "silu(gate) * up of fp32 rows [gate | up], one pass each");
}
