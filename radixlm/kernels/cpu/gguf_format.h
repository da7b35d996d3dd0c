// What the GGUF kernel's translation units share (gguf_linear.cpp: the entry point and the AVX2
// products; gguf_linear_vnni.cpp: the AVX-512 VNNI products): the block formats, the quantized
// activations' layout, and the product each instruction set implements.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace radixlm::gguf {

constexpr int kBlock = 32;
constexpr int kSuperBlock = 256;
constexpr int kRowsPerPass = 4;  // activation rows whose scales are laid out side by side

enum Format : int { kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14 };  // GGML type ids

constexpr bool is_kquant(int fmt) { return fmt == kQ4_K || fmt == kQ6_K; }
constexpr int block_bytes(int fmt) {
  return fmt == kQ4_0 ? 18 : fmt == kQ4_1 ? 20 : fmt == kQ5_0 ? 22 : fmt == kQ8_0 ? 34
       : fmt == kQ4_K ? 144 : 210;
}
constexpr int block_elems(int fmt) { return is_kquant(fmt) ? kSuperBlock : kBlock; }

constexpr int kMinChunkRows = 16;
constexpr int64_t kChunkBytes = int64_t{1} << 18;  // weight bytes per work item (at most)...

// ...and where the m rows take one pass (decode): nothing is read twice then, and longer runs read
// faster: each chunk's first tile starts cold, and its look-ahead past its end fetches bytes that
// another item may take (at one row, Zen 5: 8B Q4_0 layers 1.02-1.12x and a Q6_K LM head
// 1.10-1.30x with 2 MB for 256 KB, benchmarks/kernels/gguf_chunks.py). A setting only so that
// benchmark can compare in one process.
inline std::atomic<int64_t>& one_pass_chunk_bytes() {
  static std::atomic<int64_t> value{int64_t{2} << 20};
  return value;
}

// Weight rows per work item of a product of m activation rows with `helpers` helper threads (at
// least four items a thread). Over several passes of rows: chunks of ~kChunkBytes, long runs of the
// weight that stay in L2 while the passes go over them; in one pass, one_pass_chunk_bytes().
inline int64_t chunk_rows(int64_t n, int64_t row_bytes, int helpers, int64_t m) {
  const int64_t balanced = (n + 4 * (helpers + 1) - 1) / (4 * (helpers + 1));
  const int64_t bytes = m <= kRowsPerPass ? one_pass_chunk_bytes().load(std::memory_order_relaxed) : kChunkBytes;
  return std::max<int64_t>(kMinChunkRows, std::min<int64_t>(bytes / row_bytes, balanced));
}

// Products under this many bytes of blocks run on the calling thread alone (waking a helper costs more).
inline int64_t parallel_min_bytes() {
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

// The activation rows of a product, quantized. Scales and sums are laid out for passes of four
// rows: [m / 4 (rounded up), k / 32, 4], so one 128-bit load gives block b's value for all four
// rows of a pass (lanes of rows past m are zero).
struct Activations {
  const int8_t* q;     // [m, k]
  const float* scale;  // [passes, k / 32, 4]
  const float* sum;    // [passes, k / 32, 4]: scale * sum of the block's q
  int64_t k;
  const int32_t* qsum8 = nullptr;  // [passes, k / 32, 4]: 8 * sum of the block's q (interleaved Q4_0 only)
};

// out[m, n] = x @ W^T for weight blocks w of format fmt, on `threads` threads (the caller's
// included); both instruction sets compute the same bits.
void gemm_avx2(int fmt, const uint8_t* w, int64_t n, const Activations& x, int64_t m, float* out, int threads);
void gemm_vnni(int fmt, const uint8_t* w, int64_t n, const Activations& x, int64_t m, float* out, int threads);

// Q4_0 in groups of eight rows (gguf_interleave.cpp: the layout): repack_q4_0 writes the
// ceil(n / 8) * (k / 32) * kGroupBlockBytes bytes of w's n rows; gemm_q4_0_interleaved is the AVX2
// product with them (x.qsum8 required).
constexpr int64_t kGroupBlockBytes = 144;  // 8 fp16 scales + 8 rows' 16 quant bytes
void repack_q4_0(const uint8_t* w, int64_t n, int64_t k, uint8_t* out, int threads);
void gemm_q4_0_interleaved(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                           int threads);

// Q4_K and Q6_K in groups of eight rows (gguf_interleave_k.cpp: the layouts): repack_kquant writes
// ceil(n / 8) * (k / 256) * the format's group bytes of w's n rows; gemm_kquant_interleaved is the
// AVX2 product with them (x.sum used, x.qsum8 not).
constexpr int64_t kQ4KGroupBytes = 1184;  // per super-block: 8 d, 8 dmin, 64 scales, 64 mins, 1024 quants
constexpr int64_t kQ6KGroupBytes = 1680;  // per super-block: 8 d, 128 scales, 8 x 192 quants
// Q4_1 in groups of eight rows (gguf_interleave_q4_1.cpp: the layout): repack_q4_1 writes
// ceil(n / 8) * (k / 32) * kQ41GroupBlockBytes bytes; gemm_q4_1_interleaved is the AVX2 product.
constexpr int64_t kQ41GroupBlockBytes = 160;  // 8 fp16 d, 8 fp16 m, 8 rows' 16 quant bytes
void repack_q4_1(const uint8_t* w, int64_t n, int64_t k, uint8_t* out, int threads);
void gemm_q4_1_interleaved(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                           int threads);
// The same two products with AVX-512 VNNI (gguf_interleave_vnni.cpp), the same bits.
void gemm_q4_0_interleaved_vnni(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                                int threads);
void gemm_q4_1_interleaved_vnni(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                                int threads);
void repack_kquant(int fmt, const uint8_t* w, int64_t n, int64_t k, uint8_t* out, int threads);
void gemm_kquant_interleaved(int fmt, const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                             int threads);
// The same products with AVX-512 VNNI, the same bits (gguf_interleave_k_vnni.cpp).
void gemm_kquant_interleaved_vnni(int fmt, const uint8_t* packed, int64_t n, const Activations& x, int64_t m,
                                  float* out, int threads);

}  // namespace radixlm::gguf
