// The grouped Q4_K product (layout: gguf_interleave_k.cpp) for CPUs with AVX-512 F/BW/VL/VNNI, with
// the AVX2 build's bits.
//
// The AVX2 loop walks a super-block's eight sub-blocks one at a time: each 32-byte word of nibbles
// holds sub-block 2c's weights in its low nibbles and 2c + 1's in its high ones, so every word is
// loaded and masked twice, and its maddubs products are summed in int16 pairs that one madd with
// the scale pairs (sc, sc) turns into sc * dot. Here a 64-byte register holds the same word of two
// groups (16 rows, one per 32-bit lane), loaded once for both sub-blocks: dpbusd adds the low
// nibbles' products into one int32 sum and the high nibbles' into another, and each sum is
// multiplied by its sub-block's scale in int32. The integers are the AVX2 build's exactly (sc * dot,
// at most 63 * 61440), and the float part is the same lane-wise sequence, sub-block 2c before
// 2c + 1, so both give the same bits (tests/kernels/test_gguf_isa.py). Against the AVX2 build on a
// 2048x2048 weight, one thread (the same work in 256-bit registers, one group a register: 1.2-1.3x):
// 1.8x at one activation row, 2.1-2.3x at 2-128.
//
// As gguf_interleave_vnni.cpp: the file is built with the AVX2 flags of the others, only the code
// between the target pragmas may use AVX-512 (and defines nothing the linker could share with other
// files), every header is included before it, and gguf_linear.cpp calls this file's product only
// where the CPU reports VNNI (use_vnni).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gguf_format.h"
#include "gguf_groups.h"
#include "simd_math.h"
#include "work_pool.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
#endif

namespace radixlm::gguf {
namespace {

// Bytes of a group's super-block before its nibble words: 8 d, 8 dmin, 64 scales, 64 minimums.
constexpr int64_t kQ4KWords = 160;

// The 32 bytes at a (group a's lanes 0-7) and at b (group b's: lanes 8-15).
__attribute__((always_inline)) inline __m512i pair_words(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load_word(a)), load_word(b), 1);
}

// Eight fp16 at a and eight at b as 16 float lanes.
__attribute__((always_inline)) inline __m512 pair_halves(const uint8_t* a, const uint8_t* b) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

// Eight uint8 at a and eight at b as 16 int32 lanes.
__attribute__((always_inline)) inline __m512i pair_u8(const uint8_t* a, const uint8_t* b) {
  return _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                                 _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
}

// Sub-block j's update of acc[i] from its integer dots (gguf_interleave_k.cpp's q4_k_sub, after its
// madd): acc += float(sc * dot) * (d * dx); acc -= (dmin * m) * (dx * sum(x)).
template <int MB>
__attribute__((always_inline)) inline void q4_k_update(const uint8_t* a, const uint8_t* b, int j, const Activations& x,
                                                  int64_t blk, const __m512i (&dot)[MB], __m512 (&acc)[MB]) {
  const __m512i sc = pair_u8(a + 32 + 8 * j, b + 32 + 8 * j);
  const __m512 d = pair_halves(a, b);
  const __m512 dm = _mm512_mul_ps(pair_halves(a + 16, b + 16), _mm512_cvtepi32_ps(pair_u8(a + 96 + 8 * j, b + 96 + 8 * j)));
  for (int i = 0; i < MB; ++i) {
    const __m512 scaled = _mm512_cvtepi32_ps(_mm512_mullo_epi32(dot[i], sc));
    acc[i] = _mm512_fmadd_ps(scaled, _mm512_mul_ps(d, _mm512_set1_ps(x.scale[4 * blk + i])), acc[i]);
    acc[i] = _mm512_fnmadd_ps(dm, _mm512_set1_ps(x.sum[4 * blk + i]), acc[i]);
  }
}

