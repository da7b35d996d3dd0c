// y = x @ W^T for W stored as GGUF blocks (Q4_0, Q4_1, Q5_0, Q8_0, and the K-quants Q4_K, Q6_K) in
// the file's own byte layout (radixlm/kernels/cpu/gguf_blocks.py and gguf_kquants.py describe them).
//
// Activations are quantized on the fly to int8 blocks of 32 with one float scale each (llama.cpp's
// q8_0/q8_1 idea); each weight block is unpacked to 32 bytes once and dotted against the activation
// rows with _mm256_maddubs_epi16 (u8 x s8 -> s16 pairs) and _mm256_madd_epi16, then accumulated in
// float with one fmadd per block. A K-quant super-block of 256 weights is walked as eight sub-blocks
// of 32 against the same activation blocks: Q4_K's 6-bit scale and minimum of each sub-block become
// its float scale and offset (as Q4_1's), Q6_K's two int8 scales per 32 weights multiply the int16
// pair sums in _mm256_madd_epi16.
//
// Each weight row is read front to back (one stream the hardware prefetcher follows) against up to
// four activation rows (a pass); the scales of a pass's rows are multiplied four at a time. The rows
// of W are cut into chunks of up to kChunkBytes, at least four a thread: each thread streams long
// runs of the weight, and at batches over four a chunk stays in L2 while the passes go over it.
// (Measured, 2 threads, weights read from memory: a 1B model's 2048x8192 Q4_0 layer at batch 1 took
// 669 us in tiles of 16 rows, whose short runs interleaved between the threads defeat the
// prefetcher, and 414 us in chunks.) Chunks are shared out by radixlm::WorkPool (work_pool.h: why
// not OpenMP); products under parallel_min_bytes() of blocks run on the calling thread alone.
//
// Batch invariance: an output element's arithmetic is the same sequence of operations whatever the
// number of activation rows in a pass, the batch size or the thread count (accumulators never mix
// rows, and the file is built with -ffp-contract=off), so a token's result does not depend on the
// batch it is in.
#include <torch/extension.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "simd_math.h"
#include "work_pool.h"

namespace {

constexpr int kBlock = 32;
constexpr int kSuperBlock = 256;
constexpr int kMinChunkRows = 16;
constexpr int kRowsPerPass = 4;
constexpr int64_t kChunkBytes = int64_t{1} << 18;  // weight bytes per work item (at most)

enum Format : int { kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14 };  // GGML type ids

constexpr bool is_kquant(int fmt) { return fmt == kQ4_K || fmt == kQ6_K; }
constexpr int block_bytes(int fmt) {
  return fmt == kQ4_0 ? 18 : fmt == kQ4_1 ? 20 : fmt == kQ5_0 ? 22 : fmt == kQ8_0 ? 34
       : fmt == kQ4_K ? 144 : 210;
}
constexpr int block_elems(int fmt) { return is_kquant(fmt) ? kSuperBlock : kBlock; }

int64_t parallel_min_bytes() {
  static const int64_t value = [] {
    const char* env = std::getenv("RADIXLM_GGUF_PARALLEL_MIN_BYTES");
    return env ? std::max<int64_t>(0, std::atoll(env)) : int64_t{256} << 10;
  }();
  return value;
}

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Activation row -> int8 blocks: q = round-half-even(x / d) with d = max|x| / 127 per block;
// sums[b] = d * sum(q). scales and sums are written every `stride` floats (Activations' layout).
void quantize_row(const float* x, int64_t k, int8_t* q, float* scales, float* sums, int64_t stride) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const __m256 inv = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
    __m256i iv[4];
    for (int i = 0; i < 4; ++i) iv[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));  // nearest-even
    const __m256i total = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlock), _mm256_permutevar8x32_epi32(packed, order));
    scales[b * stride] = d;
    sums[b * stride] = d * static_cast<float>(hsum_epi32(total));
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
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  }
}

