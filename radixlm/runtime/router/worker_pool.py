"""The router's workers: their URLs, the routing policy over them, health checks, and forwarding with
retry on another worker when a request could not start (the worker refused the connection)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import httpx

from radixlm.runtime.router.policy import RoutingPolicy

logger = logging.getLogger(__name__)
RID_MEMORY = 100_000
# Failures that prove the request never reached the worker's handler, so resending cannot duplicate.
NOT_STARTED = (httpx.ConnectError, httpx.ConnectTimeout)


class NoWorkerError(RuntimeError):
    """Every worker is out of rotation."""


class WorkerPool:
    """Pick a worker per request (``policy``), forward to it, take dead workers out of rotation."""

    def __init__(
        self,
        urls: list[str],
        policy: RoutingPolicy,
        health_interval_s: float = 2.0,
        health_failures: int = 2,
        request_timeout_s: float = 600.0,
    ) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.policy = policy
        self.health_interval_s = health_interval_s
        self.health_failures = health_failures
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(request_timeout_s, connect=5.0))
        self._failures = [0] * len(urls)
        self._rid_worker: OrderedDict[str, int] = OrderedDict()
        self.retries = 0

    def remove(self, worker: int, why: str) -> None:
        if self.policy.replicas[worker].alive:
            logger.warning("router: worker %s out of rotation: %s", self.urls[worker], why)
            self.policy.remove(worker)

    def pick(self, key: str, body: dict[str, Any], exclude: tuple[int, ...]) -> int:
        """The parent's worker for a program's child when it is alive, else the policy's choice."""
        for parent in body.get("unpin_rids") or []:
            worker = self._rid_worker.get(parent) if isinstance(parent, str) else None
            if worker is not None and self.policy.replicas[worker].alive and worker not in exclude:
                self.policy.replicas[worker].index.insert(key)
                return worker
        try:
            return self.policy.choose(key, exclude)
        except RuntimeError as e:
            raise NoWorkerError(str(e)) from e

    async def send(
        self, method: str, path: str, body: dict[str, Any] | None, key: str, headers: dict[str, str]
    ) -> tuple[int, httpx.Response]:
        """Open a streamed response from some worker (the caller closes it and calls ``done``).
        A worker that refuses the connection is taken out and the request goes to another."""
        tried: tuple[int, ...] = ()
        while True:
            worker = self.pick(key, body or {}, tried)
            request = self.client.build_request(method, self.urls[worker] + path, json=body, headers=headers)
            self.policy.started(worker)
            try:
                response = await self.client.send(request, stream=True)
            except NOT_STARTED as e:
                self.policy.finished(worker)
                self.remove(worker, f"{type(e).__name__}: {e}")
                self.retries += 1
                tried += (worker,)
                continue
            except BaseException:
                self.policy.finished(worker)
                raise
            rid = (body or {}).get("rid")
            if isinstance(rid, str):
                self._remember(rid, worker)
            return worker, response

    def done(self, worker: int) -> None:
        self.policy.finished(worker)

    async def relay(self, worker: int, response: httpx.Response) -> AsyncIterator[bytes]:
        """The response body as it arrives; closes it and releases the worker's load."""
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await response.aclose()
            self.done(worker)

    async def health_loop(self) -> None:
        """GET /health on every live worker; ``health_failures`` misses in a row take it out."""
        while True:
            await asyncio.gather(*(self._check(i) for i in self.policy.alive()))
            await asyncio.sleep(self.health_interval_s)

    async def _check(self, worker: int) -> None:
        try:
            ok = (await self.client.get(self.urls[worker] + "/health", timeout=5.0)).status_code == 200
        except httpx.HTTPError:
            ok = False
        self._failures[worker] = 0 if ok else self._failures[worker] + 1
        if self._failures[worker] >= self.health_failures:
            self.remove(worker, f"{self._failures[worker]} failed health checks")

    def status(self) -> list[dict[str, Any]]:
        return [{"url": url, **state} for url, state in zip(self.urls, self.policy.status())]

    def _remember(self, rid: str, worker: int) -> None:
        self._rid_worker[rid] = worker
        while len(self._rid_worker) > RID_MEMORY:
            self._rid_worker.popitem(last=False)
