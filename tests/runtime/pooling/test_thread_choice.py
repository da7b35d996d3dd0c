"""ThreadChoice: both thread counts are tried per size class, the CPU's count is restored, and the
result is the function's."""

from __future__ import annotations

import torch

from radixlm.runtime.pooling.thread_choice import EXPLORE_EVERY, ThreadChoice


def test_tries_both_counts_first_and_restores_the_count():
    before = torch.get_num_threads()
    choice = ThreadChoice(2)
    seen = []
    for _ in range(3):
        assert choice.run(20, lambda: seen.append(torch.get_num_threads()) or 7) == 7
        assert torch.get_num_threads() == before
    assert seen[:2] == [1, 2]  # each count timed once first
    assert {key[0] for key in choice.cost} == {(20).bit_length()}


def test_the_slower_count_is_retried_in_proportion_to_its_cost():
    choice = ThreadChoice(2)
    choice.cost = {(5, 1): 1.0, (5, 2): 4.0}  # two threads 4x slower in this size class
    picks = [choice._pick(5) for _ in range(4 * EXPLORE_EVERY * 4)]
    assert picks.count(2) == 4  # once every EXPLORE_EVERY x 4 forwards
    choice.cost = {(5, 1): 2.0, (5, 2): 1.0}  # the load went away: two threads now faster
    assert choice._pick(5) == 2


def test_one_thread_machines_and_failures():
    assert ThreadChoice(1).run(5, lambda: "x") == "x"
    before = torch.get_num_threads()
    choice = ThreadChoice(2)
    try:
        choice.run(5, lambda: 1 / 0)
    except ZeroDivisionError:
        pass
    assert torch.get_num_threads() == before
