"""Every flag of SGLang 0.5.2's ``server_args.py`` and what it does on a radixlm launch line.

Data only (``sglang_flag_parsing.py`` applies it; the flags we do not implement are in
``sglang_flags_unsupported.py``). Flags that change what the model outputs and that
we cannot honour are refused; flags about speed, memory layout, hardware or SGLang's own machinery
are accepted with one warning; the rest reach ``ServerArgs``.
"""

from __future__ import annotations

from collections.abc import Mapping

from radixlm.runtime.server.sglang_flag_types import Nearest, Refuse, SGLangFlag, ValueOutcome
from radixlm.runtime.server.sglang_flags_unsupported import GPU_QUANT_REASON, NOT_IMPLEMENTED


def _impl(
    name: str, field: str, here: str = "", values: Mapping[str, ValueOutcome] | None = None
) -> SGLangFlag:
    return SGLangFlag(name, "implemented", here=here, field=field, values=values or {})


IMPLEMENTED = [
    SGLangFlag("--model-path", "implemented", field="model", aliases=("--model",)),
    _impl("--tokenizer-path", "tokenizer"),
    _impl("--context-length", "context_length"),
    _impl("--model-impl", "model_impl", values={"sglang": "native"}),
    _impl("--host", "host"),
    _impl("--port", "port"),
    _impl("--dtype", "dtype", values={"half": "float16", "float": "float32"}),
    _impl(
        "--quantization",
        "quantization",
        "a GGUF file is served in its own block formats (auto)",
        values={"gguf": "auto"}
        | {
            q: Refuse(GPU_QUANT_REASON)
            for q in "awq fp8 gptq marlin gptq_marlin awq_marlin bitsandbytes modelopt modelopt_fp4 "
            "petit_nvfp4 w8a8_int8 w8a8_fp8 moe_wna16 qoq w4afp8 mxfp4".split()
        },
    ),
    _impl(
        "--kv-cache-dtype",
        "kv_cache_dtype",
        "also float32, bfloat16, float16 here",
        values={
            k: Refuse("no fp8 KV cache here (float16/bfloat16 halve it)") for k in ("fp8_e5m2", "fp8_e4m3")
        },
    ),
    _impl("--mem-fraction-static", "mem_fraction_static", "GPU only; on the CPU see --kv-cache-gb"),
    _impl("--max-running-requests", "max_running_requests"),
    _impl("--enable-lora", "enable_lora", "implied by --lora-paths"),
    _impl("--lora-paths", "lora_paths", "NAME=PATH or PATH (PEFT directories or GGUF LoRA files)"),
    _impl("--max-loras-per-batch", "max_loras_per_batch"),
    _impl("--max-lora-rank", "max_lora_rank"),
    _impl("--max-loaded-loras", "max_loaded_loras", "a load beyond it is a 400 (unload one first)"),
    _impl("--lora-target-modules", "lora_target_modules", "q/k/v/o and gate/up/down projections"),
    _impl("--max-queued-requests", "max_queued_requests"),
    _impl("--max-total-tokens", "max_total_tokens"),
    _impl("--chunked-prefill-size", "chunked_prefill_size", "-1 (any value <= 0) disables chunking"),
    _impl("--max-prefill-tokens", "max_prefill_tokens"),
    _impl(
        "--schedule-policy",
        "schedule_policy",
        values={
            p: Nearest("lpm", "not implemented; longest-prefix-match (lpm) serves")
            for p in ("random", "dfs-weight", "lof")
        },
    ),
    _impl(
        "--device",
        "device",
        values={d: Refuse("radixlm runs on cpu and cuda only") for d in ("xpu", "hpu", "npu")},
    ),
    SGLangFlag("--tensor-parallel-size", "implemented", field="tp_size", aliases=("--tp-size",)),
    SGLangFlag("--data-parallel-size", "implemented", field="dp_size", aliases=("--dp-size",)),
    SGLangFlag("--dist-init-addr", "implemented", field="dist_init_addr", aliases=("--nccl-init-addr",)),
    _impl("--nnodes", "nnodes"),
    _impl("--node-rank", "node_rank"),
    _impl(
        "--load-balance-method",
        "load_balance_method",
        "also cache_aware (default) and random",
        values={
            "minimum_tokens": Nearest(
                "shortest_queue", "not implemented; shortest_queue (fewest requests in flight) serves"
            )
        },
    ),
    _impl("--random-seed", "seed"),
    _impl("--constrained-json-whitespace-pattern", "json_whitespace_pattern", "both grammar backends"),
    _impl("--log-level", "log_level"),
    _impl(
        "--stream-interval", "stream_interval", "the first token at once, then every N tokens, and the end"
    ),
    _impl("--log-requests", "log_requests", "a line per prompt received and per sample finished"),
    _impl("--log-requests-level", "log_requests_level", "SGLang's levels 0-3"),
    _impl("--enable-metrics", "enable_metrics"),
    _impl(
        "--enable-custom-logit-processor", "enable_custom_logit_processor", "runs client code: trusts them"
    ),
    _impl("--api-key", "api_key"),
    _impl("--served-model-name", "served_model_name"),
    _impl("--chat-template", "chat_template"),
    _impl("--reasoning-parser", "reasoning_parser", "ours: deepseek-r1, qwen3 (other names are an error)"),
    _impl(
        "--tool-call-parser",
        "tool_call_parser",
        "ours: hermes, qwen, qwen25, llama3, mistral, pythonic, auto (from the chat template); "
        "other names are an error",
    ),
    _impl(
        "--attention-backend",
        "attention_backend",
        values={"torch_native": "torch"}
        | {
            b: Nearest("auto", "not implemented; auto picks triton on CUDA, our CPU kernels on the CPU")
            for b in "cutlass_mla fa3 flashinfer flashmla trtllm_mla trtllm_mha dual_chunk_flash_attn "
            "hybrid_linear_attn aiter wave intel_amx ascend".split()
        },
    ),
    _impl(
        "--grammar-backend",
        "grammar_backend",
        values={
            "xgrammar": Nearest(
                "llguidance",
                "not installed here; llguidance (the nearest: "
                "the same JSON schema / regex / EBNF constraints, token masks) serves",
            ),
            "none": Nearest(
                "llguidance",
                "SGLang's none fails constrained requests; here they stay constrained (llguidance)",
            ),
        },
    ),
    _impl("--enable-mixed-chunk", "enable_mixed_chunk", "on by default here"),
    _impl(
        "--speculative-algorithm",
        "speculative_algorithm",
        "NGRAM (prompt lookup) or STANDALONE (a draft model); lossless; default AUTO: NGRAM on the CPU, "
        "NONE turns it off",
        values={
            a: Nearest("NGRAM", "no EAGLE heads or MTP layers here; n-gram speculation (lossless) serves")
            for a in ("EAGLE", "EAGLE3", "NEXTN")
        },
    ),
    SGLangFlag(
        "--speculative-draft-model-path",
        "implemented",
        here="STANDALONE's draft model (same tokenizer, its own KV pool, same process)",
        field="speculative_draft_model_path",
        aliases=("--speculative-draft-model",),
    ),
    _impl(
        "--speculative-num-steps",
        "speculative_num_steps",
        "the longest draft (one chain; a draft model's forward steps per proposal)",
    ),
    _impl(
        "--speculative-num-draft-tokens",
        "speculative_num_draft_tokens",
        "positions verified per step, the draft plus one",
    ),
    _impl("--disable-radix-cache", "disable_radix_cache"),
    _impl("--is-embedding", "is_embedding", "also rerank (/v1/rerank) and classify (/classify) models"),
    _impl(
        "--json-model-override-args",
        "json_model_override_args",
        "top-level config.json fields; vLLM's hf_overrides serve Qwen3-Reranker",
    ),
    _impl("--enable-hierarchical-cache", "enable_hierarchical_cache", "host tier in CPU memory"),
    _impl("--hicache-ratio", "hicache_ratio"),
    _impl("--hicache-size", "hicache_size"),
    _impl(
        "--hicache-write-policy",
        "hicache_write_policy",
        "default write_back here",
        values={"write_through_selective": Nearest("write_through", "every new node is written through")},
    ),
    _impl("--cuda-graph-max-bs", "cuda_graph_max_bs"),
    _impl("--disable-cuda-graph", "disable_cuda_graph"),
]

SGLANG_FLAGS: dict[str, SGLangFlag] = {f.name: f for f in IMPLEMENTED + NOT_IMPLEMENTED}
