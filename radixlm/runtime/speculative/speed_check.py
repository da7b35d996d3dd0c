"""Speculate only where it pays: a step's expected tokens against its measured cost, per batch size,
as the server runs.

Comparing the average seconds per token of past verify steps with plain ones mixes phases: a
request quoting its source accepts long drafts, the same request writing its own words accepts
none, and an average over both switches speculation off in the middle of a quote (measured: the
doc-quote workload at 1.2-1.9x from run to run with it, 2.06x without). So the cost and the gain are
kept apart:

- cost, per batch-size bucket: exponential averages of a plain decode step's seconds and of the
  seconds a verify step adds per draft token (its extra rows), both as measured;
- gain, per step: the tokens the drafts on hand are expected to yield, each request's draft
  accepted token by token with that request's recent acceptance rate (``SpecState``).

A step speculates when its expected tokens per second beat a plain step's. The first
``MIN_SAMPLES`` steps of a bucket run plain, the next ``MIN_SAMPLES`` speculate (to measure both),
and every ``PROBE_EVERY``-th step runs the other choice, so a change of cost is noticed; a losing
configuration thus spends at most 1/16 of its steps speculating. A probe of speculation verifies
one token a request (``probing``): it measures the cost of a draft token all the same, where whole
drafts cost chat at batch 1 up to 1.7x a plain step a probe (1-2% of its speed:
``benchmarks/workloads/speculative_probes.py``). A request kept plain has its acceptance measured
all the same, from its drafts' first tokens (``SpecState.on_guess_checked``).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SAMPLES = 4
PROBE_EVERY = 16  # the other choice's share of steps: 1/16
ALPHA = 0.25  # weight of the newest step in the averages


@dataclass
class _Bucket:
    plain_s: float = 0.0  # seconds of a plain decode step, averaged
    row_s: float = 0.0  # seconds a verify step adds per draft token, averaged
    plain_samples: int = 0
    spec_samples: int = 0
    steps: int = 0


def batch_bucket(batch_size: int) -> int:
    """1, 2, 3, 4, then powers of two (5-8 -> 8, 9-16 -> 16, ...)."""
    if batch_size <= 4:
        return batch_size
    return 1 << (batch_size - 1).bit_length()


def expected_accepted(rate: float, draft_len: int) -> float:
    """Draft tokens a verify step is expected to accept from a draft of ``draft_len`` tokens, each
    accepted with probability ``rate`` given the ones before it: ``rate + rate^2 + ...``."""
    return sum(rate**i for i in range(1, draft_len + 1))


class SpeedCheck:
    """Decides per step whether speculation runs, from the steps it is told about."""

    def __init__(self) -> None:
        self.buckets: dict[int, _Bucket] = {}
        self.skipped_steps = 0  # steps that ran plain because speculation was expected slower
        self.probing = False  # the last step allowed to speculate does so only as a probe

    def wants_speculation(self, batch_size: int, expected_tokens: float, draft_tokens: int) -> bool:
        """Whether a step of ``batch_size`` requests whose drafts (``draft_tokens`` in all) are
        expected to emit ``expected_tokens`` tokens (the model's own included) should verify them."""
        b = self.buckets.setdefault(batch_bucket(batch_size), _Bucket())
        b.steps += 1
        self.probing = False
        if b.plain_samples < MIN_SAMPLES:
            return False
        if b.spec_samples < MIN_SAMPLES:
            return True
        verify_s = b.plain_s + b.row_s * draft_tokens
        pays = expected_tokens * b.plain_s > batch_size * verify_s
        run = pays != (b.steps % PROBE_EVERY == 0)
        if not run and not pays:
            self.skipped_steps += 1
        self.probing = run and not pays
        return run

    def on_step(self, batch_size: int, speculated: bool, seconds: float, draft_tokens: int) -> None:
        """A decode (``speculated`` False) or verify step of ``batch_size`` requests, carrying
        ``draft_tokens`` draft tokens in all, took ``seconds``."""
        if seconds <= 0:
            return
        b = self.buckets.setdefault(batch_bucket(batch_size), _Bucket())
        if not speculated:
            b.plain_s = seconds if b.plain_samples == 0 else (1 - ALPHA) * b.plain_s + ALPHA * seconds
            b.plain_samples += 1
        elif draft_tokens > 0 and b.plain_samples > 0:
            row_s = max(seconds - b.plain_s, 0.0) / draft_tokens
            b.row_s = row_s if b.spec_samples == 0 else (1 - ALPHA) * b.row_s + ALPHA * row_s
            b.spec_samples += 1
