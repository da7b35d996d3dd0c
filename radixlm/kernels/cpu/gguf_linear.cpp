// y = x @ W^T for W stored as GGUF blocks (Q4_0, Q4_1, Q5_0, Q8_0, and the K-quants Q4_K, Q6_K) in
// the file's own byte layout (radixlm/kernels/cpu/gguf_blocks.py and gguf_kquants.py describe them).
//
// Activations are quantized on the fly to int8 blocks of 32 with one float scale each (llama.cpp's
// q8_0/q8_1 idea), then dotted with the weight blocks (gguf_gemm.h: the loops). Those loops are
// compiled twice: here for AVX2 (_mm256_maddubs_epi16 + _mm256_madd_epi16), and in
// gguf_linear_vnni.cpp for CPUs with AVX-512 F/BW/VL/VNNI (_mm256_dpbusd_epi32, larger tiles). Which
// one runs is decided at run time (__builtin_cpu_supports); RADIXLM_GGUF_ISA=avx2 or set_isa("avx2")
// forces the AVX2 one. Both compute the same bits: the integer dot products are equal (no int16
// pair can saturate, gguf_gemm.h) and the float arithmetic is the same sequence of operations.
//
// Batch invariance: an output element's arithmetic is the same sequence of operations whatever the
// number of activation rows in a pass, the weight rows in a tile, the batch size or the thread count
// (accumulators never mix rows, and the files are built with -ffp-contract=off), so a token's result
// does not depend on the batch it is in.
#include <torch/extension.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "gguf_format.h"
#include "simd_math.h"
#include "work_pool.h"

namespace radixlm::gguf {
namespace {
#include "gguf_gemm.h"
}  // namespace

void gemm_avx2(int fmt, const uint8_t* w, int64_t n, const Activations& x, int64_t m, float* out, int threads) {
  run_gemm(fmt, w, n, x, m, out, threads);
}

}  // namespace radixlm::gguf

namespace {

using namespace radixlm::gguf;

bool cpu_has_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

// true: the AVX-512 VNNI loops; the best this CPU has unless RADIXLM_GGUF_ISA=avx2
std::atomic<bool> use_vnni{[] {
  const char* env = std::getenv("RADIXLM_GGUF_ISA");
  return cpu_has_vnni() && !(env && std::string(env) == "avx2");
}()};

inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Activation row -> int8 blocks: q = round-half-even(x / d) with d = max|x| / 127 per block;
// sums[b] = d * sum(q), qsum8[b] = 8 * sum(q) (if not null). scales, sums and qsum8 are written every
// `stride` values (Activations' layout).
void quantize_row(const float* x, int64_t k, int8_t* q, float* scales, float* sums, int32_t* qsum8,
                  int64_t stride) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const __m256 inv = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
    __m256i iv[4];
    for (int i = 0; i < 4; ++i) iv[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));  // nearest-even
    const __m256i total = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlock), _mm256_permutevar8x32_epi32(packed, order));
    const int qsum = hsum_epi32(total);
    scales[b * stride] = d;
    sums[b * stride] = d * static_cast<float>(qsum);
    if (qsum8) qsum8[b * stride] = 8 * qsum;
  }
}

// The instruction sets this CPU can run the loops with, best last.
std::vector<std::string> available_isas() {
  std::vector<std::string> isas{"avx2"};
  if (cpu_has_vnni()) isas.push_back("avx512vnni");
  return isas;
}

std::string current_isa() { return use_vnni.load() ? "avx512vnni" : "avx2"; }

// Callers pass one of available_isas() (radixlm/kernels/cpu/gguf_ops.py checks).
void set_isa(const std::string& isa) { use_vnni.store(isa == "avx512vnni" && cpu_has_vnni()); }

// The work item size of one-pass products (gguf_format.h); returns the one before.
int64_t set_one_pass_chunk_bytes(int64_t bytes) {
  return one_pass_chunk_bytes().exchange(std::max<int64_t>(1, bytes));
}

