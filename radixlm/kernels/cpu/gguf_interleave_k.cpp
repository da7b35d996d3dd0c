// Q4_K and Q6_K weights repacked once (at bind time) into groups of eight rows, and the AVX2
// products with them: gguf_interleave.cpp's scheme (one register holds eight rows' lanes, no
// horizontal sums) for the K-quants, with each sub-block's scales decoded at repack time so the
// inner loop does no 6-bit unpacking.
//
// Both walk a super-block of 256 weights as eight sub-blocks of 32, each against one activation
// block (int8, one float scale: Activations). Words are gguf_interleave.cpp's: a 32-byte word holds
// four bytes of each of the eight rows (lane r = row r), so four activation bytes broadcast to every
// lane meet eight rows' weights in one maddubs.
//
// Q4_K, per group of 8 rows (the last padded with zero rows) and super-block, kQ4KGroupBytes:
//   16 bytes  the 8 rows' fp16 d;  16 bytes the 8 rows' fp16 dmin
//   64 bytes  scales sc[j][r] (uint8 0..63), sub-block j's eight side by side
//   64 bytes  minimums m[j][r] (uint8 0..63)
//   1024 bytes for each 32-byte chunk c of the file's nibbles (sub-blocks 2c low, 2c + 1 high), 8
//             words: word w, bytes 4r..4r+3 = row r's chunk bytes 4w..4w+3
// Sub-block j: per word, the nibbles (low for even j, high for odd) times x[4w..4w+3] by maddubs,
// the eight words added in int16, then madd with (sc_r, sc_r) gives sc * dot in int32, exactly.
// No int16 saturates: a pair is at most 2 * 15 * 128 = 3840 in magnitude (|x| <= 127; 128 stated as
// in gguf_interleave.cpp) and eight are added: 30720 <= 32767; sc * dot <= 63 * 61440 in int32.
// Then acc += float(sc * dot) * (d * dx) and acc -= (dmin * m) * (dx * sum(x)) (Activations::sum).
// 1184 bytes against the file's 8 * 144 = 1152.
//
// Q6_K, per group and super-block, kQ6KGroupBytes (= 8 * 210, the file's bytes):
//   16 bytes  the 8 rows' fp16 d
//   128 bytes int8 scales [j][h][r]: sub-block j's first 16 weights (h = 0) and last 16 (h = 1)
//   8 x 192 bytes, sub-block j: 4 words (c = 0..3; lane r byte t: low nibble = low 4 bits of weight
//             4c + t, high nibble of weight 16 + 4c + t), then 2 words of top bits (lane r byte t,
//             bits 2c..2c+1: weight 4c + t's top 2 bits; the second word: weight 16 + 4c + t's)
// A word's weights q - 32 (-32..31) are multiplied with the sign trick (|q| as u8 times x carrying
// q's sign); the low nibbles' (first 16 weights) and high nibbles' sums are kept apart in int16 and
// madd with their own scale pairs. No int16 saturates: a pair is at most 2 * 32 * 127 = 8128 (|x|
// <= 127: the activations are rounded from |x| / (max |x| / 127) and never reach 128) and four are
// added: 32512 <= 32767.
//
// Batch invariance: as gguf_interleave.cpp, an output's arithmetic is per lane and per activation
// row (exact integer parts, then the same float sequence over sub-blocks in order), whatever the
// tile, the rows in a pass or the thread split (-ffp-contract=off). The results differ from the
// block loops' (another float summation order) within the same error bound.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gguf_format.h"
#include "gguf_groups.h"
#include "simd_math.h"
#include "work_pool.h"

namespace radixlm::gguf {
namespace {

inline __m256i load8(const uint8_t* p) { return _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }

// Eight uint8 0..63 (row r at byte r) -> int16 pairs (v_r, v_r) in 32-bit lane r.
inline __m256i u8_pairs(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  const __m256i spread = _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128,
                                          4, -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128);
  return _mm256_shuffle_epi8(_mm256_set1_epi64x(v), spread);
}

// Eight int8 (row r at byte r) -> int16 pairs (v_r, v_r) in 32-bit lane r.
inline __m256i s8_pairs(const uint8_t* p) {
  const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA);
}

