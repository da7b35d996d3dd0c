"""``RuntimeEndpoint.generate_stream`` reads server-sent events as UTF-8, as the SSE format defines."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from radixlm.frontend.backends.runtime_endpoint import RuntimeEndpoint

EVENTS = [{"text": "héllo wörld ✓"}, {"text": "日本語"}]


class _BareEventStream(BaseHTTPRequestHandler):
    """Answers ``/generate`` with raw UTF-8 events under a Content-Type that names no charset."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = "".join(f"data: {json.dumps(e, ensure_ascii=False)}\n\n" for e in EVENTS) + "data: [DONE]\n\n"
        payload = body.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def bare_sse_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BareEventStream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_stream_events_keep_non_ascii_text_without_a_charset(bare_sse_url: str) -> None:
    endpoint = RuntimeEndpoint(bare_sse_url, timeout=10)
    events = list(endpoint.generate_stream({"input_segments": [{"text": "hi"}]}))
    assert events == EVENTS