// Reads every byte of `weight` in the chunks and threads a matrix-vector product would, and does
// nothing else: the bandwidth a product can reach here (benchmarks/kernels/gguf_isa.py).
int64_t read_bytes(torch::Tensor weight, int64_t threads) {
  const int64_t n = weight.size(0), row_bytes = weight.size(1);
  const uint8_t* p = weight.data_ptr<uint8_t>();
  const int helpers = n * row_bytes >= parallel_min_bytes() ? static_cast<int>(threads) - 1 : 0;
  const int64_t rows_per_chunk = chunk_rows(n, row_bytes, helpers, 1);
  const int64_t chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<int64_t> sums(chunks);
  radixlm::WorkPool::instance().run(chunks, helpers, [&](int64_t t) {
    const int64_t begin = t * rows_per_chunk * row_bytes;
    const int64_t end = std::min(n, (t + 1) * rows_per_chunk) * row_bytes;
    __m256i a = _mm256_setzero_si256(), b = a;
    int64_t i = begin;
    for (; i + 64 <= end; i += 64) {
      a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
      b = _mm256_xor_si256(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    }
    sums[t] = _mm256_extract_epi64(_mm256_xor_si256(a, b), 0) + (i < end ? p[i] : 0);
  });
  int64_t total = 0;
  for (int64_t s : sums) total ^= s;
  return total;
}

// x quantized to int8 blocks of 32 (quantize_row), in scratch reused across calls on the calling
// thread (a decode step makes ~120 products); with_qsum8: also Activations::qsum8.
Activations quantize_activations(const torch::Tensor& x, int64_t threads, bool with_qsum8) {
  thread_local std::vector<int8_t> q_buf;
  thread_local std::vector<float> scale_buf, sum_buf;
  thread_local std::vector<int32_t> qsum8_buf;
  const int64_t m = x.size(0), k = x.size(1), nblocks = k / kBlock;
  q_buf.resize(m * k);
  const int64_t padded = (m + kRowsPerPass - 1) / kRowsPerPass * kRowsPerPass;
  scale_buf.assign(padded * nblocks, 0.0f);
  sum_buf.assign(padded * nblocks, 0.0f);
  if (with_qsum8) qsum8_buf.assign(padded * nblocks, 0);
  const float* xp = x.data_ptr<float>();
  int8_t* qp = q_buf.data();
  float* sp = scale_buf.data();
  float* up = sum_buf.data();
  int32_t* ip = with_qsum8 ? qsum8_buf.data() : nullptr;
  const int quantize_helpers = m * k >= 16384 ? static_cast<int>(threads) - 1 : 0;
  radixlm::WorkPool::instance().run(m, quantize_helpers, [&](int64_t i) {
    const int64_t at = (i - i % kRowsPerPass) * nblocks + i % kRowsPerPass;  // [pass, block, row in pass]
    quantize_row(xp + i * k, k, qp + i * k, sp + at, up + at, ip ? ip + at : nullptr, kRowsPerPass);
  });
  return Activations{qp, sp, up, k, ip};
}

}  // namespace

// x: float32 [m, k]; weight: uint8 [n, k/32 * block bytes] of GGML type `fmt`; threads >= 1 (the
// calling one included). Returns float32 [m, n].
// Callers check the arguments first (radixlm/kernels/cpu/gguf_ops.py); the checks here are a backstop.
torch::Tensor gguf_linear(torch::Tensor x, torch::Tensor weight, int64_t fmt, int64_t threads) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D float32 tensor");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kUInt8, "weight must be 2-D uint8 blocks");
  TORCH_CHECK(fmt == kQ4_0 || fmt == kQ4_1 || fmt == kQ5_0 || fmt == kQ8_0 ||
              is_kquant(static_cast<int>(fmt)),
              "unsupported GGML block type ", fmt);
  TORCH_CHECK(threads >= 1 && threads <= 1024, "threads must be in [1, 1024], got ", threads);
  x = x.contiguous();
  weight = weight.contiguous();
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  const int elems = block_elems(static_cast<int>(fmt));
  TORCH_CHECK(k % elems == 0, "in_features must be a multiple of ", elems, ", got ", k);
  TORCH_CHECK(weight.size(1) == k / elems * block_bytes(static_cast<int>(fmt)),
              "weight row bytes do not match in_features ", k);
  auto out = torch::empty({m, n}, x.options());
  if (m == 0 || n == 0) return out;
  const Activations acts = quantize_activations(x, threads, false);
  const uint8_t* wp = weight.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  (use_vnni.load() ? gemm_vnni : gemm_avx2)(static_cast<int>(fmt), wp, n, acts, m, op, static_cast<int>(threads));
  return out;
}

// A format's layout in groups of eight interleaved rows (gguf_interleave*.cpp): the elements of a
// block (256 for a K-quant super-block) and a group's bytes per block.
struct GroupedLayout {
  int64_t block_elements, group_block_bytes;
};

GroupedLayout grouped_layout(int64_t fmt) {
  switch (fmt) {
    case kQ4_0: return {kBlock, kGroupBlockBytes};
    case kQ4_1: return {kBlock, kQ41GroupBlockBytes};
    case kQ4_K: return {kSuperBlock, kQ4KGroupBytes};
    case kQ6_K: return {kSuperBlock, kQ6KGroupBytes};
    default: TORCH_CHECK(false, "no grouped layout for GGML type ", fmt, " (Q4_0, Q4_1, Q4_K and Q6_K have one)");
  }
}

