"""Options shared by the in-process Engine, the scheduler and the HTTP server."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import typing
from dataclasses import dataclass
from typing import Any, Literal

from radixlm.runtime.speculative.spec_args import check_speculative_args

logger = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]
# auto: fp32 on CPU (bf16 matmuls are slow there), bf16 on CUDA
Dtype = Literal["auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"]
AttentionBackendName = Literal["auto", "torch", "triton"]
SchedulePolicy = Literal["lpm", "fcfs"]
# auto: a GGUF file in its own block format on CPU (when our kernel reads it), else none
Quantization = Literal["auto", "none", "int8", "q4_0", "q4_1", "q5_0", "q8_0", "q4_k", "q6_k"]
# auto: our native model code when the architecture has it, else transformers' modeling code on our runtime
ModelImpl = Literal["auto", "native", "transformers"]
GrammarBackendName = Literal["llguidance", "outlines"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]
# auto: from the chat template (see runtime/server/function_call/registry.py)
ToolCallParserName = Literal["auto", "hermes", "qwen", "qwen25", "llama3", "mistral", "pythonic"]
ReasoningParserName = Literal["none", "deepseek-r1", "qwen3"]


# SGLang's option names that mean one of ours (keyword arguments and CLI flags).
SGLANG_ALIASES = {"model_path": "model", "tokenizer_path": "tokenizer"}
HicacheWritePolicy = Literal["write_back", "write_through"]
# int8: the host tier holds 8-bit rows with a scale per token and head (the disk tier then float16)
HicacheDtype = Literal["auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "int8"]
LoadBalanceMethod = Literal["cache_aware", "round_robin", "random", "shortest_queue"]


@dataclass(frozen=True)
class ServerArgs:
    """Every knob of the runtime. The CLI flags are these names with dashes.

    Frozen: derive a changed copy with ``replace``. Enumerated options are checked at construction.
    """

    model: str = "smollm2-135m"
    tokenizer: str | None = None
    # llama.cpp's vision projector (mmproj-*.gguf, an Idefics3 / SmolVLM or Gemma 3 one) served with the
    # language model GGUF given as ``model``: the pair is one vision-language model
    # (runtime/weights/vision_pair.py)
    mmproj: str | None = None
    device: Device = "auto"
    dtype: Dtype = "auto"
    # The KV cache's element type; auto: the model's dtype. float16/bfloat16 halve the bytes a decode
    # step reads from the cache (on the CPU the decode kernel widens them to fp32 as it reads) and
    # double the tokens it holds, at the cost of rounding K and V. CUDA: the model's dtype only.
    kv_cache_dtype: Dtype = "auto"
    attention_backend: AttentionBackendName = "auto"
    quantization: Quantization = "auto"  # weights served as: see radixlm/runtime/quantization
    model_impl: ModelImpl = "auto"  # see radixlm/runtime/models/model_impl.py
    # fp32 weights on the CPU also get a copy packed for oneDNN (runtime/layers/packed_weights.py):
    # products of 9+ rows run 1.2-2x faster for twice the weight memory. This keeps one copy only.
    disable_weight_packing: bool = False
    # An encoder's (--is-embedding) fp32 weights on the CPU rounded to fp16 values, with an fp16 copy
    # its products of few rows read (half the bytes; runtime/layers/half_weights.py)
    encoder_fp16_weights: bool = False
    # Memory
    kv_cache_gb: float = 1.0  # KV pool budget on CPU
    mem_fraction_static: float = 0.85  # fraction of free GPU memory for weights + KV
    max_total_tokens: int | None = None  # overrides the budget: exact number of KV slots
    max_running_requests: int = 128
    context_length: int | None = None  # defaults to the model's max positions
    # Scheduling
    max_prefill_tokens: int = 4096
    chunked_prefill_size: int = 2048  # <= 0 disables chunking
    schedule_policy: SchedulePolicy = "lpm"
    # Priority scheduling (SGLang's): a larger ``priority`` is admitted first and retracted last
    # (smaller first with schedule_low_priority_values_first). Off: the field is accepted and ignored.
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    # Aging: a waiting request's effective priority rises by this much per second it waits while a
    # higher priority runs, so a low priority waits at most (gap / rate) seconds behind a stream of
    # higher ones. 0: no aging.
    priority_aging_rate: float = 1.0
    # With every row taken, a waiting request at least this much more urgent than the least urgent
    # running one takes its row (that one is retracted: its computed tokens stay cached).
    priority_preemption_threshold: int = 10
    # A prompt chunk of at most mixed_chunk_size tokens and the running decodes in one forward, so
    # a long prompt never stalls running streams for its whole prefill (SGLang's mixed chunk). On
    # by default since issue 27: one client's long prompt may not stall everyone else's streams
    # (measured, benchmarks/log/hostile-http.md); --no-enable-mixed-chunk for batch throughput.
    enable_mixed_chunk: bool = True
    mixed_chunk_size: int = 128
    disable_radix_cache: bool = False
    # Serve the model as an embedding / scoring model: /encode, /v1/embeddings, /v1/rerank, /classify
    # (generation routes answer 400). Encoder checkpoints (BERT, XLM-R) need it.
    is_embedding: bool = False
    # SGLang's --json-model-override-args: a JSON object whose fields replace config.json's, e.g. vLLM's
    # hf_overrides that serve Qwen3-Reranker as a yes/no reranker (runtime/pooling/rerank_prompt.py).
    json_model_override_args: str | None = None
    # KV tiers under the radix cache (runtime/kv_tiers): evicted prefixes sink to a host arena
    # (hicache_size GB, or hicache_ratio x the pool) and load back on a hit; a storage dir adds a
    # disk tier (hicache_storage_size GB) that survives restarts.
    enable_hierarchical_cache: bool = False
    hicache_ratio: float = 2.0
    hicache_size: float = 0.0
    hicache_write_policy: HicacheWritePolicy = "write_back"
    hicache_dtype: HicacheDtype = "auto"
    hicache_storage_dir: str | None = None
    hicache_storage_size: float = 4.0
    new_token_ratio: float = 0.4  # fraction of max_new_tokens reserved for running requests
    pin_timeout_s: float = 30.0  # a program's pinned context is released after this long regardless
    # Sessions (/open_session): at most this many open; one idle this many seconds is closed.
    max_sessions: int = 64
    session_timeout: float = 600.0
    # /v1/responses with store: the most responses kept (the oldest evicted first, its KV pin released).
    max_stored_responses: int = 1024
    # Constrained decoding
    enable_jump_forward: bool = False
    # Jump only while at most this many requests run: a mixed extend step costs per token like a
    # decode step at large batches on a CPU, so jumping pays only at small ones. None: 8 on CPU,
    # unlimited on CUDA (where a step's cost hardly depends on its token count).
    jump_forward_max_batch: int | None = None
    # Speculative decoding (runtime/speculative/): "NGRAM" guesses a request's next tokens from its
    # own prompt and output, "STANDALONE" has a small draft model (same vocabulary) propose them;
    # the model verifies them in one step and output is unchanged (exact). AUTO (the default): NGRAM
    # on the CPU, STANDALONE when a draft model is named; NONE (or None): no speculation.
    speculative_algorithm: str | None = "AUTO"
    speculative_draft_model_path: str | None = None  # STANDALONE's draft model (a name or path)
    speculative_num_steps: int | None = None  # longest draft (a chain); None: num_draft_tokens - 1, or 8
    speculative_num_draft_tokens: int | None = None  # positions verified per step: num_steps + 1
    # Speculate only while at most this many requests run (None: 4 on CPU, where larger decode
    # batches are compute-bound; unlimited on CUDA).
    speculative_max_batch: int | None = None
    # Verify a step's drafts only when the tokens they are expected to yield beat a plain step at the
    # costs measured for its batch size (runtime/speculative/speed_check.py); off: wherever drafts
    # exist (tests that need every draft).
    speculative_speed_check: bool = True
    grammar_backend: GrammarBackendName = "llguidance"  # ebnf / structural_tag always use llguidance
    grammar_cache_size: int = 64
    grammar_cache_bytes: int = 512 << 20  # compiled grammars kept, by their (estimated) memory
    grammar_compile_timeout: float = 60.0  # a compile still running then is stopped; its request fails
    grammar_max_concurrent_compiles: int = 2  # compiles running young (slow ones stop counting)
    json_whitespace_pattern: str | None = None  # None: bounded default; "free": unbounded
    # GPU
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int = 160
    # Server
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    served_model_name: str | None = None
    chat_template: str | None = None
    enable_metrics: bool = False  # Prometheus metrics at GET /metrics
    # Requests may send serialized Python (runtime/sampling/custom_logit_processor.py): trusts clients
    # with arbitrary code execution in the server, so off unless asked for.
    enable_custom_logit_processor: bool = False
    disable_web_ui: bool = False  # no playground at GET / (radixlm/web)
    stream_interval: int = 1  # a stream sends the first token, then a chunk every this many tokens
    tool_call_parser: ToolCallParserName = "auto"
    reasoning_parser: ReasoningParserName = "none"
    # Front door (runtime/server/front_door.py): limits and security checks in the HTTP process
    api_key_file: str | None = None  # the API key read from a file (or env RADIXLM_API_KEY)
    allowed_hosts: str | None = None  # comma-separated Host names accepted beside localhost names
    allowed_origins: str | None = None  # comma-separated CORS origins ("*": any); None: none
    max_request_bytes: int = 16 << 20  # larger bodies get 413
    max_json_depth: int = 64  # nesting of a request body and of a JSON schema
    # Sockets (runtime/server/socket_limits.py): slow or idle clients cannot hold connections open
    max_connections: int = 512  # open HTTP connections; more are closed at once (keep below ulimit -n)
    header_timeout: float = 10.0  # seconds for a request's headers to arrive; then the socket closes
    body_timeout: float = 30.0  # seconds for a request's whole body to arrive; then 408
    timeout_keep_alive: float = 5.0  # an idle keep-alive connection closes after this long
    max_queued_requests: int = 512  # in flight beyond max_running_requests: then 503 + Retry-After
    queue_timeout: float | None = None  # seconds a request may wait for its first token
    max_n: int = 64
    max_prompt_tokens: int | None = None  # None: the context length
    max_stop_strings: int = 32
    max_grammar_bytes: int = 64 << 10  # regex, JSON schema, choices, ebnf, structural_tag (together)
    max_top_logprobs: int = 20  # top_logprobs_num per position (vLLM's --max-logprobs, OpenAI's 20)
    max_logprob_entries: int = 1 << 20  # top logprobs per request: positions x top_logprobs_num
    max_program_nodes: int = 1024
    # Images (vision-language models, runtime/multimodal/)
    max_images_per_request: int = 16
    max_image_bytes: int = 20 << 20  # one image's encoded bytes (data URL, file or download)
    allowed_local_media_path: str | None = None  # image_url file paths are read only under this directory
    allow_image_downloads: bool = False  # http(s) image_url fetches (off: no network access)
    mm_encoder_cache_mb: int = 256  # image encoder outputs kept by content hash
    health_stall_timeout: float = 30.0  # /health is 503 when the scheduler loop stalls this long
    max_forward_failures: int = 3  # forward passes failing in a row before the runtime stops
    shutdown_grace_s: float = 10.0  # on SIGTERM, in-flight requests get this long to finish
    # Parallelism (SGLang's flags): tensor-parallel ranks over nnodes machines, data-parallel replicas
    tp_size: int = 1
    dp_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None  # host:port of rank 0's rendezvous; default a free local port
    load_balance_method: LoadBalanceMethod = "cache_aware"  # how dp_size replicas share requests
    balance_abs_threshold: int = 32  # cache_aware: imbalance when max - min load passes this ...
    balance_rel_threshold: float = 1.5  # ... and max load > this x min load
    # LoRA adapters (runtime/lora/), SGLang's flags
    enable_lora: bool = False
    lora_paths: tuple[str, ...] = ()  # name=path (or a path, named after its directory) loaded at start
    max_loras_per_batch: int = 8  # distinct adapters in one batch (device slots)
    max_lora_rank: int = 64
    max_loaded_loras: int | None = None  # adapters held in host memory at once; None: no bound
    lora_target_modules: tuple[str, ...] = ()  # empty: all of q/k/v/o/gate/up/down ("all" too)
    # Misc
    seed: int = 0
    num_threads: int | None = None  # torch threads in the scheduler process
    enable_deterministic_inference: bool = False  # batch-invariant (runtime/executor/deterministic.py)
    debug_invariants: bool = False  # check KV ownership whenever the scheduler goes idle
    profile_dir: str | None = None  # /start_profile's output_dir (else $SGLANG_TORCH_PROFILER_DIR)
    log_requests: bool = False  # a line per request received and finished (runtime/server/request_log.py)
    log_requests_level: int = 2  # SGLang's: 0 metadata, 1 + sampling params, 2 + text cut, 3 in full
    log_level: LogLevel = "warning"

    def __post_init__(self) -> None:
        for name, allowed in enumerated_options().items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r} (expected one of: {', '.join(allowed)})")
        self.model_overrides()  # a ValueError now for JSON that is not an object
        if self.mixed_chunk_size < 1:
            raise ValueError(f"mixed_chunk_size must be >= 1, got {self.mixed_chunk_size}")
        if self.hicache_ratio <= 0 or self.hicache_size < 0 or self.hicache_storage_size <= 0:
            raise ValueError(
                "hicache_ratio and hicache_storage_size must be > 0 and hicache_size >= 0, got "
                f"{self.hicache_ratio}, {self.hicache_storage_size}, {self.hicache_size}"
            )
        if self.stream_interval < 1:
            raise ValueError(f"stream_interval must be >= 1, got {self.stream_interval}")
        if self.log_requests_level not in (0, 1, 2, 3):
            raise ValueError(f"log_requests_level must be 0, 1, 2 or 3, got {self.log_requests_level}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")
        if self.max_stored_responses < 0:
            raise ValueError(f"max_stored_responses must be >= 0, got {self.max_stored_responses}")
        for name in ("header_timeout", "body_timeout", "timeout_keep_alive"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        for name in ("max_images_per_request", "max_image_bytes", "mm_encoder_cache_mb"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        check_parallel_args(self)
        # None spelled out, so that launch lines carry it; any case (``--speculative-algorithm none``)
        algorithm = "NONE" if self.speculative_algorithm is None else str(self.speculative_algorithm).upper()
        object.__setattr__(self, "speculative_algorithm", algorithm)
        check_speculative_args(
            algorithm,
            self.speculative_num_steps,
            self.speculative_num_draft_tokens,
            self.speculative_draft_model_path,
        )
        if self.speculative_max_batch is not None and self.speculative_max_batch < 1:
            raise ValueError(f"speculative_max_batch must be >= 1, got {self.speculative_max_batch}")
        check_lora_args(self)

    def model_overrides(self) -> dict[str, Any]:
        """``json_model_override_args`` parsed (empty when unset); ValueError unless a JSON object."""
        if not self.json_model_override_args:
            return {}
        try:
            value = json.loads(self.json_model_override_args)
        except json.JSONDecodeError as e:
            raise ValueError(f"json_model_override_args is not valid JSON: {e}") from None
        if not isinstance(value, dict):
            raise ValueError("json_model_override_args must be a JSON object of config.json fields")
        return value

    def replace(self, **changes: Any) -> ServerArgs:
        """A copy with ``changes`` applied (checked like a new instance)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ServerArgs:
        """Like the constructor, with a ValueError naming unknown options.

        SGLang's spellings are accepted: ``model_path`` for ``model``, ``tokenizer_path`` for
        ``tokenizer``; a ``None`` model means the default one. SGLang's other options (its
        ``ServerArgs`` names) are translated, ignored with a logged warning, or refused with a
        ``ValueError``, as on the launch line (``translate_sglang_kwargs``).
        """
        for alias, name in SGLANG_ALIASES.items():
            if alias in kwargs:
                value = kwargs.pop(alias)
                if kwargs.get(name) is not None and value is not None and kwargs[name] != value:
                    raise ValueError(f"{alias}={value!r} and {name}={kwargs[name]!r} disagree: give one")
                kwargs[name] = value if value is not None else kwargs.get(name)
        if kwargs.get("model", "") is None:
            kwargs.pop("model")
        names = {f.name for f in dataclasses.fields(cls)}
        from radixlm.runtime.server.sglang_flag_parsing import translate_sglang_kwargs

        for warning in translate_sglang_kwargs(kwargs, names):
            logger.warning(warning)
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ValueError(f"unknown runtime option(s): {', '.join(unknown)}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Every option (the API key masked), for ``get_server_info``."""
        d = dataclasses.asdict(self)
        if d.get("api_key"):
            d["api_key"] = "***"
        return d


def check_parallel_args(args: ServerArgs) -> None:
    """Raise ``ValueError`` naming the parallelism option that cannot work."""
    for name in ("tp_size", "dp_size", "nnodes"):
        if getattr(args, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(args, name)}")
    if args.tp_size % args.nnodes:
        raise ValueError(f"tp_size {args.tp_size} must be a multiple of nnodes {args.nnodes}")
    if not 0 <= args.node_rank < args.nnodes:
        raise ValueError(f"node_rank {args.node_rank} must be in [0, nnodes {args.nnodes})")
    if args.nnodes > 1 and not args.dist_init_addr:
        raise ValueError("nnodes > 1 needs dist_init_addr (host:port of node 0)")
    if args.dist_init_addr is not None:
        host, _, port = args.dist_init_addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"dist_init_addr {args.dist_init_addr!r} is not host:port")
    if args.nnodes > 1 and args.dp_size > 1:
        raise ValueError("dp_size > 1 runs on one node; front several servers with `radixlm router`")


