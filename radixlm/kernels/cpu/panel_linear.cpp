// x @ W^T (+ b) for a few to a few dozen fp32 rows, the weight packed once into column panels.
//
// small_batch_linear.cpp reads the plain [n, k] weight: its blocks (up to 4 input rows x 2 weight
// rows, 8 accumulators, each output ending in a horizontal sum) wait on FMA latency at 8-32 rows,
// about 22 GFLOP/s on an encoder's layers against ~140 for a big matmul. Here the weight is stored
// as panels of 16 output features, [n / 16][k][16] (the last panel zero-filled), so one k step of a
// panel is two AVX2 vectors: a tile of 6 input rows x 16 outputs keeps 12 accumulators, each FMA
// takes the broadcast x[i][k] and one weight vector, and nothing is summed across lanes. Panels are
// claimed by the WorkPool's threads; a panel stays in L2 while every row tile of the batch reads it.
//
// Every output element is bias + the FMA chain over k in order, starting from zero, whatever the
// number of rows and the tile its row falls in: a row's result does not depend on its batch.
//
// The panels may be fp16 (widened to fp32 as read, the arithmetic unchanged): half the bytes.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "decode_kernels.h"
#include "simd_math.h"
#include "work_pool.h"

namespace {

constexpr int64_t kPanel = 16;   // output features per panel: two AVX2 vectors
constexpr int kTileRows = 6;     // 6 rows x 2 vectors = 12 accumulators (+2 weights, 1 broadcast)
constexpr int64_t kParallelMinElements = int64_t{1} << 15;

template <typename W>  // the panels' element: float or c10::Half
struct Product {
  const float* x;     // [m, k]
  const W* panels;    // [ceil(n / 16), k, 16]
  const float* bias;  // [n] or nullptr
  float* y;           // [m, n]
  int64_t m, n, k;
};

// One row's two accumulators against the k step's two weight vectors. Named registers, not arrays:
// GCC kept an array of accumulators in memory, storing all twelve on every k step (half the speed).
#define RADIXLM_ROW_FMA(I)                                         \
  if constexpr (M > I) {                                           \
    const __m256 xb = _mm256_broadcast_ss(x##I + kk);              \
    lo##I = _mm256_fmadd_ps(w0, xb, lo##I);                        \
    hi##I = _mm256_fmadd_ps(w1, xb, hi##I);                        \
  }

// Rows [m0, m0 + M) against panel `panel` (outputs [16 * panel, 16 * panel + 16) clipped to n).
template <int M, typename W>
void tile(const Product<W>& p, int64_t m0, int64_t panel) {
  static_assert(M >= 1 && M <= kTileRows, "tile rows");
  const int64_t k = p.k;
  const W* w = p.panels + panel * k * kPanel;
  // rows past M point at row 0: never read (the FMAs for them are compiled out)
  const float* x0 = p.x + m0 * k;
  const float* x1 = M > 1 ? x0 + k : x0;
  const float* x2 = M > 2 ? x0 + 2 * k : x0;
  const float* x3 = M > 3 ? x0 + 3 * k : x0;
  const float* x4 = M > 4 ? x0 + 4 * k : x0;
  const float* x5 = M > 5 ? x0 + 5 * k : x0;
  __m256 lo0 = _mm256_setzero_ps(), lo1 = lo0, lo2 = lo0, lo3 = lo0, lo4 = lo0, lo5 = lo0;
  __m256 hi0 = lo0, hi1 = lo0, hi2 = lo0, hi3 = lo0, hi4 = lo0, hi5 = lo0;
  for (int64_t kk = 0; kk < k; ++kk) {
    const __m256 w0 = radixlm::load8(w + kk * kPanel);
    const __m256 w1 = radixlm::load8(w + kk * kPanel + 8);
    RADIXLM_ROW_FMA(0)
    RADIXLM_ROW_FMA(1)
    RADIXLM_ROW_FMA(2)
    RADIXLM_ROW_FMA(3)
    RADIXLM_ROW_FMA(4)
    RADIXLM_ROW_FMA(5)
  }
  const __m256 lo[kTileRows] = {lo0, lo1, lo2, lo3, lo4, lo5};
  const __m256 hi[kTileRows] = {hi0, hi1, hi2, hi3, hi4, hi5};
  const int64_t n0 = panel * kPanel;
  const int64_t width = std::min(kPanel, p.n - n0);
  __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
  alignas(32) float bias[kPanel] = {};
  if (p.bias != nullptr) {
    std::copy(p.bias + n0, p.bias + n0 + width, bias);
    b0 = _mm256_load_ps(bias);
    b1 = _mm256_load_ps(bias + 8);
  }
  for (int i = 0; i < M; ++i) {
    const __m256 r0 = _mm256_add_ps(lo[i], b0), r1 = _mm256_add_ps(hi[i], b1);
    float* out = p.y + (m0 + i) * p.n + n0;
    if (width == kPanel) {
      _mm256_storeu_ps(out, r0);
      _mm256_storeu_ps(out + 8, r1);
    } else {
      alignas(32) float tmp[kPanel];
      _mm256_store_ps(tmp, r0);
      _mm256_store_ps(tmp + 8, r1);
      std::copy(tmp, tmp + width, out);
    }
  }
}

// The rows in ceil(m / 6) tiles of near-equal height (20 rows: 5 + 5 + 5 + 5, not 6 + 6 + 6 + 2):
// a tile of 1-2 rows has 2-4 accumulators, too few chains to hide the FMA latency.
template <typename W>
void panel_all_rows(const Product<W>& p, int64_t panel) {
  const int64_t tiles = (p.m + kTileRows - 1) / kTileRows;
  const int64_t base = p.m / tiles, taller = p.m % tiles;  // the first `taller` tiles get base + 1
  int64_t m0 = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t rows = base + (t < taller ? 1 : 0);
    switch (rows) {
      case 6: tile<6>(p, m0, panel); break;
      case 5: tile<5>(p, m0, panel); break;
      case 4: tile<4>(p, m0, panel); break;
      case 3: tile<3>(p, m0, panel); break;
      case 2: tile<2>(p, m0, panel); break;
      default: tile<1>(p, m0, panel); break;
    }
    m0 += rows;
  }
}

template <typename W>
void run(const Product<W>& p, int64_t threads) {
  if (p.m == 0 || p.n == 0) return;
  const int64_t panels = (p.n + kPanel - 1) / kPanel;
  // about four work items a thread, so a late helper leaves little for the others
  const int64_t per_chunk = std::max<int64_t>(1, panels / std::max<int64_t>(1, 4 * threads));
  const int64_t chunks = (panels + per_chunk - 1) / per_chunk;
  const int helpers = p.n * p.k >= kParallelMinElements ? static_cast<int>(threads) - 1 : 0;
  radixlm::WorkPool::instance().run(chunks, helpers, [&](int64_t c) {
    const int64_t end = std::min(panels, (c + 1) * per_chunk);
    for (int64_t panel = c * per_chunk; panel < end; ++panel) panel_all_rows(p, panel);
  });
}

}  // namespace

