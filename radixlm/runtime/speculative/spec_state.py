"""One request's speculation: its adaptive draft length and its acceptance counts."""

from __future__ import annotations

from dataclasses import dataclass

# NOTE: after this many verify steps in a row with nothing accepted a request stops proposing for a
# while (doubling up to MAX_BACKOFF steps): free-form text then decodes at plain speed.
MISSES_BEFORE_BACKOFF = 2
MAX_BACKOFF = 32
# Weight of the past in the acceptance rate, per verify step: a quote's long accepted drafts must
# not vouch for the free text after it for more than a few steps.
RATE_DECAY = 0.5


@dataclass
class SpecState:
    """Per request: ``draft_len`` is the next draft's length (1..max); the counts feed ``meta_info``
    (SGLang's names: ``spec_verify_ct``, ``spec_draft_token_num``, ``spec_accept_token_num``)."""

    draft_len: int
    max_draft_len: int
    verify_ct: int = 0  # steps that verified a draft of this request
    draft_tokens: int = 0  # draft tokens proposed and verified
    accepted_tokens: int = 0  # draft tokens the model agreed with
    misses: int = 0  # verify steps in a row that accepted nothing
    backoff: int = 0  # steps left without a proposal
    # decayed counts of draft tokens accepted and of drafts broken off by a rejected token; one
    # each to start (a rate of 1/2 before anything is measured)
    recent_accepted: float = 1.0
    recent_rejected: float = 1.0
    # the first token of a draft the speed check kept from verifying, to be compared with the token
    # the plain step then chose (None: no such draft this step)
    unverified_guess: int | None = None

    def wants_draft(self) -> bool:
        """Whether to propose this step (counts a step of backoff down)."""
        if self.backoff > 0:
            self.backoff -= 1
            return False
        return True

    def acceptance_rate(self) -> float:
        """The chance that a draft token is accepted given the ones before it, as this request has
        recently gone: each verify step is ``accepted`` successes and, unless the whole draft was
        taken, one failure (the rate of a geometric run, estimated from decayed counts)."""
        return self.recent_accepted / (self.recent_accepted + self.recent_rejected)

    def on_verified(self, proposed: int, accepted: int) -> None:
        """Adapt the draft length: double it after a fully accepted draft, else halve it (never
        below one past what was accepted); back off from proposing after repeated misses."""
        self.verify_ct += 1
        self.draft_tokens += proposed
        self.accepted_tokens += accepted
        self.recent_accepted = RATE_DECAY * self.recent_accepted + accepted
        self.recent_rejected = RATE_DECAY * self.recent_rejected + (accepted < proposed)
        if accepted == proposed:
            self.draft_len = min(self.max_draft_len, max(2 * self.draft_len, 1))
        else:
            # NOTE: a quote breaks off for a token or two and goes on: dropping to one past the
            # accepted count (the old rule) then takes 3-4 doubling steps to reach long drafts again.
            # Replayed on greedy answers (benchmarks/workloads/speculative_policy.py) halving gives
            # doc-quote ~10% more speed at equal cost elsewhere (benchmarks/log/speculative.md).
            self.draft_len = max(1, accepted + 1, self.draft_len // 2)
        if accepted == 0:
            self.misses += 1
            if self.misses >= MISSES_BEFORE_BACKOFF:
                self.backoff = min(MAX_BACKOFF, 1 << (self.misses - MISSES_BEFORE_BACKOFF + 1))
        else:
            self.misses = 0

    def on_guess_checked(self, right: bool) -> None:
        """A plain step chose ``unverified_guess`` (``right``) or another token: one observation of
        the acceptance rate, as a verify step of a one-token draft would have made. Without it a
        request that the speed check keeps plain keeps the rate it had when its drafts were poor,
        and a quote that resumes would wait for the check's next probe (1 step in 16)."""
        self.unverified_guess = None
        self.recent_accepted = RATE_DECAY * self.recent_accepted + right
        self.recent_rejected = RATE_DECAY * self.recent_rejected + (not right)

    def meta_info(self, completion_tokens: int) -> dict[str, float | int]:
        """SGLang's speculative ``meta_info`` fields for this request."""
        rate = self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0
        # every step emits one model token plus the drafts it accepted
        steps = max(completion_tokens - self.accepted_tokens, 1)
        return {
            "spec_verify_ct": self.verify_ct,
            "spec_draft_token_num": self.draft_tokens,
            "spec_accept_token_num": self.accepted_tokens,
            "spec_accept_rate": rate,
            "spec_accept_length": completion_tokens / steps,
        }
