"""Pinned contexts: a program node's KV stays locked until its children are admitted."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.req import Req


@dataclass
class _Pin:
    node: Any
    remaining: int
    expires_at: float


class PinTable:
    """Locks the finished request's radix path for ``pin_children`` children.

    A child lists its parent's rid in ``unpin_rids``; when the child is admitted (its own lock on the
    shared prefix is then in place) one unit of the pin is released. Pins expire after ``timeout_s``,
    so a program that dies cannot hold KV forever.
    """

    def __init__(
        self, cache: CacheManager, timeout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.cache = cache
        self.timeout_s = timeout_s
        self.clock = clock
        self._pins: dict[str, _Pin] = {}

    def __len__(self) -> int:
        return len(self._pins)

    def add(self, req: Req) -> None:
        node = self.cache.pin(req)
        if node is None:
            return
        old = self._pins.pop(req.rid, None)
        if old is not None:
            self.cache.unpin(old.node)
        timeout = req.pin_timeout_s if req.pin_timeout_s is not None else self.timeout_s
        self._pins[req.rid] = _Pin(node, req.pin_children, self.clock() + timeout)

    def on_admitted(self, req: Req) -> None:
        """Release one unit of each parent pin the request names (once per request)."""
        rids, req.unpin_rids = req.unpin_rids, []
        self.release_children(rids)

    def release_children(self, rids: list[str]) -> None:
        """Release one unit of each named parent pin: a child of theirs was admitted or rejected."""
        for rid in rids:
            pin = self._pins.get(rid)
            if pin is None:
                continue
            pin.remaining -= 1
            if pin.remaining <= 0:
                self.cache.unpin(self._pins.pop(rid).node)

    def expire(self) -> None:
        if not self._pins:
            return
        now = self.clock()
        for rid in [rid for rid, pin in self._pins.items() if pin.expires_at <= now]:
            self.cache.unpin(self._pins.pop(rid).node)

    def release_all(self) -> None:
        for pin in self._pins.values():
            self.cache.unpin(pin.node)
        self._pins.clear()