#undef RADIXLM_ROW_FMA

// x: float32 [m, k] contiguous; panels: float32 or float16 [ceil(n / 16), k, 16] contiguous (output
// feature 16 * j + c, input t at [j][t][c]); bias: float32 [n] or empty. Returns float32 [m, n].
torch::Tensor panel_linear(torch::Tensor x, torch::Tensor panels, int64_t n, c10::optional<torch::Tensor> bias,
                           int64_t threads) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x: contiguous [m, k] fp32");
  const bool half = panels.scalar_type() == torch::kHalf;
  TORCH_CHECK(panels.dim() == 3 && (half || panels.scalar_type() == torch::kFloat32) && panels.is_contiguous() &&
                  panels.size(1) == x.size(1) && panels.size(2) == kPanel && n >= 0 &&
                  panels.size(0) == (n + kPanel - 1) / kPanel,
              "panels: contiguous [ceil(n / 16), k, 16] fp32 or fp16");
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->scalar_type() == torch::kFloat32 && bias->is_contiguous() &&
                    bias->size(0) == n, "bias: contiguous [n] fp32");
  }
  auto y = torch::empty({x.size(0), n}, x.options());
  const float* b = has_bias ? bias->data_ptr<float>() : nullptr;
  const int64_t m = x.size(0), k = x.size(1);
  if (half) {
    run(Product<c10::Half>{x.data_ptr<float>(), panels.data_ptr<c10::Half>(), b, y.data_ptr<float>(), m, n, k},
        threads);
  } else {
    run(Product<float>{x.data_ptr<float>(), panels.data_ptr<float>(), b, y.data_ptr<float>(), m, n, k}, threads);
  }
  return y;
}
