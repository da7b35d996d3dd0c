// The GGUF product's loops (gguf_gemm.h) for CPUs with AVX-512 F/BW/VL/VNNI: _mm256_dpbusd_epi32 in
// place of AVX2's maddubs + madd, and the 32 vector registers for larger tiles. Still 256-bit
// vectors: a block is 32 bytes, and 512-bit ones would only pair blocks up at a shuffle's cost.
//
// The whole file is built with the AVX2 flags of the others; only the code below the target pragma
// may use AVX-512, and gguf_linear.cpp calls it only where __builtin_cpu_supports says the CPU can.
// Every header is included before the pragma, so no inline function they define (which the linker
// could pick for the AVX2 code too) is compiled for AVX-512; what the pragma covers has internal
// linkage, except gemm_vnni.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "gguf_format.h"
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
#include "gguf_gemm.h"
}  // namespace

void gemm_vnni(int fmt, const uint8_t* w, int64_t n, const Activations& x, int64_t m, float* out, int threads) {
  run_gemm(fmt, w, n, x, m, out, threads);
}

}  // namespace radixlm::gguf

#undef RADIXLM_GGUF_VNNI
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
