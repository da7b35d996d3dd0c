"""Which running requests carry a draft this step, and how long: the policy side of speculation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from radixlm.runtime.speculative.ngram import NgramProposer
from radixlm.runtime.speculative.spec_state import SpecState

if TYPE_CHECKING:
    from radixlm.runtime.scheduler.req import Req

ALGORITHMS = ("NGRAM",)
# NOTE: provisional: from this many running requests on, a CPU decode step is taken to be compute-bound,
# where verifying drafts would cost more than the accepted tokens save. The shared 2-core machine was
# too noisy to measure it (benchmarks/log/speculative.md); a GPU stays memory-bound much longer.
CPU_DEFAULT_MAX_BATCH = 4
DEFAULT_MAX_DRAFT_LEN = 8


def resolve_spec_max_batch(max_batch: int | None, device_type: str) -> int:
    """The running-batch size up to which requests speculate (``None``: the device's default)."""
    if max_batch is not None:
        return max_batch
    return CPU_DEFAULT_MAX_BATCH if device_type == "cpu" else 1 << 30


def resolve_max_draft_len(num_steps: int | None, num_draft_tokens: int | None) -> int:
    """The longest draft: a chain verifies ``num_draft_tokens`` positions, the last token plus
    ``num_steps`` drafts (SGLang's relation at top-k 1). Either flag alone sets the length; given
    both (an EAGLE tree's launch line), the shorter chain."""
    if num_steps is not None and num_steps < 1:
        raise ValueError(f"speculative_num_steps must be >= 1, got {num_steps}")
    if num_draft_tokens is not None and num_draft_tokens < 2:
        raise ValueError(f"speculative_num_draft_tokens must be >= 2, got {num_draft_tokens}")
    lengths = [n for n in (num_steps, None if num_draft_tokens is None else num_draft_tokens - 1) if n]
    return min(lengths) if lengths else DEFAULT_MAX_DRAFT_LEN


def check_speculative_args(
    algorithm: str | None, num_steps: int | None, num_draft_tokens: int | None
) -> None:
    """Raise ValueError naming a bad speculative option (``ServerArgs`` calls it)."""
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise ValueError(f"speculative_algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    resolve_max_draft_len(num_steps, num_draft_tokens)


class Speculator:
    """Proposes drafts for the requests of a decode step and keeps the acceptance totals.

    A request speculates unless it opted out (``SamplingParams.speculative``), waits for a
    jump-forward verification, or backs off after misses; a draft never runs past
    ``max_new_tokens`` or the context, and stops at a token its grammar forbids.
    """

    def __init__(self, algorithm: str, max_draft_len: int, max_batch: int, context_length: int) -> None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"speculative_algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        self.max_draft_len = max_draft_len
        self.max_batch = max_batch
        self.context_length = context_length
        self.proposer = NgramProposer()
        self.stats = {"spec_verify_steps": 0, "spec_draft_tokens": 0, "spec_accepted_tokens": 0}

    def drafts(self, running: list[Req]) -> list[list[int]] | None:
        """One draft per running request (empty where none); None when no request has one."""
        if len(running) > self.max_batch:
            return None
        drafts = [self._draft(req) for req in running]
        return drafts if any(drafts) else None

    def _draft(self, req: Req) -> list[int]:
        if not req.sampling_params.speculative or req.jump_draft is not None:
            return []
        if req.spec is None:
            req.spec = SpecState(self.max_draft_len, self.max_draft_len)
        # room for the token the model adds after the accepted drafts
        room = min(req.remaining_new_tokens(), self.context_length - req.seq_len) - 1
        k = min(req.spec.draft_len, room)
        if k <= 0 or not req.spec.wants_draft():
            return []
        draft = self.proposer.propose(req.fill_ids, k)
        if draft and req.grammar is not None:
            draft = _grammar_prefix(req.grammar, draft)
        return draft

    def on_verified(self, req: Req, proposed: int, accepted: int) -> None:
        assert req.spec is not None, "a verified request has a speculation state"
        req.spec.on_verified(proposed, accepted)
        self.stats["spec_verify_steps"] += 1
        self.stats["spec_draft_tokens"] += proposed
        self.stats["spec_accepted_tokens"] += accepted


def _grammar_prefix(matcher: Any, draft: list[int]) -> list[int]:
    """The longest prefix of ``draft`` the grammar accepts (checked on a copy of the matcher)."""
    probe = matcher.copy()
    for i, token in enumerate(draft):
        if probe.is_terminated() or not probe.accept_token(token):
            return draft[:i]
    return draft