// Groups ga and gb (gb == ga for a lone last group) against MB activation rows; acc[i] lanes 0-7:
// ga's rows against activation row i, lanes 8-15: gb's. `next`: the tile after this one.
template <int MB>
void q4_k_tile(const uint8_t* ga, const uint8_t* gb, const uint8_t* next, const Activations& x, __m512 (&acc)[MB]) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int i = 0; i < MB; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t nsuper = x.k / kSuperBlock;
  const uint8_t* asked = next;  // prefetched up to here: the next tile's bytes, as fast as this one's
  for (int64_t sb = 0; sb < nsuper; ++sb) {
    const uint8_t* a = ga + sb * kQ4KGroupBytes;
    const uint8_t* b = gb + sb * kQ4KGroupBytes;
    for (int c = 0; c < 4; ++c) {
      for (const uint8_t* end = next + sb * 2 * kQ4KGroupBytes + (c + 1) * kQ4KGroupBytes / 2; asked < end;
           asked += 64) {
        radixlm::prefetch_line(asked);
      }
      const int64_t blk = 8 * sb + 2 * c;  // the activation block of sub-block 2c (2c + 1: the next)
      __m512i lo[MB], hi[MB];
      for (int i = 0; i < MB; ++i) lo[i] = hi[i] = _mm512_setzero_si512();
      for (int w = 0; w < 8; ++w) {
        const int64_t word = kQ4KWords + 256 * c + 32 * w;
        const __m512i raw = pair_words(a + word, b + word);
        const __m512i vl = _mm512_and_si512(raw, low), vh = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
        for (int i = 0; i < MB; ++i) {
          const int8_t* xq = x.q + i * x.k + blk * kBlock + 4 * w;
          int32_t xl, xh;
          std::memcpy(&xl, xq, 4);
          std::memcpy(&xh, xq + kBlock, 4);
          lo[i] = _mm512_dpbusd_epi32(lo[i], vl, _mm512_set1_epi32(xl));
          hi[i] = _mm512_dpbusd_epi32(hi[i], vh, _mm512_set1_epi32(xh));
        }
      }
      q4_k_update<MB>(a, b, 2 * c, x, blk, lo, acc);
      q4_k_update<MB>(a, b, 2 * c + 1, x, blk + 1, hi, acc);
    }
  }
}

// Eight int8 at a and eight at b as 16 int32 lanes.
__attribute__((always_inline)) inline __m512i pair_s8(const uint8_t* a, const uint8_t* b) {
  return _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                                 _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
}

// Word c of a Q6_K sub-block's top bits shifted so its bits 2c..2c+1 land on bits 4..5 of each byte.
template <int C>
__attribute__((always_inline)) inline __m512i q6_k_top(__m512i h) {
  const __m512i shifted = C == 0 ? _mm512_slli_epi16(h, 4) : C == 1 ? _mm512_slli_epi16(h, 2)
                        : C == 2 ? h : _mm512_srli_epi16(h, 2);
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x30));
}

// Word C of both halves of a Q6_K sub-block: the weights as unsigned q + 32 (0..63) by dpbusd into
// s0 (weights 0..15) and s1 (16..31).
template <int C, int MB>
__attribute__((always_inline)) inline void q6_k_word(const uint8_t* a, const uint8_t* b, __m512i top0, __m512i top1,
                                                     const int8_t* xq, int64_t k, __m512i (&s0)[MB],
                                                     __m512i (&s1)[MB]) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i raw = pair_words(a + 32 * C, b + 32 * C);
  const __m512i q0 = _mm512_or_si512(_mm512_and_si512(raw, low), q6_k_top<C>(top0));
  const __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low), q6_k_top<C>(top1));
  for (int i = 0; i < MB; ++i) {
    int32_t x0, x1;
    std::memcpy(&x0, xq + i * k + 4 * C, 4);
    std::memcpy(&x1, xq + i * k + 16 + 4 * C, 4);
    s0[i] = _mm512_dpbusd_epi32(s0[i], q0, _mm512_set1_epi32(x0));
    s1[i] = _mm512_dpbusd_epi32(s1[i], q1, _mm512_set1_epi32(x1));
  }
}

// Q6_K: groups ga and gb, as q4_k_tile. The AVX2 build multiplies the signed weights q (-32..31) by
// the sign trick, which AVX-512 lacks; here dpbusd takes q + 32 and each half's sum gives back
// 32 * (the sum of its 16 activations), from `hs` (q6_k_half_sums): the same integers.
template <int MB>
void q6_k_tile(const uint8_t* ga, const uint8_t* gb, const uint8_t* next, const Activations& x, const int32_t* hs,
               __m512 (&acc)[MB]) {
  for (int i = 0; i < MB; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t nsuper = x.k / kSuperBlock, halves_per_row = x.k / 16;
  const uint8_t* asked = next;
  for (int64_t sb = 0; sb < nsuper; ++sb) {
    const uint8_t* a = ga + sb * kQ6KGroupBytes;
    const uint8_t* b = gb + sb * kQ6KGroupBytes;
    const __m512 d = pair_halves(a, b);
    for (int j = 0; j < 8; ++j) {
      for (const uint8_t* end = next + sb * 2 * kQ6KGroupBytes + (j + 1) * kQ6KGroupBytes / 4; asked < end;
           asked += 64) {
        radixlm::prefetch_line(asked);
      }
      const int64_t blk = 8 * sb + j;
      const uint8_t* qa = a + 144 + 192 * j;
      const uint8_t* qb = b + 144 + 192 * j;
      const __m512i top0 = pair_words(qa + 128, qb + 128), top1 = pair_words(qa + 160, qb + 160);
      const int8_t* xq = x.q + blk * kBlock;
      __m512i s0[MB], s1[MB];
      for (int i = 0; i < MB; ++i) s0[i] = s1[i] = _mm512_setzero_si512();
      q6_k_word<0, MB>(qa, qb, top0, top1, xq, x.k, s0, s1);
      q6_k_word<1, MB>(qa, qb, top0, top1, xq, x.k, s0, s1);
      q6_k_word<2, MB>(qa, qb, top0, top1, xq, x.k, s0, s1);
      q6_k_word<3, MB>(qa, qb, top0, top1, xq, x.k, s0, s1);
      const __m512i sc0 = pair_s8(a + 16 + 16 * j, b + 16 + 16 * j), sc1 = pair_s8(a + 24 + 16 * j, b + 24 + 16 * j);
      for (int i = 0; i < MB; ++i) {
        const int32_t* h = hs + i * halves_per_row + 2 * blk;
        const __m512i d0 = _mm512_sub_epi32(s0[i], _mm512_set1_epi32(32 * h[0]));
        const __m512i d1 = _mm512_sub_epi32(s1[i], _mm512_set1_epi32(32 * h[1]));
        const __m512i dot = _mm512_add_epi32(_mm512_mullo_epi32(d0, sc0), _mm512_mullo_epi32(d1, sc1));
        const __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(x.scale[4 * blk + i]));
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[i]);
      }
    }
  }
}

