// Decode attention over the paged KV pool, read in place: one new query token per request against
// the keys and values at its slots (req_to_token[row, :seq_len]), for fp32 pools.
//
// The torch path gathers each layer's K and V into new tensors (index_select) and then calls
// scaled_dot_product_attention; at batch 1 those three calls cost ~220 us a layer on these CPUs,
// several times the arithmetic. Here a request's keys are split into chunks of kChunk; a work item
// is one chunk: every query head's scores against each key row (all kv heads of a slot are one
// contiguous row, read front to back), the softmax numerators, then the weighted sum of the value
// rows. A request's chunks are merged at the end (flash-decoding), so one long request still uses
// every thread.
//
// Batch invariance: chunk bounds depend only on the request's own length, and the merge walks its
// chunks in order, so a token's result does not depend on the batch, the padding or the thread count.
//
// A sliding-window layer (Mistral, Gemma) reads only each request's last `window` keys: the window
// raises the request's first key index, nothing else changes. A soft-capped layer (Gemma 2) maps each
// scaled score s to cap * tanh(s / cap) before the softmax.
//
// fp16 and bf16 pools (--kv-cache-dtype) hold half the bytes: their rows are widened to fp32 as
// they are loaded (exactly: every fp16 and bf16 value is an fp32 value), and the arithmetic is the
// fp32 pool's, operation for operation.
//
// Row groups (a speculative verify step: one row per draft position of a request): consecutive rows
// of one request (the same req_to_token row, so the same slots) whose lengths differ only in their
// tails are one group. A group's chunks cover keys up to its longest row; a chunk's key rows are read
// once for all of the group's rows while they are in L1, its value rows by every query in turn in
// blocks that stay in L1, each row using only its own keys (a causal tail). Chunk bounds and every
// row's operations are those of the row alone, so a grouped row's result has the same bits as the
// ungrouped one.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "decode_kernels.h"
#include "simd_math.h"
#include "work_pool.h"

namespace {

constexpr int64_t kChunk = 128;  // keys per work item
// Value rows of one kv head read by every query of it in turn while they stay in L1 (32 rows of 64
// fp32 values: 8 KB; reading all 128 of a chunk per query was bound by L2's bandwidth).
constexpr int64_t kValueBlock = 32;
// Below this many bytes of K and V read in a step, the work runs on the calling thread alone.
constexpr int64_t kParallelMinBytes = int64_t{256} << 10;

struct Shapes {
  int64_t q_heads, kv_heads, head_dim, group;
};

// One chunk's unnormalised result per query head: running max m, sum l, and acc = sum p * v.
struct Partial {
  float* m;
  float* l;
  float* acc;  // [q_heads, head_dim]
};

// Asks for the pool rows of slots[j], j in [from, from + 4) and in [0, n), to be brought into the
// cache. A request's slots are wherever the allocator put them, often not adjacent, so the hardware's
// stream prefetcher cannot see them coming; asked for two groups of four ahead, they arrive while the
// current group is computed (measured: 1.3-1.6x at batch 64 and 301 keys, where the rows come from
// memory). Each pass also runs on past its end: the key pass asks for the first value rows, the value
// pass for the first key rows of the chunk this thread takes next (measured: 1.2x at batch 64 and 33
// keys, where those first rows are a quarter of all).
template <typename T>
inline void prefetch_rows(const T* pool, const int64_t* slots, int64_t from, int64_t n, int64_t row) {
  const int64_t bytes = row * static_cast<int64_t>(sizeof(T));
  for (int64_t j = std::max<int64_t>(from, 0); j < std::min(from + 4, n); ++j) {
    const char* p = reinterpret_cast<const char*>(pool + slots[j] * row);
    for (int64_t b = 0; b < bytes; b += 64) radixlm::prefetch_line(p + b);
  }
}

// Scores queries against four key rows of one kv head, three at a time (dot4x3: each key row loaded
// once for all three; twelve FMA chains hide the FMA latency that dot4x2's eight do not); finish()
// scores a last one or two through dot4x2 / dot4. Every form gives each query dot4's bits, so how
// the queries fall into threes changes nothing.
template <typename T>
class KeyQuad {
 public:
  KeyQuad(const T* const k[4], int64_t offset, int64_t dim, __m128 scale4)
      : k0_(k[0] + offset), k1_(k[1] + offset), k2_(k[2] + offset), k3_(k[3] + offset), dim_(dim),
        scale4_(scale4) {}

