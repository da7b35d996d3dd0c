// Small AVX2 loops over fp32 vectors shared by the decode-step kernels: dot4 (and its two- and
// three-query forms dot4x2, dot4x3; the vectors they read may also be fp16 or bf16), axpy, max, and
// softmax numerators (exp(x - m)) with a vectorised exp; and a prefetch the compiler keeps.
#pragma once
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace radixlm {

// Asks for the cache line at p (prefetcht0). Not _mm_prefetch: GCC counts a prefetch as free of side
// effects, so a function that only prefetches can be judged pure and a call to it deleted with the
// loop around it (GCC 12 deleted the decode attention's look-ahead that way); an asm statement stays.
inline void prefetch_line(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Eight values at p as fp32 lanes: fp32 as they are, fp16 and bf16 widened (exactly: each of their
// values is an fp32 value), so a 16-bit KV cache runs the fp32 arithmetic on half the bytes.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8(const c10::BFloat16* p) {  // bf16 is the top half of an fp32
  const __m256i bits = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
}

// q . k_j for four vectors k_0..k_3 at once: four independent FMA chains, one load of q per step,
// and the four sums reduced together. T: float, c10::Half or c10::BFloat16.
template <typename T>
inline __m128 dot4(const float* q, const T* k0, const T* k1, const T* k2, const T* k3, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(q + i);
    a0 = _mm256_fmadd_ps(x, load8(k0 + i), a0);
    a1 = _mm256_fmadd_ps(x, load8(k1 + i), a1);
    a2 = _mm256_fmadd_ps(x, load8(k2 + i), a2);
    a3 = _mm256_fmadd_ps(x, load8(k3 + i), a3);
  }
  const __m256 pairs = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  __m128 sums = _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps(pairs, 1));
  if (i < n) {
    alignas(16) float tail[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (; i < n; ++i) {
      tail[0] += q[i] * static_cast<float>(k0[i]);
      tail[1] += q[i] * static_cast<float>(k1[i]);
      tail[2] += q[i] * static_cast<float>(k2[i]);
      tail[3] += q[i] * static_cast<float>(k3[i]);
    }
    sums = _mm_add_ps(sums, _mm_load_ps(tail));
  }
  return sums;
}

// dot4 for two queries a and b against the same four vectors: each key chunk is loaded once for
// both. Every lane takes dot4's operations in dot4's order, so ra and rb have dot4's bits.
template <typename T>
inline void dot4x2(const float* qa, const float* qb, const T* k0, const T* k1, const T* k2, const T* k3,
                   int64_t n, __m128& ra, __m128& rb) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xa = _mm256_loadu_ps(qa + i), xb = _mm256_loadu_ps(qb + i);
    __m256 k = load8(k0 + i);
    a0 = _mm256_fmadd_ps(xa, k, a0);
    b0 = _mm256_fmadd_ps(xb, k, b0);
    k = load8(k1 + i);
    a1 = _mm256_fmadd_ps(xa, k, a1);
    b1 = _mm256_fmadd_ps(xb, k, b1);
    k = load8(k2 + i);
    a2 = _mm256_fmadd_ps(xa, k, a2);
    b2 = _mm256_fmadd_ps(xb, k, b2);
    k = load8(k3 + i);
    a3 = _mm256_fmadd_ps(xa, k, a3);
    b3 = _mm256_fmadd_ps(xb, k, b3);
  }
  const __m256 pa = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m256 pb = _mm256_hadd_ps(_mm256_hadd_ps(b0, b1), _mm256_hadd_ps(b2, b3));
  ra = _mm_add_ps(_mm256_castps256_ps128(pa), _mm256_extractf128_ps(pa, 1));
  rb = _mm_add_ps(_mm256_castps256_ps128(pb), _mm256_extractf128_ps(pb, 1));
  if (i < n) {
    alignas(16) float ta[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    alignas(16) float tb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (; i < n; ++i) {
      const float k[4] = {static_cast<float>(k0[i]), static_cast<float>(k1[i]), static_cast<float>(k2[i]),
                          static_cast<float>(k3[i])};
      for (int j = 0; j < 4; ++j) {
        ta[j] += qa[i] * k[j];
        tb[j] += qb[i] * k[j];
      }
    }
    ra = _mm_add_ps(ra, _mm_load_ps(ta));
    rb = _mm_add_ps(rb, _mm_load_ps(tb));
  }
}

