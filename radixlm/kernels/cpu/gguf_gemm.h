// The GGUF product's loops over weight blocks, compiled once per instruction set: gguf_linear.cpp
// includes this file for AVX2 (_mm256_maddubs_epi16 + _mm256_madd_epi16), gguf_linear_vnni.cpp
// under an AVX-512 VNNI target with RADIXLM_GGUF_VNNI defined (_mm256_dpbusd_epi32 in their place,
// and ymm16-31 for larger tiles). Each includer puts it in an anonymous namespace inside
// radixlm::gguf, after the headers it needs (immintrin.h, <type_traits>, <cmath>, work_pool.h,
// simd_math.h, gguf_format.h); so it has no include guard.
//
// Each weight block is unpacked to 32 bytes once and dotted against the activation rows, then
// accumulated in float with one fmadd per block. A K-quant super-block of 256 weights is walked as
// eight sub-blocks of 32 against the same activation blocks: Q4_K's 6-bit scale and minimum of each
// sub-block become its float scale and offset (as Q4_1's), Q6_K's two int8 scales per 32 weights
// multiply the int16 pair sums in _mm256_madd_epi16 (on both paths).
//
// A tile is a few weight rows against up to four activation rows (a pass), the rows read front to
// back side by side (streams the hardware prefetcher follows); the scales of a pass's rows are
// multiplied four at a time. The rows of W are cut into chunks of up to kChunkBytes, at least four a
// thread: each thread streams long runs of the weight, and at batches over four a chunk stays in L2
// while the passes go over it. (Measured, 2 threads, weights read from memory: a 1B model's
// 2048x8192 Q4_0 layer at batch 1 took 669 us in tiles of 16 rows, whose short runs interleaved
// between the threads defeat the prefetcher, and 414 us in chunks.) Chunks are shared out by
// radixlm::WorkPool (work_pool.h: why not OpenMP).

// 32 weights of one block as bytes: unsigned nibbles 0..15 for Q4 (element j in the low nibble of
// byte j, element j+16 in its high nibble), signed bytes for Q8_0.
template <int FMT>
inline __m256i unpack(const uint8_t* qs) {
  if constexpr (FMT == kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  }
}

// Q5_0's fifth bits: bit j of the little-endian uint32 at qh -> 0x10 in byte j (else 0).
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(  // byte j <- byte j / 8 of bits (both lanes hold all 4)
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));  // bit j % 8
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// 32 u8 x s8 products summed by fours into eight int32 lanes (lane j: bytes 4j..4j+3), the same
// integers on both paths: maddubs saturates its int16 pair sums and dpbusd does not, but no pair here
// comes near (|w| <= 31 for the unsigned formats, <= 128 with Q8_0's sign trick; |x| <= 127).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#ifdef RADIXLM_GGUF_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// The block's 32 products w * x summed in eight int32 lanes, as floats.
template <int FMT>
inline __m256 dot_block(__m256i w, __m256i x) {
  if constexpr (FMT == kQ8_0) {
    return _mm256_cvtepi32_ps(dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)));
  } else {
    return _mm256_cvtepi32_ps(dot_u8s8(w, x));
  }
}

// The float scales of block b for the MB rows of a pass, dw * dx[i], each broadcast to eight lanes.
// Computed four at a time for MB > 1; the products are the same IEEE multiplications as the
// scalar ones of MB = 1, so a row's result does not depend on MB.
template <int MB>
inline void pass_scales(float dw, const Activations& x, int64_t b, __m256* out) {
  if constexpr (MB == 1) {
    out[0] = _mm256_set1_ps(dw * x.scale[4 * b]);
  } else {
    const __m256 s4 = _mm256_castps128_ps256(_mm_mul_ps(_mm_set1_ps(dw), _mm_loadu_ps(x.scale + 4 * b)));
    for (int i = 0; i < MB; ++i) out[i] = _mm256_permutevar8x32_ps(s4, _mm256_set1_epi32(i));
  }
}

// The Q4/Q5 offsets' sums of a pass, lane i for row i: a scalar for one row (a 128-bit lane 0
// measured 12-15% slower at batch 1), a vector for more.
template <int MB>
using Offsets = std::conditional_t<MB == 1, float, __m128>;