  // Query vector `in` against the four rows: scale * scores into out[0:n) (n <= 4: the rows it has).
  __attribute__((always_inline)) inline void add(const float* in, float* out, int64_t n) {
    held_[count_++] = Held{in, out, n};
    if (count_ < 3) return;
    const float* in3[3] = {held_[0].in, held_[1].in, held_[2].in};
    __m128 sums[3];
    radixlm::dot4x3(in3, k0_, k1_, k2_, k3_, dim_, sums);
    for (int j = 0; j < 3; ++j) store(held_[j], sums[j]);
    count_ = 0;
  }

  __attribute__((always_inline)) inline void finish() {
    if (count_ == 2) {
      __m128 a, b;
      radixlm::dot4x2(held_[0].in, held_[1].in, k0_, k1_, k2_, k3_, dim_, a, b);
      store(held_[0], a);
      store(held_[1], b);
    } else if (count_ == 1) {
      store(held_[0], radixlm::dot4(held_[0].in, k0_, k1_, k2_, k3_, dim_));
    }
    count_ = 0;
  }

 private:
  struct Held {
    const float* in;
    float* out;
    int64_t n;
  };

  __attribute__((always_inline)) inline void store(const Held& one, __m128 sums) const {
    if (one.n == 4) {
      _mm_storeu_ps(one.out, _mm_mul_ps(sums, scale4_));
      return;
    }
    alignas(16) float four[4];
    _mm_store_ps(four, _mm_mul_ps(sums, scale4_));
    std::copy(four, four + one.n, one.out);
  }