// Groups [g0, g1) against activation rows [m0, m0 + MB) (m0 % 4 == 0), two at a time (hs: the
// activation rows' half sums, Q6_K only).
template <int FMT, int MB>
void groups(const uint8_t* packed, int64_t group_bytes, const Activations& x, const int32_t* half_sums, int64_t m0,
            int64_t g0, int64_t g1, float* out, int64_t n) {
  const int64_t nblocks = x.k / kBlock;
  const Activations xm{x.q + m0 * x.k, x.scale + m0 * nblocks, x.sum + m0 * nblocks, x.k, nullptr};
  const int32_t* hs = half_sums ? half_sums + m0 * (x.k / 16) : nullptr;
  for (int64_t g = g0; g < g1; g += 2) {
    const uint8_t* ga = packed + g * group_bytes;
    const bool pair = g + 1 < g1;
    __m512 acc[MB];
    const uint8_t* gb = pair ? ga + group_bytes : ga;
    if constexpr (FMT == kQ4_K) {
      q4_k_tile<MB>(ga, gb, ga + 2 * group_bytes, xm, acc);
    } else {
      q6_k_tile<MB>(ga, gb, ga + 2 * group_bytes, xm, hs, acc);
    }
    for (int i = 0; i < MB; ++i) {
      store_group(_mm512_castps512_ps256(acc[i]), out, m0 + i, g, n);
      if (pair) {
        const __m256 upper = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i]), 1));
        store_group(upper, out, m0 + i, g + 1, n);
      }
    }
  }
}

// The product, Q6_K's activation half sums given (q6_k_half_sums).
void kquant_product(int fmt, const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                    int threads, const int32_t* hs) {
  const int64_t nsuper = x.k / kSuperBlock;
  const int64_t group_bytes = nsuper * (fmt == kQ4_K ? kQ4KGroupBytes : kQ6KGroupBytes);
  over_groups(n, nsuper * block_bytes(fmt), m, threads, [&](auto MB, int64_t m0, int64_t g0, int64_t g1) {
    if (fmt == kQ4_K) {
      groups<kQ4_K, decltype(MB)::value>(packed, group_bytes, x, hs, m0, g0, g1, out, n);
    } else {
      groups<kQ6_K, decltype(MB)::value>(packed, group_bytes, x, hs, m0, g0, g1, out, n);
    }
  });
}

}  // namespace
}  // namespace radixlm::gguf

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// Built for AVX2 like the rest (after the pop): the std::vector below would otherwise be
// instantiated for AVX-512 where the linker could pick it for every other file's code too.
namespace radixlm::gguf {
namespace {

// The sum of every 16 activations of each row: [m, k / 16].
std::vector<int32_t> q6_k_half_sums(const Activations& x, int64_t m) {
  std::vector<int32_t> hs(m * (x.k / 16));
  for (int64_t i = 0; i < m * (x.k / 16); ++i) {
    int32_t s = 0;
    for (int t = 0; t < 16; ++t) s += x.q[16 * i + t];
    hs[i] = s;
  }
  return hs;
}

}  // namespace

void gemm_kquant_interleaved_vnni(int fmt, const uint8_t* packed, int64_t n, const Activations& x, int64_t m,
                                  float* out, int threads) {
  const std::vector<int32_t> half_sums = fmt == kQ6_K ? q6_k_half_sums(x, m) : std::vector<int32_t>{};
  kquant_product(fmt, packed, n, x, m, out, threads, half_sums.empty() ? nullptr : half_sums.data());
}

}  // namespace radixlm::gguf
