// Q4_1 weights repacked once (at bind time) into groups of eight rows, and the AVX2 product with
// them: Q4_0's scheme (gguf_interleave.cpp, whose layout and loop this follows) plus the minimums.
//
// The file's Q4_1 block is a fp16 scale d, a fp16 minimum m and 16 bytes of nibbles (byte j: element
// j low, j + 16 high); weight = d * q + m. Layout, per group of 8 rows (the last padded with zero
// rows) and block, kQ41GroupBlockBytes = 160 (the eight file blocks' bytes):
//   16 bytes  the 8 rows' fp16 d;  16 bytes the 8 rows' fp16 m
//   128 bytes 4 words of 32 bytes; word c, bytes 4r..4r+3 = row r's quant bytes 4c..4c+3 (low
//             nibbles: elements 4c..4c+3, high nibbles: 16+4c..16+4c+3)
// Per block, group and activation row: eight maddubs added in int16 (at most 8 * 2 * 15 * 128 =
// 30720 <= 32767: no saturation), one madd with ones to an int32 per lane (exact), then
// acc += float(dot) * (d * dx) and acc += m * (dx * sum(x)) (Activations::sum).
//
// Batch invariance: per lane and per activation row, the same sequence whatever the tile, the rows
// in a pass or the thread split (-ffp-contract=off); results differ from the block loops' (another
// float order) within the same error bound.
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

inline __m256 halves(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

template <int G, int MB>
void tile(const uint8_t* p, int64_t group_bytes, const Activations& x, __m256 (&acc)[G][MB]) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int g = 0; g < G; ++g) {
    for (int i = 0; i < MB; ++i) acc[g][i] = _mm256_setzero_ps();
  }
  const int64_t nblocks = x.k / kBlock;
  const uint8_t* next = p + G * group_bytes;  // the next tile's groups, prefetched as gguf_interleave.cpp
  const uint8_t* asked = next;
  for (int64_t b = 0; b < nblocks; ++b) {
    for (const uint8_t* end = next + (b + 1) * G * kQ41GroupBlockBytes; asked < end; asked += 64) {
      radixlm::prefetch_line(asked);
    }
    __m256i sum[G][MB];
    for (int c = 0; c < 4; ++c) {
      __m256i lo[G], hi[G];
      for (int g = 0; g < G; ++g) {
        const __m256i raw = load_word(p + g * group_bytes + b * kQ41GroupBlockBytes + 32 + 32 * c);
        lo[g] = _mm256_and_si256(raw, low);
        hi[g] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
      }
      for (int i = 0; i < MB; ++i) {
        const int8_t* xq = x.q + i * x.k + b * kBlock + 4 * c;
        const __m256i xl = broadcast4(xq), xh = broadcast4(xq + 16);
        for (int g = 0; g < G; ++g) {
          const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(lo[g], xl), _mm256_maddubs_epi16(hi[g], xh));
          sum[g][i] = c == 0 ? t : _mm256_add_epi16(sum[g][i], t);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const uint8_t* blk = p + g * group_bytes + b * kQ41GroupBlockBytes;
      const __m256 d = halves(blk), m = halves(blk + 16);
      for (int i = 0; i < MB; ++i) {
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(sum[g][i], ones));
        acc[g][i] = _mm256_fmadd_ps(dot, _mm256_mul_ps(d, _mm256_set1_ps(x.scale[4 * b + i])), acc[g][i]);
        acc[g][i] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.sum[4 * b + i]), acc[g][i]);
      }
    }
  }
}

template <int MB>
void groups(const uint8_t* packed, int64_t group_bytes, const Activations& x, int64_t m0, int64_t g0, int64_t g1,
            float* out, int64_t n) {
  const int64_t nblocks = x.k / kBlock;
  const Activations xm{x.q + m0 * x.k, x.scale + m0 * nblocks, x.sum + m0 * nblocks, x.k, nullptr};
  constexpr int G = MB <= 2 ? 2 : 1;  // 16 vector registers (four groups at one row: no better than two)
  int64_t g = g0;
  for (; g + G <= g1; g += G) {
    __m256 acc[G][MB];
    tile<G, MB>(packed + g * group_bytes, group_bytes, xm, acc);
    for (int j = 0; j < G; ++j) {
      for (int i = 0; i < MB; ++i) store_group(acc[j][i], out, m0 + i, g + j, n);
    }
  }
  for (; g < g1; ++g) {
    __m256 acc[1][MB];
    tile<1, MB>(packed + g * group_bytes, group_bytes, xm, acc);
    for (int i = 0; i < MB; ++i) store_group(acc[0][i], out, m0 + i, g, n);
  }
}

// One block of a group (rows row_bytes apart from `rows`) into the 160 bytes at dst.
void pack_block(const uint8_t* rows, int64_t row_bytes, uint8_t* dst) {
  for (int r = 0; r < kGroup; ++r) {
    const uint8_t* blk = rows + r * row_bytes;
    std::memcpy(dst + 2 * r, blk, 2);
    std::memcpy(dst + 16 + 2 * r, blk + 2, 2);
    for (int c = 0; c < 4; ++c) std::memcpy(dst + 32 + 32 * c + 4 * r, blk + 4 + 4 * c, 4);
  }
}

}  // namespace

void repack_q4_1(const uint8_t* w, int64_t n, int64_t k, uint8_t* out, int threads) {
  const int64_t nblocks = k / kBlock, row_bytes = nblocks * block_bytes(kQ4_1);
  const auto pack_group = [&](const uint8_t* rows, uint8_t* dst) {
    for (int64_t b = 0; b < nblocks; ++b) {
      pack_block(rows + b * block_bytes(kQ4_1), row_bytes, dst + b * kQ41GroupBlockBytes);
    }
  };
  repack_in_groups(w, n, row_bytes, nblocks * kQ41GroupBlockBytes, out, threads, pack_group);
}

void gemm_q4_1_interleaved(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                           int threads) {
  const int64_t nblocks = x.k / kBlock, group_bytes = nblocks * kQ41GroupBlockBytes;
  over_groups(n, nblocks * block_bytes(kQ4_1), m, threads, [&](auto MB, int64_t m0, int64_t g0, int64_t g1) {
    groups<decltype(MB)::value>(packed, group_bytes, x, m0, g0, g1, out, n);
  });
}

}  // namespace radixlm::gguf
