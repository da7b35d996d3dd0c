"""CacheManager: admission, the tree commit and the one release path keep every KV slot owned once.

Every slot is always in exactly one of: the allocator's free list, the tree, a running request's
private tail (free + tree + private = capacity).
"""

from __future__ import annotations

import pytest
import torch

from tests.runtime.scheduler.scheduler_fakes import compute_extend, make_cache, make_req, ownership

PROMPT = list(range(10, 30))  # 20 tokens


def _assert_owned_once(cache, running) -> None:
    free, tree, private = ownership(cache, running)
    assert free + tree + private == cache.capacity
    cache.check_integrity(running)


def test_a_fresh_request_gets_a_row_and_one_slot_per_token():
    cache = make_cache(64)
    req = make_req("a", PROMPT)
    assert cache.admit(req, max_extend=100)
    assert req.row is not None and (req.prefix_len, req.kv_len, req.extend_len) == (0, 0, 20)
    assert cache.allocator.available_size() == 44
    # the step's slots sit in the row at the positions the extend computes
    row_slots = cache.req_to_token_pool.req_to_token[req.row, :20]
    assert len(set(row_slots.tolist())) == 20 and 0 not in row_slots.tolist()
    compute_extend(cache, req)
    assert (req.prefix_len, req.kv_len) == (20, 20)
    assert ownership(cache, [req]) == (44, 20, 0)
    _assert_owned_once(cache, [req])


def test_admit_respects_max_extend_and_a_chunked_request_continues_in_its_row():
    cache = make_cache(64)
    req = make_req("a", PROMPT)
    assert cache.admit(req, max_extend=8) and req.extend_len == 8
    row = req.row
    compute_extend(cache, req)
    assert cache.admit(req, max_extend=8)
    assert req.row == row and (req.kv_len, req.extend_len) == (8, 8)
    compute_extend(cache, req)
    assert cache.admit(req, max_extend=8) and req.extend_len == 4  # only what is left
    compute_extend(cache, req)
    assert req.kv_len == 20
    _assert_owned_once(cache, [req])


def test_a_second_request_reuses_the_cached_prefix():
    cache = make_cache(64)
    first = make_req("a", PROMPT)
    cache.admit(first, 100)
    compute_extend(cache, first)
    cache.release(first)
    assert ownership(cache, []) == (44, 20, 0)

    second = make_req("b", PROMPT[:15] + [99, 98])
    assert cache.cached_prefix_len(second) == 15
    assert cache.admit(second, 100)
    assert (second.prefix_len, second.extend_len, second.cached_tokens) == (15, 2, 15)
    assert cache.tree.protected_size() == 15  # the shared prefix is locked while b runs
    compute_extend(cache, second)
    _assert_owned_once(cache, [second])


def test_the_last_prompt_token_is_always_computed():
    """Logits need at least one computed token: a fully cached prompt reuses all but its last one."""
    cache = make_cache(64)
    first = make_req("a", PROMPT)
    cache.admit(first, 100)
    compute_extend(cache, first)
    cache.release(first)
    again = make_req("b", PROMPT)
    assert cache.admit(again, 100)
    assert (again.prefix_len, again.extend_len) == (19, 1)


def test_input_logprobs_limit_the_reused_prefix():
    cache = make_cache(64)
    first = make_req("a", PROMPT)
    cache.admit(first, 100)
    compute_extend(cache, first)
    cache.release(first)
    # logprobs from position 5 need the logit at position 4, so at most 4 tokens are reused
    again = make_req("b", PROMPT)
    again.return_logprob, again.logprob_start_len, again.logprobs.input_done = True, 5, False
    assert cache.cached_prefix_len(again) == 4
    assert cache.admit(again, 100) and again.prefix_len == 4