  const T *k0_, *k1_, *k2_, *k3_;
  int64_t dim_;
  __m128 scale4_;
  Held held_[3];
  int count_ = 0;
};

// acc[0:W*8) += p[t] * v_t[0:W*8) for t in [0, keys), v_t = pool + slots[t] * row, key by key (one
// FMA a key on each lane, in key order), the accumulator held in W registers across the keys.
template <int W, typename T>
inline void weighted_block(const float* p, const T* pool, const int64_t* slots, int64_t row, int64_t keys,
                           float* acc) {
  __m256 a[W];
  for (int j = 0; j < W; ++j) a[j] = _mm256_loadu_ps(acc + 8 * j);
  for (int64_t t = 0; t < keys; ++t) {
    const __m256 w = _mm256_set1_ps(p[t]);
    const T* v = pool + slots[t] * row;
    for (int j = 0; j < W; ++j) a[j] = _mm256_fmadd_ps(w, radixlm::load8(v + 8 * j), a[j]);
  }
  for (int j = 0; j < W; ++j) _mm256_storeu_ps(acc + 8 * j, a[j]);
}

// One query's value pass over the chunk's first `keys` value rows (pool: its kv head's first value):
// acc[0:n) += sum_t p[t] v_t, 64 values at a time, then the rest of eight, then one by one.
template <typename T>
void weighted_rows(const float* p, const T* pool, const int64_t* slots, int64_t row, int64_t keys, float* acc,
                   int64_t n) {
  int64_t d = 0;
  for (; d + 64 <= n; d += 64) weighted_block<8>(p, pool + d, slots, row, keys, acc + d);
  switch ((n - d) / 8) {
    case 7: weighted_block<7>(p, pool + d, slots, row, keys, acc + d); break;
    case 6: weighted_block<6>(p, pool + d, slots, row, keys, acc + d); break;
    case 5: weighted_block<5>(p, pool + d, slots, row, keys, acc + d); break;
    case 4: weighted_block<4>(p, pool + d, slots, row, keys, acc + d); break;
    case 3: weighted_block<3>(p, pool + d, slots, row, keys, acc + d); break;
    case 2: weighted_block<2>(p, pool + d, slots, row, keys, acc + d); break;
    case 1: weighted_block<1>(p, pool + d, slots, row, keys, acc + d); break;
    default: break;
  }
  for (d += (n - d) / 8 * 8; d < n; ++d) {
    float a = acc[d];
    for (int64_t t = 0; t < keys; ++t) a += p[t] * static_cast<float>(pool[slots[t] * row + d]);
    acc[d] = a;
  }
}

// One chunk of a group of `rows` query rows (q: [rows, q_heads, head_dim]); row r scores the chunk's
// first lens[r] keys (0 <= lens[r] <= len, len the largest) into part[r].
template <typename T>
void attend_chunk(const float* q, int64_t rows, const int64_t* lens, const T* k_pool, const T* v_pool,
                  const int64_t* slots, int64_t len, const int64_t* next_slots, int64_t next_len, const Shapes& s,
                  float scale, float softcap, const Partial* part) {
  thread_local std::vector<float> scores;  // [rows, q_heads, len]
  scores.resize(static_cast<size_t>(rows * s.q_heads * len));
  const int64_t row = s.kv_heads * s.head_dim;  // values from one slot to the next
  const int64_t step = s.q_heads * s.head_dim;  // from one query row to the next
  const __m128 scale4 = _mm_set1_ps(scale);
  // Four key rows at a time (the last group repeats its last row; those scores are dropped): each
  // row is read once from memory for every query head of every row of the group.
  for (int64_t t = 0; t < len; t += 4) {
    prefetch_rows(k_pool, slots, t + 8, len, row);
    prefetch_rows(v_pool, slots, t + 8, len, row);  // for the value pass
    const T* k[4];
    for (int64_t j = 0; j < 4; ++j) k[j] = k_pool + slots[t + std::min(j, len - t - 1)] * row;
    for (int64_t kh = 0; kh < s.kv_heads; ++kh) {
      KeyQuad<T> quad(k, kh * s.head_dim, s.head_dim, scale4);  // this kv head's queries of every row
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = std::min<int64_t>(4, lens[r] - t);
        for (int64_t h = kh * s.group; n > 0 && h < (kh + 1) * s.group; ++h) {
          quad.add(q + r * step + h * s.head_dim, scores.data() + (r * s.q_heads + h) * len + t, n);
        }
      }
      quad.finish();
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = scores.data() + r * s.q_heads * len;
    const int64_t n = lens[r];
    for (int64_t h = 0; h < s.q_heads; ++h) {
      float* sc = sr + h * len;
      if (softcap > 0.0f) {
        const float inv_cap = 1.0f / softcap;
        for (int64_t t = 0; t < n; ++t) sc[t] = softcap * std::tanh(sc[t] * inv_cap);
      }
      const float m = radixlm::max_of(sc, n);
      part[r].m[h] = m;
      part[r].l[h] = n > 0 ? radixlm::exp_shift_sum(sc, n, m) : 0.0f;  // sc[t] = exp(sc[t] - m)
    }
    std::fill(part[r].acc, part[r].acc + s.q_heads * s.head_dim, 0.0f);
  }
  // The value pass: blocks of kValueBlock value rows of one kv head, each read by every query of that
  // head in turn, the query's accumulator in registers across the block (the key pass asked for the
  // value rows); the next chunk's first keys are asked for now.
  prefetch_rows(k_pool, next_slots, 0, next_len, row);
  prefetch_rows(k_pool, next_slots, 4, next_len, row);
  for (int64_t kh = 0; kh < s.kv_heads; ++kh) {
    const T* head = v_pool + kh * s.head_dim;
    for (int64_t t = 0; t < len; t += kValueBlock) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t keys = std::min(kValueBlock, lens[r] - t);
        for (int64_t h = kh * s.group; keys > 0 && h < (kh + 1) * s.group; ++h) {
          const float* p = scores.data() + (r * s.q_heads + h) * len + t;
          weighted_rows(p, head, slots + t, row, keys, part[r].acc + h * s.head_dim, s.head_dim);
        }
      }
    }
  }
}

// out[h] = sum_c acc_c[h] e^(m_c - M) / sum_c l_c e^(m_c - M), chunks in order.
void merge(const std::vector<Partial>& parts, const Shapes& s, float* out) {
  for (int64_t h = 0; h < s.q_heads; ++h) {
    float big = -std::numeric_limits<float>::infinity();
    for (const Partial& p : parts) big = std::max(big, p.m[h]);
    float total = 0.0f;
    float* o = out + h * s.head_dim;
    std::fill(o, o + s.head_dim, 0.0f);
    for (const Partial& p : parts) {
      const float w = std::exp(p.m[h] - big);
      total += p.l[h] * w;
      radixlm::axpy(w, p.acc + h * s.head_dim, o, s.head_dim);
    }
    const float inv = 1.0f / total;
    for (int64_t i = 0; i < s.head_dim; ++i) o[i] *= inv;
  }
}

// The attention already computed over the keys before key_start, as torch's flash attention
// returns it: out [Hkv, bs * group, D] normalised, lse [Hkv, bs * group] (log-sum-exp of the scaled
// scores). It joins the merge as one more chunk: m = lse, l = 1, acc = out.
struct Prefix {
  const float* out = nullptr;
  const float* lse = nullptr;
};

