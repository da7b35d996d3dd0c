"""Which base projections a LoRA adapter may target, and where each lives in our fused layers.

PEFT names the checkpoint's separate projections (``q_proj`` ...); our Llama-family layers fuse q/k/v
into ``qkv_proj`` and gate/up into ``gate_up_proj``, so an adapter's ``q_proj`` pair updates slice 0
of ``qkv_proj``'s output.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from radixlm.runtime.models.config import ModelConfig

# PEFT module name -> (our layer attribute path inside a decoder layer, output slice)
TARGETS: dict[str, tuple[str, int]] = {
    "q_proj": ("self_attn.qkv_proj", 0),
    "k_proj": ("self_attn.qkv_proj", 1),
    "v_proj": ("self_attn.qkv_proj", 2),
    "o_proj": ("self_attn.o_proj", 0),
    "gate_proj": ("mlp.gate_up_proj", 0),
    "up_proj": ("mlp.gate_up_proj", 1),
    "down_proj": ("mlp.down_proj", 0),
}
# SGLang's --lora-target-modules also accepts these groupings
_ALIASES = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


@dataclass(frozen=True)
class ProjectionShape:
    """``in_features`` and the output size of one PEFT-named projection of the base model."""

    in_features: int
    out_features: int


def projection_shapes(cfg: ModelConfig) -> dict[str, ProjectionShape]:
    """Each targetable projection's shape in a Llama-family base (what an adapter must match)."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    h, inter = cfg.hidden_size, cfg.intermediate_size
    return {
        "q_proj": ProjectionShape(h, q),
        "k_proj": ProjectionShape(h, kv),
        "v_proj": ProjectionShape(h, kv),
        "o_proj": ProjectionShape(q, h),
        "gate_proj": ProjectionShape(h, inter),
        "up_proj": ProjectionShape(h, inter),
        "down_proj": ProjectionShape(inter, h),
    }


def normalize_targets(names: Iterable[str]) -> frozenset[str]:
    """PEFT module names from SGLang's ``--lora-target-modules`` values (``all``, fused aliases)."""
    out: set[str] = set()
    for name in names:
        if name == "all":
            out.update(TARGETS)
        elif name in _ALIASES:
            out.update(_ALIASES[name])
        elif name in TARGETS:
            out.add(name)
        else:
            raise ValueError(
                f"unsupported LoRA target module {name!r}: expected one of {sorted([*TARGETS, *_ALIASES])} "
                "or 'all'"
            )
    return frozenset(out)