inline __m256 halves(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

template <int FMT>
constexpr int64_t super_group_bytes() { return FMT == kQ4_K ? kQ4KGroupBytes : kQ6KGroupBytes; }

// Q4_K sub-block j of super-block sb: G groups' blocks at base[g] against MB activation rows.
template <int G, int MB>
inline void q4_k_sub(const uint8_t* const (&base)[G], int j, const Activations& x, int64_t b, __m256 (&acc)[G][MB]) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const int c = j / 2;
  __m256i sum[G][MB];
  for (int w = 0; w < 8; ++w) {
    __m256i v[G];
    for (int g = 0; g < G; ++g) {
      const __m256i raw = load_word(base[g] + 160 + 256 * c + 32 * w);
      v[g] = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(raw, 4) : raw, low);
    }
    for (int i = 0; i < MB; ++i) {
      const __m256i xv = broadcast4(x.q + i * x.k + b * kBlock + 4 * w);
      for (int g = 0; g < G; ++g) {
        const __m256i t = _mm256_maddubs_epi16(v[g], xv);
        sum[g][i] = w == 0 ? t : _mm256_add_epi16(sum[g][i], t);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const __m256i sc = u8_pairs(base[g] + 32 + 8 * j);
    const __m256 d = halves(base[g]);
    const __m256 dm = _mm256_mul_ps(halves(base[g] + 16), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(base[g] + 96 + 8 * j)))));
    for (int i = 0; i < MB; ++i) {
      const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(sum[g][i], sc));
      acc[g][i] = _mm256_fmadd_ps(dot, _mm256_mul_ps(d, _mm256_set1_ps(x.scale[4 * b + i])), acc[g][i]);
      acc[g][i] = _mm256_fnmadd_ps(dm, _mm256_set1_ps(x.sum[4 * b + i]), acc[g][i]);
    }
  }
}

// The top-2-bit word shifted so that word c's bits land on bits 4..5 of each byte.
template <int C>
inline __m256i top_bits(__m256i h) {
  const __m256i shifted = C == 0 ? _mm256_slli_epi16(h, 4) : C == 1 ? _mm256_slli_epi16(h, 2)
                        : C == 2 ? h : _mm256_srli_epi16(h, 2);
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x30));
}

// Q6_K: half H (0: low nibbles, weights 0..15; 1: high nibbles, 16..31) of sub-block j's words,
// word C, into sum (C == 0: set).
template <int C, int H, int G, int MB>
inline void q6_k_word(const uint8_t* const (&blk)[G], const Activations& x, int64_t b, __m256i (&sum)[G][MB]) {
  __m256i q[G], aq[G];
  for (int g = 0; g < G; ++g) {
    const __m256i raw = load_word(blk[g] + 32 * C);
    const __m256i nib = _mm256_and_si256(H ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0F));
    q[g] = _mm256_sub_epi8(_mm256_or_si256(nib, top_bits<C>(load_word(blk[g] + 128 + 32 * H))), _mm256_set1_epi8(32));
    aq[g] = _mm256_sign_epi8(q[g], q[g]);
  }
  for (int i = 0; i < MB; ++i) {
    const __m256i xv = broadcast4(x.q + i * x.k + b * kBlock + 16 * H + 4 * C);
    for (int g = 0; g < G; ++g) {
      const __m256i t = _mm256_maddubs_epi16(aq[g], _mm256_sign_epi8(xv, q[g]));
      sum[g][i] = C == 0 ? t : _mm256_add_epi16(sum[g][i], t);
    }
  }
}

template <int H, int G, int MB>
inline void q6_k_half(const uint8_t* const (&blk)[G], const uint8_t* const (&base)[G], int j, const Activations& x,
                      int64_t b, __m256i (&dot)[G][MB]) {
  __m256i sum[G][MB];
  q6_k_word<0, H, G, MB>(blk, x, b, sum);
  q6_k_word<1, H, G, MB>(blk, x, b, sum);
  q6_k_word<2, H, G, MB>(blk, x, b, sum);
  q6_k_word<3, H, G, MB>(blk, x, b, sum);
  for (int g = 0; g < G; ++g) {
    const __m256i sc = s8_pairs(base[g] + 16 + 16 * j + 8 * H);
    for (int i = 0; i < MB; ++i) {
      const __m256i t = _mm256_madd_epi16(sum[g][i], sc);
      dot[g][i] = H == 0 ? t : _mm256_add_epi32(dot[g][i], t);
    }
  }
}

