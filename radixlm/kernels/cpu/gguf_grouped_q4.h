// The grouped Q4_0/Q4_1 products' loops (layouts: gguf_interleave.cpp, gguf_interleave_q4_1.cpp),
// compiled once per instruction set like gguf_gemm.h: gguf_interleave.cpp and
// gguf_interleave_q4_1.cpp include this file for AVX2, gguf_interleave_vnni.cpp under an AVX-512
// VNNI target with RADIXLM_GGUF_VNNI defined. Each includer puts it in an anonymous namespace inside
// radixlm::gguf, after immintrin.h, gguf_format.h, gguf_groups.h and simd_math.h; so it has no
// include guard.
//
// Per block, group and activation row, each of the four 32-byte words c holds the eight rows' quant
// bytes 4c..4c+3: low nibbles against x[4c..4c+3] broadcast to every lane, high nibbles against
// x[16+4c..16+4c+3]. AVX2 multiplies them by maddubs into int16 pairs, adds the eight results in
// int16 (at most 8 * 2 * 15 * 128 = 30720: no saturation) and widens with one madd; VNNI's dpbusd
// adds the same products straight into int32 lanes (two instructions a word instead of four). The
// integers are exact either way, and the float part is the same sequence, so both give the same
// bits. AVX-512's 32 vector registers also hold two groups at four activation rows (AVX2: one).

template <int FMT>
constexpr int64_t grouped_block_bytes() {
  return FMT == kQ4_0 ? kGroupBlockBytes : kQ41GroupBlockBytes;
}

// Where a group block's words start: after the eight fp16 scales (Q4_0), or scales and minimums.
template <int FMT>
constexpr int64_t grouped_words_offset() {
  return FMT == kQ4_0 ? 16 : 32;
}

template <int MB>
constexpr int groups_per_tile() {
#ifdef RADIXLM_GGUF_VNNI
  return 2;
#else
  return MB <= 2 ? 2 : 1;  // 16 vector registers (four groups at one row: no better than two)
#endif
}

// G groups (group_bytes apart, starting at p) against MB activation rows; acc[g][i] lane r: row r of
// group g against activation row i.
template <int FMT, int G, int MB>
void grouped_tile(const uint8_t* p, int64_t group_bytes, const Activations& x, __m256 (&acc)[G][MB]) {
  constexpr int64_t block_bytes = grouped_block_bytes<FMT>();
  const __m256i low = _mm256_set1_epi8(0x0F);
#ifndef RADIXLM_GGUF_VNNI
  const __m256i ones = _mm256_set1_epi16(1);
#endif
  for (int g = 0; g < G; ++g) {
    for (int i = 0; i < MB; ++i) acc[g][i] = _mm256_setzero_ps();
  }
  const int64_t nblocks = x.k / kBlock;
  // Prefetches the next tile's groups (contiguous after these), G * block_bytes of them per block
  // step, all by this tile's end (as gguf_gemm.h's NextTile; measured at one row, loaded box:
  // 0.7-0.8x the time without it on the 2048x2048 and 8192x2048 layers).
  const uint8_t* next = p + G * group_bytes;
  const uint8_t* asked = next;
  for (int64_t b = 0; b < nblocks; ++b) {
    for (const uint8_t* end = next + (b + 1) * G * block_bytes; asked < end; asked += 64) {
      radixlm::prefetch_line(asked);
    }
    __m256i sum[G][MB];  // VNNI: int32 lanes; AVX2: int16 pairs, widened after the four words
    for (int c = 0; c < 4; ++c) {
      __m256i lo[G], hi[G];
      for (int g = 0; g < G; ++g) {
        const __m256i raw = load_word(p + g * group_bytes + b * block_bytes + grouped_words_offset<FMT>() + 32 * c);
        lo[g] = _mm256_and_si256(raw, low);
        hi[g] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
      }
      for (int i = 0; i < MB; ++i) {
        const int8_t* xq = x.q + i * x.k + b * kBlock + 4 * c;
        const __m256i xl = broadcast4(xq), xh = broadcast4(xq + 16);
        for (int g = 0; g < G; ++g) {
#ifdef RADIXLM_GGUF_VNNI
          const __m256i start = c == 0 ? _mm256_setzero_si256() : sum[g][i];
          sum[g][i] = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(start, lo[g], xl), hi[g], xh);
#else
          const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(lo[g], xl), _mm256_maddubs_epi16(hi[g], xh));
          sum[g][i] = c == 0 ? t : _mm256_add_epi16(sum[g][i], t);
#endif
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const uint8_t* blk = p + g * group_bytes + b * block_bytes;
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
      for (int i = 0; i < MB; ++i) {
#ifdef RADIXLM_GGUF_VNNI
        const __m256i dot32 = sum[g][i];
#else
        const __m256i dot32 = _mm256_madd_epi16(sum[g][i], ones);
#endif
        if constexpr (FMT == kQ4_0) {  // the -8 offset as an integer: 8 * sum(q) of the activation block
          const __m256i dot = _mm256_sub_epi32(dot32, _mm256_set1_epi32(x.qsum8[4 * b + i]));
          const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(x.scale[4 * b + i]));
          acc[g][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[g][i]);
        } else {  // weight = d * q + m: the minimum meets the activation block's sum
          const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
          const __m256 dot = _mm256_cvtepi32_ps(dot32);
          acc[g][i] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dw, _mm256_set1_ps(x.scale[4 * b + i])), acc[g][i]);
          acc[g][i] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.sum[4 * b + i]), acc[g][i]);
        }
      }
    }
  }
}

// Groups [g0, g1) against activation rows [m0, m0 + MB) (m0 % 4 == 0).
template <int FMT, int MB>
void grouped_rows(const uint8_t* packed, int64_t group_bytes, const Activations& x, int64_t m0, int64_t g0,
                  int64_t g1, float* out, int64_t n) {
  const int64_t nblocks = x.k / kBlock;
  const Activations xm{x.q + m0 * x.k, x.scale + m0 * nblocks, x.sum + m0 * nblocks, x.k,
                       FMT == kQ4_0 ? x.qsum8 + m0 * nblocks : nullptr};
  constexpr int G = groups_per_tile<MB>();
  int64_t g = g0;
  for (; g + G <= g1; g += G) {
    __m256 acc[G][MB];
    grouped_tile<FMT, G, MB>(packed + g * group_bytes, group_bytes, xm, acc);
    for (int j = 0; j < G; ++j) {
      for (int i = 0; i < MB; ++i) store_group(acc[j][i], out, m0 + i, g + j, n);
    }
  }
  for (; g < g1; ++g) {
    __m256 acc[1][MB];
    grouped_tile<FMT, 1, MB>(packed + g * group_bytes, group_bytes, xm, acc);
    for (int i = 0; i < MB; ++i) store_group(acc[0][i], out, m0 + i, g, n);
  }
}

// The whole product of an [n, x.k] Q4_0/Q4_1 weight repacked in groups against x's m rows.
template <int FMT>
void grouped_gemm(const uint8_t* packed, int64_t n, const Activations& x, int64_t m, float* out, int threads) {
  const int64_t nblocks = x.k / kBlock, group_bytes = nblocks * grouped_block_bytes<FMT>();
  over_groups(n, nblocks * block_bytes(FMT), m, threads, [&](auto MB, int64_t m0, int64_t g0, int64_t g1) {
    grouped_rows<FMT, decltype(MB)::value>(packed, group_bytes, x, m0, g0, g1, out, n);
  });
}
