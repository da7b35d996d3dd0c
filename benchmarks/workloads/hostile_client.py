"""The hostile client of ``soak.py --hostile``: one random hostile request a second, from the 11
classes of issue 27, beside the normal clients.

Each request is answered with a status (or, at the socket, how the server ended it); ``counts`` tallies
``class name -> status -> n``. ``broken`` lists what no hostile request may get: a 5xx, or a server
that no longer answers ``/health`` after the request.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

SLOW_SOCKET_CAP_S = 45.0  # a slow socket the server has not cut by then counts as "still open"


def _deep_ebnf(rng: random.Random) -> dict:
    n = rng.choice([300, 1500, 3000])
    rules = "".join(f'r{i} ::= r{i + 1} "a"\n' for i in range(n))
    return {
        "text": "x",
        "sampling_params": {"max_new_tokens": 2, "ebnf": f'root ::= r0\n{rules}r{n} ::= "b"'},
    }


def _nested_ebnf(rng: random.Random) -> dict:
    depth = rng.choice([100, 2000])
    return {
        "text": "x",
        "sampling_params": {"max_new_tokens": 2, "ebnf": "root ::= " + "(" * depth + '"a"' + ")" * depth},
    }


def _backtracking_stop(rng: random.Random) -> dict:
    pattern = rng.choice(["(x+x+)+y", "(a|aa)+b", "(.*a){12}", "((a+)+)+c"])
    return {"text": "x" * 2000, "sampling_params": {"max_new_tokens": 8, "stop_regex": [pattern] * 32}}


def _unsupported_stop(rng: random.Random) -> dict:
    pattern = rng.choice([r"(a)\1", "(?=a)b", "a" * 5000])
    return {"text": "x", "sampling_params": {"max_new_tokens": 2, "stop_regex": pattern}}


def _nested_repeats(rng: random.Random) -> dict:
    regex = rng.choice(["(a{999}){999}", "((a{9}){99}){99}", "a{99999}", "[a-z]{4096}"])
    if rng.random() < 0.5:
        schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": regex}}}
        return {"text": "x", "sampling_params": {"max_new_tokens": 2, "json_schema": schema}}
    return {"text": "x", "sampling_params": {"max_new_tokens": 2, "regex": regex}}


def _huge_top_logprobs(rng: random.Random) -> dict:
    top = rng.choice([20, 1000, 49152])
    return {
        "text": "word " * rng.choice([60, 800]),
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": top,
        "sampling_params": {"max_new_tokens": 2},
    }


def _oversize_id(rng: random.Random) -> dict:
    return {"text": "x", "rid": "r" * rng.choice([300, 100_000]), "sampling_params": {"max_new_tokens": 1}}


def _pins(rng: random.Random) -> dict:
    pins = rng.choice([{"pin_children": 3}, {"unpin_rids": [uuid.uuid4().hex]}])
    return {"text": "x", "sampling_params": {"max_new_tokens": 1}, **pins}


def _huge_batch(rng: random.Random) -> dict:
    return {"text": ["x"] * rng.choice([5000, 20_000]), "sampling_params": {"max_new_tokens": 1}}


GENERATE_BODIES = [
    _deep_ebnf,
    _nested_ebnf,
    _backtracking_stop,
    _unsupported_stop,
    _nested_repeats,
    _huge_top_logprobs,
    _oversize_id,
    _pins,
    _huge_batch,
]
USER = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def _chat_body(rng: random.Random) -> dict:
    calls = rng.choice(
        [
            "not a list",
            [{"id": "x"}],
            [{"type": "function", "function": {"name": 7, "arguments": "{}"}}],
            [
                {
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a": ' * 3000 + "1" + "}" * 3000},
                }
            ],
        ]
    )
    variants = [
        {"messages": [{"role": "assistant", "content": "", "tool_calls": calls}, *USER]},
        {"messages": USER, "chat_template_kwargs": {rng.choice(["messages", "tools", "eos_token"]): []}},
        {"messages": USER, "temperature": 10**400},
        {"messages": USER, "tools": TOOLS, "tool_choice": "required", "max_tokens": rng.choice([3, 9, 200])},
        # min_tokens past the grammar's end: every token but EOS masked (was a 500)
        {"messages": USER, "tools": TOOLS, "tool_choice": "required", "min_tokens": 300, "max_tokens": 320},
        {"messages": USER, "stop_regex": "(x+x+)+y", "response_format": {"type": "json_object"}},
        {"messages": [{"role": "user", "content": "hi " * 20_000}]},
    ]
    return {"max_tokens": 4, **rng.choice(variants)}


class HostileClient:
    """``run`` sends one random hostile request every ``period_s`` until ``deadline``."""

    def __init__(self, url: str, deadline: float, seed: int = 27, period_s: float = 1.0) -> None:
        self.url, self.deadline, self.period_s = url, deadline, period_s
        self.rng = random.Random(seed)
        self.counts: dict[str, Counter] = {}
        self.broken: list[str] = []
        self.kinds: list[tuple[str, Callable[[httpx.AsyncClient], Awaitable[str]]]] = [
            ("generate", self._generate),
            ("chat", self._chat),
            ("tokenize", self._tokenize),
            ("get_flush_cache", self._get_flush_cache),
            ("session_rid_reuse", self._session_rid_reuse),
            ("slow_headers", self._slow_headers),
            ("endless_body", self._endless_body),
        ]

    async def run(self) -> None:
        tasks = []
        async with httpx.AsyncClient(base_url=self.url, timeout=300) as http:
            while time.monotonic() < self.deadline:
                name, send = self.rng.choice(self.kinds)
                tasks.append(asyncio.create_task(self._one(http, name, send)))
                await asyncio.sleep(self.period_s)
            await asyncio.gather(*tasks)

    async def _one(self, http: httpx.AsyncClient, name: str, send: Callable[..., Awaitable[Any]]) -> None:
        try:
            status = str(await send(http))
        except Exception as e:  # noqa: BLE001 - a transport error is an outcome, recorded
            status = type(e).__name__
        label = name
        if name in ("generate", "chat"):
            label, _, status = status.partition(":")
        self.counts.setdefault(label, Counter())[status] += 1
        if status.startswith("5"):
            self.broken.append(f"{label}: {status}")
        try:
            health = (await http.get("/health", timeout=30)).status_code
        except httpx.HTTPError as e:
            health = type(e).__name__
        if health != 200:
            self.broken.append(f"/health answered {health} after {label}")

    async def _generate(self, http: httpx.AsyncClient) -> str:
        make = self.rng.choice(GENERATE_BODIES)
        r = await http.post("/generate", json=make(self.rng))
        return f"{make.__name__.lstrip('_')}:{r.status_code}"

    async def _chat(self, http: httpx.AsyncClient) -> str:
        r = await http.post("/v1/chat/completions", json=_chat_body(self.rng))
        return f"chat:{r.status_code}"

    async def _tokenize(self, http: httpx.AsyncClient) -> int:
        if self.rng.random() < 0.5:
            r = await http.post("/v1/tokenize", json={"prompt": "hostile " * 30_000})
        else:
            r = await http.post("/v1/detokenize", json={"tokens": [[65] * 20_000] * 10})
        return r.status_code

    async def _get_flush_cache(self, http: httpx.AsyncClient) -> int:
        return (await http.get("/flush_cache")).status_code

    async def _session_rid_reuse(self, http: httpx.AsyncClient) -> str:
        """A plain request reusing a session turn's rid; the session's next turn must still work."""
        sid = (await http.post("/open_session", json={"capacity_of_str_len": 400})).json()
        rid = uuid.uuid4().hex
        turn = {"text": "Turn.", "rid": rid, "sampling_params": {"max_new_tokens": 2}}
        await http.post("/generate", json={**turn, "session_params": {"id": sid, "rid": None}})
        await http.post(
            "/generate", json={"text": "zz", "rid": rid, "sampling_params": {"max_new_tokens": 1}}
        )
        nxt = {
            "text": " More.",
            "sampling_params": {"max_new_tokens": 2},
            "session_params": {"id": sid, "rid": rid},
        }
        status = (await http.post("/generate", json=nxt)).status_code
        await http.post("/close_session", json={"session_id": sid})
        return status

    async def _raw_socket(self, first: bytes, trickle: bytes | None) -> str:
        """Send ``first``, then ``trickle`` every half second; how the server ended the socket."""
        parts = urlsplit(self.url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writer.write(first)
        started = time.monotonic()
        try:
            while time.monotonic() - started < SLOW_SOCKET_CAP_S:
                try:
                    data = await asyncio.wait_for(reader.read(65536), 0.5)
                except TimeoutError:
                    if trickle:
                        writer.write(trickle)
                    continue
                if not data:
                    return "closed"
                return data.split(b"\r\n", 1)[0].decode(errors="replace").split(" ", 2)[1]
            return "still open"
        finally:
            writer.close()

    async def _slow_headers(self, http: httpx.AsyncClient) -> str:
        return await self._raw_socket(b"POST /generate HTTP/1.1\r\nHost: localhost\r\n", None)

    async def _endless_body(self, http: httpx.AsyncClient) -> str:
        head = b"POST /generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        return await self._raw_socket(head + b"Transfer-Encoding: chunked\r\n\r\n", b"1\r\n \r\n")

    def report(self) -> dict[str, Any]:
        return {
            "answers": {k: dict(sorted(v.items())) for k, v in sorted(self.counts.items())},
            "broken": self.broken[:10],
            "broken_count": len(self.broken),
        }
