"""The TokenizerManager's receive loop is watched: when it fails, every pending request fails with an
error at once, ``/health`` says why, and the server is asked to stop (it never hangs)."""

from __future__ import annotations

import asyncio
import types

import httpx
import pytest
import zmq

from radixlm.runtime.ipc import IpcDir, zmq_socket
from radixlm.runtime.server.http_server import build_app
from radixlm.runtime.server.tokenizer_manager import TokenizerManager
from radixlm.runtime.server_args import ServerArgs
from tests.helpers.waiting import async_wait_until

MODEL_INFO = {"vocab_size": 100, "context_length": 64}
FAIL_WITHIN_S = 5.0


@pytest.fixture
def ipc_dir():
    directory = IpcDir()
    yield directory
    directory.close()


def test_a_failing_receive_loop_fails_pending_requests_and_health(ipc_dir):
    addrs = ipc_dir.addrs()
    ctx = zmq.Context()
    scheduler_inbox = zmq_socket(ctx, zmq.PULL, addrs.scheduler, bind=True)  # swallows the requests
    server_args = ServerArgs(model="m")
    tm = TokenizerManager(types.SimpleNamespace(), MODEL_INFO, addrs, server_args=server_args)
    fatal: list[str] = []
    tm.on_fatal = fatal.append
    app = build_app(tm, server_args)

    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        tm.start()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}}
            pending = asyncio.create_task(client.post("/generate", json=body))
            await async_wait_until(lambda: tm.num_pending == 1, 10, "the request to be pending")
            to_tokenizer_manager = zmq_socket(ctx, zmq.PUSH, addrs.tokenizer_manager, bind=False)
            to_tokenizer_manager.send(b"\x00 not a pickle")  # a malformed message from the other side
            try:
                response = await asyncio.wait_for(pending, FAIL_WITHIN_S)
            finally:
                to_tokenizer_manager.close()
            return response, await client.get("/health")

    try:
        response, health = asyncio.run(scenario())
    finally:
        scheduler_inbox.close()
        ctx.term()
    assert response.status_code == 500
    message = response.json()["error"]["message"]
    assert "receive loop failed" in message and "UnpicklingError" in message
    assert health.status_code == 503
    assert "receive loop failed" in health.json()["error"]["message"]
    assert len(fatal) == 1 and "Traceback" in fatal[0]  # the server is asked to stop, with the cause
    assert tm.num_pending == 0
