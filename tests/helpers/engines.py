"""Engines and schedulers for tests: small KV pools, so that leaks and pressure show up quickly."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from radixlm.runtime.engine import Engine
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs


def make_engine(model: str, **kwargs: Any) -> Engine:
    kwargs.setdefault("kv_cache_gb", 0.05)
    kwargs.setdefault("max_running_requests", 32)
    return Engine(model=model, **kwargs)


@contextlib.contextmanager
def tiny_scheduler(model: str, **overrides: Any) -> Iterator[Scheduler]:
    """A ``Scheduler`` driven directly (no engine loop) on ``model``: CPU, fp32, one thread, a
    2048-token pool unless ``overrides`` say otherwise; shut down on exit."""
    args = {"device": "cpu", "dtype": "float32", "max_total_tokens": 2048, "num_threads": 1, **overrides}
    sched = Scheduler(ServerArgs(model=model, **args))
    try:
        yield sched
    finally:
        sched.shutdown()
