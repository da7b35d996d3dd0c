// What the grouped GGUF products share (Q4_0, Q4_1 and the K-quants, gguf_interleave*.cpp): rows
// repacked in groups of eight, one group's outputs in the eight lanes of a vector. Each format
// supplies how one group of rows is packed and how a tile of groups meets the activation rows, and
// its own loop over tiles; this header holds the rest: the repack's work split, the product's work
// split over groups and passes of activation rows, and where a tile's lanes are stored.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gguf_format.h"
#include "work_pool.h"

namespace radixlm::gguf {

constexpr int kGroup = 8;  // rows per group: one per lane of an 8-float vector

// The helpers below run inside every tile loop. Declared in a header they have external linkage,
// and GCC then left some calls out of line in the larger tiles, where a call clobbers every vector
// register the loop keeps (Q4_K products of 4-32 rows ran 1.4-1.7x slower): they are inlined by force.

// 32 bytes of a group's packed weights.
__attribute__((always_inline)) inline __m256i load_word(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Four int8 activations (4 bytes at p) in every 32-bit lane.
__attribute__((always_inline)) inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Work items of the repack are runs of whole groups of about this many output bytes (a 2 MB huge
// page): the two threads then fault (and the kernel zeroes) different pages rather than wait on one.
constexpr int64_t kRepackChunkBytes = int64_t{2} << 20;

// Rows [0, n) of `row_bytes` each at w into groups of group_bytes at out: pack_group(rows, dst) packs
// kGroup rows (row_bytes apart; the last group padded with zero rows) into dst.
template <typename PackGroup>
void repack_in_groups(const uint8_t* w, int64_t n, int64_t row_bytes, int64_t group_bytes, uint8_t* out,
                      int threads, PackGroup&& pack_group) {
  const int64_t ngroups = (n + kGroup - 1) / kGroup;
  const int64_t per_chunk = std::max<int64_t>(1, kRepackChunkBytes / group_bytes);
  const int helpers = n * row_bytes >= (int64_t{4} << 20) ? threads - 1 : 0;
  radixlm::WorkPool::instance().run((ngroups + per_chunk - 1) / per_chunk, helpers, [&](int64_t t) {
    for (int64_t g = t * per_chunk; g < std::min(ngroups, (t + 1) * per_chunk); ++g) {
      const uint8_t* rows = w + g * kGroup * row_bytes;
      std::vector<uint8_t> padded;  // the last group, when n is no multiple of 8: zero rows after n
      if ((g + 1) * kGroup > n) {
        padded.assign(kGroup * row_bytes, 0);
        std::memcpy(padded.data(), rows, (n - g * kGroup) * row_bytes);
        rows = padded.data();
      }
      pack_group(rows, out + g * group_bytes);
    }
  });
}

// Lane r of v (row r of group g against activation row `row`) into out ([m, n]), clipped at n.
__attribute__((always_inline)) inline void store_group(const __m256& v, float* out, int64_t row, int64_t g,
                                                       int64_t n) {
  const int64_t row0 = g * kGroup;
  float* o = out + row * n + row0;
  if (row0 + kGroup <= n) {
    _mm256_storeu_ps(o, v);
  } else {
    alignas(32) float lanes[kGroup];
    _mm256_store_ps(lanes, v);
    std::memcpy(o, lanes, sizeof(float) * (n - row0));
  }
}

// The product's work split: runs of whole groups per work item (chunk_rows), each item taking every
// activation row in passes of up to kRowsPerPass: pass(MB, m0, g0, g1) with MB given as
// std::integral_constant<int, MB>.
template <typename Pass>
void over_groups(int64_t n, int64_t row_bytes, int64_t m, int threads, Pass&& pass) {
  const int64_t ngroups = (n + kGroup - 1) / kGroup;
  const int helpers = n * row_bytes * m >= parallel_min_bytes() ? threads - 1 : 0;
  const int64_t per_chunk = (chunk_rows(n, row_bytes, helpers, m) + kGroup - 1) / kGroup;  // groups
  const int64_t chunks = (ngroups + per_chunk - 1) / per_chunk;
  radixlm::WorkPool::instance().run(chunks, helpers, [&](int64_t t) {
    const int64_t g0 = t * per_chunk, g1 = std::min(ngroups, g0 + per_chunk);
    for (int64_t m0 = 0; m0 < m; m0 += kRowsPerPass) {
      switch (std::min<int64_t>(kRowsPerPass, m - m0)) {
        case 4: pass(std::integral_constant<int, 4>{}, m0, g0, g1); break;
        case 3: pass(std::integral_constant<int, 3>{}, m0, g0, g1); break;
        case 2: pass(std::integral_constant<int, 2>{}, m0, g0, g1); break;
        default: pass(std::integral_constant<int, 1>{}, m0, g0, g1); break;
      }
    }
  });
}

}  // namespace radixlm::gguf
