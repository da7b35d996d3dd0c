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
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

void attend_chunk(const float* q, const float* k_pool, const float* v_pool, const int64_t* slots,
                  int64_t len, const Shapes& s, float scale, const Partial& part) {
  thread_local std::vector<float> scores;  // [q_heads, len]
  scores.resize(static_cast<size_t>(s.q_heads * len));
  const int64_t row = s.kv_heads * s.head_dim;  // floats from one slot to the next
  for (int64_t t = 0; t < len; ++t) {
    const float* k = k_pool + slots[t] * row;
    for (int64_t h = 0; h < s.q_heads; ++h) {
      scores[h * len + t] = radixlm::dot(q + h * s.head_dim, k + (h / s.group) * s.head_dim, s.head_dim) * scale;
    }
  }
  for (int64_t h = 0; h < s.q_heads; ++h) {
    float* sc = scores.data() + h * len;
    const float m = radixlm::max_of(sc, len);
    part.m[h] = m;
    part.l[h] = radixlm::exp_shift_sum(sc, len, m);  // sc[t] = exp(sc[t] - m)
  }
  std::fill(part.acc, part.acc + s.q_heads * s.head_dim, 0.0f);
  for (int64_t t = 0; t < len; ++t) {
    const float* v = v_pool + slots[t] * row;
    for (int64_t h = 0; h < s.q_heads; ++h) {
      radixlm::axpy(scores[h * len + t], v + (h / s.group) * s.head_dim, part.acc + h * s.head_dim, s.head_dim);
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

}  // namespace

// q: float32 [bs, Hq, D]; k_pool, v_pool: float32 [slots, Hkv, D]; req_to_token: int64 [rows, ctx];
// req_pool_indices, seq_lens: int64 [bs] (seq_lens >= 1). Returns float32 [bs, Hq, D].
// Callers check the arguments first (radixlm/kernels/cpu/decode_ops.py); the checks here are a backstop.
torch::Tensor paged_decode_attention(torch::Tensor q, torch::Tensor k_pool, torch::Tensor v_pool,
                                     torch::Tensor req_to_token, torch::Tensor req_pool_indices,
                                     torch::Tensor seq_lens, double sm_scale, int64_t threads) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat32 && q.is_contiguous(), "q: contiguous [bs, Hq, D] fp32");
  TORCH_CHECK(k_pool.scalar_type() == torch::kFloat32 && k_pool.is_contiguous(), "k_pool: contiguous fp32");
  TORCH_CHECK(v_pool.scalar_type() == torch::kFloat32 && v_pool.is_contiguous(), "v_pool: contiguous fp32");
  TORCH_CHECK(req_to_token.scalar_type() == torch::kInt64 && req_to_token.is_contiguous(), "req_to_token: int64");
  const Shapes s{q.size(1), k_pool.size(1), q.size(2), q.size(1) / k_pool.size(1)};
  const int64_t bs = q.size(0), ctx = req_to_token.size(1);
  auto out = torch::empty_like(q);
  const int64_t* rows = req_pool_indices.data_ptr<int64_t>();
  const int64_t* lens = seq_lens.data_ptr<int64_t>();
  const int64_t* r2t = req_to_token.data_ptr<int64_t>();
  const int64_t pool_rows = req_to_token.size(0), pool_slots = k_pool.size(0);
  std::vector<int64_t> first_chunk(bs + 1, 0);  // request b owns chunks [first_chunk[b], first_chunk[b+1])
  int64_t keys = 0;
  for (int64_t b = 0; b < bs; ++b) {
    TORCH_CHECK(rows[b] >= 0 && rows[b] < pool_rows, "req_pool_indices out of range");
    TORCH_CHECK(lens[b] >= 1 && lens[b] <= ctx, "seq_lens out of range");
    for (int64_t t = 0; t < lens[b]; ++t) {
      const int64_t slot = r2t[rows[b] * ctx + t];
      TORCH_CHECK(slot >= 0 && slot < pool_slots, "a KV slot is outside the pool");
    }
    keys += lens[b];
    first_chunk[b + 1] = first_chunk[b] + (lens[b] + kChunk - 1) / kChunk;
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
  const float* kp = k_pool.data_ptr<float>();
  const float* vp = v_pool.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t step = s.q_heads * s.head_dim;
  const float scale = static_cast<float>(sm_scale);
  const int helpers = keys * s.kv_heads * s.head_dim * 8 >= kParallelMinBytes ? static_cast<int>(threads) - 1 : 0;
  radixlm::WorkPool::instance().run(chunks, helpers, [&](int64_t c) {
    const int64_t b = owner[c], t0 = (c - first_chunk[b]) * kChunk;
    attend_chunk(qp + b * step, kp, vp, r2t + rows[b] * ctx + t0, std::min(kChunk, lens[b] - t0), s, scale,
                 parts[c]);
  });
  for (int64_t b = 0; b < bs; ++b) {
    const std::vector<Partial> mine(parts.begin() + first_chunk[b], parts.begin() + first_chunk[b + 1]);
    merge(mine, s, op + b * step);
  }
  return out;
}
