"""``radixlm router --worker-urls URL...``: one HTTP endpoint in front of several ``radixlm serve``
(or SGLang) servers, routing each generation by the policy and passing other calls to a live worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from fastapi import Request

from radixlm.runtime.router.policy import RoutingPolicy
from radixlm.runtime.router.routing_key import routing_key
from radixlm.runtime.router.worker_pool import NoWorkerError, WorkerPool

ROUTED_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")
PASSED_PATHS = ("/get_model_info", "/v1/models", "/flush_cache", "/abort_request")
HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "content-encoding"}


def build_router_app(pool: WorkerPool) -> Any:
    """The FastAPI app: routed generation endpoints, pass-through info endpoints, health and status."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        checker = asyncio.create_task(pool.health_loop())
        try:
            yield
        finally:
            checker.cancel()
            await pool.client.aclose()

    app = FastAPI(lifespan=lifespan)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message}}, status_code=status)

    async def forward(request: Request, path: str, routed: bool) -> Any:
        body = None
        if request.method == "POST":
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                return error(400, "the request body is not valid JSON")
            if not isinstance(body, dict):
                return error(400, "the request body must be a JSON object")
        key = routing_key(path, body or {}) if routed else ""
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "x-api-key")}
        try:
            worker, response = await pool.send(request.method, path, body, key, headers)
        except NoWorkerError as e:
            return error(503, f"no worker available: {e}")
        out_headers = {k: v for k, v in response.headers.items() if k.lower() not in HOP_HEADERS}
        out_headers["x-radixlm-worker"] = pool.urls[worker]
        return StreamingResponse(
            pool.relay(worker, response), status_code=response.status_code, headers=out_headers
        )

    for path in ROUTED_PATHS:
        app.add_api_route(path, _bind(forward, path, True), methods=["POST"])
    for path in PASSED_PATHS:
        app.add_api_route(path, _bind(forward, path, False), methods=["GET", "POST"])

    @app.get("/health")
    async def health() -> Any:
        alive = pool.policy.alive()
        return JSONResponse({"workers": len(alive)}, status_code=200 if alive else 503)

    @app.get("/get_server_info")
    async def server_info() -> Any:
        return {"router": {"policy": pool.policy.policy, "retries": pool.retries}, "workers": pool.status()}

    return app


def _bind(forward: Any, path: str, routed: bool) -> Any:
    async def endpoint(request: Request) -> Any:
        return await forward(request, path, routed)

    return endpoint


def run_router(
    urls: list[str],
    host: str,
    port: int,
    policy: str,
    balance_abs_threshold: int,
    balance_rel_threshold: float,
    health_interval_s: float,
    log_level: str = "warning",
) -> None:
    """Serve the router until interrupted."""
    import uvicorn

    pool = WorkerPool(
        urls,
        RoutingPolicy(len(urls), policy, balance_abs_threshold, balance_rel_threshold),
        health_interval_s=health_interval_s,
    )
    print(f"radixlm: routing {len(urls)} workers ({policy}) at http://{host}:{port}", flush=True)
    uvicorn.run(build_router_app(pool), host=host, port=port, log_level=log_level)
