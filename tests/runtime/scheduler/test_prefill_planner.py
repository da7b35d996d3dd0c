"""PrefillPlanner: which waiting requests extend this step, under token, row and KV budgets."""

from __future__ import annotations

import pytest

from radixlm.runtime.scheduler.prefill_planner import IN_BATCH_PREFIX_DEFER, PrefillPlanner
from radixlm.runtime.server_args import ServerArgs
from tests.runtime.scheduler.scheduler_fakes import compute_extend, make_cache, make_req


def _planner(cache, **args) -> PrefillPlanner:
    args.setdefault("new_token_ratio", 0.0)
    args.setdefault("chunked_prefill_size", 0)
    return PrefillPlanner(ServerArgs(**args), cache)


def _prompt(first: int, n: int) -> list[int]:
    return list(range(first, first + n))


def _cache_prompt(cache, ids) -> None:
    """Run a request over ``ids`` and release it: its tokens stay (unlocked) in the tree."""
    req = make_req("warm", ids)
    assert cache.admit(req, 10_000)
    compute_extend(cache, req)
    cache.release(req)


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError, match="schedule_policy"):
        _planner(make_cache(), schedule_policy="random")


def test_token_budget_stops_the_batch_without_chunking():
    planner = _planner(make_cache(256), max_prefill_tokens=16)
    waiting = [make_req(r, _prompt(i * 50, 6)) for i, r in enumerate("abc")]
    batch = planner.plan(waiting, [], None)
    assert [r.rid for r in batch] == ["a", "b"]  # 12 tokens; c's 6 exceed the 4 left
    assert [r.extend_len for r in batch] == [6, 6]
    assert waiting[2].row is None  # not admitted: nothing allocated


def test_the_first_request_is_admitted_whole_even_over_budget_without_chunking():
    planner = _planner(make_cache(256), max_prefill_tokens=4)
    batch = planner.plan([make_req("a", _prompt(0, 10))], [], None)
    assert [(r.rid, r.extend_len) for r in batch] == [("a", 10)]


def test_a_long_prompt_is_chunked_and_ends_the_batch():
    cache = make_cache(256)
    planner = _planner(cache, max_prefill_tokens=64, chunked_prefill_size=8)
    long, short = make_req("long", _prompt(0, 20)), make_req("short", _prompt(100, 3))
    batch = planner.plan([long, short], [], None)
    assert batch == [long] and long.extend_len == 8
    compute_extend(cache, long)
    # the chunked request continues first; its last chunk leaves budget for the next one
    batch = planner.plan([short], [], long)
    assert batch == [long] and long.extend_len == 8
    compute_extend(cache, long)
    batch = planner.plan([short], [], long)
    assert batch == [long, short] and (long.extend_len, short.extend_len) == (4, 3)


def test_a_chunked_request_that_cannot_continue_blocks_new_admissions():
    cache = make_cache(24)
    planner = _planner(cache, chunked_prefill_size=8)
    long = make_req("long", _prompt(0, 20), max_new_tokens=1)
    assert planner.plan([long], [], None) == [long]
    compute_extend(cache, long)
    cache.alloc_slots(cache.allocator.available_size())  # the pool is taken by someone else
    assert planner.plan([make_req("b", _prompt(100, 2))], [], long) == []


def test_max_running_requests_bounds_the_batch():
    planner = _planner(make_cache(256), max_running_requests=3)
    running = [make_req("r", _prompt(200, 1))]
    waiting = [make_req(r, _prompt(i * 20, 4)) for i, r in enumerate("abcd")]
    assert [r.rid for r in planner.plan(waiting, running, None)] == ["a", "b"]


def test_lpm_admits_the_longest_cached_prefix_first_and_fcfs_keeps_arrival_order():
    shared = _prompt(0, 12)
    for policy, expected in (("lpm", ["hit", "miss"]), ("fcfs", ["miss", "hit"])):
        cache = make_cache(256)
        _cache_prompt(cache, shared + [200])
        planner = _planner(cache, schedule_policy=policy)
        waiting = [make_req("miss", _prompt(100, 5)), make_req("hit", shared + [201, 202])]
        batch = planner.plan(waiting, [], None)
        assert [r.rid for r in batch] == expected
        hit = next(r for r in batch if r.rid == "hit")
        assert (hit.prefix_len, hit.extend_len) == (12, 2)


def test_a_request_sharing_a_long_uncached_prefix_with_an_admitted_one_waits_a_step():
    cache = make_cache(512)
    planner = _planner(cache)
    shared = _prompt(0, IN_BATCH_PREFIX_DEFER)
    first, second = make_req("first", shared + [300]), make_req("second", shared + [301])
    batch = planner.plan([first, second], [], None)
    assert batch == [first] and second.row is None
    compute_extend(cache, first)
    # next step the shared part is in the tree: second computes only its own token
    assert planner.plan([second], [first], None) == [second]
    assert (second.prefix_len, second.extend_len) == (IN_BATCH_PREFIX_DEFER, 1)


def test_a_short_shared_prefix_is_not_deferred():
    planner = _planner(make_cache(512))
    shared = _prompt(0, IN_BATCH_PREFIX_DEFER - 1)
    waiting = [make_req("first", shared + [300]), make_req("second", shared + [301])]
    assert [r.rid for r in planner.plan(waiting, [], None)] == ["first", "second"]


def test_with_the_cache_disabled_a_shared_prefix_defers_nothing():
    planner = _planner(make_cache(512, disabled=True))
    shared = _prompt(0, 4 * IN_BATCH_PREFIX_DEFER)
    waiting = [make_req("first", shared + [300]), make_req("second", shared + [301])]
    assert [r.rid for r in planner.plan(waiting, [], None)] == ["first", "second"]


def test_decode_reservation_of_running_requests_limits_admission():
    cache = make_cache(64)
    planner = _planner(cache, new_token_ratio=0.5)
    running = make_req("running", _prompt(0, 10), max_new_tokens=60)
    assert planner.plan([running], [], None) == [running]
    compute_extend(cache, running)
    assert planner.decode_reservation([running]) == 30  # 60 remaining tokens * 0.5
    # 54 slots available - 30 reserved = 24: a 20-token prompt reserving 10 more does not fit
    big = make_req("big", _prompt(100, 20), max_new_tokens=20)
    assert planner.plan([big], [running], None) == []
    small = make_req("small", _prompt(200, 10), max_new_tokens=20)
    assert planner.plan([small], [running], None) == [small]


def test_with_nothing_running_the_head_request_is_tried_whatever_its_reservation():
    planner = _planner(make_cache(64), new_token_ratio=1.0)
    req = make_req("a", _prompt(0, 20), max_new_tokens=60)  # 20 + 60 reserved > 64
    assert planner.plan([req], [], None) == [req]


def test_plan_does_not_modify_the_waiting_list():
    planner = _planner(make_cache(256))
    waiting = [make_req("a", _prompt(0, 4)), make_req("b", _prompt(50, 4))]
    before = list(waiting)
    planner.plan(waiting, [], None)
    assert waiting == before