// Q5_0's fifth bits: bit j of the little-endian uint32 at qh -> 0x10 in byte j (else 0).
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(  // byte j <- byte j / 8 of bits (both lanes hold all 4)
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));  // bit j % 8
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// The block's 32 products w * x summed in eight int32 lanes, as floats.
template <int FMT>
inline __m256 dot_block(__m256i w, __m256i x) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (FMT == kQ8_0) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
  } else {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones));
  }
}

// The activation rows of a product, quantized. Scales and sums are laid out for passes of four
// rows: [m / 4 (rounded up), k / 32, 4], so one 128-bit load gives block b's value for all four
// rows of a pass (lanes of rows past m are zero).
struct Activations {
  const int8_t* q;     // [m, k]
  const float* scale;  // [passes, k / 32, 4]
  const float* sum;    // [passes, k / 32, 4]: scale * sum of the block's q
  int64_t k;
};

// The float scales of block b for the MB rows of a pass, dw * dx[i], each broadcast to eight lanes.
// Computed four at a time for MB > 1; the products are the same IEEE multiplications as the
// scalar ones of MB = 1, so a row's result does not depend on MB.
template <int MB>
inline void pass_scales(float dw, const Activations& x, int64_t b, __m256* out) {
  if constexpr (MB == 1) {
    out[0] = _mm256_set1_ps(dw * x.scale[4 * b]);
  } else {
    const __m256 s4 = _mm256_castps128_ps256(_mm_mul_ps(_mm_set1_ps(dw), _mm_loadu_ps(x.scale + 4 * b)));
    for (int i = 0; i < MB; ++i) out[i] = _mm256_permutevar8x32_ps(s4, _mm256_set1_epi32(i));
  }
}

// The Q4/Q5 offsets' sums of a pass, lane i for row i: a scalar for one row (a 128-bit lane 0
// measured 12-15% slower at batch 1), a vector for more.
template <int MB>
using Offsets = std::conditional_t<MB == 1, float, __m128>;

// offset[i] += off * sx[i] for the rows of a pass, one fused multiply-add each.
template <int MB>
inline Offsets<MB> add_offsets(float off, const Activations& x, int64_t b, Offsets<MB> offset) {
  if constexpr (MB == 1) {
    return std::fma(off, x.sum[4 * b], offset);
  } else {
    return _mm_fmadd_ps(_mm_set1_ps(off), _mm_loadu_ps(x.sum + 4 * b), offset);
  }
}

inline __m256i load_x(const Activations& x, int i, int64_t b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + i * x.k + b * kBlock));
}

// 32 unsigned weights wv with values dw * q + off (activation block b) against MB activation rows:
// acc[i] += dot * (dw * dx[i]), offset[i] += off * sx[i].
template <int MB>
inline void unsigned_step(__m256i wv, float dw, float off, const Activations& x, int64_t b, __m256* acc,
                          Offsets<MB>& offset) {
  __m256 scale[MB];
  pass_scales<MB>(dw, x, b, scale);
  for (int i = 0; i < MB; ++i) {
    acc[i] = _mm256_fmadd_ps(dot_block<kQ4_1>(wv, load_x(x, i, b)), scale[i], acc[i]);
  }
  offset = add_offsets<MB>(off, x, b, offset);
}

// One Q4_0/Q4_1/Q5_0/Q8_0 weight block against MB activation rows.
template <int FMT, int MB>
inline void block_step(const uint8_t* blk, const Activations& x, int64_t b, __m256* acc, Offsets<MB>& offset) {
  constexpr int qs_offset = FMT == kQ4_1 ? 4 : FMT == kQ5_0 ? 6 : 2;
  const float dw = half_to_float(blk);
  const __m256i wv = unpack<FMT>(blk + qs_offset);
  if constexpr (FMT == kQ5_0) {
    const __m256i q = _mm256_or_si256(wv, fifth_bits(blk + 2));  // 0..31
    unsigned_step<MB>(q, dw, -16.0f * dw, x, b, acc, offset);
  } else if constexpr (FMT == kQ8_0) {
    __m256 scale[MB];
    pass_scales<MB>(dw, x, b, scale);
    for (int i = 0; i < MB; ++i) acc[i] = _mm256_fmadd_ps(dot_block<FMT>(wv, load_x(x, i, b)), scale[i], acc[i]);
  } else {
    const float off = FMT == kQ4_0 ? -8.0f * dw : half_to_float(blk + 2);
    unsigned_step<MB>(wv, dw, off, x, b, acc, offset);
  }
}

