"""Drive a grammar ``Matcher`` (either backend's) with random allowed tokens (sampled from its bitmask)."""

from __future__ import annotations

import numpy as np
import torch

from radixlm.runtime.constrained import Matcher

CLOSING_BYTES = frozenset(b'"}],')


def allowed_ids(bitmask: torch.Tensor, row: int) -> np.ndarray:
    """Token ids whose bit is set in ``bitmask[row]``."""
    bits = np.unpackbits(bitmask[row].numpy().view(np.uint8), bitorder="little")
    return np.flatnonzero(bits)


def closing_tokens(token_bytes) -> np.ndarray:
    """Bool per token id: the token is made only of closing punctuation (ends strings/objects fast)."""
    return np.array([bool(b) and all(c in CLOSING_BYTES for c in b) for b in token_bytes])


def drive_random(
    matcher: Matcher,
    bitmask: torch.Tensor,
    rng: np.random.Generator,
    closing: np.ndarray,
    max_tokens: int = 200,
    prefer=None,
) -> list[int]:
    """Sample allowed tokens until the matcher terminates or ``max_tokens``; returns them (EOS excluded).

    Half the time the policy prefers ending (EOS, or closing punctuation) so most runs finish; ``prefer``
    (bool per token id) overrides that preference.
    """
    eos = matcher.grammar.eos_token_ids[0]
    preferred = closing if prefer is None else prefer
    out: list[int] = []
    for _ in range(max_tokens):
        if matcher.is_terminated():
            break
        matcher.fill_bitmask(bitmask, 0)
        ids = allowed_ids(bitmask, 0)
        assert len(ids) > 0, "a live grammar state allowed no token"
        token = None
        if rng.random() < 0.5:
            if prefer is None and eos in ids:
                token = eos
            else:
                pref = ids[(ids < len(preferred))]
                pref = pref[preferred[pref]]
                if len(pref):
                    token = int(rng.choice(pref))
        if token is None:
            token = int(rng.choice(ids))
        assert matcher.accept_token(token)
        if token == eos:
            break
        out.append(token)
    return out