// offset[i] += off * sx[i] for the rows of a pass, one fused multiply-add each.
template <int MB>
inline Offsets<MB> add_offsets(float off, const Activations& x, int64_t b, Offsets<MB> offset) {
  if constexpr (MB == 1) {
    return std::fma(off, x.sum[4 * b], offset);
  } else {
    return _mm_fmadd_ps(_mm_set1_ps(off), _mm_loadu_ps(x.sum + 4 * b), offset);
  }
}

inline __m256i load_x(const Activations& x, int i, int64_t b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + i * x.k + b * kBlock));
}

// 32 unsigned weights wv with values dw * q + off (activation block b) against MB activation rows:
// acc[i] += dot * (dw * dx[i]), offset[i] += off * sx[i].
template <int MB>
inline void unsigned_step(__m256i wv, float dw, float off, const Activations& x, int64_t b, __m256* acc,
                          Offsets<MB>& offset) {
  __m256 scale[MB];
  pass_scales<MB>(dw, x, b, scale);
  for (int i = 0; i < MB; ++i) {
    acc[i] = _mm256_fmadd_ps(dot_block<kQ4_1>(wv, load_x(x, i, b)), scale[i], acc[i]);
  }
  offset = add_offsets<MB>(off, x, b, offset);
}

// One Q4_0/Q4_1/Q5_0/Q8_0 weight block against MB activation rows.
template <int FMT, int MB>
inline void block_step(const uint8_t* blk, const Activations& x, int64_t b, __m256* acc, Offsets<MB>& offset) {
  constexpr int qs_offset = FMT == kQ4_1 ? 4 : FMT == kQ5_0 ? 6 : 2;
  const float dw = half_to_float(blk);
  const __m256i wv = unpack<FMT>(blk + qs_offset);
  if constexpr (FMT == kQ5_0) {
    const __m256i q = _mm256_or_si256(wv, fifth_bits(blk + 2));  // 0..31
    unsigned_step<MB>(q, dw, -16.0f * dw, x, b, acc, offset);
  } else if constexpr (FMT == kQ8_0) {
    __m256 scale[MB];
    pass_scales<MB>(dw, x, b, scale);
    for (int i = 0; i < MB; ++i) acc[i] = _mm256_fmadd_ps(dot_block<FMT>(wv, load_x(x, i, b)), scale[i], acc[i]);
  } else {
    const float off = FMT == kQ4_0 ? -8.0f * dw : half_to_float(blk + 2);
    unsigned_step<MB>(wv, dw, off, x, b, acc, offset);
  }
}

// A Q4_K super-block (sub-block j: d * sc[j] * q - dmin * m[j]) against MB activation rows; its
// sub-blocks are activation blocks 8 * sb .. 8 * sb + 7.
template <int MB>
inline void q4_k_step(const uint8_t* blk, const Activations& x, int64_t sb, __m256* acc, Offsets<MB>& offset) {
  const float d = half_to_float(blk), dmin = half_to_float(blk + 2);
  const uint8_t* s = blk + 4;  // 12 bytes of packed 6-bit scales and minimums
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high) share 32 bytes
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * c));
    for (int hi = 0; hi < 2; ++hi) {
      const int j = 2 * c + hi;
      const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
      const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      const __m256i wv = _mm256_and_si256(hi ? _mm256_srli_epi16(raw, 4) : raw, low_mask);
      unsigned_step<MB>(wv, d * static_cast<float>(sc), -dmin * static_cast<float>(m), x, 8 * sb + j, acc, offset);
    }
  }
}

