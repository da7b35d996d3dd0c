// RMSNorm of fp32 rows, alone or after the residual add, one pass over each row.
//
// torch's F.rms_norm on the CPU runs as five or six elementwise and reduction ops (~20 us for one
// 576-wide row, two per layer); here a row is summed (in double), scaled and written in one go.
// The rounding points are Hugging Face's LlamaRMSNorm: (h * rstd) rounded to fp32, then times the
// weight. The sum of squares may differ from torch's in the last bit (another summation order).
// Rows never mix, so a row's result does not depend on the batch it is in.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "decode_kernels.h"
#include "work_pool.h"

namespace {

constexpr int64_t kParallelMinElements = int64_t{1} << 16;

// out = weight * (h * rstd), h = x (+ residual, also stored to h_out when given)
void norm_row(const float* x, const float* residual, float* h_out, const float* weight, float eps,
              int64_t n, float* out) {
  const float* h = x;
  if (residual != nullptr) {
    for (int64_t i = 0; i < n; ++i) h_out[i] = x[i] + residual[i];
    h = h_out;
  }
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(h + i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc0 = _mm256_add_pd(acc0, _mm256_mul_pd(lo, lo));
    acc1 = _mm256_add_pd(acc1, _mm256_mul_pd(hi, hi));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) ss += static_cast<double>(h[i]) * h[i];
  const float mean = static_cast<float>(ss / static_cast<double>(n));
  const float rstd = 1.0f / std::sqrt(mean + eps);
  for (int64_t j = 0; j < n; ++j) {
    const float normed = h[j] * rstd;
    out[j] = weight[j] * normed;
  }
}

void check(const torch::Tensor& x, const torch::Tensor& weight) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x: contiguous [T, H] fp32");
  TORCH_CHECK(weight.dim() == 1 && weight.scalar_type() == torch::kFloat32 && weight.is_contiguous() &&
                  weight.size(0) == x.size(1), "weight: contiguous [H] fp32");
}

}  // namespace

// x: float32 [T, H] contiguous; weight: float32 [H]. Returns float32 [T, H].
torch::Tensor rmsnorm(torch::Tensor x, torch::Tensor weight, double eps, int64_t threads) {
  check(x, weight);
  auto out = torch::empty_like(x);
  const int64_t n = x.size(1);
  const float *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  radixlm::run_rows(x.size(0), x.size(0) * n, threads, kParallelMinElements, [&](int64_t r) {
    norm_row(xp + r * n, nullptr, nullptr, wp, static_cast<float>(eps), n, op + r * n);
  });
  return out;
}

// h = x + residual; returns (rmsnorm(h), h), float32 [T, H] each.
std::tuple<torch::Tensor, torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual,
                                                     torch::Tensor weight, double eps, int64_t threads) {
  check(x, weight);
  check(residual, weight);
  TORCH_CHECK(residual.size(0) == x.size(0), "x and residual: the same shape");
  auto out = torch::empty_like(x);
  auto h = torch::empty_like(x);
  const int64_t n = x.size(1);
  const float *xp = x.data_ptr<float>(), *rp = residual.data_ptr<float>(), *wp = weight.data_ptr<float>();
  float *op = out.data_ptr<float>(), *hp = h.data_ptr<float>();
  radixlm::run_rows(x.size(0), x.size(0) * n, threads, kParallelMinElements, [&](int64_t r) {
    norm_row(xp + r * n, rp + r * n, hp + r * n, wp, static_cast<float>(eps), n, op + r * n);
  });
  return {out, h};
}
