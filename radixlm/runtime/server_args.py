"""Options shared by the in-process Engine, the scheduler and the HTTP server."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class ServerArgs:
    """Every knob of the runtime. The CLI flags are these names with dashes."""

    model: str = "smollm2-135m"
    tokenizer: Optional[str] = None
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "auto"  # auto (fp32 on CPU, bf16 on CUDA) | float32 | bfloat16 | float16
    attention_backend: str = "auto"  # auto | torch | triton
    # Memory
    kv_cache_gb: float = 1.0  # KV pool budget on CPU
    mem_fraction_static: float = 0.85  # fraction of free GPU memory for weights + KV
    max_total_tokens: Optional[int] = None  # overrides the budget: exact number of KV slots
    max_running_requests: int = 128
    context_length: Optional[int] = None  # defaults to the model's max positions
    # Scheduling
    max_prefill_tokens: int = 4096
    chunked_prefill_size: int = 2048  # <= 0 disables chunking
    schedule_policy: str = "lpm"  # lpm | fcfs
    disable_radix_cache: bool = False
    new_token_ratio: float = 0.4  # fraction of max_new_tokens reserved for running requests
    pin_timeout_s: float = 30.0  # a program's pinned context is released after this long regardless
    # Constrained decoding
    enable_jump_forward: bool = False
    # Jump only while at most this many requests run: a mixed extend step costs per token like a
    # decode step at large batches on a CPU, so jumping pays only at small ones. None: 8 on CPU,
    # unlimited on CUDA (where a step's cost hardly depends on its token count).
    jump_forward_max_batch: Optional[int] = None
    grammar_cache_size: int = 64
    grammar_compile_timeout: float = 60.0
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
    log_level: str = "warning"

    def replace(self, **changes) -> "ServerArgs":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_kwargs(cls, **kwargs) -> "ServerArgs":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ValueError(f"unknown runtime option(s): {', '.join(unknown)}")
        return cls(**kwargs)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if d.get("api_key"):
            d["api_key"] = "***"
        return d