// Q6_K sub-block G (0..3) of a half: 32 weights from ql (low nibbles of ql0/ql1 for G < 2, high ones
// after), bits 2G, 2G + 1 of qh on top, -32; scales: the half's eight int16 scales in both lanes,
// of which 2G weights the first 16 weights and 2G + 1 the next 16.
template <int G, int MB>
inline void q6_k_sub(__m256i ql0, __m256i ql1, __m256i qh, __m256i scales, float d, const Activations& x,
                     int64_t b, __m256* acc) {
  const __m256i src = G & 1 ? ql1 : ql0;
  const __m256i low = _mm256_and_si256(G >= 2 ? _mm256_srli_epi16(src, 4) : src, _mm256_set1_epi8(0x0F));
  const __m256i shifted = G == 0 ? _mm256_slli_epi16(qh, 4) : G == 1 ? _mm256_slli_epi16(qh, 2)
                        : G == 2 ? qh : _mm256_srli_epi16(qh, 2);
  const __m256i high = _mm256_and_si256(shifted, _mm256_set1_epi8(0x30));
  const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));  // -32..31
  const __m256i abs_q = _mm256_sign_epi8(q, q);
  const __m256i pick =  // int16 element 2G in the low lane, 2G + 1 in the high lane
      _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(((4 * G + 3) << 8) | (4 * G + 2))),
                       _mm_set1_epi16(static_cast<int16_t>(((4 * G + 1) << 8) | (4 * G))));
  const __m256i sub_scales = _mm256_shuffle_epi8(scales, pick);
  __m256 scale[MB];
  pass_scales<MB>(d, x, b, scale);
  for (int i = 0; i < MB; ++i) {
    const __m256i pairs = _mm256_maddubs_epi16(abs_q, _mm256_sign_epi8(load_x(x, i, b), q));
    const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, sub_scales));
    acc[i] = _mm256_fmadd_ps(dot, scale[i], acc[i]);
  }
}

// A Q6_K super-block (weight i: d * scale[i / 16] * (q - 32)) against MB activation rows. Each
// sub-block of 32 is unpacked to signed bytes (-32..31) and multiplied with the sign trick
// (|w| as u8 times x carrying w's sign); its two scales weight the halves' int16 pair sums.
template <int MB>
inline void q6_k_step(const uint8_t* blk, const Activations& x, int64_t sb, __m256* acc) {
  const float d = half_to_float(blk + 208);
  const __m256i all_scales =  // int16: scales 0-7 (first half) in the low lane, 8-15 in the high one
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
  for (int h = 0; h < 2; ++h) {  // halves of 128 weights: ql[64h..], qh[32h..], scales[8h..]
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i scales = h ? _mm256_permute2x128_si256(all_scales, all_scales, 0x11)
                             : _mm256_permute2x128_si256(all_scales, all_scales, 0x00);
    const int64_t b = 8 * sb + 4 * h;
    q6_k_sub<0, MB>(ql0, ql1, qh, scales, d, x, b, acc);
    q6_k_sub<1, MB>(ql0, ql1, qh, scales, d, x, b + 1, acc);
    q6_k_sub<2, MB>(ql0, ql1, qh, scales, d, x, b + 2, acc);
    q6_k_sub<3, MB>(ql0, ql1, qh, scales, d, x, b + 3, acc);
  }
}

// Weight rows per tile against MB activation rows: several rows' independent accumulator chains
// hide the fused multiply-adds' latency, and a tile loads each activation block once for them all.
// AVX-512 has 32 vector registers, AVX2 16.
template <int FMT, int MB>
constexpr int tile_rows() {
#ifdef RADIXLM_GGUF_VNNI
  return MB <= 2 ? 4 : 2;
#else
  return MB == 1 ? 4 : MB == 2 ? 2 : 1;
#endif
}

// Prefetches the weight rows after a tile's (the next tile's, contiguous) a little per block step,
// all of them by the tile's end. The tile reads its R rows side by side, so each row is a short
// stream the hardware prefetcher only catches up with part way; measured at batch 1 (one thread, 8B
// layers, weights from memory) a tile of four 4096-wide Q4_0 rows read ~6 GB/s without this against
// ~13 GB/s from L2.
struct NextTile {
  const uint8_t* at;   // next line to ask for
  const uint8_t* end;  // where this step's share ends
  inline void step(int64_t bytes) {
    for (end += bytes; at < end; at += 64) radixlm::prefetch_line(at);
  }
};

