"""The KV ownership check the root conftest runs after every test, on whatever served its requests.

Recognised: an in-process ``Engine`` (its pool is walked slot by slot: free + tree + private tails =
capacity, no slot twice; with KV tiers the host rows too), anything that wraps one in ``.engine``
(the language's ``EngineBackend``), and HTTP servers (anything with a string ``url``: ``launch_server``
handles, ``Runtime``), whose ``/get_server_info`` must report no slot owned by a request once the
server is idle (and every host row free or cached). Test servers run
with ``debug_invariants``, so their scheduler also walks the pool itself whenever it goes idle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx

from radixlm.runtime.engine import Engine, EngineError
from tests.helpers.waiting import wait_until

IDLE_TIMEOUT_S = 20.0  # aborts and disconnects reach a server asynchronously: poll until it is idle
POLL_INTERVAL_S = 0.05


def serving_objects(values: Iterable[Any]) -> list[Any]:
    """The engines and servers among a test's fixture values (and the engines they wrap), once each."""
    found: dict[int, Any] = {}
    for value in values:
        for obj in (value, getattr(value, "engine", None)):
            if isinstance(obj, Engine) or isinstance(getattr(obj, "url", None), str):
                found.setdefault(id(obj), obj)
    return list(found.values())


def assert_engine_kv_returned(engine: Engine) -> None:
    try:
        engine.check_kv_integrity()  # waits for the engine to go idle
    except EngineError:
        return  # the test shut this engine down itself (or killed it on purpose)
    stats = engine.get_server_info()
    assert stats["kv_used"] == 0, f"{stats['kv_used']} KV slots still owned by requests"
    assert stats["kv_free"] + stats["kv_cached"] == stats["kv_total"]
    assert_host_tier_accounted(stats)


def assert_host_tier_accounted(stats: dict[str, Any]) -> None:
    """With the hierarchical cache on, every host row is free or held by the tree (none leaked)."""
    if "host_total_tokens" in stats:
        assert stats["host_free_tokens"] + stats["host_cached_tokens"] == stats["host_total_tokens"], stats


def assert_server_kv_returned(url: str, api_key: str | None = None) -> None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    stats: dict[str, Any] = {}

    def idle_or_gone() -> str | None:
        try:
            reply = httpx.get(url + "/get_server_info", headers=headers, timeout=30)
        except httpx.TransportError:
            return "gone"  # the test shut this server down itself
        if reply.status_code != 200:
            return "gone"  # a server the test took down (503) has nothing left to check
        stats.update(reply.json()["stats"])
        idle = stats["num_running"] == 0 and stats["num_queued"] == 0 and stats["kv_used"] == 0
        return "idle" if idle else None

    state = wait_until(
        idle_or_gone,
        IDLE_TIMEOUT_S,
        lambda: f"the server at {url} to return its KV slots (last stats: {stats})",
        POLL_INTERVAL_S,
    )
    if state == "idle":
        assert stats["kv_free"] + stats["kv_cached"] == stats["kv_total"], stats
        assert_host_tier_accounted(stats)


def assert_kv_returned(fixture_values: Iterable[Any]) -> None:
    for obj in serving_objects(fixture_values):
        if isinstance(obj, Engine):
            assert_engine_kv_returned(obj)
        else:
            assert_server_kv_returned(obj.url, getattr(obj, "api_key", None))
