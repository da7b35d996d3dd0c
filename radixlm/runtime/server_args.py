"""Options shared by the in-process Engine, the scheduler and the HTTP server."""
from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from typing import Any, Literal, Optional

Device = Literal["auto", "cpu", "cuda"]
# auto: fp32 on CPU (bf16 matmuls are slow there), bf16 on CUDA
Dtype = Literal["auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"]
AttentionBackendName = Literal["auto", "torch", "triton"]
SchedulePolicy = Literal["lpm", "fcfs"]
GrammarBackendName = Literal["llguidance", "outlines"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]


@dataclass(frozen=True)
class ServerArgs:
    """Every knob of the runtime. The CLI flags are these names with dashes.

    Frozen: derive a changed copy with ``replace``. Enumerated options are checked at construction.
    """

    model: str = "smollm2-135m"
    tokenizer: Optional[str] = None
    device: Device = "auto"
    dtype: Dtype = "auto"
    attention_backend: AttentionBackendName = "auto"
    # Memory
    kv_cache_gb: float = 1.0  # KV pool budget on CPU
    mem_fraction_static: float = 0.85  # fraction of free GPU memory for weights + KV
    max_total_tokens: Optional[int] = None  # overrides the budget: exact number of KV slots
    max_running_requests: int = 128
    context_length: Optional[int] = None  # defaults to the model's max positions
    # Scheduling
    max_prefill_tokens: int = 4096
    chunked_prefill_size: int = 2048  # <= 0 disables chunking
    schedule_policy: SchedulePolicy = "lpm"
    disable_radix_cache: bool = False
    new_token_ratio: float = 0.4  # fraction of max_new_tokens reserved for running requests
    pin_timeout_s: float = 30.0  # a program's pinned context is released after this long regardless
    # Constrained decoding
    enable_jump_forward: bool = False
    # Jump only while at most this many requests run: a mixed extend step costs per token like a
    # decode step at large batches on a CPU, so jumping pays only at small ones. None: 8 on CPU,
    # unlimited on CUDA (where a step's cost hardly depends on its token count).
    jump_forward_max_batch: Optional[int] = None
    grammar_backend: GrammarBackendName = "llguidance"  # ebnf / structural_tag always use llguidance
    grammar_cache_size: int = 64
    grammar_compile_timeout: float = 60.0  # a compile still running then is stopped; its request fails
    grammar_max_concurrent_compiles: int = 2  # compiles running young (slow ones stop counting)
    json_whitespace_pattern: Optional[str] = None  # None: bounded default; "free": unbounded
    # GPU
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int = 160
    # Server
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: Optional[str] = None
    served_model_name: Optional[str] = None
    chat_template: Optional[str] = None
    # Misc
    seed: int = 0
    num_threads: Optional[int] = None  # torch threads in the scheduler process
    debug_invariants: bool = False  # check KV ownership whenever the scheduler goes idle
    log_level: LogLevel = "warning"

    def __post_init__(self) -> None:
        for name, allowed in enumerated_options().items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r} (expected one of: {', '.join(allowed)})")

    def replace(self, **changes: Any) -> ServerArgs:
        """A copy with ``changes`` applied (checked like a new instance)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ServerArgs:
        """Like the constructor, with a ValueError naming unknown options."""
        names = {f.name for f in dataclasses.fields(cls)}
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


@functools.lru_cache(maxsize=1)
def enumerated_options() -> dict[str, tuple[str, ...]]:
    """Each ``Literal``-typed option and its allowed values (the CLI offers them as choices)."""
    hints = typing.get_type_hints(ServerArgs)
    return {name: typing.get_args(hint) for name, hint in hints.items() if typing.get_origin(hint) is Literal}
