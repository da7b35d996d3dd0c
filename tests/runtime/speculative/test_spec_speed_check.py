"""The speed check: a step verifies its drafts only when the tokens they are expected to yield beat a
plain step at the measured costs of its batch size, and the other choice is still probed now and
then."""

from __future__ import annotations

import pytest

from radixlm.runtime.speculative.spec_state import SpecState
from radixlm.runtime.speculative.speed_check import (
    MIN_SAMPLES,
    PROBE_EVERY,
    SpeedCheck,
    batch_bucket,
    expected_accepted,
)
from tests.helpers.engines import tiny_scheduler
from tests.runtime.speculative.spec_helpers import PLAIN, SPEC, repetitive_prompt, request, run_all


def _decisions(
    check: SpeedCheck, batch: int, steps: int, expected: float, drafted: int, plain_s: float, row_s: float
) -> list[bool]:
    """Run ``steps`` steps whose drafts (``drafted`` tokens) are expected to yield ``expected`` tokens,
    where a plain step takes ``plain_s`` and each draft token adds ``row_s``; the decisions taken."""
    out = []
    for _ in range(steps):
        speculate = check.wants_speculation(batch, expected, drafted)
        out.append(speculate)
        check.on_step(
            batch, speculate, plain_s + (row_s * drafted if speculate else 0.0), drafted if speculate else 0
        )
    return out


def test_costs_are_measured_first_then_drafts_that_pay_run():
    check = SpeedCheck()
    # one request, six draft tokens expected to give 4 tokens; a verify step costs 1 + 6 * 0.2 = 2.2x
    runs = _decisions(check, 1, 200, expected=4.0, drafted=6, plain_s=1.0, row_s=0.2)
    assert runs[:MIN_SAMPLES] == [False] * MIN_SAMPLES  # a plain step's cost first
    assert runs[MIN_SAMPLES : 2 * MIN_SAMPLES] == [True] * MIN_SAMPLES  # then a draft token's
    later = runs[2 * MIN_SAMPLES :]
    assert len(later) - sum(later) <= len(later) // PROBE_EVERY + 1  # only the probes run plain
    assert check.skipped_steps == 0


def test_drafts_that_do_not_pay_are_kept_plain_but_probed():
    check = SpeedCheck()
    # 1.2 tokens expected from a verify step costing 1.6x a plain one
    runs = _decisions(check, 1, 200, expected=1.2, drafted=2, plain_s=1.0, row_s=0.3)
    later = runs[2 * MIN_SAMPLES :]
    assert 0 < sum(later) <= len(later) // PROBE_EVERY + 1  # only the probes speculate
    assert check.skipped_steps == len(later) - sum(later)


def test_only_probes_are_flagged_as_probing():
    check = SpeedCheck()
    _decisions(check, 1, 2 * MIN_SAMPLES, expected=1.2, drafted=2, plain_s=1.0, row_s=0.3)
    flags = []
    for _ in range(3 * PROBE_EVERY):
        run = check.wants_speculation(1, 1.2, 2)
        flags.append((run, check.probing))
    assert {flag for flag in flags if flag[0]} == {(True, True)} and (False, False) in flags
    check.wants_speculation(1, 8.0, 2)  # drafts that pay are verified as themselves
    assert not check.probing


def test_each_step_is_decided_by_its_own_drafts():
    """The point of splitting cost from gain: in one bucket, a step whose drafts look good verifies
    and the next, whose drafts look poor, does not (a quote, then free text)."""
    check = SpeedCheck()
    _decisions(check, 1, 2 * MIN_SAMPLES, expected=4.0, drafted=6, plain_s=1.0, row_s=0.2)
    good = [check.wants_speculation(1, 4.0, 6) for _ in range(3)]
    poor = [check.wants_speculation(1, 1.1, 6) for _ in range(3)]
    assert good == [True] * 3 and poor == [False] * 3


def test_a_rise_in_cost_is_noticed():
    check = SpeedCheck()
    _decisions(check, 2, 40, expected=6.0, drafted=8, plain_s=1.0, row_s=0.1)
    after = _decisions(check, 2, 64, expected=6.0, drafted=8, plain_s=1.0, row_s=2.0)
    assert sum(after[-32:]) <= 32 // PROBE_EVERY + 1  # off: verify steps measured dearer
    assert [batch_bucket(b) for b in (1, 4, 5, 8, 9, 33)] == [1, 4, 8, 8, 16, 64]


