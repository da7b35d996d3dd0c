"""ThreadChoice: each plan (products' threads, torch's threads) is tried per size class, torch's count
is restored, our product kernels see the plan's count, and the result is the function's."""

from __future__ import annotations

import torch

from radixlm.kernels import product_threads
from radixlm.runtime.pooling.thread_choice import EXPLORE_EVERY, ThreadChoice


def test_tries_every_plan_first_and_restores_the_count():
    before = torch.get_num_threads()
    choice = ThreadChoice(2)
    seen = []
    for _ in range(4):
        assert (
            choice.run(20, lambda: seen.append((product_threads.current(), torch.get_num_threads())) or 7)
            == 7
        )
        assert torch.get_num_threads() == before
        assert product_threads.current() is None  # only inside the forward
    assert seen[:3] == [(1, 1), (2, 1), (2, 2)]  # each plan timed once first
    assert {key[0] for key in choice.cost} == {(20).bit_length()}


def test_a_slower_plan_is_retried_in_proportion_to_its_cost():
    choice = ThreadChoice(2)
    # products on two threads and torch's ops on one the fastest; all on two 4x slower
    choice.cost = {(5, (1, 1)): 2.0, (5, (2, 1)): 1.0, (5, (2, 2)): 4.0}
    picks = [choice._pick(5) for _ in range(4 * EXPLORE_EVERY * 4)]
    # about once every EXPLORE_EVERY x 4 forwards, and every EXPLORE_EVERY x 2 (one late when both are due)
    assert picks.count((2, 2)) in (3, 4)
    assert picks.count((1, 1)) in (7, 8)
    assert picks.count((2, 1)) >= len(picks) - 12
    choice.cost[(5, (2, 2))] = 0.5  # the load went away: all on two threads now fastest
    assert choice._pick(5) == (2, 2)


def test_large_forwards_time_only_the_even_plans():
    """Above PANEL_MAX_ROWS tokens oneDNN's products follow torch's count: no split plan there."""
    choice = ThreadChoice(2)
    for _ in range(3):
        choice.run(4000, lambda: None)
    assert sorted(plan for (_, plan) in choice.cost) == [(1, 1), (2, 2)]


def test_one_thread_machines_and_failures():
    assert ThreadChoice(1).run(5, lambda: "x") == "x"
    before = torch.get_num_threads()
    choice = ThreadChoice(2)
    try:
        choice.run(5, lambda: 1 / 0)
    except ZeroDivisionError:
        pass
    assert torch.get_num_threads() == before
    assert product_threads.current() is None


def test_linear_hands_the_plan_to_our_kernels(monkeypatch):
    """``linear`` passes the count ``product_threads`` set to the panel kernel (None outside)."""
    from radixlm.kernels import linear as linear_mod
    from radixlm.kernels.linear import linear, pack_panels

    seen = []

    class Kernels:
        def panel_linear(self, x, panels, out_features, bias, threads):
            seen.append(threads)
            return torch.zeros(x.shape[0], out_features)

    monkeypatch.setattr(linear_mod, "decode_kernels_if_ready", lambda: Kernels())
    weight = torch.randn(32, 16)
    panels = pack_panels(weight)
    linear(torch.randn(3, 16), weight, panels=panels)
    with product_threads.product_threads(2):
        linear(torch.randn(3, 16), weight, panels=panels)
    assert seen == [None, 2]
