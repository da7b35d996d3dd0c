// Q4_1 weights repacked once (at bind time) into groups of eight rows, and the AVX2 product with
// them: Q4_0's scheme (gguf_interleave.cpp, whose layout this follows; the loops of both are
// gguf_grouped_q4.h) plus the minimums.
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

#include "gguf_grouped_q4.h"

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
  grouped_gemm<kQ4_1>(packed, n, x, m, out, threads);
}

}  // namespace radixlm::gguf
