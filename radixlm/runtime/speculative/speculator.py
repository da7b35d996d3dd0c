"""Which running requests carry a draft this step, and how long: the policy side of speculation."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from radixlm.radix.continuation import continuation
from radixlm.runtime.lora.namespace import plain_ids
from radixlm.runtime.scheduler.scheduled_batch import BatchKind, ScheduledBatch
from radixlm.runtime.speculative.ngram import NgramProposer
from radixlm.runtime.speculative.spec_args import ALGORITHMS
from radixlm.runtime.speculative.spec_state import SpecState
from radixlm.runtime.speculative.speed_check import SpeedCheck, expected_accepted

if TYPE_CHECKING:
    from radixlm.runtime.scheduler.req import Req
    from radixlm.runtime.speculative.draft_model import DraftModel

logger = logging.getLogger(__name__)


class Speculator:
    """Proposes drafts for the requests of a decode step and keeps the acceptance totals.

    A request speculates unless it opted out (``SamplingParams.speculative``), waits for a
    jump-forward verification, or backs off after misses; a draft never runs past
    ``max_new_tokens`` or the context, and stops at a token its grammar forbids.
    """

    def __init__(
        self,
        algorithm: str,
        max_draft_len: int,
        max_batch: int,
        context_length: int,
        draft_model: DraftModel | None = None,
        tree: Any = None,
        vocab_size: int = 0,
        speed_check: bool = True,
    ) -> None:
        """``tree``: the target's prefix cache, whose continuations of a request's tokens NGRAM
        proposes first (tokens at or past ``vocab_size`` end such a draft); ``speed_check``: speculate
        only at batch sizes where it measures faster (``speed_check.py``)."""
        if algorithm not in ALGORITHMS:
            raise ValueError(f"speculative_algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        if (algorithm == "STANDALONE") != (draft_model is not None):
            raise ValueError("speculative_algorithm STANDALONE, and only it, runs a draft model")
        self.max_draft_len = max_draft_len
        self.max_batch = max_batch
        self.context_length = context_length
        self.proposer = NgramProposer()
        self.draft_model = draft_model
        self.tree = tree
        self.vocab_size = vocab_size
        self.speed = SpeedCheck() if speed_check else None
        self.counts = {"spec_verify_steps": 0, "spec_draft_tokens": 0, "spec_accepted_tokens": 0}

    def drafts(self, running: list[Req]) -> list[list[int]] | None:
        """One draft per running request (empty where none); None when no request has one, or
        when the speed check expects them to lose (each NGRAM draft's first token is then kept as
        the request's ``unverified_guess``, checked against the plain step's token in ``on_step``)."""
        for req in running:
            if req.spec is not None:
                req.spec.unverified_guess = None
        if len(running) > self.max_batch:
            return None
        ks = [self._draft_len(req) for req in running]
        if not any(ks):
            return None
        if self.draft_model is not None:
            if not self._pays(running, ks):  # decided before the draft model's forward is spent
                return None
            if self._probing():
                ks = [min(k, 1) for k in ks]
            try:
                drafts = self.draft_model.propose(running, ks)
            except Exception:  # noqa: BLE001 - a failed draft forward costs only the speedup
                logger.exception("the draft model's forward failed; this step decodes without drafts")
                return None
        else:
            drafts = [self._ngram_draft(r, k) if k else [] for r, k in zip(running, ks)]
        for i, req in enumerate(running):
            if drafts[i] and req.grammar is not None:
                drafts[i] = _grammar_prefix(req.grammar, drafts[i])
        if not any(drafts):
            return None
        if self.draft_model is None:
            if not self._pays(running, [len(d) for d in drafts]):
                for req, draft in zip(running, drafts):
                    if draft and req.spec is not None:
                        req.spec.unverified_guess = draft[0]
                return None
            if self._probing():
                drafts = [d[:1] for d in drafts]
        return drafts

    def _probing(self) -> bool:
        """Whether the speed check lets this step verify only to probe the cost (then one draft
        token a request is enough, and costs least)."""
        return self.speed is not None and self.speed.probing

    def _pays(self, running: list[Req], lens: list[int]) -> bool:
        """Whether verifying drafts of ``lens`` tokens is expected to beat a plain step (the speed
        check; always, without it)."""
        if self.speed is None:
            return True
        expected = sum(
            1 + (expected_accepted(req.spec.acceptance_rate(), n) if n and req.spec is not None else 0.0)
            for req, n in zip(running, lens)
        )
        return self.speed.wants_speculation(len(running), expected, sum(lens))

    def _ngram_draft(self, req: Req, k: int) -> list[int]:
        """What the radix tree holds after the request's whole sequence (text another request produced
        after the same context) or, failing that, prompt lookup in the request's own tokens."""
        if self.tree is not None:
            keys = continuation(self.tree.root, req.cache_key(len(req.fill_ids)), k)
            found = plain_ids(keys, req.cache_namespace, self.vocab_size)
            if found:
                return found
        return self.proposer.propose(req.fill_ids, k)

    def _draft_len(self, req: Req) -> int:
        """How many tokens to propose for ``req`` this step (0: none)."""
        if not req.sampling_params.speculative or req.jump_draft is not None:
            return 0
        if req.spec is None:
            req.spec = SpecState(self.max_draft_len, self.max_draft_len)
        # room for the token the model adds after the accepted drafts
        room = min(req.remaining_new_tokens(), self.context_length - req.seq_len) - 1
        k = min(req.spec.draft_len, room)
        if k <= 0 or not req.spec.wants_draft():
            return 0
        return k

    def release(self, req: Req) -> None:
        """``req`` ended or was retracted: its draft-model row and KV go back to their pool."""
        if self.draft_model is not None:
            self.draft_model.release(req)

    def flush(self) -> None:
        if self.draft_model is not None:
            self.draft_model.flush()

    def check_integrity(self, running: list[Req]) -> None:
        if self.draft_model is not None:
            self.draft_model.check_integrity(running)

    def close(self) -> None:
        if self.draft_model is not None:
            self.draft_model.close()

    def on_verified(self, req: Req, proposed: int, accepted: int) -> None:
        assert req.spec is not None, "a verified request has a speculation state"
        req.spec.on_verified(proposed, accepted)
        self.counts["spec_verify_steps"] += 1
        self.counts["spec_draft_tokens"] += proposed
        self.counts["spec_accepted_tokens"] += accepted

    def on_step(self, batch: ScheduledBatch, seconds: float) -> None:
        """``batch`` ran in ``seconds`` (from scheduling to its tokens processed): a decode or verify
        step's cost feeds the speed check, and a plain step's tokens are compared with the drafts it
        did not verify."""
        if batch.kind is BatchKind.DECODE:
            for req in batch.reqs:
                if req.spec is not None and req.spec.unverified_guess is not None and req.output_ids:
                    req.spec.on_guess_checked(req.output_ids[-1] == req.spec.unverified_guess)
        if self.speed is None or batch.kind not in (BatchKind.DECODE, BatchKind.VERIFY):
            return
        n = len(batch.reqs)
        if n <= self.max_batch:
            drafted = sum(len(d) for d in batch.spec_drafts) if batch.kind is BatchKind.VERIFY else 0
            self.speed.on_step(n, batch.kind is BatchKind.VERIFY, seconds, drafted)

    @property
    def stats(self) -> dict[str, int]:
        """The totals, and ``spec_slower_steps``: decode steps that ran plain because speculation
        was expected slower (``speed_check.py``)."""
        return {**self.counts, "spec_slower_steps": self.speed.skipped_steps if self.speed is not None else 0}


def _grammar_prefix(matcher: Any, draft: list[int]) -> list[int]:
    """The longest prefix of ``draft`` the grammar accepts (checked on a copy of the matcher)."""
    probe = matcher.copy()
    for i, token in enumerate(draft):
        if probe.is_terminated() or not probe.accept_token(token):
            return draft[:i]
    return draft
