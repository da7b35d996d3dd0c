// The gated MLP activation silu(gate) * up of fp32 rows [gate | up], one pass over each row.
//
// torch runs it as two ops (silu, then an in-place multiply), each its own OpenMP parallel region:
// with OMP_WAIT_POLICY=PASSIVE a region wakes the team from sleep, and at a decode batch of 64 rows
// of SmolLM2 the pair took ~150 us a layer. Here a row is read once and written once, on the
// calling thread and (above kParallelMinElements) the work pool's helpers.
//
// silu(x) = x / (1 + e^-x), computed from t = e^-|x| (always a non-positive exponent, so the same
// vectorised exp as the attention's softmax): x / (1 + t) for x >= 0 and x t / (1 + t) below. It
// differs from torch's silu by a few ulp (another exp); rows never mix, so a row's result does not
// depend on the batch it is in.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "decode_kernels.h"
#include "simd_math.h"
#include "work_pool.h"

namespace {

constexpr int64_t kParallelMinElements = int64_t{1} << 15;

inline float silu_scalar(float x) {
  const float t = std::exp(-std::fabs(x));
  return (x >= 0.0f ? x : x * t) / (1.0f + t);
}

// out[i] = silu(gate[i]) * up[i], i < n
void silu_mul_row(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 t = radixlm::exp_nonpositive(_mm256_or_ps(x, sign));  // e^-|x|
    const __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 num = _mm256_blendv_ps(x, _mm256_mul_ps(x, t), negative);
    const __m256 s = _mm256_div_ps(num, _mm256_add_ps(one, t));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = silu_scalar(gate[i]) * up[i];
}

}  // namespace

// gate_up: float32 [T, 2d] contiguous, each row [gate | up]. Returns float32 [T, d].
torch::Tensor silu_and_mul(torch::Tensor gate_up, int64_t threads) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.scalar_type() == torch::kFloat32 && gate_up.is_contiguous() &&
                  gate_up.size(1) % 2 == 0, "gate_up: contiguous [T, 2d] fp32");
  const int64_t rows = gate_up.size(0), d = gate_up.size(1) / 2;
  auto out = torch::empty({rows, d}, gate_up.options());
  const float* in = gate_up.data_ptr<float>();
  float* op = out.data_ptr<float>();
  radixlm::run_rows(rows, rows * d, threads, kParallelMinElements, [&](int64_t r) {
    silu_mul_row(in + r * 2 * d, in + r * 2 * d + d, op + r * d, d);
  });
  return out;
}
