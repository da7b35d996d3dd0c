"""PinTable without a model: pins hold a finished request's context until children come or time runs out."""

from __future__ import annotations

from radixlm.runtime.scheduler.pins import PinTable
from tests.runtime.scheduler.scheduler_fakes import compute_extend, make_cache, make_req


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def finished_parent(cache, rid: str, pin_children: int):
    """A request that computed its 10-token prompt and is pinned as it finishes."""
    req = make_req(rid, range(100, 110))
    req.pin_children = pin_children
    assert cache.admit(req, 64)
    compute_extend(cache, req)
    return req


def test_pin_holds_the_context_until_every_child_is_admitted():
    cache, clock = make_cache(), FakeClock()
    pins = PinTable(cache, timeout_s=30, clock=clock)
    parent = finished_parent(cache, "p", pin_children=2)
    pins.add(parent)
    cache.release(parent)
    assert cache.tree.protected_size() == 10 and len(pins) == 1
    pins.release_children(["p"])
    assert len(pins) == 1 and cache.tree.protected_size() == 10
    child = make_req("c", range(100, 112), max_new_tokens=4)
    child.unpin_rids = ["p"]
    pins.on_admitted(child)
    assert len(pins) == 0 and cache.tree.protected_size() == 0
    assert child.unpin_rids == []  # a request releases its parents once


def test_pins_expire_on_the_injected_clock():
    cache, clock = make_cache(), FakeClock()
    pins = PinTable(cache, timeout_s=30, clock=clock)
    parent = finished_parent(cache, "p", pin_children=1)
    pins.add(parent)
    cache.release(parent)
    clock.now = 29.9
    pins.expire()
    assert len(pins) == 1 and cache.tree.protected_size() == 10
    clock.now = 30.0
    pins.expire()
    assert len(pins) == 0 and cache.tree.protected_size() == 0
    assert cache.tree.evictable_size() == 10  # still cached, no longer protected


def test_release_all_unlocks_every_pin():
    cache = make_cache()
    pins = PinTable(cache, timeout_s=30, clock=FakeClock())
    for rid, base in (("a", 100), ("b", 200)):
        req = make_req(rid, range(base, base + 10))
        req.pin_children = 3
        assert cache.admit(req, 64)
        compute_extend(cache, req)
        pins.add(req)
        cache.release(req)
    assert len(pins) == 2 and cache.tree.protected_size() == 20
    pins.release_all()
    assert len(pins) == 0 and cache.tree.protected_size() == 0
