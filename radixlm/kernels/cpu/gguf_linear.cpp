// y = x @ W^T for W stored as GGUF blocks (Q4_0, Q4_1, Q8_0) in the file's own byte layout.
//
// Activations are quantized on the fly to int8 blocks of 32 with one float scale each (llama.cpp's
// q8_0/q8_1 idea); each weight block is unpacked to 32 bytes once and dotted against up to four
// activation rows with _mm256_maddubs_epi16 (u8 x s8 -> s16 pairs) and _mm256_madd_epi16. Rows of
// W are split over OpenMP threads in tiles of kTileRows; within a tile the activation rows are
// walked four at a time, so at batch <= 4 every weight byte is read once (the matrix-vector
// path), and at larger batches a tile stays in cache while all activation rows pass over it.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

constexpr int kBlock = 32;
constexpr int kTileRows = 16;
constexpr int kRowsPerPass = 4;

enum Format : int { kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8 };  // GGML type ids

constexpr int block_bytes(int fmt) { return fmt == kQ4_0 ? 18 : fmt == kQ4_1 ? 20 : 34; }

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Activation row -> int8 blocks: q = round(x / d) with d = max|x| / 127 per block; sums[b] = d * sum(q).
void quantize_row(const float* x, int64_t k, int8_t* q, float* scales, float* sums) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    __m256 amax = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < kBlock; i += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < kBlock; ++i) {
      const int v = static_cast<int>(std::nearbyint(xb[i] * inv));
      q[b * kBlock + i] = static_cast<int8_t>(v);
      sum += v;
    }
    scales[b] = d;
    sums[b] = d * static_cast<float>(sum);
  }
}

// 32 weights of one block as bytes: unsigned nibbles 0..15 for Q4 (element j in the low nibble of
// byte j, element j+16 in its high nibble), signed bytes for Q8_0.
template <int FMT>
inline __m256i unpack(const uint8_t* qs) {
  if constexpr (FMT == kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(raw, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
    return _mm256_set_m128i(hi, lo);
  }
}

// Eight int32 partial sums of the block's 32 products w * x.
template <int FMT>
inline __m256i dot_block(__m256i w, __m256i x) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (FMT == kQ8_0) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p, ones);
  } else {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
  }
}

template <int FMT, int MB>
void rows_pass(const uint8_t* wrow, int64_t nblocks, const int8_t* xq, const float* xs, const float* xsum,
               int64_t k, float* out, int64_t out_stride) {
  constexpr int bytes = block_bytes(FMT);
  constexpr int qs_offset = FMT == kQ4_1 ? 4 : 2;
  __m256 acc[MB];
  float offset[MB];
  for (int i = 0; i < MB; ++i) { acc[i] = _mm256_setzero_ps(); offset[i] = 0.0f; }
  for (int64_t b = 0; b < nblocks; ++b) {
    const uint8_t* blk = wrow + b * bytes;
    const float dw = half_to_float(blk);
    const __m256i w = unpack<FMT>(blk + qs_offset);
    float off = 0.0f;
    if constexpr (FMT == kQ4_0) off = -8.0f * dw;
    if constexpr (FMT == kQ4_1) off = half_to_float(blk + 2);
    for (int i = 0; i < MB; ++i) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + i * k + b * kBlock));
      const __m256 p = _mm256_cvtepi32_ps(dot_block<FMT>(w, x));
      acc[i] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * xs[i * (k / kBlock) + b]), acc[i]);
      if constexpr (FMT != kQ8_0) offset[i] += off * xsum[i * (k / kBlock) + b];
    }
  }
  for (int i = 0; i < MB; ++i) out[i * out_stride] = hsum(acc[i]) + offset[i];
}

template <int FMT>
void gemm(const uint8_t* w, int64_t n, int64_t k, const int8_t* xq, const float* xs, const float* xsum,
          int64_t m, float* out) {
  const int64_t nblocks = k / kBlock;
  const int64_t row_bytes = nblocks * block_bytes(FMT);
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
#pragma omp parallel for schedule(static) num_threads(at::get_num_threads())
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n_end = std::min(n, (t + 1) * kTileRows);
    for (int64_t m0 = 0; m0 < m; m0 += kRowsPerPass) {
      const int64_t mb = std::min<int64_t>(kRowsPerPass, m - m0);
      const int8_t* xq_p = xq + m0 * k;
      const float* xs_p = xs + m0 * nblocks;
      const float* xsum_p = xsum + m0 * nblocks;
      for (int64_t r = t * kTileRows; r < n_end; ++r) {
        float* o = out + m0 * n + r;
        const uint8_t* wr = w + r * row_bytes;
        switch (mb) {
          case 4: rows_pass<FMT, 4>(wr, nblocks, xq_p, xs_p, xsum_p, k, o, n); break;
          case 3: rows_pass<FMT, 3>(wr, nblocks, xq_p, xs_p, xsum_p, k, o, n); break;
          case 2: rows_pass<FMT, 2>(wr, nblocks, xq_p, xs_p, xsum_p, k, o, n); break;
          default: rows_pass<FMT, 1>(wr, nblocks, xq_p, xs_p, xsum_p, k, o, n); break;
        }
      }
    }
  }
}

}  // namespace

// x: float32 [m, k]; weight: uint8 [n, k/32 * block bytes] of GGML type `fmt`. Returns float32 [m, n].
torch::Tensor gguf_linear(torch::Tensor x, torch::Tensor weight, int64_t fmt) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D float32 tensor");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kUInt8, "weight must be 2-D uint8 blocks");
  TORCH_CHECK(fmt == kQ4_0 || fmt == kQ4_1 || fmt == kQ8_0, "unsupported GGML block type ", fmt);
  x = x.contiguous();
  weight = weight.contiguous();
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  TORCH_CHECK(k % kBlock == 0, "in_features must be a multiple of 32, got ", k);
  TORCH_CHECK(weight.size(1) == k / kBlock * block_bytes(static_cast<int>(fmt)),
              "weight row bytes do not match in_features ", k);
  auto out = torch::empty({m, n}, x.options());
  if (m == 0 || n == 0) return out;
  auto xq = torch::empty({m, k}, torch::dtype(torch::kInt8));
  auto xs = torch::empty({m, k / kBlock}, x.options());
  auto xsum = torch::empty({m, k / kBlock}, x.options());
  const float* xp = x.data_ptr<float>();
  int8_t* qp = xq.data_ptr<int8_t>();
  float* sp = xs.data_ptr<float>();
  float* up = xsum.data_ptr<float>();
#pragma omp parallel for schedule(static) num_threads(at::get_num_threads()) if (m > 1)
  for (int64_t i = 0; i < m; ++i) quantize_row(xp + i * k, k, qp + i * k, sp + i * (k / kBlock), up + i * (k / kBlock));
  const uint8_t* wp = weight.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  switch (fmt) {
    case kQ4_0: gemm<kQ4_0>(wp, n, k, qp, sp, up, m, op); break;
    case kQ4_1: gemm<kQ4_1>(wp, n, k, qp, sp, up, m, op); break;
    default: gemm<kQ8_0>(wp, n, k, qp, sp, up, m, op); break;
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  mod.def("gguf_linear", &gguf_linear, "x @ W^T for GGUF Q4_0/Q4_1/Q8_0 weight blocks (AVX2, OpenMP)");
}
