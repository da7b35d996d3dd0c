"""The speed check: speculation runs at a batch size only while its steps measure faster per token
than plain decode steps there, and still probes the slower kind now and then."""

from __future__ import annotations

from radixlm.runtime.speculative.speed_check import MIN_SAMPLES, PROBE_EVERY, SpeedCheck, batch_bucket
from tests.helpers.engines import tiny_scheduler
from tests.runtime.speculative.spec_helpers import SPEC, repetitive_prompt, request, run_all


def _decisions(check: SpeedCheck, batch: int, steps: int, spec_spt: float, plain_spt: float) -> list[bool]:
    """Run ``steps`` steps where a verify step costs ``spec_spt`` and a decode step ``plain_spt`` per
    token; the decisions taken."""
    out = []
    for _ in range(steps):
        speculate = check.wants_speculation(batch)
        out.append(speculate)
        check.on_step(batch, speculate, (spec_spt if speculate else plain_spt) * 4, 4)
    return out


def test_slower_speculation_is_turned_off_but_probed():
    check = SpeedCheck()
    runs = _decisions(check, 1, 200, spec_spt=2.0, plain_spt=1.0)
    assert runs[:MIN_SAMPLES] == [True] * MIN_SAMPLES  # measure speculation first
    assert runs[MIN_SAMPLES : 2 * MIN_SAMPLES] == [False] * MIN_SAMPLES  # then plain steps
    later = runs[2 * MIN_SAMPLES :]
    assert 0 < sum(later) <= len(later) // PROBE_EVERY + 1  # only the probes speculate
    assert check.skipped_steps == len(later) - sum(later)


def test_faster_speculation_keeps_running_and_buckets_are_separate():
    check = SpeedCheck()
    runs = _decisions(check, 2, 200, spec_spt=0.5, plain_spt=1.0)
    later = runs[2 * MIN_SAMPLES :]
    assert len(later) - sum(later) <= len(later) // PROBE_EVERY + 1  # only the probes run plain
    assert check.skipped_steps == 0
    assert _decisions(check, 32, MIN_SAMPLES, 2.0, 1.0) == [True] * MIN_SAMPLES  # its own bucket
    assert [batch_bucket(b) for b in (1, 4, 5, 8, 9, 33)] == [1, 4, 8, 8, 16, 64]


def test_a_change_in_speed_is_noticed_through_the_probes():
    check = SpeedCheck()
    _decisions(check, 1, 100, spec_spt=2.0, plain_spt=1.0)
    after = _decisions(check, 1, 200, spec_spt=0.5, plain_spt=1.0)
    assert sum(after[:PROBE_EVERY]) <= 1  # still off: one probe at most
    assert sum(after[-64:]) >= 64 - 64 // PROBE_EVERY - 1  # on again, plain only as probes


class _SlowVerify(SpeedCheck):
    """Verify steps made to look 100x slower than measured: the scheduler must stop speculating."""

    def on_step(self, batch_size: int, speculated: bool, seconds: float, tokens: int) -> None:
        super().on_step(batch_size, speculated, seconds * (100.0 if speculated else 1.0), tokens)


def test_the_scheduler_stops_verifying_where_speculation_is_slower(tiny_llama_dir):
    new = 120
    make = lambda: [request("r", repetitive_prompt(60, 5), max_new_tokens=new)]  # noqa: E731
    with tiny_scheduler(tiny_llama_dir) as plain:
        reference = run_all(plain, make())["r"]
    with tiny_scheduler(tiny_llama_dir, **{**SPEC, "speculative_speed_check": True}) as sched:
        assert sched.speculator is not None
        sched.speculator.speed = _SlowVerify()
        got = run_all(sched, make())["r"]
        stats = sched.stats()
    assert got["ids"] == reference["ids"]
    assert stats["spec_slower_steps"] > 0, stats
    steps = stats["spec_verify_steps"] + stats["spec_slower_steps"]
    assert stats["spec_verify_steps"] <= MIN_SAMPLES + steps // PROBE_EVERY + 1, stats