template <int G, int MB>
inline void q6_k_sub(const uint8_t* const (&base)[G], int j, const Activations& x, int64_t b, __m256 (&acc)[G][MB]) {
  const uint8_t* blk[G];
  for (int g = 0; g < G; ++g) blk[g] = base[g] + 144 + 192 * j;
  __m256i dot[G][MB];
  q6_k_half<0, G, MB>(blk, base, j, x, b, dot);
  q6_k_half<1, G, MB>(blk, base, j, x, b, dot);
  for (int g = 0; g < G; ++g) {
    const __m256 d = halves(base[g]);
    for (int i = 0; i < MB; ++i) {
      const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(x.scale[4 * b + i]));
      acc[g][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[g][i]), scale, acc[g][i]);
    }
  }
}

// G groups (group_bytes apart, starting at p) against MB activation rows; acc[g][i] lane r: row r of
// group g against activation row i.
template <int FMT, int G, int MB>
void tile(const uint8_t* p, int64_t group_bytes, const Activations& x, __m256 (&acc)[G][MB]) {
  for (int g = 0; g < G; ++g) {
    for (int i = 0; i < MB; ++i) acc[g][i] = _mm256_setzero_ps();
  }
  constexpr int64_t bytes = super_group_bytes<FMT>();
  const int64_t nsuper = x.k / kSuperBlock;
  // Prefetches the next tile's groups (contiguous after these), as gguf_interleave.cpp's tile.
  const uint8_t* next = p + G * group_bytes;
  const uint8_t* asked = next;
  for (int64_t sb = 0; sb < nsuper; ++sb) {
    const uint8_t* base[G];
    for (int g = 0; g < G; ++g) base[g] = p + g * group_bytes + sb * bytes;
    for (int j = 0; j < 8; ++j) {
      for (const uint8_t* end = next + sb * G * bytes + (j + 1) * G * bytes / 8; asked < end; asked += 64) {
        radixlm::prefetch_line(asked);
      }
      if constexpr (FMT == kQ4_K) {
        q4_k_sub<G, MB>(base, j, x, 8 * sb + j, acc);
      } else {
        q6_k_sub<G, MB>(base, j, x, 8 * sb + j, acc);
      }
    }
  }
}

// Groups [g0, g1) against activation rows [m0, m0 + MB) (m0 % 4 == 0).
template <int FMT, int MB>
void groups(const uint8_t* packed, int64_t group_bytes, const Activations& x, int64_t m0, int64_t g0, int64_t g1,
            float* out, int64_t n) {
  const int64_t nblocks = x.k / kBlock;
  const Activations xm{x.q + m0 * x.k, x.scale + m0 * nblocks, x.sum + m0 * nblocks, x.k, nullptr};
  constexpr int G = MB <= 2 ? 2 : 1;  // 16 vector registers
  int64_t g = g0;
  for (; g + G <= g1; g += G) {
    __m256 acc[G][MB];
    tile<FMT, G, MB>(packed + g * group_bytes, group_bytes, xm, acc);
    for (int j = 0; j < G; ++j) {
      for (int i = 0; i < MB; ++i) store_group(acc[j][i], out, m0 + i, g + j, n);
    }
  }
  for (; g < g1; ++g) {
    __m256 acc[1][MB];
    tile<FMT, 1, MB>(packed + g * group_bytes, group_bytes, xm, acc);
    for (int i = 0; i < MB; ++i) store_group(acc[0][i], out, m0 + i, g, n);
  }
}