def check_lora_args(args: ServerArgs) -> None:
    """Normalise the LoRA lists to tuples and raise ``ValueError`` naming a LoRA option that cannot work."""
    for name in ("lora_paths", "lora_target_modules"):
        value = getattr(args, name)
        object.__setattr__(args, name, (value,) if isinstance(value, str) else tuple(value or ()))
    if not args.enable_lora and args.lora_paths:
        object.__setattr__(args, "enable_lora", True)  # SGLang: --lora-paths alone enables LoRA
    if not args.enable_lora:
        return
    for name in ("max_loras_per_batch", "max_lora_rank"):
        if getattr(args, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(args, name)}")
    cap = args.max_loaded_loras
    if cap is not None:
        if cap < args.max_loras_per_batch:  # SGLang's rule: a batch's adapters must all fit in host memory
            raise ValueError(
                f"max_loaded_loras ({cap}) must be >= max_loras_per_batch ({args.max_loras_per_batch})"
            )
        if len(args.lora_paths) > cap:
            raise ValueError(f"{len(args.lora_paths)} --lora-paths exceed max_loaded_loras ({cap})")


@functools.lru_cache(maxsize=1)
def enumerated_options() -> dict[str, tuple[str, ...]]:
    """Each ``Literal``-typed option and its allowed values (the CLI offers them as choices)."""
    hints = typing.get_type_hints(ServerArgs)
    return {name: typing.get_args(hint) for name, hint in hints.items() if typing.get_origin(hint) is Literal}
