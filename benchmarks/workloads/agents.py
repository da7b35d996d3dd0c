"""Agent benchmark: concurrent agent loops (OpenAI chat or Responses API, native sessions) calling tools.

Each loop is offered two tools (from twenty schemas), makes ``--tool-turns`` calls with ``tool_choice``
``required`` (or ``auto`` with ``--choice auto``), feeds every result back as a ``tool`` message, and ends
with a text answer. Reports completed loops per minute, the share of tool calls whose arguments parsed
and validated against the tool's schema (must be 100% with ``required``), and the cache hit rate of the
turns after the first (prompt tokens served from the radix cache).

``--mode`` (default ``both``): ``openai`` runs the loops over ``/v1/chat/completions`` (each turn sends
the whole conversation, re-rendered); ``session`` runs the same loops over the native ``/generate`` with
SGLang sessions (each turn sends only its new text and continues the model's own tokens; forced-call
regex, parser and ``jsonschema`` check as on the OpenAI path; see ``agents_session.py`` for how
a session turn's text is built); ``responses`` runs them over ``/v1/responses`` with
``previous_response_id`` (each turn sends only its new items; ``agents_responses.py``); ``messages``
runs the OpenAI mode's loops over the Anthropic Messages API (``agents_messages.py``; ``any`` for
``required``); ``all`` runs the four. Only ``tool_choice`` required is run in session mode. When this script
launches the server, each mode gets its own fresh server (cold radix and grammar caches); with
``--base-url`` the modes share it (``/flush_cache`` in between; compiled grammars stay cached).

    python -m benchmarks.workloads.agents                       # launches radixlm (smollm2-135m)
    python -m benchmarks.workloads.agents --loops 32 --tool-turns 3 --base-url http://127.0.0.1:30000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx
import openai

from benchmarks.harness import add_json_argument, write_results
from benchmarks.workloads.agents_messages import run_messages
from benchmarks.workloads.agents_responses import run_responses
from benchmarks.workloads.agents_session import LoopResult, loop_task, run_sessions, summarise, valid_call


async def agent_loop(
    client: openai.AsyncOpenAI, model: str, i: int, tool_turns: int, choice: str
) -> LoopResult:
    out = LoopResult()
    try:
        await _turns(client, model, i, tool_turns, choice, out)
    except openai.APIError as e:
        out.errors.append(f"loop {i}: {e}")
    return out


async def _turns(
    client: openai.AsyncOpenAI, model: str, i: int, tool_turns: int, choice: str, out: LoopResult
) -> None:
    tools, messages = loop_task(i)
    for turn in range(tool_turns + 1):
        final = turn == tool_turns
        r = await client.chat.completions.create(
            model=model,
            messages=messages,
            tools=tools,
            tool_choice="none" if final else choice,
            parallel_tool_calls=False,
            temperature=0,
            max_tokens=48 if final else 160,
        )
        if turn > 0:
            out.prompt_tokens_later += r.usage.prompt_tokens
            details = r.usage.prompt_tokens_details
            out.cached_tokens_later += (details.cached_tokens or 0) if details else 0
        message = r.choices[0].message
        if final:
            out.completed = message.content is not None
            return
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            out.calls += 1
            ok = valid_call(call.function.name, call.function.arguments)
            out.valid += ok
            result = {"ok": True, "turn": turn} if ok else {"error": "invalid arguments"}
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
        if not message.tool_calls:
            if choice == "required":
                out.errors.append(f"loop {i} turn {turn}: no tool call under required")
            messages.append({"role": "user", "content": "Continue."})


async def run_openai(base_url: str, model: str, loops: int, tool_turns: int, choice: str) -> dict:
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=1800)
    start = time.perf_counter()
    results = await asyncio.gather(*(agent_loop(client, model, i, tool_turns, choice) for i in range(loops)))
    elapsed = time.perf_counter() - start
    await client.close()
    return {
        "mode": "openai",
        "loops": loops,
        "tool_turns": tool_turns,
        "tool_choice": choice,
        **summarise(list(results), elapsed),
    }


def run_mode(mode: str, base_url: str, args: argparse.Namespace) -> dict:
    if mode == "openai":
        return asyncio.run(run_openai(base_url, args.model, args.loops, args.tool_turns, args.choice))
    if mode == "responses":
        return asyncio.run(run_responses(base_url, args.model, args.loops, args.tool_turns, args.choice))
    if mode == "messages":
        return asyncio.run(run_messages(base_url, args.model, args.loops, args.tool_turns, args.choice))
    return asyncio.run(run_sessions(base_url, args.loops, args.tool_turns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=None, help="a running server (default: launch radixlm)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--loops", type=int, default=32)
    parser.add_argument("--tool-turns", type=int, default=3)
    parser.add_argument(
        "--choice",
        choices=["required", "auto"],
        default="required",
        help="tool_choice of the OpenAI mode (session mode always forces the call)",
    )
    parser.add_argument(
        "--mode", choices=["openai", "session", "responses", "messages", "both", "all"], default="both"
    )
    add_json_argument(parser)
    args = parser.parse_args()
    groups = {"both": ["openai", "session"], "all": ["openai", "session", "responses", "messages"]}
    modes = groups.get(args.mode, [args.mode])
    reports = []
    for k, mode in enumerate(modes):
        if args.base_url:
            if k:
                httpx.post(args.base_url + "/flush_cache", timeout=60)
            reports.append(run_mode(mode, args.base_url, args))
            continue
        from radixlm.runtime.server.launch import launch_server

        # NOTE: each loop's tool pair is its own grammar; on a busy CPU 32 of them compiling at once
        # outlast the default 60 s compile timeout. Sessions outlive a slow turn (session_timeout).
        with launch_server(
            model=args.model, kv_cache_gb=0.5, grammar_compile_timeout=900, session_timeout=1800
        ) as server:
            reports.append(run_mode(mode, server.url, args))
    print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=2))
    headline = [
        {"label": f"{mode}, {args.loops} loops", "metric": "loops/min", "value": r["loops_per_minute"]}
        for mode, r in zip(modes, reports)
    ]
    write_results(args.json, __spec__.name, headline, dict(zip(modes, reports)))


if __name__ == "__main__":
    main()