// Row groups: group g is rows [starts[g], starts[g + 1]), all with the same req_pool_indices entry.
// Empty `groups`, or a windowed layer (each row's window starts elsewhere): one row per group.
std::vector<int64_t> group_starts(const torch::Tensor& groups, const int64_t* rows, int64_t bs, int64_t window) {
  std::vector<int64_t> starts;
  if (!groups.defined() || groups.numel() == 0 || window > 0) {
    for (int64_t b = 0; b <= bs; ++b) starts.push_back(b);
    return starts;
  }
  TORCH_CHECK(groups.scalar_type() == torch::kInt64 && groups.dim() == 1 && groups.is_contiguous(),
              "row_groups: contiguous int64 [groups + 1]");
  const int64_t* g = groups.data_ptr<int64_t>();
  starts.assign(g, g + groups.numel());
  TORCH_CHECK(starts.front() == 0 && starts.back() == bs, "row_groups must run from 0 to the batch size");
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    TORCH_CHECK(starts[i] < starts[i + 1], "row_groups must increase");
    for (int64_t b = starts[i] + 1; b < starts[i + 1]; ++b) {
      TORCH_CHECK(rows[b] == rows[starts[i]], "the rows of a row group must share their req_pool_indices entry");
    }
  }
  return starts;
}