// Blocks of `fmt` uint8 [n, blocks * block bytes] -> uint8 [ceil(n / 8), blocks * group block bytes],
// eight rows interleaved (the last group padded with zero rows).
torch::Tensor repack_groups(torch::Tensor weight, int64_t fmt, int64_t threads) {
  const GroupedLayout layout = grouped_layout(fmt);
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kUInt8, "weight must be 2-D uint8 blocks");
  const int bytes = block_bytes(static_cast<int>(fmt));
  TORCH_CHECK(weight.size(1) % bytes == 0, "rows must be whole ", bytes, "-byte blocks");
  TORCH_CHECK(threads >= 1 && threads <= 1024, "threads must be in [1, 1024], got ", threads);
  weight = weight.contiguous();
  const int64_t n = weight.size(0), blocks = weight.size(1) / bytes, k = blocks * layout.block_elements;
  // torch's allocator puts it on transparent huge pages where THP_MEM_ALLOC_ENABLE=1 (radixlm/_env.py)
  auto out = torch::empty({(n + 7) / 8, blocks * layout.group_block_bytes}, weight.options());
  const uint8_t* w = weight.data_ptr<uint8_t>();
  uint8_t* op = out.data_ptr<uint8_t>();
  const int t = static_cast<int>(threads);
  switch (fmt) {
    case kQ4_0: repack_q4_0(w, n, k, op, t); break;
    case kQ4_1: repack_q4_1(w, n, k, op, t); break;
    default: repack_kquant(static_cast<int>(fmt), w, n, k, op, t); break;
  }
  return out;
}

// x: float32 [m, k]; packed: repack_groups of an [n, k] weight of `fmt`. Returns float32 [m, n].
torch::Tensor gguf_linear_groups(torch::Tensor x, torch::Tensor packed, int64_t fmt, int64_t n, int64_t threads) {
  const GroupedLayout layout = grouped_layout(fmt);
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D float32 tensor");
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == torch::kUInt8 && packed.is_contiguous(),
              "packed must be contiguous 2-D uint8");
  TORCH_CHECK(threads >= 1 && threads <= 1024, "threads must be in [1, 1024], got ", threads);
  x = x.contiguous();
  const int64_t m = x.size(0), k = x.size(1);
  TORCH_CHECK(k % layout.block_elements == 0 && packed.size(0) == (n + 7) / 8 &&
                  packed.size(1) == k / layout.block_elements * layout.group_block_bytes,
              "packed does not match n ", n, " and in_features ", k);
  auto out = torch::empty({m, n}, x.options());
  if (m == 0 || n == 0) return out;
  // Q4_0's product subtracts its -8 offset as 8 * sum(q) of each activation block (qsum8)
  const Activations acts = quantize_activations(x, threads, fmt == kQ4_0);
  const uint8_t* pp = packed.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  const int t = static_cast<int>(threads);
  switch (fmt) {
    case kQ4_0: (use_vnni.load() ? gemm_q4_0_interleaved_vnni : gemm_q4_0_interleaved)(pp, n, acts, m, op, t); break;
    case kQ4_1: (use_vnni.load() ? gemm_q4_1_interleaved_vnni : gemm_q4_1_interleaved)(pp, n, acts, m, op, t); break;
    default:
      (use_vnni.load() ? gemm_kquant_interleaved_vnni : gemm_kquant_interleaved)(static_cast<int>(fmt), pp, n, acts, m,
                                                                               op, t);
      break;
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  mod.def("gguf_linear", &gguf_linear,
          "x @ W^T for GGUF Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K blocks (AVX2 or AVX-512 VNNI, threaded)");
  mod.def("available_isas", &available_isas, "the instruction sets the loops can use here, best last");
  mod.def("current_isa", &current_isa, "the instruction set the loops use now");
  mod.def("set_isa", &set_isa, "use one of available_isas() from now on");
  mod.def("repack_groups", &repack_groups, "Q4_0/Q4_1/Q4_K/Q6_K blocks -> groups of eight interleaved rows",
          py::call_guard<py::gil_scoped_release>());
  mod.def("gguf_linear_groups", &gguf_linear_groups, "x @ W^T for a weight repacked by repack_groups");
  mod.def("set_one_pass_chunk_bytes", &set_one_pass_chunk_bytes,
          "bytes of weight per work item of a one-pass product (a benchmark's knob); returns the old value");
  mod.def("read_bytes", &read_bytes, "read a weight as a matrix-vector product would (a bandwidth probe)");
}
