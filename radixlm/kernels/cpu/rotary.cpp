// Rotary position embedding ("rotate half", Hugging Face Llama) of fp32 q and k in one call.
//
// torch needs about seven ops a tensor for it (~16 us each for q and k in a batch-1 decode layer);
// here the strided views of the fused qkv projection are read directly and written rotated into new
// contiguous tensors. The arithmetic is the reference's, product by product
// (x1 cos - x2 sin, x2 cos + x1 sin, no fused multiply-add), so the results have the same bits.
#include <algorithm>
#include <cstdint>

#include "decode_kernels.h"
#include "work_pool.h"

namespace {

constexpr int64_t kParallelMinElements = int64_t{1} << 16;

void rotate_rows(const torch::Tensor& x, const int64_t* pos, const float* cache, int64_t cache_stride,
                 int64_t t0, int64_t t1, torch::Tensor& out) {
  const int64_t heads = x.size(1), dim = x.size(2), half = dim / 2;
  const int64_t s0 = x.stride(0), s1 = x.stride(1);
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t t = t0; t < t1; ++t) {
    const float* cos = cache + pos[t] * cache_stride;
    const float* sin = cos + half;
    for (int64_t h = 0; h < heads; ++h) {
      const float* a = xp + t * s0 + h * s1;
      float* o = op + (t * heads + h) * dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = a[i], x2 = a[i + half];
        o[i] = x1 * cos[i] - x2 * sin[i];
        o[i + half] = x2 * cos[i] + x1 * sin[i];
      }
    }
  }
}

}  // namespace

// q: float32 [T, Hq, D], k: float32 [T, Hkv, D] (any row and head strides, unit stride within a
// head); positions: int64 [T]; cos_sin_cache: float32 [max_positions, D] (cos | sin). Returns new
// contiguous rotated (q, k).
std::tuple<torch::Tensor, torch::Tensor> rotary(torch::Tensor q, torch::Tensor k, torch::Tensor positions,
                                                torch::Tensor cos_sin_cache, int64_t threads) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.scalar_type() == torch::kFloat32 &&
                  k.scalar_type() == torch::kFloat32 && q.stride(2) == 1 && k.stride(2) == 1,
              "q, k: fp32 [T, H, D] with unit stride in D");
  TORCH_CHECK(positions.scalar_type() == torch::kInt64 && positions.is_contiguous(), "positions: int64");
  TORCH_CHECK(cos_sin_cache.scalar_type() == torch::kFloat32 && cos_sin_cache.stride(1) == 1 &&
                  cos_sin_cache.size(1) == q.size(2), "cos_sin_cache: fp32 [max_positions, D]");
  const int64_t tokens = q.size(0);
  const int64_t* pos = positions.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(pos[t] >= 0 && pos[t] < cos_sin_cache.size(0), "a position is outside the rotary table");
  }
  auto q_out = torch::empty({tokens, q.size(1), q.size(2)}, q.options());
  auto k_out = torch::empty({tokens, k.size(1), k.size(2)}, k.options());
  const float* cache = cos_sin_cache.data_ptr<float>();
  const int64_t cs = cos_sin_cache.stride(0);
  const int64_t elements = tokens * (q.size(1) + k.size(1)) * q.size(2);
  const int helpers = elements >= kParallelMinElements ? static_cast<int>(threads) - 1 : 0;
  constexpr int64_t kRowsPerChunk = 16;
  radixlm::WorkPool::instance().run((tokens + kRowsPerChunk - 1) / kRowsPerChunk, helpers, [&](int64_t c) {
    const int64_t t0 = c * kRowsPerChunk, t1 = std::min(tokens, t0 + kRowsPerChunk);
    rotate_rows(q, pos, cache, cs, t0, t1, q_out);
    rotate_rows(k, pos, cache, cs, t0, t1, k_out);
  });
  return {q_out, k_out};
}