// Keys [key_start, seq_len) of each row (and `prefix`, when given, for the keys before), only the
// last `window` of them when window > 0; scores soft-capped when softcap > 0; rows grouped by
// `groups` (see group_starts); out: float32 [bs, Hq, D].
void attend(const torch::Tensor& q, const torch::Tensor& k_pool, const torch::Tensor& v_pool,
            const torch::Tensor& req_to_token, const torch::Tensor& req_pool_indices,
            const torch::Tensor& seq_lens, double sm_scale, int64_t threads, int64_t key_start,
            int64_t window, double softcap, const Prefix& prefix, const torch::Tensor& groups,
            torch::Tensor& out) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat32 && q.is_contiguous(), "q: contiguous [bs, Hq, D] fp32");
  const auto pool_type = k_pool.scalar_type();
  TORCH_CHECK((pool_type == torch::kFloat32 || pool_type == torch::kHalf || pool_type == torch::kBFloat16) &&
              k_pool.is_contiguous(), "k_pool: contiguous fp32, fp16 or bf16");
  TORCH_CHECK(v_pool.scalar_type() == pool_type && v_pool.is_contiguous(), "v_pool: contiguous, k_pool's dtype");
  TORCH_CHECK(req_to_token.scalar_type() == torch::kInt64 && req_to_token.is_contiguous(), "req_to_token: int64");
  const Shapes s{q.size(1), k_pool.size(1), q.size(2), q.size(1) / k_pool.size(1)};
  const int64_t bs = q.size(0), ctx = req_to_token.size(1);
  const int64_t* rows = req_pool_indices.data_ptr<int64_t>();
  const int64_t* lens = seq_lens.data_ptr<int64_t>();
  const int64_t* r2t = req_to_token.data_ptr<int64_t>();
  const int64_t pool_rows = req_to_token.size(0), pool_slots = k_pool.size(0);
  TORCH_CHECK(window >= 0 && softcap >= 0.0, "window and softcap must be >= 0 (0: none)");
  for (int64_t b = 0; b < bs; ++b) {
    TORCH_CHECK(rows[b] >= 0 && rows[b] < pool_rows, "req_pool_indices out of range");
    TORCH_CHECK(lens[b] > key_start && lens[b] <= ctx, "seq_lens out of range (or no key past key_start)");
  }
  const std::vector<int64_t> gs = group_starts(groups, rows, bs, window);
  const int64_t num_groups = static_cast<int64_t>(gs.size()) - 1;
  std::vector<int64_t> first_chunk(num_groups + 1, 0);  // group g owns chunks [first_chunk[g], first_chunk[g+1])
  std::vector<int64_t> first_key(num_groups);  // group g reads keys [first_key[g], end_key[g])
  std::vector<int64_t> end_key(num_groups);
  int64_t keys = 0;
  for (int64_t g = 0; g < num_groups; ++g) {
    end_key[g] = *std::max_element(lens + gs[g], lens + gs[g + 1]);
    first_key[g] = window > 0 ? std::max(key_start, end_key[g] - window) : key_start;  // window: one row
    for (int64_t t = first_key[g]; t < end_key[g]; ++t) {
      const int64_t slot = r2t[rows[gs[g]] * ctx + t];
      TORCH_CHECK(slot >= 0 && slot < pool_slots, "a KV slot is outside the pool");
    }
    keys += end_key[g] - first_key[g];
    first_chunk[g + 1] = first_chunk[g] + (end_key[g] - first_key[g] + kChunk - 1) / kChunk;
  }
  const int64_t chunks = first_chunk[num_groups];
  const int64_t per_part = s.q_heads * (s.head_dim + 2);
  std::vector<int64_t> owner(chunks), first_part(chunks + 1, 0);  // chunk c's rows: parts [first_part[c], ...)
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t c = first_chunk[g]; c < first_chunk[g + 1]; ++c) {
      owner[c] = g;
      first_part[c + 1] = first_part[c] + gs[g + 1] - gs[g];
    }
  }
  std::vector<float> scratch(static_cast<size_t>(first_part[chunks] * per_part));
  std::vector<Partial> parts(first_part[chunks]);
  for (int64_t i = 0; i < first_part[chunks]; ++i) {
    float* base = scratch.data() + i * per_part;
    parts[i] = Partial{base, base + s.q_heads, base + 2 * s.q_heads};
  }
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t step = s.q_heads * s.head_dim;
  const float scale = static_cast<float>(sm_scale);
  const float cap = static_cast<float>(softcap);
  const int64_t pool_bytes = 2 * static_cast<int64_t>(k_pool.element_size());  // K and V, one value each
  const int helpers = keys * s.kv_heads * s.head_dim * pool_bytes >= kParallelMinBytes
                          ? static_cast<int>(threads) - 1 : 0;
  const auto chunk_start = [&](int64_t c) { return first_key[owner[c]] + (c - first_chunk[owner[c]]) * kChunk; };
  const auto chunk_keys = [&](int64_t c) {  // the chunk's slots and their count
    const int64_t g = owner[c], t0 = chunk_start(c);
    return std::pair<const int64_t*, int64_t>(r2t + rows[gs[g]] * ctx + t0, std::min(kChunk, end_key[g] - t0));
  };
  // A work item is a run of consecutive chunks (so a thread knows the chunk it takes next, and asks
  // for that chunk's first keys while it finishes the current one) of about an eighth of a thread's
  // share of the work (keys times the group's rows), so that the threads still come out even.
  int64_t work = 0;
  for (int64_t c = 0; c < chunks; ++c) work += chunk_keys(c).second * (first_part[c + 1] - first_part[c]);
  const int64_t item_work = work / (8 * (helpers + 1));
  std::vector<int64_t> item_start{0};
  for (int64_t c = 0, run = 0; c < chunks; ++c) {
    run += chunk_keys(c).second * (first_part[c + 1] - first_part[c]);
    if (run >= item_work || c + 1 == chunks) {
      item_start.push_back(c + 1);
      run = 0;
    }
  }
  const auto attend_chunks = [&](const auto* kp, const auto* vp) {  // kp, vp: the pool's element type
    const int64_t items = static_cast<int64_t>(item_start.size()) - 1;
    radixlm::WorkPool::instance().run(items, helpers, [&](int64_t item) {
      thread_local std::vector<int64_t> row_lens;  // the group's rows' keys in this chunk
      for (int64_t c = item_start[item]; c < item_start[item + 1]; ++c) {
        const auto [slots, len] = chunk_keys(c);
        const bool more = c + 1 < item_start[item + 1];
        const auto [next_slots, next_len] = more ? chunk_keys(c + 1) : std::pair<const int64_t*, int64_t>{};
        const int64_t g = owner[c], t0 = chunk_start(c);
        row_lens.resize(static_cast<size_t>(gs[g + 1] - gs[g]));
        for (int64_t b = gs[g]; b < gs[g + 1]; ++b) row_lens[b - gs[g]] = std::clamp<int64_t>(lens[b] - t0, 0, len);
        attend_chunk(qp + gs[g] * step, gs[g + 1] - gs[g], row_lens.data(), kp, vp, slots, len, next_slots,
                     next_len, s, scale, cap, parts.data() + first_part[c]);
      }
    });
  };
  if (pool_type == torch::kHalf) {
    attend_chunks(k_pool.data_ptr<c10::Half>(), v_pool.data_ptr<c10::Half>());
  } else if (pool_type == torch::kBFloat16) {
    attend_chunks(k_pool.data_ptr<c10::BFloat16>(), v_pool.data_ptr<c10::BFloat16>());
  } else {
    attend_chunks(k_pool.data_ptr<float>(), v_pool.data_ptr<float>());
  }
  std::vector<float> prefix_part(prefix.out == nullptr ? 0 : static_cast<size_t>(per_part));
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t b = gs[g]; b < gs[g + 1]; ++b) {
      // the row's own chunks only: those a row alone would have (a shorter row's may end early)
      const int64_t own = (lens[b] - first_key[g] + kChunk - 1) / kChunk;
      std::vector<Partial> mine;
      for (int64_t c = first_chunk[g]; c < first_chunk[g] + own; ++c) mine.push_back(parts[first_part[c] + b - gs[g]]);
      if (prefix.out != nullptr) {
        const Partial p{prefix_part.data(), prefix_part.data() + s.q_heads, prefix_part.data() + 2 * s.q_heads};
        for (int64_t h = 0; h < s.q_heads; ++h) {
          const int64_t src = (h / s.group * bs + b) * s.group + h % s.group;  // [Hkv, bs, group] order
          p.m[h] = prefix.lse[src];
          p.l[h] = 1.0f;
          std::copy(prefix.out + src * s.head_dim, prefix.out + (src + 1) * s.head_dim, p.acc + h * s.head_dim);
        }
        mine.insert(mine.begin(), p);
      }
      merge(mine, s, op + b * step);
    }
  }
}

}  // namespace

