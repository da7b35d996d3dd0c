// Q4_0 weights repacked once (at bind time) into groups of eight rows, and the AVX2 product with them.
//
// The file's Q4_0 block is a fp16 scale and 16 bytes of nibbles (byte j: element j low, j + 16 high).
// The old loops (gguf_gemm.h) dot one row's block with one activation row at a time: per (weight
// block, activation row) maddubs + madd + cvtepi32_ps + fmadd, and a horizontal sum per output. Here
// eight rows share one register, lane r = row r, so those last three instructions are paid once per
// eight rows and no horizontal sum is left.
//
// Layout, per group of 8 rows (the last one padded with zero rows) and block b, kGroupBlockBytes:
//   16 bytes  the 8 rows' fp16 scales side by side
//   128 bytes 4 words of 32 bytes; word c, bytes 4r..4r+3 = row r's quant bytes 4c..4c+3, whose low
//             nibbles are elements 4c..4c+3 and high nibbles elements 16+4c..16+4c+3
// (the same 144 bytes as the eight file blocks: the product reads no more memory than before). A
// group's blocks are contiguous, so a tile streams each group front to back.
//
// Product, per block, group and activation row i: for each word c, the low nibbles (& 0x0F) times
// x[4c..4c+3] broadcast to every lane, the high nibbles times x[16+4c..16+4c+3], by maddubs into
// int16 pairs; the eight maddubs results are added in int16, then madd with ones gives one int32 per
// lane: row r's integer dot with the block. No int16 can saturate: a maddubs pair is at most
// 2 * 15 * 128 = 3840 in magnitude (nibbles 0..15; activations are int8, |q| <= 127 and 128 at most
// after saturation) and eight are added: 30720 <= 32767. Q4_0's -8 offset is subtracted as an
// integer, 8 * sum(q) of the activation block (Activations::qsum8), so the integer dot is exact; then
// one cvtepi32_ps and one fmadd with (the 8 rows' scales * the activation block's scale).
//
// Batch invariance: an output's arithmetic is per lane and per activation row (the integer part is
// exact, the float part the same mul + fmadd sequence over blocks in order), whatever the tile, the
// number of rows in a pass or the thread split; the build has -ffp-contract=off. The results differ
// from the old loops' (another float summation order), within the same error bound.
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

// G groups (group_bytes apart, starting at p) against MB activation rows; acc[g][i] lane r: row r of
// group g against activation row i.
template <int G, int MB>
void tile(const uint8_t* p, int64_t group_bytes, const Activations& x, __m256 (&acc)[G][MB]) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int g = 0; g < G; ++g) {
    for (int i = 0; i < MB; ++i) acc[g][i] = _mm256_setzero_ps();
  }
  const int64_t nblocks = x.k / kBlock;
  // Prefetches the next tile's groups (contiguous after these), G * kGroupBlockBytes of them per
  // block step, all by this tile's end (as gguf_gemm.h's NextTile; measured at one row, loaded box:
  // 0.7-0.8x the time without it on the 2048x2048 and 8192x2048 layers).
  const uint8_t* next = p + G * group_bytes;
  const uint8_t* asked = next;
  for (int64_t b = 0; b < nblocks; ++b) {
    for (const uint8_t* end = next + (b + 1) * G * kGroupBlockBytes; asked < end; asked += 64) {
      radixlm::prefetch_line(asked);
    }
    __m256i sum[G][MB];
    for (int c = 0; c < 4; ++c) {
      __m256i lo[G], hi[G];
      for (int g = 0; g < G; ++g) {
        const __m256i raw = load_word(p + g * group_bytes + b * kGroupBlockBytes + 16 + 32 * c);
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
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
          p + g * group_bytes + b * kGroupBlockBytes)));
      for (int i = 0; i < MB; ++i) {
        const __m256i dot = _mm256_sub_epi32(_mm256_madd_epi16(sum[g][i], ones),
                                             _mm256_set1_epi32(x.qsum8[4 * b + i]));
        const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(x.scale[4 * b + i]));
        acc[g][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[g][i]);
      }
    }
  }
}

// Groups [g0, g1) against activation rows [m0, m0 + MB) (m0 % 4 == 0).
template <int MB>
void groups(const uint8_t* packed, int64_t group_bytes, const Activations& x, int64_t m0, int64_t g0,
            int64_t g1, float* out, int64_t n) {
  const int64_t nblocks = x.k / kBlock;
  const Activations xm{x.q + m0 * x.k, x.scale + m0 * nblocks, x.sum + m0 * nblocks, x.k,
                       x.qsum8 + m0 * nblocks};
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

// One block of a group: the eight rows' blocks b (rows row_bytes apart from `rows`) into the 144
// bytes at dst. Each row's 16 quant bytes are four 32-bit words (q[r][0..3]); word c of the output
// is q[0..7][c], an 8x4 -> 4x8 transposition of 32-bit words: rows r and r + 4 share a register
// (low and high 128 bits), and a 4x4 transposition per 128-bit lane (unpack 32 then 64) leaves word
// c with rows 0..3 low and 4..7 high.
inline void pack_block(const uint8_t* rows, int64_t row_bytes, uint8_t* dst) {
  auto quants = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + r * row_bytes + 2)); };
  __m256i a[4];
  for (int r = 0; r < 4; ++r) a[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(quants(r)), quants(r + 4), 1);
  const __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
  uint16_t scales[kGroup];
  for (int r = 0; r < kGroup; ++r) std::memcpy(&scales[r], rows + r * row_bytes, 2);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
  auto* words = reinterpret_cast<__m256i*>(dst + 16);
  _mm256_storeu_si256(words + 0, _mm256_unpacklo_epi64(t0, t2));
  _mm256_storeu_si256(words + 1, _mm256_unpackhi_epi64(t0, t2));
  _mm256_storeu_si256(words + 2, _mm256_unpacklo_epi64(t1, t3));
  _mm256_storeu_si256(words + 3, _mm256_unpackhi_epi64(t1, t3));
}

}  // namespace

void repack_q4_0(const uint8_t* w, int64_t n, int64_t k, uint8_t* out, int threads) {
  const int64_t nblocks = k / kBlock, row_bytes = nblocks * block_bytes(kQ4_0);
  repack_in_groups(w, n, row_bytes, nblocks * kGroupBlockBytes, out, threads, [&](const uint8_t* rows, uint8_t* dst) {
    for (int64_t b = 0; b < nblocks; ++b) {
      pack_block(rows + b * block_bytes(kQ4_0), row_bytes, dst + b * kGroupBlockBytes);
    }
  });
}

void gemm_q4_0_interleaved(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                           int threads) {
  const int64_t nblocks = x.k / kBlock, group_bytes = nblocks * kGroupBlockBytes;
  over_groups(n, nblocks * block_bytes(kQ4_0), m, threads, [&](auto MB, int64_t m0, int64_t g0, int64_t g1) {
    groups<decltype(MB)::value>(packed, group_bytes, x, m0, g0, g1, out, n);
  });
}

}  // namespace radixlm::gguf