def test_duplicates_computed_in_the_same_step_go_back_to_the_allocator():
    cache = make_cache(64)
    a, b = make_req("a", PROMPT), make_req("b", PROMPT)
    assert cache.admit(a, 100) and cache.admit(b, 100)  # neither sees the other's tokens yet
    assert cache.allocator.available_size() == 24
    compute_extend(cache, a)
    compute_extend(cache, b)
    # b's 20 slots duplicated a's: freed, and b's row now points at the tree's slots
    assert ownership(cache, [a, b]) == (44, 20, 0)
    assert torch.equal(
        cache.req_to_token_pool.req_to_token[b.row, :20], cache.req_to_token_pool.req_to_token[a.row, :20]
    )
    _assert_owned_once(cache, [a, b])


def test_release_caches_the_generated_tail_and_unlocks():
    cache = make_cache(64)
    req = make_req("a", PROMPT)
    cache.admit(req, 100)
    compute_extend(cache, req)
    for token in (7, 8, 9):  # three decode steps: one slot each at position kv_len
        req.output_ids.append(token)
        slots = cache.alloc_decode_slot([req])
        assert int(cache.req_to_token_pool.req_to_token[req.row, req.kv_len]) == int(slots[0])
        req.kv_len += 1
    assert ownership(cache, [req]) == (41, 20, 3)
    _assert_owned_once(cache, [req])
    cache.release(req)
    assert req.row is None and (req.prefix_len, req.kv_len) == (0, 0)
    assert ownership(cache, []) == (41, 23, 0)
    assert cache.tree.protected_size() == 0 and cache.tree.evictable_size() == 23
    assert cache.req_to_token_pool.available_size() == 4
    _assert_owned_once(cache, [])


def test_disabled_cache_frees_everything_on_release():
    cache = make_cache(64, disabled=True)
    req = make_req("a", PROMPT)
    cache.admit(req, 100)
    compute_extend(cache, req)  # nothing moves into a disabled tree
    assert ownership(cache, [req]) == (44, 0, 20)
    _assert_owned_once(cache, [req])
    cache.release(req)
    assert ownership(cache, []) == (64, 0, 0)


def test_a_failed_admission_changes_nothing():
    cache = make_cache(16)
    req = make_req("a", PROMPT)  # 20 tokens, 16 slots
    assert not cache.admit(req, 100)
    assert req.row is None and req.extend_len == 0
    assert cache.allocator.available_size() == 16 and cache.req_to_token_pool.available_size() == 4
    assert cache.tree.protected_size() == 0


def test_no_free_row_means_no_admission():
    cache = make_cache(64, rows=1)
    a, b = make_req("a", [1, 2, 3]), make_req("b", [4, 5, 6])
    assert cache.admit(a, 100)
    assert not cache.admit(b, 100)
    assert b.row is None and cache.allocator.available_size() == 61


def test_alloc_slots_evicts_unlocked_cache_but_never_locked_paths():
    cache = make_cache(32)
    old = make_req("old", range(100, 120))
    cache.admit(old, 100)
    compute_extend(cache, old)
    cache.release(old)  # 20 evictable slots in the tree, 12 free
    assert cache.available_tokens() == 32
    assert cache.alloc_slots(30) is not None  # evicts what it needs
    assert cache.tree.total_size() < 20

    cache = make_cache(32)
    held = make_req("held", range(100, 120))
    cache.admit(held, 100)
    compute_extend(cache, held)  # locked by the running request
    assert cache.available_tokens() == 12
    assert cache.alloc_slots(13) is None
    assert cache.tree.total_size() == 20


def test_a_pinned_path_stays_protected_until_unpinned():
    cache = make_cache(64)
    req = make_req("a", PROMPT)
    cache.admit(req, 100)
    compute_extend(cache, req)
    node = cache.pin(req)
    cache.release(req)
    assert cache.tree.protected_size() == 20 and cache.available_tokens() == 44
    cache.unpin(node)
    assert cache.tree.protected_size() == 0 and cache.available_tokens() == 64


@pytest.mark.parametrize("disabled", [False, True])
def test_integrity_check_catches_a_leaked_slot(disabled):
    cache = make_cache(64, disabled=disabled)
    req = make_req("a", PROMPT)
    cache.admit(req, 100)
    compute_extend(cache, req)
    cache.allocator.alloc(1)  # taken, and owned by no one
    with pytest.raises(AssertionError, match="KV ownership broken"):
        cache.check_integrity([req])
