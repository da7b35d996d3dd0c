"""Nothing input-sized runs on the HTTP event loop (issue 27, class 5), on every route that validates
grammars: a server whose validators wait (``tests/helpers/blocking_hook.py``) while a request's
regex, EBNF, schema pattern or tool schema holds a marker must still answer ``/health`` meanwhile.
Where the validation ran on the loop, ``/health`` cannot answer until the test releases the hook."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx
import pytest

import tests
from radixlm.runtime.server.launch import launch_server
from tests.helpers.blocking_hook import ENV, MARKER, install_dir
from tests.runtime.server.test_native_api import assert_kv_idle

USER = [{"role": "user", "content": "hi"}]
LETTERS = " | ".join(f'"{c}"' for c in "abcdefghijklmnopqrstuvwxyz")
EBNF = 'root ::= "' + MARKER + '" tail\ntail ::= ' + LETTERS
TOOL = {
    "type": "function",
    "function": {
        "name": "f",
        "parameters": {"type": "object", "properties": {MARKER + "x" * 200: {"type": "string"}}},
    },
}
SCHEMA = {"type": "object", "properties": {"a": {"type": "string", "pattern": MARKER + "[a-z]{0,3}" * 40}}}
CASES = [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 1, "stop_regex": MARKER + "a{1,3}" * 150}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 1, "regex": MARKER + "[ab]{0,3}" * 40}),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 1, "stop_regex": [MARKER + "b" * 900]}),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 1, "ebnf": EBNF}),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 4, "tools": [TOOL], "tool_choice": "required"}),
    (
        "/v1/chat/completions",
        {
            "messages": USER,
            "max_tokens": 1,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
        },
    ),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 1, "ebnf": EBNF}}),
    (
        "/v1/responses",
        {
            "input": "hi",
            "max_output_tokens": 4,
            "tools": [{"type": "function", **TOOL["function"]}],
            "tool_choice": "required",
        },
    ),
    (
        "/v1/responses",
        {
            "input": "hi",
            "max_output_tokens": 1,
            "text": {"format": {"type": "json_schema", "name": "s", "schema": SCHEMA}},
        },
    ),
    (
        "/v1/messages",
        {
            "messages": USER,
            "max_tokens": 4,
            "model": "tiny",
            "tools": [{"name": "f", "input_schema": TOOL["function"]["parameters"]}],
            "tool_choice": {"type": "any"},
        },
    ),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 1, "json_schema": SCHEMA}}),
]


@pytest.fixture(scope="module")
def hooked(tiny_llama_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("blocking-hook")
    folder = tmp / "signals"
    folder.mkdir()
    repo = str(Path(tests.__file__).resolve().parent.parent)
    path = os.pathsep.join([str(install_dir(tmp)), repo, os.environ.get("PYTHONPATH", "")])
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=256,
        env={"PYTHONPATH": path, ENV: str(folder)},
    ) as handle:
        yield handle, folder


@pytest.mark.parametrize("path, body", CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(CASES)])
def test_health_answers_while_a_request_is_validated(hooked, path, body):
    server, folder = hooked
    for name in ("entered", "release"):
        (folder / name).unlink(missing_ok=True)
    result: dict = {}

    def send() -> None:
        with httpx.Client(base_url=server.url, timeout=180) as c:
            result["r"] = c.post(path, json=body)

    t = threading.Thread(target=send)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while not (folder / "entered").exists():  # the request reached its validation and waits there
            assert t.is_alive() and time.monotonic() < deadline, result.get("r") and result["r"].text
            time.sleep(0.02)
        try:
            health = httpx.get(server.url + "/health", timeout=10).status_code
        except httpx.TimeoutException:
            health = None  # the event loop is the one waiting
    finally:
        (folder / "release").touch()
        t.join(180)
    assert health == 200, f"/health did not answer while {path} validated its grammar on the event loop"
    assert result["r"].status_code in (200, 400), result["r"].text
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert_kv_idle(c)
