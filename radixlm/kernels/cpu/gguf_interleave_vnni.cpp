// The grouped Q4_0/Q4_1 products (gguf_grouped_q4.h) for CPUs with AVX-512 F/BW/VL/VNNI: dpbusd adds
// a word's products straight into int32 lanes, and 32 vector registers hold two groups at four
// activation rows. The same bits as the AVX2 build (gguf_interleave.cpp, gguf_interleave_q4_1.cpp).
//
// As gguf_linear_vnni.cpp: the file is built with the AVX2 flags of the others, only the code below
// the target pragma may use AVX-512, every header is included before it, and gguf_linear.cpp calls
// these functions only where the CPU reports VNNI (use_vnni).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

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
#define RADIXLM_GGUF_VNNI 1

namespace radixlm::gguf {
namespace {
#include "gguf_grouped_q4.h"
}  // namespace

void gemm_q4_0_interleaved_vnni(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                                int threads) {
  grouped_gemm<kQ4_0>(packed, n, x, m, out, threads);
}

void gemm_q4_1_interleaved_vnni(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out,
                                int threads) {
  grouped_gemm<kQ4_1>(packed, n, x, m, out, threads);
}

}  // namespace radixlm::gguf

#undef RADIXLM_GGUF_VNNI
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
