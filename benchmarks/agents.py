"""Agent benchmark: concurrent agent loops over the OpenAI chat API, each making tool calls turn after turn.

Each loop is offered two tools (from twenty schemas), makes ``--tool-turns`` calls with ``tool_choice``
``required`` (or ``auto`` with ``--choice auto``), feeds every result back as a ``tool`` message, and ends
with a text answer. Reports completed loops per minute, the share of tool calls whose arguments parsed
and validated against the tool's schema (must be 100% with ``required``), and the cache hit rate of the
turns after the first (prompt tokens served from the radix cache).

    python benchmarks/agents.py                                 # launches radixlm (smollm2-135m)
    python benchmarks/agents.py --loops 32 --tool-turns 3 --base-url http://127.0.0.1:30000
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field

import jsonschema
import openai

from tests.runtime.server.tool_schemas import SCHEMAS, tool

NAMES = list(SCHEMAS)


@dataclass
class LoopResult:
    calls: int = 0
    valid: int = 0
    prompt_tokens_later: int = 0  # prompt tokens of turns after the first
    cached_tokens_later: int = 0
    completed: bool = False
    errors: list[str] = field(default_factory=list)


def _valid(name: str, arguments: str) -> bool:
    try:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])
        return True
    except (json.JSONDecodeError, jsonschema.ValidationError, KeyError):
        return False


async def agent_loop(client: openai.AsyncOpenAI, model: str, i: int, tool_turns: int,
                     choice: str) -> LoopResult:
    out = LoopResult()
    try:
        await _turns(client, model, i, tool_turns, choice, out)
    except openai.APIError as e:
        out.errors.append(f"loop {i}: {e}")
    return out


async def _turns(client: openai.AsyncOpenAI, model: str, i: int, tool_turns: int, choice: str,
                 out: LoopResult) -> None:
    names = [NAMES[i % len(NAMES)], NAMES[(i + 5) % len(NAMES)]]
    tools = [tool(n) for n in names]
    messages = [{"role": "user", "content": f"Task {i}: use {names[0].replace('_', ' ')} and then "
                                            f"{names[1].replace('_', ' ')}, then summarise."}]
    for turn in range(tool_turns + 1):
        final = turn == tool_turns
        r = await client.chat.completions.create(
            model=model, messages=messages, tools=tools, tool_choice="none" if final else choice,
            parallel_tool_calls=False, temperature=0, max_tokens=48 if final else 160)
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
            ok = _valid(call.function.name, call.function.arguments)
            out.valid += ok
            result = {"ok": True, "turn": turn} if ok else {"error": "invalid arguments"}
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
        if not message.tool_calls:
            if choice == "required":
                out.errors.append(f"loop {i} turn {turn}: no tool call under required")
            messages.append({"role": "user", "content": "Continue."})


async def run(base_url: str, model: str, loops: int, tool_turns: int, choice: str) -> dict:
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=1800)
    start = time.perf_counter()
    results = await asyncio.gather(*(agent_loop(client, model, i, tool_turns, choice) for i in range(loops)))
    elapsed = time.perf_counter() - start
    await client.close()
    calls = sum(r.calls for r in results)
    prompt_later = sum(r.prompt_tokens_later for r in results)
    cached_later = sum(r.cached_tokens_later for r in results)
    return {
        "loops": loops, "tool_turns": tool_turns, "tool_choice": choice, "seconds": round(elapsed, 1),
        "completed_loops": sum(r.completed for r in results),
        "loops_per_minute": round(60 * sum(r.completed for r in results) / elapsed, 2),
        "tool_calls": calls,
        "valid_share": round(sum(r.valid for r in results) / calls, 4) if calls else None,
        "cache_hit_rate_after_first_turn": round(cached_later / prompt_later, 4) if prompt_later else None,
        "errors": [e for r in results for e in r.errors][:5],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=None, help="a running server (default: launch radixlm)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--loops", type=int, default=32)
    parser.add_argument("--tool-turns", type=int, default=3)
    parser.add_argument("--choice", choices=["required", "auto"], default="required")
    args = parser.parse_args()
    if args.base_url:
        report = asyncio.run(run(args.base_url, args.model, args.loops, args.tool_turns, args.choice))
    else:
        from radixlm.runtime.server.launch import launch_server

        # NOTE: each loop's tool pair is its own grammar; on a busy CPU 32 of them compiling at once
        # outlast the default 60 s compile timeout.
        with launch_server(model=args.model, kv_cache_gb=0.5, grammar_compile_timeout=900) as server:
            report = asyncio.run(run(server.url, args.model, args.loops, args.tool_turns, args.choice))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
