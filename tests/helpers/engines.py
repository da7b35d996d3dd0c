"""Engines for tests: small KV pools, so that leaks and pressure show up quickly."""

from __future__ import annotations

from typing import Any

from radixlm.runtime.engine import Engine


def make_engine(model: str, **kwargs: Any) -> Engine:
    kwargs.setdefault("kv_cache_gb", 0.05)
    kwargs.setdefault("max_running_requests", 32)
    return Engine(model=model, **kwargs)