// A Q4_K super-block (sub-block j: d * sc[j] * q - dmin * m[j]) against MB activation rows; its
// sub-blocks are activation blocks 8 * sb .. 8 * sb + 7.
template <int MB>
inline void q4_k_step(const uint8_t* blk, const Activations& x, int64_t sb, __m256* acc, Offsets<MB>& offset) {
  const float d = half_to_float(blk), dmin = half_to_float(blk + 2);
  const uint8_t* s = blk + 4;  // 12 bytes of packed 6-bit scales and minimums
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high) share 32 bytes
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * c));
    for (int hi = 0; hi < 2; ++hi) {
      const int j = 2 * c + hi;
      const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
      const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      const __m256i wv = _mm256_and_si256(hi ? _mm256_srli_epi16(raw, 4) : raw, low_mask);
      unsigned_step<MB>(wv, d * static_cast<float>(sc), -dmin * static_cast<float>(m), x, 8 * sb + j, acc, offset);
    }
  }
}

// Q6_K sub-block G (0..3) of a half: 32 weights from ql (low nibbles of ql0/ql1 for G < 2, high ones
// after), bits 2G, 2G + 1 of qh on top, -32; scales: the half's eight int16 scales in both lanes,
// of which 2G weights the first 16 weights and 2G + 1 the next 16.
template <int G, int MB>
inline void q6_k_sub(__m256i ql0, __m256i ql1, __m256i qh, __m256i scales, float d, const Activations& x,
                     int64_t b, __m256* acc) {
  const __m256i src = G & 1 ? ql1 : ql0;
  const __m256i low = _mm256_and_si256(G >= 2 ? _mm256_srli_epi16(src, 4) : src, _mm256_set1_epi8(0x0F));
  const __m256i shifted = G == 0 ? _mm256_slli_epi16(qh, 4) : G == 1 ? _mm256_slli_epi16(qh, 2)
                        : G == 2 ? qh : _mm256_srli_epi16(qh, 2);
  const __m256i high = _mm256_and_si256(shifted, _mm256_set1_epi8(0x30));
  const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));  // -32..31
  const __m256i abs_q = _mm256_sign_epi8(q, q);
  const __m256i pick =  // int16 element 2G in the low lane, 2G + 1 in the high lane
      _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(((4 * G + 3) << 8) | (4 * G + 2))),
                       _mm_set1_epi16(static_cast<int16_t>(((4 * G + 1) << 8) | (4 * G))));
  const __m256i sub_scales = _mm256_shuffle_epi8(scales, pick);
  __m256 scale[MB];
  pass_scales<MB>(d, x, b, scale);
  for (int i = 0; i < MB; ++i) {
    const __m256i pairs = _mm256_maddubs_epi16(abs_q, _mm256_sign_epi8(load_x(x, i, b), q));
    const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, sub_scales));
    acc[i] = _mm256_fmadd_ps(dot, scale[i], acc[i]);
  }
}

