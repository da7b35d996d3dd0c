// x @ W^T (+ b) for a few fp32 rows: the products of a decode step that serves one to a few requests.
//
// torch's CPU F.linear gives a product of one row to one thread (measured: the same 8.5 GB/s with 1
// or 2 threads on the 49152x576 LM head, 15 GB/s on 2048x8192), so a batch-1 fp32 decode step read
// its weights at a fraction of the machine's bandwidth. Here the output features are cut into
// chunks claimed by the WorkPool's threads, and each weight row is read once for all input rows.
//
// Every output element is summed the same way whatever the number of rows and wherever its weight
// row falls in a chunk: eight fp32 lanes over k in order (one FMA chain), their hsum, the scalar
// tail of k, then the bias. So a row's result does not depend on the other rows in its batch.
//
// The weight may also be fp16 (widened to fp32 as read, the arithmetic unchanged): half the bytes for
// products whose weights do not stay in cache (an encoder's batch-1 forward; pooling/half_weights.py).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "decode_kernels.h"
#include "simd_math.h"
#include "work_pool.h"

namespace {

constexpr int64_t kChunkBytes = int64_t{1} << 18;        // weight bytes per work item
// Each weight stream is prefetched into L2 this far ahead of the reads. Measured at batch 1 on 538 MB
// of weights (2 threads, huge pages): 33-37 GB/s with 16 KB into L2, 28-33 with 32-64 KB, 22 with
// 32 KB into L1 (which evicts the lines before their use), 19-20 GB/s without.
constexpr int64_t kPrefetchBytes = 16 * 1024;
constexpr int64_t kParallelMinElements = int64_t{1} << 15;

template <typename W>  // the weight's element: float or c10::Half
struct Product {
  const float* x;     // [m, k]
  const W* w;         // [n, k]
  const float* bias;  // [n] or nullptr
  float* y;           // [m, n]
  int64_t m, n, k;
};

// Output features [n0, n0 + R) for the M input rows starting at row m0.
template <int M, int R, typename W>
void block(const Product<W>& p, int64_t m0, int64_t n0) {
  __m256 acc[M][R];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  const W* w = p.w + n0 * p.k;
  const float* x = p.x + m0 * p.k;
  int64_t kk = 0;
  for (; kk + 8 <= p.k; kk += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = radixlm::load8(w + r * p.k + kk);
      // past the end of the weight this is harmless: a prefetch never faults
      _mm_prefetch(reinterpret_cast<const char*>(w + r * p.k + kk) + kPrefetchBytes, _MM_HINT_T1);
    }
    for (int i = 0; i < M; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * p.k + kk);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(wv[r], xv, acc[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) {
      float s = radixlm::hsum(acc[i][r]);
      for (int64_t t = kk; t < p.k; ++t) s += static_cast<float>(w[r * p.k + t]) * x[i * p.k + t];
      if (p.bias != nullptr) s += p.bias[n0 + r];
      p.y[(m0 + i) * p.n + n0 + r] = s;
    }
  }
}

// All input rows [m0, m0 + M) against output features [n0, n1): R weight rows at a time, then one.
template <int M, typename W>
void features(const Product<W>& p, int64_t m0, int64_t n0, int64_t n1) {
  constexpr int R = M <= 2 ? 4 : (M <= 4 ? 2 : 1);
  int64_t j = n0;
  for (; j + R <= n1; j += R) block<M, R, W>(p, m0, j);
  for (; j < n1; ++j) block<M, 1, W>(p, m0, j);
}

template <typename W>
void features_all_rows(const Product<W>& p, int64_t n0, int64_t n1) {
  int64_t m0 = 0;
  for (; m0 + 4 <= p.m; m0 += 4) features<4>(p, m0, n0, n1);
  switch (p.m - m0) {
    case 3: features<3>(p, m0, n0, n1); break;
    case 2: features<2>(p, m0, n0, n1); break;
    case 1: features<1>(p, m0, n0, n1); break;
    default: break;
  }
}

template <typename W>
void run(const Product<W>& p, int64_t threads) {
  if (p.m == 0 || p.n == 0) return;
  const int64_t row_bytes = std::max<int64_t>(p.k * static_cast<int64_t>(sizeof(W)), 1);
  const int64_t rows_per_chunk = std::max<int64_t>(4, kChunkBytes / row_bytes);
  const int64_t chunks = (p.n + rows_per_chunk - 1) / rows_per_chunk;
  const int helpers = p.n * p.k >= kParallelMinElements ? static_cast<int>(threads) - 1 : 0;
  radixlm::WorkPool::instance().run(chunks, helpers, [&](int64_t c) {
    features_all_rows(p, c * rows_per_chunk, std::min(p.n, (c + 1) * rows_per_chunk));
  });
}

}  // namespace

// x: float32 [m, k] contiguous; weight: float32 or float16 [n, k] contiguous; bias: float32 [n] or
// empty. Returns float32 [m, n].
torch::Tensor small_batch_linear(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias,
                                 int64_t threads) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x: contiguous [m, k] fp32");
  const bool half = weight.scalar_type() == torch::kHalf;
  TORCH_CHECK(weight.dim() == 2 && (half || weight.scalar_type() == torch::kFloat32) && weight.is_contiguous() &&
                  weight.size(1) == x.size(1), "weight: contiguous [n, k] fp32 or fp16");
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->scalar_type() == torch::kFloat32 && bias->is_contiguous() &&
                    bias->size(0) == weight.size(0), "bias: contiguous [n] fp32");
  }
  auto y = torch::empty({x.size(0), weight.size(0)}, x.options());
  const float* b = has_bias ? bias->data_ptr<float>() : nullptr;
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  if (half) {
    run(Product<c10::Half>{x.data_ptr<float>(), weight.data_ptr<c10::Half>(), b, y.data_ptr<float>(), m, n, k},
        threads);
  } else {
    run(Product<float>{x.data_ptr<float>(), weight.data_ptr<float>(), b, y.data_ptr<float>(), m, n, k}, threads);
  }
  return y;
}
