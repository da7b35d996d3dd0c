"""The agent benchmark's ``messages`` mode: the same loops as the OpenAI mode over the Anthropic
Messages API (``/v1/messages`` with the ``anthropic`` SDK): ``tool_choice`` ``any`` (or ``auto``) with
``disable_parallel_tool_use``, every ``tool_use`` answered by a ``tool_result`` block, a final turn
with ``tool_choice`` ``none``. Cache hits are ``usage.cache_read_input_tokens`` over the whole prompt
(``input_tokens`` + cache reads, Anthropic's split)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import anthropic

from benchmarks.workloads.agents_session import LoopResult, loop_task, summarise, valid_call


def _anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}
        for fn in (t["function"] for t in tools)
    ]


async def messages_loop(
    client: anthropic.AsyncAnthropic, model: str, i: int, tool_turns: int, choice: str
) -> LoopResult:
    out = LoopResult()
    openai_tools, messages = loop_task(i)
    tools = _anthropic_tools(openai_tools)
    forced = {"type": "any" if choice == "required" else "auto", "disable_parallel_tool_use": True}
    try:
        for turn in range(tool_turns + 1):
            final = turn == tool_turns
            r = await client.messages.create(
                model=model,
                messages=messages,
                tools=tools,  # type: ignore[arg-type]
                tool_choice={"type": "none"} if final else forced,  # type: ignore[arg-type]
                max_tokens=48 if final else 160,
                extra_body={"temperature": 0},
            )
            if turn > 0:
                out.prompt_tokens_later += r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0)
                out.cached_tokens_later += r.usage.cache_read_input_tokens or 0
            if final:
                out.completed = any(b.type == "text" for b in r.content)
                return out
            messages.append({"role": "assistant", "content": r.content})
            results = []
            for block in r.content:
                if block.type != "tool_use":
                    continue
                out.calls += 1
                ok = valid_call(block.name, json.dumps(block.input))
                out.valid += ok
                body = {"ok": True, "turn": turn} if ok else {"error": "invalid arguments"}
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": json.dumps(body)})
            if not results and choice == "required":
                out.errors.append(f"loop {i} turn {turn}: no tool_use under any")
            messages.append({"role": "user", "content": results or "Continue."})
    except anthropic.APIError as e:
        out.errors.append(f"loop {i}: {e}")
    return out


async def run_messages(base_url: str, model: str, loops: int, tool_turns: int, choice: str) -> dict:
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key="unused", max_retries=0, timeout=1800)
    start = time.perf_counter()
    loops_run = (messages_loop(client, model, i, tool_turns, choice) for i in range(loops))
    results = await asyncio.gather(*loops_run)
    elapsed = time.perf_counter() - start
    await client.close()
    return {
        "mode": "messages",
        "loops": loops,
        "tool_turns": tool_turns,
        "tool_choice": "any" if choice == "required" else choice,
        **summarise(list(results), elapsed),
    }
