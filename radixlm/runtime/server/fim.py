"""Fill-in-the-middle prompts from the model's own FIM tokens (prefix-suffix-middle order).

The prompt is built as token ids, not text, so a family whose marker tokens do not round-trip
through text (CodeLlama's ``▁<PRE>``) works like one whose markers do (``<|fim_prefix|>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radixlm.runtime.server.errors import ApiError

# (prefix, suffix, middle) as the families name them, most common first.
FIM_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder, Granite, DeepSeek-V3
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder/StarCoder2, SantaCoder
    ("<fim-prefix>", "<fim-suffix>", "<fim-middle>"),  # older BigCode checkpoints
    ("▁<PRE>", "▁<SUF>", "▁<MID>"),  # CodeLlama
    ("<PRE>", "<SUF>", "<MID>"),  # CodeLlama converted to GGUF
)


@dataclass(frozen=True)
class FimTokens:
    """The ids of a model's prefix, suffix and middle markers."""

    prefix: int
    suffix: int
    middle: int


def find_fim_tokens(tokenizer: Any) -> FimTokens | None:
    """The first family whose three markers are all single tokens of ``tokenizer``, or None."""
    vocab = tokenizer.get_vocab()
    for names in FIM_FAMILIES:
        ids = [vocab.get(n) for n in names]
        if all(i is not None for i in ids):
            return FimTokens(*ids)  # type: ignore[arg-type]
    return None


def missing_fim_message(tokenizer: Any, model: str) -> str:
    """Why ``model`` cannot fill in the middle: the markers it lacks (of its closest family)."""
    vocab = tokenizer.get_vocab()
    closest = max(FIM_FAMILIES, key=lambda names: sum(n in vocab for n in names))
    missing = [n for n in closest if n not in vocab]
    return (
        f"model {model!r} does not support fill-in-the-middle: its tokenizer has no "
        f"{', '.join(missing)} token{'s' if len(missing) > 1 else ''} (nor any other family's "
        "prefix/suffix/middle markers)"
    )


def fim_input_ids(
    tokenizer: Any, model: str, prefix: str | list[int], suffix: str, middle: str = "", param: str = "suffix"
) -> list[int]:
    """``[bos] <PRE> prefix <SUF> suffix <MID> middle`` as ids; a 400 naming ``model`` and the missing
    markers when its tokenizer has none. ``prefix`` may already be token ids."""
    tokens = find_fim_tokens(tokenizer)
    if tokens is None:
        raise ApiError(missing_fim_message(tokenizer, model), param=param)

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False)) if text else []

    prefix_ids = prefix if isinstance(prefix, list) else encode(prefix)
    bos = tokenizer.bos_token_id
    lead = [bos] if bos is not None and tokenizer.encode("a", add_special_tokens=True)[:1] == [bos] else []
    return [*lead, tokens.prefix, *prefix_ids, tokens.suffix, *encode(suffix), tokens.middle, *encode(middle)]