// A Q6_K super-block (weight i: d * scale[i / 16] * (q - 32)) against MB activation rows. Each
// sub-block of 32 is unpacked to signed bytes (-32..31) and multiplied with the sign trick
// (|w| as u8 times x carrying w's sign); its two scales weight the halves' int16 pair sums.
template <int MB>
inline void q6_k_step(const uint8_t* blk, const Activations& x, int64_t sb, __m256* acc) {
  const float d = half_to_float(blk + 208);
  const __m256i all_scales =  // int16: scales 0-7 (first half) in the low lane, 8-15 in the high one
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
  for (int h = 0; h < 2; ++h) {  // halves of 128 weights: ql[64h..], qh[32h..], scales[8h..]
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i scales = h ? _mm256_permute2x128_si256(all_scales, all_scales, 0x11)
                             : _mm256_permute2x128_si256(all_scales, all_scales, 0x00);
    const int64_t b = 8 * sb + 4 * h;
    q6_k_sub<0, MB>(ql0, ql1, qh, scales, d, x, b, acc);
    q6_k_sub<1, MB>(ql0, ql1, qh, scales, d, x, b + 1, acc);
    q6_k_sub<2, MB>(ql0, ql1, qh, scales, d, x, b + 2, acc);
    q6_k_sub<3, MB>(ql0, ql1, qh, scales, d, x, b + 3, acc);
  }
}

// out[i * n] for one weight row against MB activation rows.
template <int FMT, int MB>
void row_dot(const uint8_t* w, const Activations& x, float* out, int64_t n) {
  const int64_t nblocks = x.k / kBlock;
  __m256 acc[MB];
  for (int i = 0; i < MB; ++i) acc[i] = _mm256_setzero_ps();
  Offsets<MB> offset{};  // lane i: row i
  constexpr int bytes = block_bytes(FMT);
  if constexpr (FMT == kQ4_K) {
    for (int64_t sb = 0; sb < x.k / kSuperBlock; ++sb) {
      q4_k_step<MB>(w + sb * bytes, x, sb, acc, offset);
    }
  } else if constexpr (FMT == kQ6_K) {
    for (int64_t sb = 0; sb < x.k / kSuperBlock; ++sb) q6_k_step<MB>(w + sb * bytes, x, sb, acc);
  } else {
    for (int64_t b = 0; b < nblocks; ++b) block_step<FMT, MB>(w + b * bytes, x, b, acc, offset);
  }
  alignas(16) float offsets[4];
  if constexpr (MB == 1) {
    offsets[0] = offset;
  } else {
    _mm_store_ps(offsets, offset);
  }
  for (int i = 0; i < MB; ++i) out[i * n] = radixlm::hsum(acc[i]) + offsets[i];
}

// Weight rows [r0, r1) against activation rows [m0, m0 + MB).
template <int FMT, int MB>
void rows(const uint8_t* w, int64_t row_bytes, const Activations& x, int64_t m0, int64_t r0, int64_t r1,
          float* out, int64_t n) {
  const int64_t nblocks = x.k / kBlock;
  const Activations xm{x.q + m0 * x.k, x.scale + m0 * nblocks, x.sum + m0 * nblocks, x.k};  // m0 % 4 == 0
  for (int64_t r = r0; r < r1; ++r) row_dot<FMT, MB>(w + r * row_bytes, xm, out + m0 * n + r, n);
}

template <int FMT>
void gemm(const uint8_t* w, int64_t n, const Activations& x, int64_t m, float* out, int threads) {
  const int64_t row_bytes = x.k / block_elems(FMT) * block_bytes(FMT);
  const int helpers = n * row_bytes * m >= parallel_min_bytes() ? threads - 1 : 0;
  // chunks of ~kChunkBytes of weight rows (at least four a thread): long runs of the weight that
  // stay in L2 while the passes of four activation rows go over them
  const int64_t balanced = (n + 4 * (helpers + 1) - 1) / (4 * (helpers + 1));
  const int64_t chunk_rows = std::max<int64_t>(kMinChunkRows, std::min<int64_t>(kChunkBytes / row_bytes, balanced));
  const int64_t chunks = (n + chunk_rows - 1) / chunk_rows;
  radixlm::WorkPool::instance().run(chunks, helpers, [&](int64_t t) {
    const int64_t r0 = t * chunk_rows, r1 = std::min(n, r0 + chunk_rows);
    for (int64_t m0 = 0; m0 < m; m0 += kRowsPerPass) {
      switch (std::min<int64_t>(kRowsPerPass, m - m0)) {
        case 4: rows<FMT, 4>(w, row_bytes, x, m0, r0, r1, out, n); break;
        case 3: rows<FMT, 3>(w, row_bytes, x, m0, r0, r1, out, n); break;
        case 2: rows<FMT, 2>(w, row_bytes, x, m0, r0, r1, out, n); break;
        default: rows<FMT, 1>(w, row_bytes, x, m0, r0, r1, out, n); break;
      }
    }
  });
}

}  // namespace

