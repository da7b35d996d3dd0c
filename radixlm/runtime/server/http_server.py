"""The HTTP server: a FastAPI app over the TokenizerManager, and ``run_server`` that starts it all.

``run_server`` is the main process of ``radixlm serve``: it starts the scheduler and detokenizer
children, serves HTTP until Ctrl-C, SIGTERM or a dead child, then stops the children and removes
the socket directory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from radixlm import _env
from radixlm.version import __version__

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
CHILD_POLL_S = 0.5
GRACEFUL_SHUTDOWN_S = 5

SERVING_MODULES = (
    "uvicorn",
    "fastapi",
    "transformers.tokenization_utils_tokenizers",  # what a pickled GGUF tokenizer's class needs
    "radixlm.runtime.server.tokenizer_manager",
    "radixlm.runtime.server.native_api",
    "radixlm.runtime.server.openai_api",
    "radixlm.runtime.server.anthropic_api",
    "radixlm.runtime.server.responses_api",
    "radixlm.runtime.server.drain",
)

logger = logging.getLogger(__name__)


def build_app(tokenizer_manager: Any, server_args: Any) -> Any:
    """The FastAPI app with the native, OpenAI and Anthropic routes, error handlers and the front
    door checks (Host, Origin, content type, API key, body size: ``front_door.py``)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    from radixlm.runtime.messages import CLIENT_ABORT_STATUS
    from radixlm.runtime.server import (
        anthropic_api,
        embeddings_api,
        infill_api,
        lora_api,
        native_api,
        openai_api,
        ops_api,
        program_api,
        reasoning_api,
        responses_api,
        session_api,
        weights_profile_api,
    )
    from radixlm.runtime.server.errors import ApiError, error_body_for_path
    from radixlm.runtime.server.front_door import FrontDoor, FrontDoorMiddleware
    from radixlm.runtime.server.http_util import ClientDisconnected
    from radixlm.runtime.server.openapi_doc import OPENAPI_PATH, openapi_document
    from radixlm.runtime.server.responses_store import ResponseStore
    from radixlm.runtime.server.serving_mode import ServingModeGate
    from radixlm.runtime.server.sessions import SessionStore

    app = FastAPI(title="radixlm", docs_url=None, redoc_url=None, openapi_url=OPENAPI_PATH)
    app.state.tokenizer_manager = tokenizer_manager
    app.state.server_args = server_args
    app.state.served_model_name = server_args.served_model_name or server_args.model
    app.state.started_at = time.time()
    app.state.version = __version__
    model_info = getattr(tokenizer_manager, "model_info", {}) or {}
    app.state.lora_names = lora_api.LoRANames(server_args.enable_lora, model_info.get("lora_adapters", []))

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(ClientDisconnected)
    async def client_left(request: Request, exc: ClientDisconnected) -> Response:
        return Response(status_code=CLIENT_ABORT_STATUS)  # logged where it was noticed

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("error while serving %s", request.url.path)
        message = f"internal server error: {type(exc).__name__}: {exc}"
        return JSONResponse(error_body_for_path(request.url.path, message, 500), 500)

    app.include_router(native_api.router)
    app.include_router(openai_api.router)
    app.include_router(infill_api.router)
    app.include_router(anthropic_api.router)
    app.include_router(program_api.router)
    app.include_router(ops_api.router)
    app.include_router(weights_profile_api.router)
    app.include_router(lora_api.router)
    app.include_router(session_api.router)
    app.include_router(responses_api.router)
    app.state.responses = ResponseStore(tokenizer_manager, server_args.max_stored_responses)
    app.state.sessions = SessionStore(
        tokenizer_manager, server_args.max_sessions, server_args.session_timeout
    )
    if server_args.enable_metrics and getattr(tokenizer_manager, "metrics", None) is None:
        from radixlm.runtime.server.metrics import ServerMetrics

        tokenizer_manager.metrics = ServerMetrics(app.state.served_model_name)
    app.include_router(reasoning_api.router)
    if not server_args.disable_web_ui:
        from radixlm.web.routes import router as web_router

        app.include_router(web_router)
    if server_args.is_embedding:
        app.include_router(embeddings_api.router)
    app.add_middleware(ServingModeGate, is_embedding=server_args.is_embedding)  # inside the front door
    app.add_middleware(FrontDoorMiddleware, front_door=FrontDoor(server_args))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            limits = getattr(tokenizer_manager, "limits", None)
            app.openapi_schema = openapi_document(app, server_args, getattr(limits, "vocab_size", None))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def run_server(server_args: Any, scheduler_factory: Callable[[Any], Any] | None = None) -> None:
    """Serve until stopped; exits with status 1 when a child process died."""
    thread_env = {name: os.environ.get(name) for name in THREAD_VARS}
    _env.limit_threads_for_helper_process()  # the scheduler child gets thread_env back
    logging.basicConfig(level=server_args.log_level.upper(), format="%(asctime)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    from radixlm.runtime.server.front_door import resolve_api_key

    server_args = resolve_api_key(server_args)
    _require_free_port(server_args.host, server_args.port)  # before minutes of model loading

    from radixlm.runtime.router.dp_processes import start_dp_processes
    from radixlm.runtime.server.chat_template_names import resolve_chat_template
    from radixlm.runtime.server.processes import start_processes

    resolve_chat_template(server_args.chat_template)  # a bad value fails before the model loads
    _check_model_available(server_args.model)
    started = time.monotonic()
    if server_args.dp_size > 1:
        procs = start_dp_processes(server_args, thread_env, scheduler_factory)
    else:
        procs = start_processes(server_args, thread_env, scheduler_factory, _import_serving_modules)
    logger.info("the model is loaded (%.1f s after the scheduler started)", time.monotonic() - started)
    try:
        tokenizer_manager = _make_tokenizer_manager(server_args, procs)
        asyncio.run(_serve(server_args, tokenizer_manager, procs))
        if tokenizer_manager.dead is not None:
            raise SystemExit(1)
    finally:
        procs.shutdown()


def _import_serving_modules() -> None:
    """Import what serving needs (the HTTP stack, the API routes, the tokenizer's library; none of them
    imports torch) while the scheduler loads the model, so the imports overlap the load."""
    import importlib

    for name in SERVING_MODULES:
        importlib.import_module(name)


def _check_model_available(model: str) -> None:
    """A hub id that is neither cached nor downloadable ends the server with one line saying what to
    do, before any process starts (not a child's traceback). Downloads happen here, once."""
    from radixlm.runtime.weights.hf_hub import ModelUnavailableError, looks_like_hub_id, resolve_hub_model

    if not looks_like_hub_id(model):
        return
    try:
        resolve_hub_model(model)
    except ModelUnavailableError as e:
        raise SystemExit(f"radixlm serve: error: {e}") from None


def _make_tokenizer_manager(server_args: Any, procs: Any) -> Any:
    from radixlm.runtime.server.processes import tokenizer_path
    from radixlm.runtime.server.tokenizer_manager import TokenizerManager
    from radixlm.runtime.weights.tokenizer_files import served_tokenizer

    tokenizer = served_tokenizer(tokenizer_path(procs.model_info))
    from radixlm.runtime.server.chat_template_names import resolve_chat_template

    chat_template = resolve_chat_template(server_args.chat_template) or procs.model_info.get("chat_template")
    manager = TokenizerManager(tokenizer, procs.model_info, procs.addrs, chat_template, server_args)
    logger.info("the tokenizer manager is ready")
    if server_args.log_requests:
        from radixlm.runtime.server.request_log import RequestLog

        request_log = RequestLog(server_args.log_requests_level)
        manager.submit_hooks.append(request_log.received)
        manager.finish_hooks.append(request_log.finished)
    return manager


async def _serve(server_args: Any, tokenizer_manager: Any, procs: Any) -> None:
    import uvicorn

    from radixlm.runtime.server.drain import DrainingServer
    from radixlm.runtime.server.socket_limits import connection_limit, guarded_h11

    app = build_app(tokenizer_manager, server_args)
    max_connections = connection_limit(server_args.max_connections)
    config = uvicorn.Config(
        app,
        host=server_args.host,
        port=server_args.port,
        log_level=server_args.log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        http=guarded_h11(max_connections, server_args.header_timeout),
        timeout_keep_alive=server_args.timeout_keep_alive,  # type: ignore[arg-type]
        limit_concurrency=max_connections + 1,  # uvicorn refuses at >=; ours closes beyond the cap
    )
    server = DrainingServer(config, tokenizer_manager, server_args.shutdown_grace_s)

    def on_fatal(message: str) -> None:
        print(f"radixlm: {message}\nradixlm: stopping the server", file=sys.stderr, flush=True)
        server.should_exit = True

    tokenizer_manager.on_fatal = on_fatal
    tokenizer_manager.start()
    app.state.sessions.start()
    watcher = asyncio.get_running_loop().create_task(_watch(server, tokenizer_manager, procs, server_args))
    try:
        await server.serve()
    finally:
        watcher.cancel()


async def _watch(server: Any, tokenizer_manager: Any, procs: Any, server_args: Any) -> None:
    """Print the URL once serving; fail every pending request when a child process exits."""
    announced = False
    while True:
        await asyncio.sleep(0.05 if not announced else CHILD_POLL_S)
        if server.started and not announced:
            url = f"http://{server_args.host}:{server_args.port}"
            ui = "" if server_args.disable_web_ui else f"; playground: open {url}/ in a browser"
            print(f"radixlm: serving {server_args.model} at {url} (OpenAI API at {url}/v1{ui})", flush=True)
            announced = True
        dead = procs.dead_child()
        if dead is not None:
            await asyncio.sleep(CHILD_POLL_S)  # let its own death notice (with traceback) arrive first
            tokenizer_manager.fail(dead)
            return


def _require_free_port(host: str, port: int) -> None:
    """Exit with a clear message when another process already listens on ``host:port``."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as e:
            raise SystemExit(
                f"radixlm: cannot serve on {host}:{port}: port {port} is already in use "
                f"or not available ({e.strerror}); choose another with --port"
            ) from e


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)
