// The decode-step kernels compiled into one extension module (decode_kernels.cpp binds them).
#pragma once
#include <torch/extension.h>

#include <tuple>

torch::Tensor paged_decode_attention(torch::Tensor q, torch::Tensor k_pool, torch::Tensor v_pool,
                                     torch::Tensor req_to_token, torch::Tensor req_pool_indices,
                                     torch::Tensor seq_lens, double sm_scale, int64_t window, double softcap,
                                     torch::Tensor row_groups, int64_t threads);
torch::Tensor paged_decode_attention_after_prefix(torch::Tensor q, torch::Tensor k_pool, torch::Tensor v_pool,
                                                  torch::Tensor req_to_token, torch::Tensor req_pool_indices,
                                                  torch::Tensor seq_lens, double sm_scale, int64_t key_start,
                                                  torch::Tensor prefix_out, torch::Tensor prefix_lse,
                                                  int64_t threads);

torch::Tensor rmsnorm(torch::Tensor x, torch::Tensor weight, double eps, int64_t threads);

std::tuple<torch::Tensor, torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual,
                                                     torch::Tensor weight, double eps, int64_t threads);

std::tuple<torch::Tensor, torch::Tensor> rotary(torch::Tensor q, torch::Tensor k, torch::Tensor positions,
                                                torch::Tensor cos_sin_cache, int64_t threads);

torch::Tensor small_batch_linear(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias,
                                 int64_t threads);

torch::Tensor panel_linear(torch::Tensor x, torch::Tensor panels, int64_t n, c10::optional<torch::Tensor> bias,
                           int64_t threads);

torch::Tensor silu_and_mul(torch::Tensor gate_up, int64_t threads);