// One Q4_K super-block of eight rows (row_bytes apart from `rows`) into dst.
void pack_q4_k(const uint8_t* rows, int64_t row_bytes, uint8_t* dst) {
  for (int r = 0; r < kGroup; ++r) {
    const uint8_t* blk = rows + r * row_bytes;
    std::memcpy(dst + 2 * r, blk, 2);
    std::memcpy(dst + 16 + 2 * r, blk + 2, 2);
    const uint8_t* s = blk + 4;
    for (int j = 0; j < 8; ++j) {
      dst[32 + 8 * j + r] = static_cast<uint8_t>(j < 4 ? s[j] & 63 : (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
      dst[96 + 8 * j + r] = static_cast<uint8_t>(j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
    for (int c = 0; c < 4; ++c) {
      for (int w = 0; w < 8; ++w) std::memcpy(dst + 160 + 256 * c + 32 * w + 4 * r, blk + 16 + 32 * c + 4 * w, 4);
    }
  }
}

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// One Q6_K super-block of eight rows into dst, eight bytes at a time in 64-bit words (byte by byte
// it ran at ~0.1 GB/s).
void pack_q6_k(const uint8_t* rows, int64_t row_bytes, uint8_t* dst) {
  constexpr uint64_t kNibbles = 0x0F0F0F0F0F0F0F0FULL, kPairs = 0x0303030303030303ULL;
  for (int r = 0; r < kGroup; ++r) {
    const uint8_t* blk = rows + r * row_bytes;
    std::memcpy(dst + 2 * r, blk + 208, 2);
    alignas(8) uint8_t q[kSuperBlock];  // 0..63
    for (int h = 0; h < 2; ++h) {
      for (int g = 0; g < 4; ++g) {
        for (int l = 0; l < 32; l += 8) {
          const uint64_t ql = load64(blk + 64 * h + 32 * (g % 2) + l), qh = load64(blk + 128 + 32 * h + l);
          const uint64_t v = ((ql >> (g >= 2 ? 4 : 0)) & kNibbles) | (((qh >> (2 * g)) & kPairs) << 4);
          std::memcpy(q + 128 * h + 32 * g + l, &v, 8);
        }
      }
    }
    for (int j = 0; j < 8; ++j) {
      dst[16 + 16 * j + r] = blk[192 + 2 * j];
      dst[16 + 16 * j + 8 + r] = blk[192 + 2 * j + 1];
      const uint8_t* qj = q + 32 * j;
      uint8_t* out = dst + 144 + 192 * j;
      for (int half = 0; half < 2; ++half) {  // nibble bytes 8 * half .. 8 * half + 7
        const uint64_t v = (load64(qj + 8 * half) & kNibbles) | ((load64(qj + 16 + 8 * half) & kNibbles) << 4);
        std::memcpy(out + 64 * half + 4 * r, &v, 4);
        const uint32_t upper = static_cast<uint32_t>(v >> 32);
        std::memcpy(out + 64 * half + 32 + 4 * r, &upper, 4);
      }
      uint32_t top[2] = {0, 0};  // byte t, bits 2c..2c+1: the top bits of weight 4c + t (16 + 4c + t)
      for (int c = 0; c < 4; ++c) {
        top[0] |= ((load32(qj + 4 * c) >> 4) & 0x03030303u) << (2 * c);
        top[1] |= ((load32(qj + 16 + 4 * c) >> 4) & 0x03030303u) << (2 * c);
      }
      std::memcpy(out + 128 + 4 * r, &top[0], 4);
      std::memcpy(out + 160 + 4 * r, &top[1], 4);
    }
  }
}

}  // namespace

void repack_kquant(int fmt, const uint8_t* w, int64_t n, int64_t k, uint8_t* out, int threads) {
  const int64_t nsuper = k / kSuperBlock, row_bytes = nsuper * block_bytes(fmt);
  const int64_t bytes = fmt == kQ4_K ? kQ4KGroupBytes : kQ6KGroupBytes;
  repack_in_groups(w, n, row_bytes, nsuper * bytes, out, threads, [&](const uint8_t* rows, uint8_t* dst) {
    for (int64_t sb = 0; sb < nsuper; ++sb) {
      if (fmt == kQ4_K) {
        pack_q4_k(rows + sb * block_bytes(fmt), row_bytes, dst + sb * bytes);
      } else {
        pack_q6_k(rows + sb * block_bytes(fmt), row_bytes, dst + sb * bytes);
      }
    }
  });
}

template <int FMT>
void gemm_groups(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out, int threads) {
  const int64_t nsuper = x.k / kSuperBlock, group_bytes = nsuper * super_group_bytes<FMT>();
  over_groups(n, nsuper * block_bytes(FMT), m, threads, [&](auto MB, int64_t m0, int64_t g0, int64_t g1) {
    groups<FMT, decltype(MB)::value>(packed, group_bytes, x, m0, g0, g1, out, n);
  });
}

void gemm_kquant_interleaved(int fmt, const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                             int threads) {
  if (fmt == kQ4_K) {
    gemm_groups<kQ4_K>(packed, n, x, m, out, threads);
  } else {
    gemm_groups<kQ6_K>(packed, n, x, m, out, threads);
  }
}

}  // namespace radixlm::gguf