// q: float32 [bs, Hq, D]; k_pool, v_pool: [slots, Hkv, D], both float32, float16 or bfloat16;
// req_to_token: int64 [rows, ctx];
// req_pool_indices, seq_lens: int64 [bs] (seq_lens >= 1); window: keys per query (0: all);
// softcap: the score cap (0: none); row_groups: int64 [groups + 1], the first row of each group of
// consecutive rows of one request (same req_pool_indices entry) and bs last, read in one pass over
// their keys (empty: one row per group; window > 0: ignored). Returns float32 [bs, Hq, D].
// Callers check the arguments first (radixlm/kernels/cpu/decode_ops.py); the checks here are a backstop.
torch::Tensor paged_decode_attention(torch::Tensor q, torch::Tensor k_pool, torch::Tensor v_pool,
                                     torch::Tensor req_to_token, torch::Tensor req_pool_indices,
                                     torch::Tensor seq_lens, double sm_scale, int64_t window, double softcap,
                                     torch::Tensor row_groups, int64_t threads) {
  auto out = torch::empty_like(q);
  attend(q, k_pool, v_pool, req_to_token, req_pool_indices, seq_lens, sm_scale, threads, 0, window, softcap,
         Prefix{}, row_groups, out);
  return out;
}

// The same over keys [key_start, seq_len) (seq_lens > key_start), merged with the attention over
// the keys before key_start that the caller computed (a prefix the batch shares, read once for all
// requests: radixlm/kernels/shared_prefix_attention.py): prefix_out float32 [Hkv, bs * group, D],
// prefix_lse float32 [Hkv, bs * group], contiguous.
torch::Tensor paged_decode_attention_after_prefix(torch::Tensor q, torch::Tensor k_pool, torch::Tensor v_pool,
                                                  torch::Tensor req_to_token, torch::Tensor req_pool_indices,
                                                  torch::Tensor seq_lens, double sm_scale, int64_t key_start,
                                                  torch::Tensor prefix_out, torch::Tensor prefix_lse,
                                                  int64_t threads) {
  TORCH_CHECK(key_start >= 0, "key_start must be >= 0");
  TORCH_CHECK(prefix_out.scalar_type() == torch::kFloat32 && prefix_out.is_contiguous() &&
              prefix_out.numel() == q.numel(), "prefix_out: contiguous fp32 [Hkv, bs * group, D]");
  TORCH_CHECK(prefix_lse.scalar_type() == torch::kFloat32 && prefix_lse.is_contiguous() &&
              prefix_lse.numel() == q.size(0) * q.size(1), "prefix_lse: contiguous fp32 [Hkv, bs * group]");
  auto out = torch::empty_like(q);
  const Prefix prefix{prefix_out.data_ptr<float>(), prefix_lse.data_ptr<float>()};
  attend(q, k_pool, v_pool, req_to_token, req_pool_indices, seq_lens, sm_scale, threads, key_start, 0, 0.0,
         prefix, torch::Tensor(), out);
  return out;
}
