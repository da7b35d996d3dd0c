"""Responses mode of ``agents.py``: the same agent loops over ``/v1/responses``, stateful.

Turn 1 sends the task and the loop's tools (flat Responses function tools); each later turn sends only
its new items (a ``function_call_output`` per call) and names the previous response in
``previous_response_id``, so the server continues the previous turn's own tokens, kept pinned in the
radix cache (``responses_store.py``). Calls are forced as in the OpenAI mode (``tool_choice``
``required``, no parallel calls) and checked with ``jsonschema``; the last turn asks for text with
``tool_choice="none"``. Each loop deletes its last stored response (releasing its pin).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai

from benchmarks.workloads.agents_session import LoopResult, loop_task, summarise, valid_call


async def responses_loop(
    client: openai.AsyncOpenAI, model: str, i: int, tool_turns: int, choice: str
) -> LoopResult:
    out = LoopResult()
    tools, messages = loop_task(i)
    flat = [{"type": "function", **t["function"]} for t in tools]
    items: list[dict[str, Any]] = list(messages)
    previous: str | None = None
    try:
        for turn in range(tool_turns + 1):
            final = turn == tool_turns
            r = await client.responses.create(
                model=model,
                input=items,  # type: ignore[arg-type]
                previous_response_id=previous or openai.omit,
                tools=flat,  # type: ignore[arg-type]
                tool_choice="none" if final else choice,  # type: ignore[arg-type]
                parallel_tool_calls=False,
                temperature=0,
                max_output_tokens=48 if final else 160,
            )
            if previous is not None:
                await client.responses.delete(previous)  # continued: only the newest is kept
            previous = r.id
            if turn > 0 and r.usage is not None:
                out.prompt_tokens_later += r.usage.input_tokens
                out.cached_tokens_later += r.usage.input_tokens_details.cached_tokens
            if final:
                out.completed = isinstance(r.output_text, str)
                break
            calls = [item for item in r.output if item.type == "function_call"]
            items = []
            for call in calls:
                out.calls += 1
                ok = valid_call(call.name, call.arguments)
                out.valid += ok
                result = {"ok": True, "turn": turn} if ok else {"error": "invalid arguments"}
                items.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps(result)}
                )
            if not calls:
                if choice == "required":
                    out.errors.append(f"loop {i} turn {turn}: no tool call under required")
                items.append({"role": "user", "content": "Continue."})
    except openai.APIError as e:
        out.errors.append(f"loop {i}: {e}")
    finally:
        if previous is not None:
            await client.responses.delete(previous)
    return out


async def run_responses(base_url: str, model: str, loops: int, tool_turns: int, choice: str) -> dict:
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=1800)
    start = time.perf_counter()
    results = await asyncio.gather(
        *(responses_loop(client, model, i, tool_turns, choice) for i in range(loops))
    )
    elapsed = time.perf_counter() - start
    await client.close()
    return {
        "mode": "responses",
        "loops": loops,
        "tool_turns": tool_turns,
        "tool_choice": choice,
        **summarise(list(results), elapsed),
    }
