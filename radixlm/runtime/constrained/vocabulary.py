"""Token vocabulary as raw bytes: the bridge from a Hugging Face tokenizer to outlines-core.

Grammars match bytes, so every token is mapped back to the exact bytes it stands for:

- byte-level BPE (GPT-2 style, SmolLM2): each character of the token string is one byte, through the
  inverse of GPT-2's ``bytes_to_unicode`` table;
- SentencePiece style: ``▁`` is a space and ``<0xNN>`` is the single byte ``NN``.

Special tokens never appear in the map; EOS is left out too, because outlines-core adds it itself.
Token ids ``>= limit`` (the model's logits width) are dropped so a mask can never allow them.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from outlines_core import Vocabulary

_SP_SPACE = "\u2581"
_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode``: printable bytes map to themselves, the rest to 256+."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


_UNICODE_TO_BYTE = _gpt2_unicode_to_byte()


@dataclass(frozen=True)
class TokenVocabulary:
    """Per-tokenizer byte view of the vocabulary.

    ``token_bytes[i]`` is token ``i``'s bytes, or None for special tokens, EOS and ids past ``limit``.
    """

    outlines: Vocabulary
    token_bytes: tuple[bytes | None, ...]
    eos_token_id: int

    @property
    def size(self) -> int:
        """Number of token ids covered (the tokenizer's length, capped at the logits width)."""
        return len(self.token_bytes)

    def byte_map(self) -> dict[bytes, list[int]]:
        """Bytes -> the token ids spelling them (what outlines-core's ``Vocabulary`` is built from)."""
        out: dict[bytes, list[int]] = {}
        for tid, b in enumerate(self.token_bytes):
            if b:
                out.setdefault(b, []).append(tid)
        return out

    def decode(self, token_ids: Iterable[int]) -> bytes:
        """Concatenated bytes of ``token_ids``; special tokens contribute nothing."""
        tb = self.token_bytes
        return b"".join(tb[t] or b"" for t in token_ids if 0 <= t < len(tb))


def _special_ids(tokenizer: Any) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for tid, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(added, "special", False):
            ids.add(int(tid))
    return ids


def _is_sentencepiece(tokens: Iterable[str]) -> bool:
    return any(t.startswith(_SP_SPACE) or _SP_BYTE.match(t) for t in tokens)


def token_string_to_bytes(token: str, sentencepiece: bool) -> bytes | None:
    """Raw bytes of one vocabulary entry, or None if it is not representable."""
    if sentencepiece:
        m = _SP_BYTE.match(token)
        if m:
            return bytes([int(m.group(1), 16)])
        return token.replace(_SP_SPACE, " ").encode("utf-8")
    try:
        return bytes(_UNICODE_TO_BYTE[c] for c in token)
    except KeyError:
        return None


def build_vocabulary(tokenizer: Any, eos_token_id: int, limit: int | None = None) -> TokenVocabulary:
    """Map every non-special token of ``tokenizer`` to its bytes and wrap it for outlines-core."""
    vocab: dict[str, int] = tokenizer.get_vocab()
    size = max(len(tokenizer), max(vocab.values()) + 1)
    if limit is not None:
        size = min(size, limit)
    special = _special_ids(tokenizer) | {eos_token_id}
    added_plain = {
        int(tid): a.content
        for tid, a in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
        if not getattr(a, "special", False)
    }
    sentencepiece = _is_sentencepiece(vocab)
    token_bytes: list[bytes | None] = [None] * size
    for token, tid in vocab.items():
        if tid >= size or tid in special:
            continue
        if tid in added_plain:
            token_bytes[tid] = added_plain[tid].encode("utf-8")
        else:
            token_bytes[tid] = token_string_to_bytes(token, sentencepiece)
    byte_map: dict[bytes, list[int]] = {}
    for tid, b in enumerate(token_bytes):
        if b:
            byte_map.setdefault(b, []).append(tid)
        else:
            token_bytes[tid] = None
    return TokenVocabulary(Vocabulary(eos_token_id, byte_map), tuple(token_bytes), eos_token_id)


_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple[int, int | None], TokenVocabulary]] = (
    weakref.WeakKeyDictionary()
)
_CACHE_LOCK = threading.Lock()


def get_vocabulary(tokenizer: Any, eos_token_id: int, limit: int | None = None) -> TokenVocabulary:
    """``build_vocabulary``, cached per tokenizer object (building takes ~0.4 s for 49k tokens)."""
    with _CACHE_LOCK:
        per_tok = _CACHE.setdefault(tokenizer, {})
        key = (eos_token_id, limit)
        if key not in per_tok:
            per_tok[key] = build_vocabulary(tokenizer, eos_token_id, limit)
        return per_tok[key]
