"""The adaptive draft length (``SpecState.on_verified``)."""

from __future__ import annotations

from radixlm.runtime.speculative.spec_state import SpecState


def test_draft_length_doubles_on_full_accept_and_halves_on_a_partial_one():
    s = SpecState(draft_len=2, max_draft_len=8)
    s.on_verified(2, 2)
    assert s.draft_len == 4
    s.on_verified(4, 4)
    s.on_verified(8, 8)
    assert s.draft_len == 8  # capped
    s.on_verified(8, 1)
    assert s.draft_len == 4  # halved, not one past the accepted count
    s.on_verified(4, 3)
    assert s.draft_len == 4  # one past the accepted count when that is more than half
    s.on_verified(4, 0)
    assert s.draft_len == 2 and s.backoff == 0
    s.on_verified(2, 0)
    assert s.draft_len == 1 and s.backoff == 2  # two misses in a row: back off
