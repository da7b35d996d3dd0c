"""Reasoning parsers on scripted outputs: thinking and answer, whole and streamed at every split."""

from __future__ import annotations

import pytest

from radixlm.program.reasoning import ReasoningParser, separate_reasoning
from radixlm.runtime.server.function_call.registry import get_parser
from radixlm.runtime.server.function_call.streaming import ChatOutputReader
from tests.runtime.server.function_call.stream_check import check_every_split

CASES = [
    ("deepseek-r1", "Let me think: 2+2.\n</think>\n\nIt is 4.", "Let me think: 2+2.", "It is 4."),
    ("deepseek-r1", "<think>\nhmm</think>4", "hmm", "4"),
    ("deepseek-r1", "still thinking when cut", "still thinking when cut", ""),
    ("qwen3", "<think>\nplan < steps </thi\n</think>\n\nDone.", "plan < steps </thi", "Done."),
    ("qwen3", "No thinking here.", "", "No thinking here."),
    ("qwen3", "<thought> is not the tag", "", "<thought> is not the tag"),
]


@pytest.mark.parametrize("name,text,reasoning,answer", CASES)
def test_reasoning_split_whole_and_streamed(name, text, reasoning, answer):
    got = check_every_split(ChatOutputReader(ReasoningParser(name), None), text)
    assert (got["reasoning"], got["content"]) == (reasoning, answer)
    assert separate_reasoning(text, name) == (reasoning, answer)


def test_reasoning_then_tool_call():
    text = (
        "<think>I need the weather.</think>\n"
        '<tool_call>\n{"name": "w", "arguments": {"c": "P"}}\n</tool_call>'
    )
    got = check_every_split(ChatOutputReader(ReasoningParser("qwen3"), get_parser("hermes")), text)
    assert got["reasoning"] == "I need the weather."
    assert got["calls"] == [("w", '{"c": "P"}')] and got["content"] == ""


def test_unknown_reasoning_parser():
    with pytest.raises(ValueError, match="unknown reasoning parser 'r2'"):
        ReasoningParser("r2")


def test_native_separate_reasoning_route():
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from fastapi.testclient import TestClient

    from radixlm.runtime.server import reasoning_api
    from radixlm.runtime.server.errors import ApiError
    from radixlm.runtime.server_args import ServerArgs

    app = FastAPI()
    app.state.server_args = ServerArgs()  # the body limits read_json applies
    app.include_router(reasoning_api.router)
    app.exception_handler(ApiError)(lambda request, e: JSONResponse(e.body(), status_code=e.status_code))
    client = TestClient(app)
    r = client.post(
        "/separate_reasoning", json={"text": "hmm</think>Four.", "reasoning_parser": "deepseek-r1"}
    )
    assert r.status_code == 200 and r.json() == {"text": "Four.", "reasoning_text": "hmm"}
    bad = client.post("/separate_reasoning", json={"text": "x", "reasoning_parser": "r9"})
    assert bad.status_code == 400 and "reasoning_parser" in bad.text
