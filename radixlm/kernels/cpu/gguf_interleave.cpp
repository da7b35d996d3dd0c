// Q4_0 weights repacked once (at bind time) into groups of eight rows, and the AVX2 product with them
// (its loops: gguf_grouped_q4.h, shared with Q4_1 and the AVX-512 VNNI build).
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

#include "gguf_grouped_q4.h"

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
  grouped_gemm<kQ4_0>(packed, n, x, m, out, threads);
}

}  // namespace radixlm::gguf