// out[i * n + r] for R weight rows (row_bytes apart) against MB activation rows.
template <int FMT, int R, int MB>
void tile_dot(const uint8_t* w, int64_t row_bytes, const Activations& x, float* out, int64_t n) {
  __m256 acc[R][MB];
  Offsets<MB> offset[R];  // lane i: activation row i
  for (int r = 0; r < R; ++r) {
    offset[r] = Offsets<MB>{};
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_setzero_ps();
  }
  constexpr int bytes = block_bytes(FMT);
  NextTile next{w + R * row_bytes, w + R * row_bytes};
  if constexpr (FMT == kQ4_K) {
    for (int64_t sb = 0; sb < x.k / kSuperBlock; ++sb) {
      next.step(R * bytes);
      for (int r = 0; r < R; ++r) q4_k_step<MB>(w + r * row_bytes + sb * bytes, x, sb, acc[r], offset[r]);
    }
  } else if constexpr (FMT == kQ6_K) {
    for (int64_t sb = 0; sb < x.k / kSuperBlock; ++sb) {
      next.step(R * bytes);
      for (int r = 0; r < R; ++r) q6_k_step<MB>(w + r * row_bytes + sb * bytes, x, sb, acc[r]);
    }
  } else {
    for (int64_t b = 0; b < x.k / kBlock; ++b) {
      next.step(R * bytes);
      for (int r = 0; r < R; ++r) block_step<FMT, MB>(w + r * row_bytes + b * bytes, x, b, acc[r], offset[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(16) float offsets[4];
    if constexpr (MB == 1) {
      offsets[0] = offset[r];
    } else {
      _mm_store_ps(offsets, offset[r]);
    }
    for (int i = 0; i < MB; ++i) out[i * n + r] = radixlm::hsum(acc[r][i]) + offsets[i];
  }
}

// Weight rows [r0, r1) against activation rows [m0, m0 + MB).
template <int FMT, int MB>
void rows(const uint8_t* w, int64_t row_bytes, const Activations& x, int64_t m0, int64_t r0, int64_t r1,
          float* out, int64_t n) {
  const int64_t nblocks = x.k / kBlock;
  const Activations xm{x.q + m0 * x.k, x.scale + m0 * nblocks, x.sum + m0 * nblocks, x.k};  // m0 % 4 == 0
  constexpr int R = tile_rows<FMT, MB>();
  int64_t r = r0;
  for (; r + R <= r1; r += R) tile_dot<FMT, R, MB>(w + r * row_bytes, row_bytes, xm, out + m0 * n + r, n);
  for (; r < r1; ++r) tile_dot<FMT, 1, MB>(w + r * row_bytes, row_bytes, xm, out + m0 * n + r, n);
}

template <int FMT>
void gemm(const uint8_t* w, int64_t n, const Activations& x, int64_t m, float* out, int threads) {
  const int64_t row_bytes = x.k / block_elems(FMT) * block_bytes(FMT);
  const int helpers = n * row_bytes * m >= parallel_min_bytes() ? threads - 1 : 0;
  const int64_t rows_per_chunk = chunk_rows(n, row_bytes, helpers, m);
  const int64_t chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  radixlm::WorkPool::instance().run(chunks, helpers, [&](int64_t t) {
    const int64_t r0 = t * rows_per_chunk, r1 = std::min(n, r0 + rows_per_chunk);
    for (int64_t m0 = 0; m0 < m; m0 += kRowsPerPass) {
      switch (std::min<int64_t>(kRowsPerPass, m - m0)) {
        case 4: rows<FMT, 4>(w, row_bytes, x, m0, r0, r1, out, n); break;
        case 3: rows<FMT, 3>(w, row_bytes, x, m0, r0, r1, out, n); break;
        case 2: rows<FMT, 2>(w, row_bytes, x, m0, r0, r1, out, n); break;
        default: rows<FMT, 1>(w, row_bytes, x, m0, r0, r1, out, n); break;
      }
    }
  });
}


void run_gemm(int fmt, const uint8_t* w, int64_t n, const Activations& x, int64_t m, float* out, int threads) {
  switch (fmt) {
    case kQ4_0: gemm<kQ4_0>(w, n, x, m, out, threads); break;
    case kQ4_1: gemm<kQ4_1>(w, n, x, m, out, threads); break;
    case kQ5_0: gemm<kQ5_0>(w, n, x, m, out, threads); break;
    case kQ4_K: gemm<kQ4_K>(w, n, x, m, out, threads); break;
    case kQ6_K: gemm<kQ6_K>(w, n, x, m, out, threads); break;
    default: gemm<kQ8_0>(w, n, x, m, out, threads); break;
  }
}