def test_expected_tokens_and_a_requests_acceptance_rate():
    assert expected_accepted(0.5, 3) == pytest.approx(0.5 + 0.25 + 0.125)
    assert expected_accepted(1.0, 4) == 4.0 and expected_accepted(0.0, 4) == 0.0
    state = SpecState(8, 8)
    assert state.acceptance_rate() == 0.5  # nothing measured yet
    for _ in range(6):
        state.on_verified(8, 8)  # whole drafts taken
    high = state.acceptance_rate()
    for _ in range(3):
        state.on_verified(4, 0)  # then nothing
    assert high > 0.95 and state.acceptance_rate() < 0.6  # three misses outweigh six whole drafts


class _SlowVerify(SpeedCheck):
    """Verify steps made to look 100x slower than measured: the scheduler must stop speculating."""

    def on_step(self, batch_size: int, speculated: bool, seconds: float, draft_tokens: int) -> None:
        super().on_step(batch_size, speculated, seconds * (100.0 if speculated else 1.0), draft_tokens)


def test_the_scheduler_stops_verifying_where_speculation_is_slower(tiny_llama_dir):
    new = 120
    make = lambda: [request("r", repetitive_prompt(60, 5), max_new_tokens=new)]  # noqa: E731
    with tiny_scheduler(tiny_llama_dir, **PLAIN) as plain:
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


class _AlwaysProbes(SpeedCheck):
    def wants_speculation(self, batch_size: int, expected_tokens: float, draft_tokens: int) -> bool:
        self.probing = True
        return True


def test_a_probe_verifies_one_draft_token_a_request(tiny_llama_dir):
    make = lambda: [request(f"r{i}", repetitive_prompt(60, 5 + i), max_new_tokens=40) for i in range(2)]  # noqa: E731
    with tiny_scheduler(tiny_llama_dir, **PLAIN) as plain:
        reference = run_all(plain, make())
    with tiny_scheduler(tiny_llama_dir, **{**SPEC, "speculative_speed_check": True}) as sched:
        assert sched.speculator is not None
        sched.speculator.speed = _AlwaysProbes()
        got = run_all(sched, make())
        stats = sched.stats()
    assert {rid: g["ids"] for rid, g in got.items()} == {rid: r["ids"] for rid, r in reference.items()}
    assert stats["spec_verify_steps"] > 0 and stats["spec_draft_tokens"] == stats["spec_verify_steps"]
    assert stats["spec_accepted_tokens"] > 0


class _NeverPays(SpeedCheck):
    def wants_speculation(self, batch_size: int, expected_tokens: float, draft_tokens: int) -> bool:
        self.skipped_steps += 1
        return False


@pytest.mark.parametrize("guess_right", [True, False])
def test_a_request_kept_plain_still_has_its_acceptance_measured(tiny_llama_dir, guess_right):
    """Drafts the speed check keeps from verifying are still judged: their first token against the
    token the plain step chose, so a quote that resumes is noticed without waiting for a probe."""
    new = 30
    make = lambda: [request("r", repetitive_prompt(40, 5), max_new_tokens=new)]  # noqa: E731
    with tiny_scheduler(tiny_llama_dir, **PLAIN) as plain:
        reference = run_all(plain, make())["r"]["ids"]
    with tiny_scheduler(tiny_llama_dir, **{**SPEC, "speculative_speed_check": True}) as sched:
        speculator = sched.speculator
        assert speculator is not None
        speculator.speed, speculator.tree = _NeverPays(), None
        prompt_len = 40

        def oracle(tokens, k: int) -> list[int]:  # the model's own next token, or one it never picks
            done = len(tokens) - prompt_len
            right = reference[done] if done < len(reference) else 3
            return [right if guess_right else (right + 1) % 250 + 3][:k]

        speculator.proposer.propose = oracle  # type: ignore[method-assign]
        rates: list[float] = []
        on_step = speculator.on_step

        def record(batch, seconds):
            on_step(batch, seconds)
            rates.extend(r.spec.acceptance_rate() for r in batch.reqs if r.spec is not None)

        speculator.on_step = record  # type: ignore[method-assign]
        got = run_all(sched, make())["r"]
        stats = sched.stats()
    assert got["ids"] == reference and stats["spec_verify_steps"] == 0
    assert stats["spec_slower_steps"] >= new - 2
    if guess_right:
        assert rates[-1] > 0.99  # every guess matched: the rate says drafts would now pay
    else:
        assert rates[-1] < 0.01
