"""Jump-forward: append the string a grammar forces, re-tokenized the way the model would write it.

Pure logic, no scheduler. The last few output tokens may be re-tokenized together with the forced
string (``"name` + `":"`` reads better as ``"name":``), so the result says how many output tokens to
keep; the scheduler drops the rest (and their KV) and extends with the new tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # importing the protocol here would pull torch into compile workers
    from radixlm.runtime.constrained.matcher_protocol import Matcher

MAX_RETOKENIZED = 4


class JumpForward(NamedTuple):
    """Keep ``output_ids[:keep_len]``, then append ``token_ids``; ``matcher`` is in the matching state."""

    keep_len: int
    token_ids: list[int]
    matcher: Matcher


def jump_forward(
    matcher: Matcher,
    output_ids: Sequence[int],
    tokenizer: Any,
    forced: str,
    max_retokenized: int = MAX_RETOKENIZED,
) -> JumpForward | None:
    """Re-tokenize the output's tail plus ``forced``; None when nothing exact and grammatical exists.

    ``matcher`` must have accepted exactly ``output_ids`` (no EOS); it is not modified. Exactness:
    bytes of ``output_ids[:keep_len] + token_ids`` == bytes of ``output_ids`` + ``forced``.
    """
    if not forced:
        return None
    vocab = matcher.vocab
    forced_bytes = forced.encode("utf-8")
    longest = min(max_retokenized, len(output_ids), matcher.max_rollback)
    for n_tail in range(longest, -1, -1):
        tail = vocab.decode(output_ids[len(output_ids) - n_tail :])
        try:
            text = (tail + forced_bytes).decode("utf-8")
        except UnicodeDecodeError:
            continue
        new_ids = list(tokenizer.encode(text, add_special_tokens=False))
        if any(t >= vocab.size or vocab.token_bytes[t] is None for t in new_ids):
            continue
        if vocab.decode(new_ids) != tail + forced_bytes:
            continue
        keep_len = len(output_ids) - n_tail
        while new_ids and keep_len < len(output_ids) and new_ids[0] == output_ids[keep_len]:
            keep_len += 1
            new_ids.pop(0)
        candidate = matcher.copy()
        candidate.rollback(len(output_ids) - keep_len)
        if all(candidate.accept_token(t) for t in new_ids):
            return JumpForward(keep_len, new_ids, candidate)
    return None
