"""Speculate only where it measures faster: seconds per emitted token of verify steps against plain
decode steps, per batch size, as the server runs.

Acceptance alone does not decide it: a verify step costs more than a decode step by an amount that
depends on the batch (a CPU step turns compute-bound as the batch grows), the model and the machine.
So each batch-size bucket keeps an exponential average of both step kinds' seconds per token; once
both have ``MIN_SAMPLES`` the faster kind runs, and every ``PROBE_EVERY``-th step of the bucket runs
the other kind so a change (acceptance, load, context length) is noticed. Before that, speculation
runs until it has its samples, then plain steps until they have theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SAMPLES = 4
PROBE_EVERY = 16  # the slower kind's share of steps: 1/16 (bounds the loss when speculation loses)
ALPHA = 0.25  # weight of the newest step in the averages


@dataclass
class _Bucket:
    spec_spt: float = 0.0  # seconds per emitted token, averaged
    plain_spt: float = 0.0
    spec_samples: int = 0
    plain_samples: int = 0
    steps: int = 0


def batch_bucket(batch_size: int) -> int:
    """1, 2, 3, 4, then powers of two (5-8 -> 8, 9-16 -> 16, ...)."""
    if batch_size <= 4:
        return batch_size
    return 1 << (batch_size - 1).bit_length()


class SpeedCheck:
    """Decides per step whether speculation runs, from the steps it is told about."""

    def __init__(self) -> None:
        self.buckets: dict[int, _Bucket] = {}
        self.skipped_steps = 0  # steps that ran plain because speculation measured slower

    def wants_speculation(self, batch_size: int) -> bool:
        b = self.buckets.setdefault(batch_bucket(batch_size), _Bucket())
        b.steps += 1
        if b.spec_samples < MIN_SAMPLES:
            return True
        if b.plain_samples < MIN_SAMPLES:
            return False
        faster = b.spec_spt <= b.plain_spt
        run = faster != (b.steps % PROBE_EVERY == 0)
        if not run and not faster:
            self.skipped_steps += 1
        return run

    def on_step(self, batch_size: int, speculated: bool, seconds: float, tokens: int) -> None:
        """A decode (``speculated`` False) or verify step of ``batch_size`` requests took ``seconds``
        and emitted ``tokens``."""
        if tokens <= 0 or seconds <= 0:
            return
        b = self.buckets.setdefault(batch_bucket(batch_size), _Bucket())
        spt = seconds / tokens
        if speculated:
            b.spec_spt = spt if b.spec_samples == 0 else (1 - ALPHA) * b.spec_spt + ALPHA * spt
            b.spec_samples += 1
        else:
            b.plain_spt = spt if b.plain_samples == 0 else (1 - ALPHA) * b.plain_spt + ALPHA * spt
            b.plain_samples += 1
