"""SGLang 0.5.2's launch flags that radixlm does not implement: warned (accepted, one warning, no
effect on output) or refused (they would change the output and we cannot honour them). Part of the
table ``SGLANG_FLAGS`` (``sglang_flags.py``)."""

from __future__ import annotations

import functools

from radixlm.runtime.server.sglang_flag_types import flag_group

_warn = functools.partial(flag_group, "warned")
_refuse = functools.partial(flag_group, "refused")

GPU_QUANT_REASON = "radixlm reads no such checkpoint format; its quantized formats are GGUF blocks and int8"
_NO_MOE_EP = "radixlm's MoE models (Mixtral, OLMoE, Qwen3-MoE) shard experts with --tp-size; no such option"
_NO_CUDA_KNOB = "radixlm's CUDA path has no such switch; it does not change what is generated"
_ONE_BACKEND = "one attention backend (--attention-backend) serves prefill and decode here"

NOT_IMPLEMENTED = [
    # Model loading
    *_warn(
        "tokenizes in several worker processes",
        "the HTTP process tokenizes (big jobs in a thread pool)",
        "--tokenizer-worker-num=",
    ),
    *_refuse(
        "uses the slow (Python) tokenizer",
        "the fast tokenizer serves; the slow one may split text differently",
        "--tokenizer-mode=",
        accepts=("auto",),
    ),
    *_refuse(
        "serves input_ids in, output_ids out, with no tokenizer (no text in responses)",
        "responses always carry text; a request may send input_ids",
        "--skip-tokenizer-init",
    ),
    *_refuse(
        "selects how weights are read (dummy: random weights, remote, layered, bitsandbytes, ...)",
        "the format is detected from the files (safetensors or GGUF); other formats are not read",
        "--load-format=",
        accepts=("auto", "safetensors", "gguf"),
    ),
    *_warn(
        "passes extra settings to the chosen weight loader",
        "our loaders take no extra settings",
        "--model-loader-extra-config=",
    ),
    *_warn(
        "lets transformers run Python code shipped with the checkpoint",
        "no checkpoint code runs: our model classes or transformers' own serve; a checkpoint that "
        "needs its own code fails to load with an error",
        "--trust-remote-code",
    ),
    *_warn(
        "turns on image/audio/video inputs",
        "text only: such inputs get a 400 naming them",
        "--enable-multimodal",
    ),
    *_refuse(
        "picks a branch, tag or commit of a hub model",
        "give it in the model name: --model-path org/name@revision",
        "--revision=",
    ),
    *_refuse(
        "loads a custom function that updates the weights",
        "no user code is loaded",
        "--custom-weight-loader=*",
    ),
    *_warn(
        "reads safetensors without mmap",
        "our loader's reading strategy is fixed",
        "--weight-loader-disable-mmap",
    ),
    *_warn(
        "deletes the checkpoint files after loading",
        "radixlm never deletes checkpoint files",
        "--delete-ckpt-after-loading",
    ),
    *_warn(
        "sets the hub download directory",
        "hub downloads go to your Hugging Face cache (HF_HOME)",
        "--download-dir=",
    ),
    *_warn("labels the weights' version in responses", "no weight versions are tracked", "--weight-version="),
    # Server start, logging and metrics
    *_warn(
        "skips the warmup request before serving",
        "there is no warmup request to skip",
        "--skip-server-warmup",
    ),
    *_warn("runs named warmup functions before serving", "there are no warmup functions", "--warmups="),
    *_warn(
        "sets the logging level of the HTTP server",
        "one --log-level covers every logger",
        "--log-level-http=",
    ),
    *_warn(
        "dumps the last requests to a folder after a crash",
        "a crash logs the scheduler's traceback",
        "--crash-dump-folder=",
    ),
    *_warn(
        "logs timing marks, decode stats, per-request time stats or long GC pauses",
        "radixlm has its own logs (--log-level) and /metrics",
        "--show-time-cost --decode-log-interval= --enable-request-time-stats-logging "
        "--gc-warning-threshold-secs=",
    ),
    *_warn(
        "tunes Prometheus metrics (buckets, histograms, per-scheduler metrics)",
        "--enable-metrics serves /metrics with fixed buckets",
        "--enable-metrics-for-all-schedulers --bucket-time-to-first-token=+ --bucket-inter-token-latency=+ "
        "--bucket-e2e-request-latency=+ --collect-tokens-histogram --prompt-tokens-buckets=+ "
        "--generation-tokens-buckets=+",
    ),
    *_warn("publishes KV cache events (NVIDIA Dynamo)", "no KV event publishing", "--kv-events-config="),
    *_warn("stores uploaded files for the files API", "no files API", "--file-storage-path="),
    *_warn(
        "adds cached_tokens to OpenAI usage",
        "usage has no prompt_tokens_details; the text is the same",
        "--enable-cache-report",
    ),
    *_warn(
        "kills the server when a forward pass hangs this long",
        "--health-stall-timeout marks /health 503 when the scheduler stalls; "
        "--max-forward-failures stops a failing runtime",
        "--watchdog-timeout=",
    ),
    *_warn(
        "lowers CPU use while idle", "the scheduler already waits on its socket while idle", "--sleep-on-idle"
    ),
    # Output-shaping features we do not have
    *_refuse(
        "wraps /v1/completions prompts in a code-completion (fill-in-the-middle) template",
        "no completion templates; the prompt is sent as given",
        "--completion-template=",
    ),
    *_refuse("runs tool servers for the model (gpt-oss built-in tools)", "no tool servers", "--tool-server="),
    *_refuse(
        "sets default sampling parameters for every request",
        "requests get SGLang's documented defaults; give parameters per request",
        "--preferred-sampling-params=",
    ),
    *_refuse(
        "streams disjoint segments (each chunk holds only new text)",
        "a native /generate stream sends the text so far, as SGLang does by default",
        "--stream-output",
    ),
    *_refuse(
        "truncates prompts longer than the context instead of failing",
        "such a prompt gets a 400 naming its length",
        "--allow-auto-truncate",
    ),
    *_refuse(
        "returns hidden states with responses",
        "requests asking for them get a 400",
        "--enable-return-hidden-states",
    ),
    *_warn(
        "picks SGLang's LoRA kernels", "one grouped torch product serves every adapter", "--lora-backend="
    ),
    *_refuse(
        "approximates attention with double sparsity", "attention is exact here", "--enable-double-sparsity"
    ),
    *_warn(
        "tunes double-sparsity attention",
        "attention is exact here (--enable-double-sparsity is refused)",
        "--ds-channel-config-path= --ds-heavy-channel-num= --ds-heavy-token-num= --ds-heavy-channel-type= "
        "--ds-sparse-decode-threshold=",
    ),
    *_refuse("quantizes the weights on load with torchao", GPU_QUANT_REASON, "--torchao-config="),
    *_warn(
        "reads fp8 KV cache scales",
        "no fp8 KV cache (--kv-cache-dtype fp8 is refused)",
        "--quantization-param-path=",
    ),
    *_refuse(
        "injects or dumps tensors between layers for debugging",
        "no tensor dumps here",
        "--debug-tensor-dump-output-folder= --debug-tensor-dump-input-file= --debug-tensor-dump-inject=",
    ),
    *_warn("limits tensor dumps to prefill", "no tensor dumps here", "--debug-tensor-dump-prefill-only"),
    # Scheduling and memory layout (speed and memory only)
    *_warn(
        "scales how much room running requests keep", "see --new-token-ratio", "--schedule-conservativeness="
    ),
    *_warn(
        "sets tokens per KV page",
        "the radix cache and KV pool work per token (page size 1)",
        "--page-size=",
        accepts=("1",),
    ),
    *_warn(
        "splits KV memory between sliding-window and full-attention layers",
        "one KV pool serves every layer",
        "--hybrid-kvcache-ratio=? --swa-full-tokens-ratio= --disable-hybrid-swa-memory",
    ),
    *_warn(
        "overlaps CPU scheduling with GPU compute",
        "the scheduler does not overlap; nothing to disable",
        "--disable-overlap-schedule",
    ),
    *_warn(
        "runs several decode steps per scheduling round or polls for requests less often",
        "one step per round",
        "--num-continuous-decode-steps= --scheduler-recv-interval=",
    ),
    *_warn(
        "reserves KV room for decode tokens of new requests",
        "see --new-token-ratio",
        "--num-reserved-decode-tokens=",
    ),
    *_warn(
        "tunes HiCache's transfers or stores KV in a remote backend (LMCache, Mooncake, 3FS)",
        "one host arena and --hicache-storage-dir (a local directory)",
        "--hicache-io-backend= --hicache-mem-layout= --hicache-storage-backend= "
        "--hicache-storage-prefetch-policy= --hicache-storage-backend-extra-config= --enable-lmcache",
    ),
    *_warn(
        "offloads weights to CPU memory",
        "weights stay on the serving device",
        "--cpu-offload-gb= --offload-group-size= --offload-num-in-group= --offload-prefetch-step= "
        "--offload-mode=",
    ),
    *_warn(
        "sizes state caches of Mamba models",
        "no Mamba models here",
        "--max-mamba-cache-size= --mamba-ssm-dtype=",
    ),
    *_warn(
        "releases and resumes GPU memory on request (RL training loops)",
        "not implemented",
        "--enable-memory-saver",
    ),
    # Kernels, compilation and devices
    *_warn(
        "compiles the model with torch.compile",
        "radixlm runs without torch.compile (CUDA graphs on GPUs, C++ kernels on CPUs); output is the same",
        "--enable-torch-compile --torch-compile-max-bs=",
    ),
    *_warn(
        "tunes CUDA graph capture",
        _NO_CUDA_KNOB,
        "--cuda-graph-bs=+ --disable-cuda-graph-padding --enable-profile-cuda-graph --enable-cudagraph-gc",
    ),
    *_warn(
        "picks separate prefill/decode or multimodal attention kernels",
        _ONE_BACKEND,
        "--prefill-attention-backend= --decode-attention-backend= --mm-attention-backend=",
    ),
    *_warn(
        "picks the sampling kernels (flashinfer or pytorch)", "sampling runs in torch", "--sampling-backend="
    ),
    *_warn(
        "tunes Triton attention (fp32 reduction, KV splits)",
        _NO_CUDA_KNOB,
        "--triton-attention-reduce-in-fp32 --triton-attention-num-kv-splits=",
    ),
    *_warn(
        "tunes DeepSeek MLA kernels and shared-expert fusion",
        "no DeepSeek MLA models here",
        "--flashinfer-mla-disable-ragged --disable-shared-experts-fusion --disable-chunked-prefix-cache",
    ),
    *_warn("tunes image preprocessing", "text only", "--disable-fast-image-processor"),
    *_warn(
        "batches tokenization of several texts",
        "the tokenizer manager has no such switch; the tokens are the same",
        "--enable-tokenizer-batch-encode",
    ),
    *_warn(
        "turns off outlines' disk cache",
        "compiled grammars are cached in memory only",
        "--disable-outlines-disk-cache",
    ),
    *_warn("checks logits for NaN", "not implemented", "--enable-nan-detection"),
    *_warn("picks GPUs by id", "choose GPUs with CUDA_VISIBLE_DEVICES", "--base-gpu-id= --gpu-id-step="),
    *_warn("binds subprocesses to NUMA nodes", "use numactl", "--numa-node=+"),
    *_warn(
        "splits the GPU's SMs between prefill and decode (PD multiplexing)",
        "not implemented",
        "--enable-pdmux --sm-group-num=",
    ),
    # Parallelism and collectives
    *_refuse(
        "splits layers over GPUs (pipeline parallelism)",
        "use --tp-size",
        "--pipeline-parallel-size|--pp-size=",
        accepts=("1",),
    ),
    *_warn("sizes pipeline-parallel micro-batches", "no pipeline parallelism", "--max-micro-batch-size="),
    *_warn(
        "sets the NCCL port or its init timeout",
        "ranks meet at --dist-init-addr (default a free port)",
        "--nccl-port= --dist-timeout=",
    ),
    *_warn(
        "tunes all-reduce (custom kernels, NVLS, symmetric memory, mscclpp, P2P checks, fusion)",
        _NO_CUDA_KNOB,
        "--disable-custom-all-reduce --enable-mscclpp --enable-nccl-nvls --enable-symm-mem "
        "--enable-p2p-check --enable-flashinfer-allreduce-fusion",
    ),
    *_warn(
        "runs attention data-parallel inside tensor parallelism, or overlaps two micro-batches",
        "not implemented",
        "--enable-dp-attention --enable-dp-lm-head --enable-two-batch-overlap "
        "--tbo-token-distribution-threshold=",
    ),
    *_warn(
        "shards MoE experts over GPUs (expert parallelism)",
        _NO_MOE_EP,
        "--expert-parallel-size|--ep-size|--ep=",
        accepts=("1",),
    ),
    *_warn(
        "balances and records MoE experts over GPUs (expert parallelism)",
        _NO_MOE_EP,
        "--moe-a2a-backend= --deepep-mode= --ep-num-redundant-experts= "
        "--ep-dispatch-algorithm= --init-expert-location= --enable-eplb --eplb-algorithm= "
        "--eplb-rebalance-num-iterations= --eplb-rebalance-layers-per-chunk= "
        "--eplb-min-rebalancing-utilization-threshold= --expert-distribution-recorder-mode= "
        "--expert-distribution-recorder-buffer-size= --enable-expert-distribution-metrics "
        "--deepep-config= --moe-dense-tp-size=",
    ),
    *_warn(
        "picks MoE kernels",
        "our MoE kernels are fixed",
        "--moe-runner-backend= "
        "--flashinfer-mxfp4-moe-precision= --disable-flashinfer-cutlass-moe-fp4-allgather --enable-ep-moe "
        "--enable-deepep-moe --enable-flashinfer-cutlass-moe --enable-flashinfer-trtllm-moe "
        "--enable-triton-kernel-moe --enable-flashinfer-mxfp4-moe",
    ),
    *_warn(
        "configures EAGLE speculation (a draft tree, its vocabulary) or a draft model's revision",
        "drafts here are chains (top-k 1) from n-grams or a local draft model",
        "--speculative-draft-model-revision= "
        "--speculative-eagle-topk= "
        "--speculative-token-map= --speculative-attention-mode=",
    ),
    *_refuse(
        "accepts draft tokens below the target probability (lossy speculative decoding)",
        "no speculative decoding",
        "--speculative-accept-threshold-single= --speculative-accept-threshold-acc=",
        accepts=("1.0", "1"),
    ),
    *_refuse(
        "splits prefill and decode over servers (PD disaggregation)",
        "not implemented",
        "--disaggregation-mode=",
        accepts=("null",),
    ),
    *_warn(
        "configures PD disaggregation",
        "no disaggregation (--disaggregation-mode is refused)",
        "--disaggregation-transfer-backend= --disaggregation-bootstrap-port= --disaggregation-decode-tp= "
        "--disaggregation-decode-dp= --disaggregation-prefill-pp= --disaggregation-ib-device= "
        "--prefill-round-robin-balance",
    ),
]
