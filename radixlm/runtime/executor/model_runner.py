"""The model runner: owns the model, the KV memory pools and the attention backend on one device."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from radixlm.runtime.attention.factory import create_attention_backend
from radixlm.runtime.distributed.comm import agree_min, destroy_group
from radixlm.runtime.distributed.tensor_parallel import TensorParallel, local_rank
from radixlm.runtime.executor.cuda_graph_runner import CudaGraphRunner
from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.half_weights import add_half_weights_if_asked
from radixlm.runtime.layers.packed_weights import pack_model_weights
from radixlm.runtime.lora.manager import build_lora_manager
from radixlm.runtime.memory.kv_pool import KVPool
from radixlm.runtime.memory.req_to_token_pool import ReqToTokenPool
from radixlm.runtime.models.config import language_fields
from radixlm.runtime.models.transformers_fallback import check_fallback_options
from radixlm.runtime.multimodal.encoder_cache import EncoderCache
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.weights.loader import load_model

logger = logging.getLogger(__name__)

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
_GIB = 1 << 30


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``auto`` -> fp32 on CPU (bf16 matmuls are ~100x slower there), bf16 on CUDA."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r} (expected auto, {', '.join(_DTYPES)})")
    return _DTYPES[name]


def resolve_kv_dtype(name: str, model_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """``auto`` -> the model's dtype. Another dtype is CPU-only: the CUDA attention kernels read the
    cache in the model's dtype."""
    dtype = model_dtype if name == "auto" else resolve_dtype(name, device)
    if dtype != model_dtype and device.type != "cpu":
        raise ValueError(
            f"kv_cache_dtype {name!r} differs from the model's {model_dtype}: on {device.type} "
            f"the KV cache holds the model's dtype (use kv_cache_dtype='auto')"
        )
    return dtype


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class ModelRunner:
    """Loads the model and sizes the KV cache from ``server_args``; ``forward(fb)`` returns logits.

    Attributes: ``device``, ``dtype``, ``kv_dtype``, ``loaded`` (LoadedModel), ``model``,
    ``context_length``, ``vocab_size``, ``req_to_token_pool``, ``kv_pool``, ``attn_backend``.
    """

    def __init__(self, server_args: ServerArgs, tp_rank: int = 0) -> None:
        """``tp_rank``: this process's tensor-parallel rank (rank 0 starts the others)."""
        self.server_args = server_args
        self.device = resolve_device(server_args.device)
        self.dtype = resolve_dtype(server_args.dtype, self.device)
        if self.device.type == "cpu":
            torch.set_num_threads(self._cpu_threads())
        elif self.device.type == "cuda":
            # one GPU per tensor-parallel rank of this node, counted from the one asked for ("cuda" is GPU 0)
            self.device = torch.device("cuda", (self.device.index or 0) + local_rank(server_args, tp_rank))
            torch.cuda.set_device(self.device)
        torch.manual_seed(server_args.seed)
        self.tp: TensorParallel | None = None
        if server_args.tp_size > 1:
            self.tp = TensorParallel(server_args, tp_rank, self.device)

        self.loaded = load_model(
            server_args.model,
            self.device,
            self.dtype,
            tokenizer=server_args.tokenizer,
            context_length=server_args.context_length,
            quantization=server_args.quantization,
            model_impl=server_args.model_impl,
            config_overrides=server_args.model_overrides(),
            mmproj=server_args.mmproj,
        )
        if not server_args.is_embedding and not getattr(self.loaded.model, "generates", True):
            raise ValueError(
                f"{self.loaded.architecture} embeds or scores text and does not generate: serve it with "
                "--is-embedding (is_embedding=True)"
            )
        if self.loaded.model_impl == "transformers":
            try:
                check_fallback_options(server_args.quantization, server_args.tp_size)
            except ValueError:
                self.close()  # the other tensor-parallel ranks, already started
                raise
        # Quantized whole (while loading), then sharded: each rank keeps the values one process serves.
        self.quantization = self.loaded.quantization
        self.model = self.loaded.model
        self.context_length = self.loaded.context_length
        self.vocab_size = self.loaded.vocab_size
        self.num_kv_heads = self.loaded.num_kv_heads  # this rank's share under tensor parallelism
        if self.tp is not None:
            self.num_kv_heads = self.tp.shard_model(self.model, self.quantization)
        add_half_weights_if_asked(server_args.encoder_fp16_weights, self.model)
        # deterministic inference reroutes every product through F.linear: a packed copy would idle
        if not (server_args.disable_weight_packing or server_args.enable_deterministic_inference):
            pack_model_weights(self.model)
        self.is_multimodal = bool(getattr(self.model, "is_multimodal", False))
        self.encoder_cache = (
            EncoderCache(server_args.mm_encoder_cache_mb << 20) if self.is_multimodal else None
        )
        model_max = int(
            language_fields(self.loaded.hf_config).get("max_position_embeddings") or self.context_length
        )
        if self.context_length > model_max:
            logger.warning(
                "context_length %d exceeds the model's max positions %d", self.context_length, model_max
            )

        try:
            self.lora = build_lora_manager(
                server_args, self.model, self.dtype, self.device, None if self.tp is None else self.tp.shard
            )
        except BaseException:
            self.close()  # the other tensor-parallel ranks, already started
            raise
        if self.lora is not None and self.tp is not None and self.tp.rank == 0:
            self.lora.broadcast = self.tp.lora_op
        self.req_to_token_pool = ReqToTokenPool(
            server_args.max_running_requests, self.context_length, device=self.device
        )
        self.kv_dtype = resolve_kv_dtype(server_args.kv_cache_dtype, self.dtype, self.device)
        num_slots = self._num_kv_slots()
        if self.tp is not None:
            num_slots = agree_min(num_slots, self.device)
        self.kv_pool = KVPool(
            num_slots,
            self.loaded.num_layers,
            self.num_kv_heads,
            self.loaded.head_dim,
            self.kv_dtype,
            device=self.device,
        )
        self.attn_backend = create_attention_backend(server_args.attention_backend, self.device)
        if server_args.enable_deterministic_inference:
            from radixlm.runtime.executor.deterministic import enable_deterministic_inference

            enable_deterministic_inference(self)
        # Decode replays captured CUDA graphs; prefill runs eagerly.
        self.cuda_graph_runner: CudaGraphRunner | None = None
        if (
            self.device.type == "cuda"
            and not server_args.disable_cuda_graph
            and self.tp is None
            and self.lora is None  # the adapter segments change per batch, outside a graph
            and self.attn_backend.supports_cuda_graph
            and getattr(self.model, "supports_cuda_graph", True)  # False: MoE models, the fallback
        ):
            self.cuda_graph_runner = CudaGraphRunner(self, max_bs=server_args.cuda_graph_max_bs)
        logger.info(
            "model %s on %s/%s: %d KV slots, context %d",
            self.loaded.model_path,
            self.device,
            self.dtype,
            num_slots,
            self.context_length,
        )

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """Float32 logits ``[len(fb.logits_indices), vocab_size]``; writes the new tokens' KV."""
        self._begin_adapters(fb)
        if self.cuda_graph_runner is not None and self.cuda_graph_runner.can_run(fb):
            return self.cuda_graph_runner.replay(fb)
        if self.tp is not None:
            return self.tp.forward(self.model, self.attn_backend, fb, self.vocab_size, self.lora)
        self.attn_backend.init_forward_metadata(fb)
        return self.model(fb)

    def _begin_adapters(self, fb: ForwardBatch) -> None:
        if self.lora is not None:
            self.lora.begin(fb.lora_slots, fb.extend_seq_lens_cpu or [1] * fb.batch_size)

    def forward_hidden(self, fb: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The final layer's ``(h, residual)`` for every new token of ``fb``, before the final norm
        and the logits (eager, one rank: embedding and score sequences pool them); writes the KV."""
        self._begin_adapters(fb)
        self.attn_backend.init_forward_metadata(fb)
        return self.model.model(fb)

    def model_info(self) -> dict[str, Any]:
        """The served model: paths, template, limits, device, dtype and the quantization in use.

        ``model_path`` and ``tokenizer_path`` are the names the user gave, as SGLang reports them (its
        client picks a chat template by that name); ``local_model_path`` and ``local_tokenizer_path``
        are where the files are (``local_tokenizer_path`` is None when the model has no tokenizer)."""
        loaded = self.loaded
        given = self.server_args.model
        return {
            "model_path": given,
            "tokenizer_path": self.server_args.tokenizer or given,
            "local_model_path": loaded.model_path,
            "local_tokenizer_path": loaded.tokenizer_path,
            "is_generation": not self.server_args.is_embedding,
            "is_multimodal": self.is_multimodal,  # takes images (runtime/multimodal/)
            "image_token": self._image_token(),
            "mmproj_path": loaded.mmproj_path,  # images preprocessed from its metadata (no processor dir)
            "chat_template": loaded.chat_template,
            "context_length": self.context_length,
            "vocab_size": self.vocab_size,
            "eos_token_ids": list(loaded.eos_token_ids),
            "architecture": loaded.architecture,
            "model_impl": loaded.model_impl,
            "device": str(self.device),
            "dtype": _dtype_name(self.dtype),
            "kv_cache_dtype": _dtype_name(self.kv_dtype),
            "quantization": self.quantization,
            "id2label": loaded.hf_config.get("id2label") if self.server_args.is_embedding else None,
            "rerank_format": getattr(self.model, "rerank_format", None),  # a decoder reranker's prompt
            **({"lora_adapters": self.lora.info()} if self.lora is not None else {}),
        }

    def _image_token(self) -> str | None:
        """The placeholder a prompt's text carries once per image (None: a text-only model)."""
        token_id = getattr(self.model, "image_token_id", None)
        if token_id is None or self.loaded.tokenizer is None:
            return None
        return str(self.loaded.tokenizer.convert_ids_to_tokens(int(token_id)))

    def tp_status(self) -> list[dict]:
        """Each tensor-parallel rank's pid and liveness (one entry without parallelism)."""
        if self.tp is None:
            return [{"tp_rank": 0, "pid": os.getpid(), "alive": True}]
        return self.tp.status()

    def close(self) -> None:
        """Stop the other tensor-parallel ranks (rank 0) or leave their group; idempotent."""
        if self.tp is not None:
            tp, self.tp = self.tp, None
            if tp.rank == 0:
                tp.stop()
            else:
                destroy_group()

    def _cpu_threads(self) -> int:
        """``num_threads``, else ``OMP_NUM_THREADS`` when set, else every core this process may use."""
        if self.server_args.num_threads:
            return self.server_args.num_threads
        env = os.environ.get("OMP_NUM_THREADS", "")
        return int(env) if env.isdigit() and int(env) > 0 else len(os.sched_getaffinity(0))

    def _num_kv_slots(self) -> int:
        args, loaded = self.server_args, self.loaded
        if getattr(self.model, "is_encoder", False):
            return 1  # an encoder attends within its own forward and keeps no KV
        if args.max_total_tokens:
            return int(args.max_total_tokens)
        per_slot = KVPool.bytes_per_slot(loaded.num_layers, self.num_kv_heads, loaded.head_dim, self.kv_dtype)
        if self.device.type == "cuda":
            budget = self._cuda_kv_budget()
        else:
            budget = args.kv_cache_gb * _GIB
        slots = int(budget // per_slot)
        if slots < 1:
            raise ValueError(
                f"no memory left for the KV cache (budget {budget / _GIB:.2f} GiB); "
                f"raise kv_cache_gb / mem_fraction_static or set max_total_tokens"
            )
        return slots

    def _cuda_kv_budget(self) -> float:
        """``mem_fraction_static`` of the memory free after loading weights, less an activation reserve."""
        torch.cuda.synchronize(self.device)
        free, _ = torch.cuda.mem_get_info(self.device)
        return free * self.server_args.mem_fraction_static - self._activation_reserve()

    def _activation_reserve(self) -> int:
        """Bytes a prefill step of ``max_prefill_tokens`` tokens may need beyond weights and KV."""
        cfg = language_fields(self.loaded.hf_config)
        hidden = int(cfg.get("hidden_size") or cfg.get("n_embd") or 0)
        inter = int(cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * hidden)
        elt = torch.empty((), dtype=self.dtype).element_size()
        tokens = max(self.server_args.max_prefill_tokens, self.server_args.chunked_prefill_size)
        per_token = (6 * hidden + 3 * inter) * elt
        logits = self.server_args.max_running_requests * self.vocab_size * 4 * 4
        return tokens * per_token + logits + _GIB // 2
