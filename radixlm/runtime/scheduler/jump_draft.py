"""A greedy request's jump-forward tokens that still await verification against the model."""

from __future__ import annotations

from typing import NamedTuple

from radixlm.runtime.constrained.matcher_protocol import Matcher


class JumpDraft(NamedTuple):
    """Forced tokens ``output_ids[start:start + len(token_ids)]`` of a greedy request, unverified.

    ``matcher`` is the grammar state before them (the request's own matcher has accepted them).
    """

    start: int
    token_ids: list[int]
    matcher: Matcher