// dot4 for three queries against the same four vectors: twelve FMA chains (dot4x2 has eight, too few
// to cover the FMA latency), each key chunk loaded once for all three. Every lane takes dot4's
// operations in dot4's order, so r[0..2] have dot4's bits.
template <typename T>
inline void dot4x3(const float* const q[3], const T* k0, const T* k1, const T* k2, const T* k3, int64_t n,
                   __m128 r[3]) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  __m256 c0 = a0, c1 = a0, c2 = a0, c3 = a0;
  const float *qa = q[0], *qb = q[1], *qc = q[2];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xa = _mm256_loadu_ps(qa + i), xb = _mm256_loadu_ps(qb + i), xc = _mm256_loadu_ps(qc + i);
    __m256 k = load8(k0 + i);
    a0 = _mm256_fmadd_ps(xa, k, a0);
    b0 = _mm256_fmadd_ps(xb, k, b0);
    c0 = _mm256_fmadd_ps(xc, k, c0);
    k = load8(k1 + i);
    a1 = _mm256_fmadd_ps(xa, k, a1);
    b1 = _mm256_fmadd_ps(xb, k, b1);
    c1 = _mm256_fmadd_ps(xc, k, c1);
    k = load8(k2 + i);
    a2 = _mm256_fmadd_ps(xa, k, a2);
    b2 = _mm256_fmadd_ps(xb, k, b2);
    c2 = _mm256_fmadd_ps(xc, k, c2);
    k = load8(k3 + i);
    a3 = _mm256_fmadd_ps(xa, k, a3);
    b3 = _mm256_fmadd_ps(xb, k, b3);
    c3 = _mm256_fmadd_ps(xc, k, c3);
  }
  const __m256 pa = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m256 pb = _mm256_hadd_ps(_mm256_hadd_ps(b0, b1), _mm256_hadd_ps(b2, b3));
  const __m256 pc = _mm256_hadd_ps(_mm256_hadd_ps(c0, c1), _mm256_hadd_ps(c2, c3));
  r[0] = _mm_add_ps(_mm256_castps256_ps128(pa), _mm256_extractf128_ps(pa, 1));
  r[1] = _mm_add_ps(_mm256_castps256_ps128(pb), _mm256_extractf128_ps(pb, 1));
  r[2] = _mm_add_ps(_mm256_castps256_ps128(pc), _mm256_extractf128_ps(pc, 1));
  if (i < n) {
    alignas(16) float t[3][4] = {};
    for (; i < n; ++i) {
      const float k[4] = {static_cast<float>(k0[i]), static_cast<float>(k1[i]), static_cast<float>(k2[i]),
                          static_cast<float>(k3[i])};
      for (int j = 0; j < 4; ++j) {
        for (int x = 0; x < 3; ++x) t[x][j] += q[x][i] * k[j];
      }
    }
    for (int x = 0; x < 3; ++x) r[x] = _mm_add_ps(r[x], _mm_load_ps(t[x]));
  }
}

// acc += p * v
inline void axpy(float p, const float* v, float* acc, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] += p * v[i];
}

inline float max_of(const float* x, int64_t n) {
  // four independent running maxima: one chain of vmaxss waits on itself for every element
  __m256 m0 = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
    m2 = _mm256_max_ps(m2, _mm256_loadu_ps(x + i + 16));
    m3 = _mm256_max_ps(m3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
  const __m256 v = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float m = _mm_cvtss_f32(h);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// e^x for x <= 0, 8 lanes: x = k ln2 + r with |r| <= ln2/2, e^r by its Taylor polynomial to r^6
// (relative error ~1e-7, about one ulp), times 2^k built in the exponent bits. Inputs below -87
// (where 2^k would leave the normal range) give e^-87 ~ 1.6e-38 instead of a smaller number.
inline __m256 exp_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);  // ln2 in two parts, exact product first
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// x[i] = e^(x[i] - m) (with x[i] <= m); returns their sum.
inline float exp_shift_sum(float* x, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float total = hsum(acc);
  if (i < n) {  // the tail through the same vector code (padding lanes are computed, not used)
    alignas(32) float tail[8];
    std::fill(tail, tail + 8, m);
    std::copy(x + i, x + n, tail);
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(tail), mv));
    _mm256_store_ps(tail, e);
    for (int64_t j = 0; i + j < n; ++j) {
      x[i + j] = tail[j];
      total += tail[j];
    }
  }
  return total;
}

}  // namespace radixlm