// x: float32 [m, k]; weight: uint8 [n, k/32 * block bytes] of GGML type `fmt`; threads >= 1 (the
// calling one included). Returns float32 [m, n].
// Callers check the arguments first (radixlm/kernels/cpu/gguf_ops.py); the checks here are a backstop.
torch::Tensor gguf_linear(torch::Tensor x, torch::Tensor weight, int64_t fmt, int64_t threads) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D float32 tensor");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kUInt8, "weight must be 2-D uint8 blocks");
  TORCH_CHECK(fmt == kQ4_0 || fmt == kQ4_1 || fmt == kQ5_0 || fmt == kQ8_0 ||
              is_kquant(static_cast<int>(fmt)),
              "unsupported GGML block type ", fmt);
  TORCH_CHECK(threads >= 1 && threads <= 1024, "threads must be in [1, 1024], got ", threads);
  x = x.contiguous();
  weight = weight.contiguous();
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  const int elems = block_elems(static_cast<int>(fmt));
  TORCH_CHECK(k % elems == 0, "in_features must be a multiple of ", elems, ", got ", k);
  TORCH_CHECK(weight.size(1) == k / elems * block_bytes(static_cast<int>(fmt)),
              "weight row bytes do not match in_features ", k);
  auto out = torch::empty({m, n}, x.options());
  if (m == 0 || n == 0) return out;
  // scratch reused across calls on the calling thread (a decode step makes ~120 of them)
  thread_local std::vector<int8_t> q_buf;
  thread_local std::vector<float> scale_buf, sum_buf;
  const int64_t nblocks = k / kBlock;
  q_buf.resize(m * k);
  const int64_t padded = (m + kRowsPerPass - 1) / kRowsPerPass * kRowsPerPass;
  scale_buf.assign(padded * nblocks, 0.0f);
  sum_buf.assign(padded * nblocks, 0.0f);
  const float* xp = x.data_ptr<float>();
  int8_t* qp = q_buf.data();
  float* sp = scale_buf.data();
  float* up = sum_buf.data();
  const int quantize_helpers = m * k >= 16384 ? static_cast<int>(threads) - 1 : 0;
  radixlm::WorkPool::instance().run(m, quantize_helpers, [&](int64_t i) {
    const int64_t at = (i - i % kRowsPerPass) * nblocks + i % kRowsPerPass;  // [pass, block, row in pass]
    quantize_row(xp + i * k, k, qp + i * k, sp + at, up + at, kRowsPerPass);
  });
  const Activations acts{qp, sp, up, k};
  const uint8_t* wp = weight.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  switch (fmt) {
    case kQ4_0: gemm<kQ4_0>(wp, n, acts, m, op, static_cast<int>(threads)); break;
    case kQ4_1: gemm<kQ4_1>(wp, n, acts, m, op, static_cast<int>(threads)); break;
    case kQ5_0: gemm<kQ5_0>(wp, n, acts, m, op, static_cast<int>(threads)); break;
    case kQ4_K: gemm<kQ4_K>(wp, n, acts, m, op, static_cast<int>(threads)); break;
    case kQ6_K: gemm<kQ6_K>(wp, n, acts, m, op, static_cast<int>(threads)); break;
    default: gemm<kQ8_0>(wp, n, acts, m, op, static_cast<int>(threads)); break;
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  mod.def("gguf_linear", &gguf_linear,
          "x @ W^T for GGUF Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K blocks (AVX2, threaded)");
}
