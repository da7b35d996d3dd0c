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

template <typename T>
void attend_chunk(const float* q, const T* k_pool, const T* v_pool, const int64_t* slots, int64_t len,
                  const int64_t* next_slots, int64_t next_len, const Shapes& s, float scale, float softcap,
                  const Partial& part) {
  thread_local std::vector<float> scores;  // [q_heads, len]
  scores.resize(static_cast<size_t>(s.q_heads * len));
  const int64_t row = s.kv_heads * s.head_dim;  // values from one slot to the next
  const __m128 scale4 = _mm_set1_ps(scale);
  // Four key rows at a time (the last group repeats its last row; those scores are dropped): each
  // row is read once from memory for every query head.
  for (int64_t t = 0; t < len; t += 4) {
    prefetch_rows(k_pool, slots, t + 8, len, row);
    prefetch_rows(v_pool, slots, t + 8 - len, len, row);  // past the keys: the first value rows
    const int64_t n = std::min<int64_t>(4, len - t);
    const T* k[4];
    for (int64_t j = 0; j < 4; ++j) k[j] = k_pool + slots[t + std::min(j, n - 1)] * row;
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t off = (h / s.group) * s.head_dim;
      alignas(16) float four[4];
      _mm_store_ps(four, _mm_mul_ps(radixlm::dot4(q + h * s.head_dim, k[0] + off, k[1] + off, k[2] + off,
                                                  k[3] + off, s.head_dim), scale4));
      std::copy(four, four + n, scores.data() + h * len + t);
    }
  }
  if (softcap > 0.0f) {
    const float inv_cap = 1.0f / softcap;
    for (float& x : scores) x = softcap * std::tanh(x * inv_cap);
  }
  for (int64_t h = 0; h < s.q_heads; ++h) {
    float* sc = scores.data() + h * len;
    const float m = radixlm::max_of(sc, len);
    part.m[h] = m;
    part.l[h] = radixlm::exp_shift_sum(sc, len, m);  // sc[t] = exp(sc[t] - m)
  }
  std::fill(part.acc, part.acc + s.q_heads * s.head_dim, 0.0f);
  for (int64_t t = 0; t < len; t += 4) {
    prefetch_rows(v_pool, slots, t + 8, len, row);
    prefetch_rows(k_pool, next_slots, t + 8 - len, next_len, row);  // past the values: the next keys
    const int64_t n = std::min<int64_t>(4, len - t);
    const T* v[4];
    for (int64_t j = 0; j < 4; ++j) v[j] = v_pool + slots[t + std::min(j, n - 1)] * row;
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t off = (h / s.group) * s.head_dim;
      float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // weight 0 for the repeated rows: adds exactly nothing
      std::copy(scores.data() + h * len + t, scores.data() + h * len + t + n, p);
      radixlm::axpy4(p, v[0] + off, v[1] + off, v[2] + off, v[3] + off, part.acc + h * s.head_dim, s.head_dim);
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

// Keys [key_start, seq_len) of each request (and `prefix`, when given, for the keys before), only the
// last `window` of them when window > 0; scores soft-capped when softcap > 0; out: float32 [bs, Hq, D].
void attend(const torch::Tensor& q, const torch::Tensor& k_pool, const torch::Tensor& v_pool,
            const torch::Tensor& req_to_token, const torch::Tensor& req_pool_indices,
            const torch::Tensor& seq_lens, double sm_scale, int64_t threads, int64_t key_start,
            int64_t window, double softcap, const Prefix& prefix, torch::Tensor& out) {
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
  std::vector<int64_t> first_chunk(bs + 1, 0);  // request b owns chunks [first_chunk[b], first_chunk[b+1])
  std::vector<int64_t> first_key(bs);  // request b reads keys [first_key[b], lens[b])
  int64_t keys = 0;
  for (int64_t b = 0; b < bs; ++b) {
    TORCH_CHECK(rows[b] >= 0 && rows[b] < pool_rows, "req_pool_indices out of range");
    TORCH_CHECK(lens[b] > key_start && lens[b] <= ctx, "seq_lens out of range (or no key past key_start)");
    first_key[b] = window > 0 ? std::max(key_start, lens[b] - window) : key_start;
    for (int64_t t = first_key[b]; t < lens[b]; ++t) {
      const int64_t slot = r2t[rows[b] * ctx + t];
      TORCH_CHECK(slot >= 0 && slot < pool_slots, "a KV slot is outside the pool");
    }
    keys += lens[b] - first_key[b];
    first_chunk[b + 1] = first_chunk[b] + (lens[b] - first_key[b] + kChunk - 1) / kChunk;
  }
  const int64_t chunks = first_chunk[bs];
  const int64_t per_part = s.q_heads * (s.head_dim + 2);
  std::vector<float> scratch(static_cast<size_t>(chunks * per_part));
  std::vector<Partial> parts(chunks);
  std::vector<int64_t> owner(chunks);
  for (int64_t b = 0; b < bs; ++b) {
    for (int64_t c = first_chunk[b]; c < first_chunk[b + 1]; ++c) {
      float* base = scratch.data() + c * per_part;
      parts[c] = Partial{base, base + s.q_heads, base + 2 * s.q_heads};
      owner[c] = b;
    }
  }
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t step = s.q_heads * s.head_dim;
  const float scale = static_cast<float>(sm_scale);
  const float cap = static_cast<float>(softcap);
  const int64_t pool_bytes = 2 * static_cast<int64_t>(k_pool.element_size());  // K and V, one value each
  const int helpers = keys * s.kv_heads * s.head_dim * pool_bytes >= kParallelMinBytes
                          ? static_cast<int>(threads) - 1 : 0;
  // A work item is a run of consecutive chunks (so a thread knows the chunk it takes next, and asks
  // for that chunk's first keys while it finishes the current one) of about an eighth of a thread's
  // share of the keys, so that the threads still come out even.
  const auto chunk_keys = [&](int64_t c) {  // the chunk's slots and their count
    const int64_t b = owner[c], t0 = first_key[b] + (c - first_chunk[b]) * kChunk;
    return std::pair<const int64_t*, int64_t>(r2t + rows[b] * ctx + t0, std::min(kChunk, lens[b] - t0));
  };
  const int64_t item_keys = keys / (8 * (helpers + 1));
  std::vector<int64_t> item_start{0};
  for (int64_t c = 0, run = 0; c < chunks; ++c) {
    run += chunk_keys(c).second;
    if (run >= item_keys || c + 1 == chunks) {
      item_start.push_back(c + 1);
      run = 0;
    }
  }
  const auto attend_chunks = [&](const auto* kp, const auto* vp) {  // kp, vp: the pool's element type
    const int64_t items = static_cast<int64_t>(item_start.size()) - 1;
    radixlm::WorkPool::instance().run(items, helpers, [&](int64_t item) {
      for (int64_t c = item_start[item]; c < item_start[item + 1]; ++c) {
        const auto [slots, len] = chunk_keys(c);
        const bool more = c + 1 < item_start[item + 1];
        const auto [next_slots, next_len] = more ? chunk_keys(c + 1) : std::pair<const int64_t*, int64_t>{};
        attend_chunk(qp + owner[c] * step, kp, vp, slots, len, next_slots, next_len, s, scale, cap, parts[c]);
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
  for (int64_t b = 0; b < bs; ++b) {
    std::vector<Partial> mine(parts.begin() + first_chunk[b], parts.begin() + first_chunk[b + 1]);
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

}  // namespace

// q: float32 [bs, Hq, D]; k_pool, v_pool: [slots, Hkv, D], both float32, float16 or bfloat16;
// req_to_token: int64 [rows, ctx];
// req_pool_indices, seq_lens: int64 [bs] (seq_lens >= 1); window: keys per query (0: all);
// softcap: the score cap (0: none). Returns float32 [bs, Hq, D].
// Callers check the arguments first (radixlm/kernels/cpu/decode_ops.py); the checks here are a backstop.
torch::Tensor paged_decode_attention(torch::Tensor q, torch::Tensor k_pool, torch::Tensor v_pool,
                                     torch::Tensor req_to_token, torch::Tensor req_pool_indices,
                                     torch::Tensor seq_lens, double sm_scale, int64_t window, double softcap,
                                     int64_t threads) {
  auto out = torch::empty_like(q);
  attend(q, k_pool, v_pool, req_to_token, req_pool_indices, seq_lens, sm_scale, threads, 0, window, softcap,
         Prefix{}, out);
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
         prefix, out);
  return out;
}
